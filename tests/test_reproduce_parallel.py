"""``dsf reproduce --jobs N``: rows side by side in child processes, costs counted over every sitting."""

import csv
import functools
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from dsf_lightning.cli import lightning_cli, main
from dsf_lightning.cli.row import CHILD_ENTRY
from dsf_lightning.reproduce import parallel, runner
from dsf_lightning.reproduce.progress import read_progress, totals
from dsf_lightning.reproduce.tables import default_recipes_dir, get_table

#: the runner sits below the CLI: tests hand it the CLI's row builder and child entry, as `dsf reproduce` does
run_table = functools.partial(runner.run_table, build_cli=lightning_cli, child_entry=CHILD_ENTRY)

ROOT = Path(__file__).resolve().parents[1]
DATA_ROOT = os.environ.get("DSF_DATA_ROOT", str(ROOT.parent / "shared" / "data"))
HAVE_PTB = (Path(DATA_ROOT) / "ptb" / "ptb.train.txt").is_file()
needs_ptb = pytest.mark.skipif(not HAVE_PTB, reason="PTB not under the data root")


def read_csv(path):
    with open(path, newline="") as f:
        return {r["row"]: r for r in csv.DictReader(f)}


@needs_ptb
def test_two_rows_train_side_by_side_in_one_thread_processes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    code = main(["reproduce", "dsf-table1-word", "--rows", "elman,lstm", "--jobs", "2", "--scale", "tiny",
                 "--data-root", DATA_ROOT, "--out", str(out)])
    assert code == 0
    rows = read_csv(out / "dsf-table1-word.csv")
    state = json.loads((out / "dsf-table1-word.state.json").read_text())
    for key in ("elman", "lstm"):
        row, entry = rows[key], state["rows"][key]
        assert row["status"] == "done", row
        assert entry["threads"] == 1  # the child ran with one torch thread
        assert "runner" not in entry  # who ran it matters only while it is unfinished
        assert float(row["cpu_seconds"]) > 0 and float(row["wall_seconds"]) > 0 and row["epochs"] == "1"
        assert row["command"].startswith("dsf fit --config recipes/ptb/") and "$DSF_DATA_ROOT" in row["command"]
        assert row["commit"], "the git commit is recorded"
        folder = out / "runs" / "dsf-table1-word" / key
        assert "dsf_lightning.reproduce.row" in (folder / "row.log").read_text()
        progress = read_progress(folder)
        assert len(progress["sittings"]) == 1 and totals(progress)["tokens"] == entry["tokens"] > 0
    assert rows["delta-rnn"]["status"] == "not run"
    with open(out / "dsf-table1-word.curves.csv", newline="") as f:
        curves = list(csv.DictReader(f))
    assert sorted(c["row"] for c in curves) == ["elman", "lstm"] and all(float(c["val_metric"]) > 1 for c in curves)
    assert (out / "dsf-table1-word.curves.png").read_bytes()[:4] == b"\x89PNG"
    markdown = (out / "dsf-table1-word.md").read_text()
    assert "Produced by `dsf reproduce dsf-table1-word --scale tiny --rows elman,lstm --jobs 2 " \
           "--data-root \"$DSF_DATA_ROOT\" --out" in markdown
    assert "| CPU |" in markdown


