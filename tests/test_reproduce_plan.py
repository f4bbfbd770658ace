"""``dsf reproduce``'s steps one at a time, training nothing: the plan (rank 0's decision for each row), the
record of each outcome (the state file) and the rows measured after the fits."""

import json
import os
from pathlib import Path

import pytest

from dsf_lightning.reproduce import runner
from dsf_lightning.reproduce.state import TableState
from dsf_lightning.reproduce.tables import default_recipes_dir, get_table
from dsf_lightning.reproduce.train import measure_in_run, measure_later

ROOT = Path(__file__).resolve().parents[1]
DATA_ROOT = os.environ.get("DSF_DATA_ROOT", str(ROOT.parent / "shared" / "data"))
needs_ptb = pytest.mark.skipif(not (Path(DATA_ROOT) / "ptb" / "ptb.train.txt").is_file(), reason="PTB not under the data root")


def _setup(data_root=DATA_ROOT, scale="tiny"):
    return runner.RowSetup(scale, default_recipes_dir().resolve(), str(Path(data_root).resolve()), (), None)


def _record(table, out, wanted, said):
    return TableState(table, out, "tiny", wanted, log=said.append, command="dsf reproduce test", commit="abc")


def _fingerprint(table, key, setup):
    row = table.row(key)
    path = setup.recipes / row.recipe
    return runner._fingerprints(table, row, setup.scale, runner.load_recipe(path), path.read_text(), setup.extra,
                                setup.root)[0]


@needs_ptb
def test_the_plan_skips_a_done_row_resumes_a_failed_one_and_starts_the_rest_fresh_in_the_order_asked(tmp_path):
    table, setup, said = get_table("dsf-table1-word"), _setup(), []
    state = {"table": table.id, "rows": {
        "elman": {"status": "done", "fingerprint": _fingerprint(table, "elman", setup), "measured": 130.0},
        "lstm": {"status": "failed", "fingerprint": _fingerprint(table, "lstm", setup)},
        "scrn": {"status": "failed", "fingerprint": "other settings"},
    }}
    (tmp_path / f"{table.id}.state.json").write_text(json.dumps(state))
    last = tmp_path / "runs" / table.id / "lstm" / "runs" / "ptb" / "lstm" / "last.ckpt"
    last.parent.mkdir(parents=True)
    last.write_bytes(b"a checkpoint")
    stale = tmp_path / "runs" / table.id / "scrn" / "last.ckpt"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"a checkpoint of other settings")

    record = _record(table, tmp_path, ["scrn", "lstm", "elman"], said)
    plan = runner.plan_rows(table, record, setup)

    assert [fit[0].key for fit in plan.fits] == ["scrn", "lstm"] and not plan.later  # the order --rows names them
    specs = {fit[0].key: fit[2] for fit in plan.fits}
    assert specs["lstm"]["resume"] == str(last.relative_to(tmp_path / "runs" / table.id / "lstm"))
    assert specs["scrn"]["resume"] is False  # another fingerprint: fresh, its folder moved aside
    assert not stale.exists() and list((tmp_path / "runs" / table.id).glob("scrn.superseded-*/last.ckpt"))
    assert (stale.parent / "fingerprint.txt").read_text() == plan.fits[0][1]["fingerprint"]
    assert record.summary["skipped_done"] == ["elman"] and "[dsf-table1-word] elman: done before, skipped" in said
    assert specs["lstm"]["args"][:2] == ["--config", str(setup.recipes / "ptb/lstm.yaml")]
    assert "--trainer.max_epochs=1" in specs["lstm"]["args"] and specs["lstm"]["threads"] is None
    entry = plan.fits[1][1]
    assert entry["commit"] == "abc" and entry["reproduce_command"] == "dsf reproduce test" and entry["run"] == plan.fits[1][3]


def test_rows_that_train_one_model_share_one_fit(tmp_path):
    table, said = get_table("srnn-table1"), []
    keys = [row.key for row in table.rows if row.key.startswith("large-lstm-")]
    assert len(keys) > 1
    plan = runner.plan_rows(table, _record(table, tmp_path, keys, said), _setup(tmp_path))
    assert [fit[0].key for fit in plan.fits] == keys[:1]  # generated data: nothing is missing
    assert [item[0].key for item in plan.later] == keys[1:]
    assert {item[3] for item in plan.later} == {plan.fits[0][3]}  # measured in the first row's run


@needs_ptb
def test_a_dynamic_row_is_measured_after_the_fits(tmp_path):
    table, said = get_table("irlm-table2"), []
    dynamic = next(row for row in table.rows if row.evaluation)
    plan = runner.plan_rows(table, _record(table, tmp_path, [dynamic.parent, dynamic.key], said), _setup())
    assert [fit[0].key for fit in plan.fits] == [dynamic.parent]
    assert [(item[0].key, item[3]) for item in plan.later] == [(dynamic.key, None)]