@needs_ptb
def test_interrupted_parallel_run_stops_its_children_and_the_next_run_retries(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    started = []
    real_start = parallel._start

    def start(spec, entry):
        child = real_start(spec, entry)
        started.append(child[0])
        return child

    def interrupt(_seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(parallel, "_start", start)
    monkeypatch.setattr(parallel, "_wait", interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_table("dsf-table1-word", rows=["elman", "lstm"], jobs=2, scale="tiny", data_root=DATA_ROOT,
                         out=out, log=lambda _: None)
    assert len(started) == 2 and all(child.poll() is not None for child in started)
    state = json.loads((out / "dsf-table1-word.state.json").read_text())
    assert {state["rows"][k]["status"] for k in ("elman", "lstm")} == {"running"}
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    summary = run_table("dsf-table1-word", rows=["elman", "lstm"], jobs=2, scale="tiny", data_root=DATA_ROOT,
                               out=out, log=lambda _: None)
    assert sorted(summary["ran"]) == ["elman", "lstm"] and not summary["failed"]


@needs_ptb
def test_a_stopped_rows_progress_outlives_its_run_folder(tmp_path, monkeypatch, capsys):
    """The runner copies a training row's progress into the state after every epoch: when the row is stopped
    and its run folder is lost (another machine, a cleaned disk), the table still shows its epochs and costs."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    state_path = out / "dsf-table1-word.state.json"
    deadline = time.monotonic() + 120

    folder = out / "runs" / "dsf-table1-word" / "elman"

    def wait(seconds):  # stop the run once the folder is an epoch ahead of the state's copy (the race CI once lost)
        state = json.loads(state_path.read_text()) if state_path.is_file() else {"rows": {}}
        recorded = len(state["rows"].get("elman", {}).get("progress", {}).get("epochs", []))
        if recorded and len(read_progress(folder)["epochs"]) > recorded:
            raise KeyboardInterrupt
        if time.monotonic() > deadline:
            raise RuntimeError("the state never recorded the row's progress")
        time.sleep(0.2)

    monkeypatch.setattr(parallel, "_wait", wait)
    with pytest.raises(KeyboardInterrupt):
        run_table("dsf-table1-word", rows=["elman"], jobs=2, scale="tiny", data_root=DATA_ROOT, out=out,
                  overrides=["--trainer.max_epochs=100000"], log=lambda _: None)
    live = read_csv(out / "dsf-table1-word.csv")["elman"]
    in_folder = len(read_progress(folder)["epochs"])
    shutil.rmtree(out / "runs")
    assert main(["reproduce", "dsf-table1-word", "--report-only", "--out", str(out)]) == 0
    row = read_csv(out / "dsf-table1-word.csv")["elman"]
    assert int(row["epochs"]) >= 1 and float(row["cpu_seconds"]) > 0
    assert row["message"].startswith(f"running: {row['epochs']} epoch(s) so far of at most 100000 (at most ~")
    assert int(row["epochs"]) >= int(live["epochs"] or 0)
    assert int(row["epochs"]) >= in_folder  # the stopped run's last epochs were copied into the state, not lost
    curves = [r for r in csv.DictReader(open(out / "dsf-table1-word.curves.csv")) if r["row"] == "elman"]
    assert len(curves) == int(row["epochs"])


def test_jobs_and_threads_are_checked(tmp_path):
    with pytest.raises(ValueError, match="jobs must be a whole number >= 1"):
        run_table("scrn-table2", jobs=0, out=tmp_path)
    with pytest.raises(ValueError, match="threads must be"):
        run_table("scrn-table2", jobs=2, threads=0, out=tmp_path)
    with pytest.raises(ValueError, match="cannot be combined"):
        run_table("scrn-table2", jobs=2, out=tmp_path, overrides=["--trainer.devices=2"])


@needs_ptb
def test_progress_counts_every_sitting_of_a_resumed_row(tmp_path):
    """Fit one epoch, then resume from last.ckpt to two: two sittings, one record per epoch, totals summed."""
    recipe = load = default_recipes_dir() / "ptb" / "scrn_h40_s10.yaml"
    recipe_dict = runner.load_recipe(load)
    row = get_table("scrn-table2").row("h40-s10")
    args = runner.cli_arguments(recipe, runner.merged_overrides(recipe_dict, row, "tiny"), DATA_ROOT, [])
    workdir = tmp_path / "row"
    spec = {"args": args, "workdir": str(workdir), "metric": "ppl", "resume": False}
    first = runner.run_row(spec, lightning_cli)
    assert first["sittings"] == 1 and [e["epoch"] for e in first["epochs"]] == [0]
    second = runner.run_row(dict(spec, args=[*args, "--trainer.max_epochs=2"], resume=True), lightning_cli)
    assert second["resumed_from"] and second["sittings"] == 2
    assert [e["epoch"] for e in second["epochs"]] == [0, 1]
    progress = read_progress(workdir)
    spent = totals(progress)
    assert spent["tokens"] == second["tokens"] == 2 * first["tokens"]
    assert second["cpu_seconds"] == pytest.approx(spent["cpu_seconds"]) and spent["cpu_seconds"] > first["cpu_seconds"]
    assert second["epochs"][1]["cpu_seconds"] > second["epochs"][0]["cpu_seconds"]
    assert second["epochs"][0]["val_ppl"] > 1


@needs_ptb
@pytest.mark.parametrize("how, rows", [(["--jobs", "2"], ["elman", "lstm"]), (["--isolate"], ["elman"])],
                         ids=["jobs-2", "isolate"])
def test_sigterm_to_the_run_stops_its_row_processes(tmp_path, how, rows):
    """`kill PID` of `dsf reproduce --jobs 2` or `--isolate` must not leave its row processes running on their own
    (`--isolate` did: its child trained on as an orphan)."""
    import re
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    log = tmp_path / "log.txt"
    with open(log, "w") as sink:
        parent = subprocess.Popen([sys.executable, "-m", "dsf_lightning.cli", "reproduce", "dsf-table1-word", "--rows",
                                   ",".join(rows), *how, "--scale", "tiny", "--data-root", DATA_ROOT,
                                   "--out", str(out)], stdout=sink, stderr=subprocess.STDOUT, cwd=tmp_path,
                                  env=dict(os.environ, OMP_NUM_THREADS="1"))
        try:
            deadline = time.time() + 120
            while log.read_text().count("started (pid") < len(rows) and time.time() < deadline and parent.poll() is None:
                time.sleep(0.2)
            pids = [int(pid) for pid in re.findall(r"started \(pid (\d+)", log.read_text())]
            assert len(pids) == len(rows), log.read_text()
            parent.send_signal(signal.SIGTERM)
            parent.wait(timeout=60)
        finally:
            if parent.poll() is None:
                parent.kill()
    time.sleep(0.5)
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
    assert not alive, f"row processes {alive} outlived their parent\n{log.read_text()}"
    assert "stopped; the next run resumes it" in log.read_text()
    # the state still says running (nothing could clean up after a kill -9 either); the table knows better
    state = json.loads((out / "dsf-table1-word.state.json").read_text())
    assert {state["rows"][k]["status"] for k in rows} == {"running"}
    assert {state["rows"][k]["runner"]["pid"] for k in rows} == {parent.pid}
    assert main(["reproduce", "dsf-table1-word", "--report-only", "--out", str(out)]) == 0
    table = read_csv(out / "dsf-table1-word.csv")
    assert {table[k]["status"] for k in rows} == {"stopped"}, table["elman"]


@needs_ptb
def test_the_table_shows_a_row_still_training_from_its_progress(tmp_path):
    """A row whose process is still training (status running) is shown with its epochs and costs so far."""
    from dsf_lightning.reproduce.report import row_folder, write_outputs

    table = get_table("scrn-table2")
    recipe = default_recipes_dir() / table.row("h40-s10").recipe
    args = runner.cli_arguments(recipe, runner.merged_overrides(runner.load_recipe(recipe), table.row("h40-s10"), "tiny"),
                                DATA_ROOT, [])
    folder = row_folder(tmp_path, table.id, "h40-s10")
    runner.run_row({"args": args, "workdir": str(folder), "metric": "ppl", "resume": False}, lightning_cli)
    state = {"table": table.id, "rows": {"h40-s10": {"status": "running"}}}
    md, csv_path = write_outputs(table, state, tmp_path, "paper")
    row = read_csv(csv_path)["h40-s10"]
    assert row["status"] == "running" and row["epochs"] == "1" and float(row["cpu_seconds"]) > 0
    assert row["message"].startswith("running: 1 epoch(s) so far of at most 1, last valid loss")
    assert "running: 1 epoch(s) so far" in md.read_text()
    assert (tmp_path / "scrn-table2.curves.png").is_file()
    assert read_progress(folder)["max_epochs"] == 1  # the Trainer's, recorded by the row's own fit


def test_a_running_row_says_how_many_epochs_it_may_still_take_and_how_long(tmp_path):
    from dsf_lightning.reproduce.liveness import this_process
    from dsf_lightning.reproduce.report import row_folder, table_rows

    table = get_table("scrn-table2")
    folder = row_folder(tmp_path, table.id, "h40-s10")
    folder.mkdir(parents=True)
    epochs = [{"epoch": i, "val_loss": 5.0, "wall_seconds": 90.0 * (i + 1), "cpu_seconds": 80.0 * (i + 1)} for i in range(4)]
    progress = {"sittings": [{"started": 0.0, "tokens": 1, "wall_seconds": 360.0, "cpu_seconds": 320.0}],
                "epochs": epochs, "max_epochs": 120}
    (folder / "progress.json").write_text(json.dumps(progress))
    state = {"rows": {"h40-s10": {"status": "running", "runner": this_process()}}}

    def message():
        return next(r for r in table_rows(table, state, "paper", tmp_path) if r["row"] == "h40-s10")["message"]

    # 116 epochs left at 90 s each (the mean of the four so far): 174 minutes
    assert message().startswith("running: 4 epoch(s) so far of at most 120 (at most ~2 h 54 min more at its mean")
    (folder / "progress.json").write_text(json.dumps({**progress, "max_epochs": 4}))
    assert message().startswith("running: 4 epoch(s) so far of at most 4, last valid loss")
    (folder / "progress.json").write_text(json.dumps({k: v for k, v in progress.items() if k != "max_epochs"}))
    assert message().startswith("running: 4 epoch(s) so far, last valid loss")  # written before the field


def test_classifier_rows_curves_and_best_validation_read_as_error(tmp_path):
    """A task table's curves and its 'valid measured' are error = 1 - val_acc, not a perplexity of the loss."""
    from dsf_lightning.reproduce.report import curve_rows, table_rows, validation_metric

    assert validation_metric({"val_acc": 0.75, "val_loss": 0.5}, "error") == pytest.approx(0.25)
    assert validation_metric({"val_loss": 0.5}, "error") is None
    assert validation_metric({"val_loss": 0.5}, "ppl") == pytest.approx(1.6487212707)
    table = get_table("srnn-imdb")
    key = "lstm-trunc10-l100"
    state = {"rows": {key: {"status": "done", "measured": 0.3, "metrics": {"best_val_acc": 0.8},
                            "epochs": [{"epoch": 0, "val_loss": 0.6, "val_acc": 0.7, "cpu_seconds": 10.0},
                                       {"epoch": 1, "val_loss": 0.5, "val_acc": 0.8, "cpu_seconds": 20.0}]}}}
    row = next(r for r in table_rows(table, state, "paper", tmp_path) if r["row"] == key)
    assert row["measured_valid"] == pytest.approx(0.2)
    curves = curve_rows(table, state, tmp_path)
    assert [c["val_metric"] for c in curves] == pytest.approx([0.3, 0.2])
    # the length-200 row is measured in the same run: its curve is that row's, drawn once
    state["rows"]["lstm-trunc10-l200"] = {**state["rows"][key], "shared_with": key}
    assert [c["row"] for c in curve_rows(table, state, tmp_path)] == [key, key]


def test_report_only_rewrites_the_table_from_the_state_and_trains_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "run_row", lambda spec, *_: pytest.fail("--report-only trained a row"))
    assert main(["reproduce", "scrn-table2", "--report-only", "--out", str(tmp_path)]) == 2  # one usage error policy
    err = capsys.readouterr().err
    assert err.startswith("dsf reproduce: error: no ") and "scrn-table2.state.json: run `dsf reproduce scrn-table2" in err
    assert err.count("\n") == 1
    state = {"table": "scrn-table2", "command": "dsf reproduce scrn-table2 --scale paper", "commit": "abc",
             "rows": {"h40-s10": {"status": "done", "measured": 130.5, "metrics": {"best_val_loss": 4.9},
                                  "epochs": [{"epoch": 0, "val_loss": 5.0, "cpu_seconds": 60.0}]}}}
    (tmp_path / "scrn-table2.state.json").write_text(json.dumps(state))
    assert main(["reproduce", "scrn-table2", "--report-only", "--out", str(tmp_path)]) == 0
    rows = read_csv(tmp_path / "scrn-table2.csv")
    assert float(rows["h40-s10"]["measured"]) == 130.5 and float(rows["h40-s10"]["difference"]) == pytest.approx(2.5)
    assert "Produced by `dsf reproduce scrn-table2 --scale paper` at commit `abc`" in (tmp_path / "scrn-table2.md").read_text()
    assert (tmp_path / "scrn-table2.curves.csv").is_file()


@needs_ptb
def test_two_reproduce_processes_on_one_out_keep_each_others_rows(tmp_path, monkeypatch):
    """Another `dsf reproduce` (other rows, same --out) finishes a row while this one trains: this run's saves
    keep that row instead of writing back the state it read at its start."""
    out = tmp_path / "out"
    real_run_row = runner.run_row

    def other_process_finishes_elman_meanwhile(spec, *args, **kwargs):
        path = out / "dsf-table1-word.state.json"
        on_disk = json.loads(path.read_text())
        on_disk["rows"]["elman"] = {"status": "done", "measured": 321.0, "fingerprint": "theirs", "epochs": []}
        on_disk.setdefault("runs", {})["their-run"] = {"row": "elman", "measured": 321.0}
        path.write_text(json.dumps(on_disk))
        return real_run_row(spec, *args, **kwargs)

    monkeypatch.setattr(runner, "run_row", other_process_finishes_elman_meanwhile)
    summary = run_table("dsf-table1-word", rows=["lstm"], scale="tiny", data_root=DATA_ROOT, out=out, log=lambda _: None)
    assert summary["ran"] == ["lstm"]
    state = json.loads((out / "dsf-table1-word.state.json").read_text())
    assert state["rows"]["lstm"]["status"] == "done"
    assert state["rows"]["elman"]["measured"] == 321.0 and state["runs"]["their-run"]["row"] == "elman"
    assert float(read_csv(out / "dsf-table1-word.csv")["elman"]["measured"]) == 321.0


def test_the_curve_plots_title_speaks_of_dashed_lines_only_where_there_are_some():
    from dsf_lightning.reproduce.report import curves_title

    scrn, dsf = get_table("scrn-table2"), get_table("dsf-table1-word")  # published validation numbers / none
    assert all(row.published_valid is None for row in dsf.rows)
    assert "dashed: the paper's validation number" in curves_title(scrn, [{"row": "h40-s10"}])
    assert "the paper gives no validation number" in curves_title(dsf, [{"row": "elman"}])
    assert "dashed" not in curves_title(dsf, [{"row": "elman"}])


@needs_ptb
def test_a_finished_rows_wall_time_is_summed_over_its_sittings(tmp_path, monkeypatch):
    """A row stopped after an epoch and resumed to its end: the table's wall time is the earlier sittings'
    training wall plus the last process, not the last sitting alone (under which CPU could exceed wall)."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    state_path = out / "dsf-table1-word.state.json"
    deadline = time.monotonic() + 120

    def wait(seconds):  # stop the first sitting once the state holds an epoch of the row's progress
        if state_path.is_file() and json.loads(state_path.read_text())["rows"]["elman"].get("progress", {}).get("epochs"):
            raise KeyboardInterrupt
        if time.monotonic() > deadline:
            raise RuntimeError("the state never recorded the row's progress")
        time.sleep(0.2)

    overrides = ["--trainer.max_epochs=2"]
    monkeypatch.setattr(parallel, "_wait", wait)
    with pytest.raises(KeyboardInterrupt):
        run_table("dsf-table1-word", rows=["elman"], jobs=2, scale="tiny", data_root=DATA_ROOT, out=out,
                  overrides=overrides, log=lambda _: None)
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    # the first sitting stands for a long one (hours on a real row): its recorded training wall says 10,000 s
    progress_path = out / "runs" / "dsf-table1-word" / "elman" / "progress.json"
    progress = read_progress(progress_path)
    first = progress["sittings"][-1]
    first["wall_seconds"] = 10_000.0 + first["wall_seconds"]
    progress_path.write_text(json.dumps(progress))
    earlier = totals(progress)["wall_seconds"]
    started = time.perf_counter()
    summary = run_table("dsf-table1-word", rows=["elman"], scale="tiny", data_root=DATA_ROOT, out=out,
                        overrides=overrides, log=lambda _: None)
    elapsed = time.perf_counter() - started
    assert summary["ran"] == ["elman"]
    entry = json.loads(state_path.read_text())["rows"]["elman"]
    assert entry["sittings"] == len(progress["sittings"]) + 1 and entry["resumed_from"]
    assert earlier < entry["wall_seconds"] < earlier + elapsed
    assert entry["wall_seconds"] >= entry["train_seconds"]
    assert float(read_csv(out / "dsf-table1-word.csv")["elman"]["wall_seconds"]) == pytest.approx(entry["wall_seconds"])


def test_a_finished_row_written_before_wall_scope_shows_at_least_its_sittings_training_wall():
    from dsf_lightning.reproduce.report import WALL_OVER_SITTINGS, done_wall_seconds

    legacy = {"status": "done", "wall_seconds": 8668.7, "train_seconds": 18752.9, "sittings": 2}
    assert done_wall_seconds(legacy) == pytest.approx(18752.9)  # the h300 row's state: last sitting 2:24 of 5:12
    assert done_wall_seconds({**legacy, "train_seconds": 5000.0}) == pytest.approx(8668.7)
    assert done_wall_seconds({**legacy, "wall_scope": WALL_OVER_SITTINGS}) == pytest.approx(8668.7)
    assert done_wall_seconds({"status": "done"}) is None


@needs_ptb
def test_one_job_rows_copy_each_epoch_into_the_state_while_they_train(tmp_path, monkeypatch):
    """``--jobs 1`` (the row trains in this process): the state file gets the row's epochs as they finish, as
    with ``--jobs 2``, not only at its start and end, so a row whose folder is lost later keeps them."""
    from dsf_lightning.reproduce.state import TableState

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(parallel, "POLL_SECONDS", 0.05)
    state_path = tmp_path / "out" / "dsf-table1-word.state.json"
    seen = []  # (status, epochs recorded) of the row at each save while it trained
    save = TableState.save

    def spy(self):
        save(self)
        entry = json.loads(state_path.read_text())["rows"].get("elman", {})
        seen.append((entry.get("status"), len(entry.get("progress", {}).get("epochs", []))))

    monkeypatch.setattr(TableState, "save", spy)
    messages = []
    summary = run_table("dsf-table1-word", rows=["elman"], jobs=1, scale="tiny", data_root=DATA_ROOT,
                        out=tmp_path / "out", overrides=["--trainer.max_epochs=3"], log=messages.append)
    assert summary["ran"] == ["elman"]
    assert any(status == "running" and epochs >= 1 for status, epochs in seen), seen
    assert any("elman: epoch 1 valid PPL" in message for message in messages), messages


def test_report_only_records_the_folders_progress_so_a_lost_folder_keeps_it(tmp_path):
    """`--report-only` reads a stopped row's folder for the table; it also copies that progress into the state,
    so when the folder is lost later the table keeps the epochs it once showed (it lost one: the runner was gone
    before copying a row's last epoch, the report showed 4 epochs, the state kept 3)."""
    from dsf_lightning.reproduce.report import row_folder

    out = tmp_path / "out"
    folder = row_folder(out, "dsf-table1-word", "elman")
    folder.mkdir(parents=True)
    epochs = [{"epoch": i, "val_loss": 5.0 - i / 10, "wall_seconds": 60.0 * (i + 1), "cpu_seconds": 50.0 * (i + 1)} for i in range(3)]
    sitting = {"started": 0.0, "tokens": 3000, "wall_seconds": 180.0, "cpu_seconds": 150.0}
    recorded = {"sittings": [sitting], "epochs": epochs[:2], "max_epochs": 100}
    (folder / "progress.json").write_text(json.dumps({**recorded, "epochs": epochs}))
    state_path = out / "dsf-table1-word.state.json"
    state_path.write_text(json.dumps({"table": "dsf-table1-word", "rows": {"elman": {"status": "stopped", "progress": recorded}}}))
    assert main(["reproduce", "dsf-table1-word", "--report-only", "--out", str(out)]) == 0
    assert read_csv(out / "dsf-table1-word.csv")["elman"]["epochs"] == "3"
    assert len(json.loads(state_path.read_text())["rows"]["elman"]["progress"]["epochs"]) == 3
    shutil.rmtree(out / "runs")
    assert main(["reproduce", "dsf-table1-word", "--report-only", "--out", str(out)]) == 0
    assert read_csv(out / "dsf-table1-word.csv")["elman"]["epochs"] == "3"