def test_missing_data_and_pending_rows_are_recorded_while_planning(tmp_path):
    table, said = get_table("srnn-imdb"), []
    keys = [row.key for row in table.rows]
    record = _record(table, tmp_path, keys, said)
    plan = runner.plan_rows(table, record, _setup(tmp_path / "no data here"))
    assert not plan.fits
    pending = [row.key for row in table.rows if row.pending]
    assert record.summary["pending"] == pending
    assert record.summary["skipped"] == [k for k in keys if k not in pending and not table.row(k).evaluation]
    on_disk = json.loads((tmp_path / "srnn-imdb.state.json").read_text())  # a skipped row is saved at once
    assert all(on_disk["rows"][k]["status"] == "skipped" for k in record.summary["skipped"])
    assert "imdb/train.jsonl.xz" in on_disk["rows"][record.summary["skipped"][0]]["message"]


def test_rows_measured_later_are_recorded_failed_when_what_they_wait_on_failed(tmp_path):
    table = get_table("srnn-table1")
    first, second = [row for row in table.rows if row.key.startswith("large-lstm-")][:2]
    irlm = get_table("irlm-table2")
    dynamic = next(row for row in irlm.rows if row.evaluation)
    said = []
    record = _record(table, tmp_path, [first.key, second.key], said)
    measure_later([(second, {"run": "gone"}, {}, "gone")], record, evaluate=lambda *a: pytest.fail("evaluated"))
    assert record.summary["failed"] == [second.key]
    assert record.state["rows"][second.key]["message"] == ("failed: RuntimeError: the row whose run it shares "
                                                            "failed (see that row)")

    record.runs["run-1"] = {"row": first.key, "metrics": {runner.metric_key(second): 0.25}, "wall_seconds": 3.0}
    measure_later([(second, {"run": "run-1"}, {}, "run-1")], record, evaluate=lambda *a: pytest.fail("evaluated"))
    entry = json.loads((tmp_path / "srnn-table1.state.json").read_text())["rows"][second.key]
    assert entry["status"] == "done" and entry["measured"] == 0.25 and entry["shared_with"] == first.key

    record = _record(irlm, tmp_path, [dynamic.key], said)
    measure_later([(dynamic, {}, {}, None)], record, evaluate=lambda *a: pytest.fail("evaluated"))
    assert record.state["rows"][dynamic.key]["message"].startswith(f"failed: RuntimeError: needs row {dynamic.parent} "
                                                                   "to be done first")
    record.state["rows"][dynamic.parent] = {"status": "done", "finished": 123.0, "checkpoint": "best.ckpt"}
    measure_later([(dynamic, {}, {}, None)], record, evaluate=lambda row, parent, recipe: {"measured": 98.0})
    entry = record.state["rows"][dynamic.key]
    assert entry["status"] == "done" and entry["measured"] == 98.0 and entry["parent_finished"] == 123.0
    assert record.close()["ran"] == [dynamic.key] and (tmp_path / "irlm-table2.md").is_file()


def test_a_rows_recipe_that_does_not_parse_is_one_line_as_in_dsf_fit(tmp_path, capsys):
    from dsf_lightning.reproduce.runner import run_row

    with pytest.raises(SystemExit) as exit_:
        run_row({"args": ["--model.bogus", "1"], "workdir": str(tmp_path), "metric": "test_ppl"})
    assert exit_.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("dsf fit: error: ") and "--model.bogus" in lines[0], lines


def test_the_rows_read_from_a_run_are_measured_once_when_it_ends(tmp_path):
    table = get_table("srnn-table1")
    first, second, third = [row for row in table.rows if row.key.startswith("large-lstm-")][:3]
    record = _record(table, tmp_path, [first.key, second.key, third.key], [])
    later = [(second, {"run": "run-1"}, {}, "run-1"), (third, {"run": "run-2"}, {}, "run-2")]
    record.runs["run-1"] = {"row": first.key, "metrics": {runner.metric_key(second): 0.25}, "wall_seconds": 3.0}
    measure_in_run(later, "run-1", record)
    assert [item[0].key for item in later] == [third.key]  # the other run's row still waits
    assert record.summary["ran"] == [second.key] and record.state["rows"][second.key]["measured"] == 0.25
    measure_later(later, record, evaluate=lambda *a: pytest.fail("evaluated"))  # the end of the table
    assert record.summary["ran"] == [second.key]  # measured once; run-2 never trained: recorded failed
    assert record.summary["failed"] == [third.key]
