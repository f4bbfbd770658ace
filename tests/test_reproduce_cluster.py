"""``dsf reproduce`` on a cluster: under torchrun rank 0 decides and writes, the other ranks follow and write
nothing; a changed option never resumes another run's checkpoint; job arrays pick their row by index.

The torchrun test launches two real ranks (``torch.distributed.run``, gloo on CPU, a real DDP fit of the
smallest task row). Which process wrote what is read from Python's audit hooks (``sitecustomize`` below, on
every rank's ``PYTHONPATH``): each process logs every file it opens for writing, renames, removes or creates
under the output folder.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dsf_lightning.cli import main
from dsf_lightning.reproduce import runner

ROOT = Path(__file__).resolve().parents[1]
TABLE, ROW = "srnn-tomita", "g2"  # the fastest row at --scale tiny (a few seconds)
DDP = ["--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.accelerator", "cpu"]

AUDIT = textwrap.dedent('''
    import os, sys
    OUT, LOGS = os.environ.get("AUDIT_OUT"), os.environ.get("AUDIT_LOGS")
    WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    EVENTS = {"os.rename": 2, "os.remove": 1, "os.mkdir": 1, "os.rmdir": 1}
    busy = []

    def _inside(path):
        try:
            return os.path.abspath(os.fsdecode(path)).startswith(OUT)
        except TypeError:
            return False  # a file descriptor

    def hook(event, args):
        if busy:
            return
        if event == "open":
            path, mode, flags = args
            writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & WRITES)
            paths = [path] if writing else []
        elif event in EVENTS:
            paths = list(args[:EVENTS[event]])
        else:
            return
        paths = [os.path.abspath(os.fsdecode(p)) for p in paths if _inside(p)]
        if paths:
            busy.append(1)
            try:
                name = f"rank{os.environ.get('RANK', 'none')}-{os.getpid()}.txt"
                with open(os.path.join(LOGS, name), "a") as f:
                    f.write(f"{event} {' '.join(paths)}\\n")
            finally:
                busy.pop()

    if OUT and LOGS:
        sys.addaudithook(hook)
''')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(tmp_path: Path, out: Path, audit: Path, *extra: str) -> str:
    """Two ranks of ``dsf reproduce TABLE --rows ROW`` under torchrun; returns their output (checked rc 0)."""
    audit.mkdir()
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(AUDIT)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]),
               AUDIT_OUT=str(out), AUDIT_LOGS=str(audit), PYTHONUNBUFFERED="1")
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_free_port()),
            "-m", "dsf_lightning.cli", "reproduce", TABLE, "--scale", "tiny", "--rows", ROW, "--out", str(out),
            *DDP, *extra]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def _decisions(output: str) -> dict[int, str]:
    """{rank: how it starts the row} from the ranks' ``fit + test ..., starting fresh [rank R of 2 ...]`` lines."""
    found = re.findall(rf"\[{TABLE}\] {ROW}: fit \+ test of \S+ \(tiny\), (.+?) \[rank (\d) of 2", output)
    return {int(rank): how for how, rank in found}


def _writers(audit: Path) -> dict[str, list[str]]:
    """{log file: the writes it recorded}: one file per process, named after its RANK."""
    return {f.name: f.read_text().splitlines() for f in sorted(audit.iterdir())}


@pytest.mark.slow
def test_torchrun_ranks_follow_rank_zero_and_only_rank_zero_writes(tmp_path):
    out = tmp_path / "out"
    first = _torchrun(tmp_path, out, tmp_path / "audit1")
    assert _decisions(first) == {0: "starting fresh", 1: "starting fresh"}, first[-3000:]
    writers = _writers(tmp_path / "audit1")
    assert any(name.startswith("rank0-") for name in writers)
    assert not [w for name, w in writers.items() if not name.startswith("rank0-")], writers
    state = json.loads((out / f"{TABLE}.state.json").read_text())
    assert state["rows"][ROW]["status"] == "done"
    folder = out / "runs" / TABLE / ROW
    old_last = next(folder.rglob("last.ckpt"))
    old_fingerprint = (folder / "fingerprint.txt").read_text()
    assert old_fingerprint == state["rows"][ROW]["fingerprint"]

    # the run is marked interrupted: with the same settings both ranks would resume its last.ckpt; with a changed
    # option neither may: both start fresh, and the old run is moved aside (kept), not resumed or deleted
    state["rows"][ROW]["status"] = "running"
    (out / f"{TABLE}.state.json").write_text(json.dumps(state))
    second = _torchrun(tmp_path, out, tmp_path / "audit2", "--seed_everything=7")
    assert _decisions(second) == {0: "starting fresh", 1: "starting fresh"}, second[-3000:]
    assert "resuming" not in second
    writers = _writers(tmp_path / "audit2")
    assert not [w for name, w in writers.items() if not name.startswith("rank0-")], writers
    (aside,) = (out / "runs" / TABLE).glob(f"{ROW}.superseded-*")
    assert (aside / old_last.relative_to(folder)).is_file() and (aside / "fingerprint.txt").read_text() == old_fingerprint
    state = json.loads((out / f"{TABLE}.state.json").read_text())
    assert state["rows"][ROW]["status"] == "done"
    assert (folder / "fingerprint.txt").read_text() == state["rows"][ROW]["fingerprint"] != old_fingerprint


def test_prepare_row_folder_resumes_only_its_own_fingerprints_checkpoint(tmp_path):
    """Rank 0's choice of checkpoint: its own run's last.ckpt (a folder from before fingerprint.txt is trusted
    as the state says); a folder of another fingerprint is moved aside and the row starts fresh."""
    recipe = {"trainer": {"callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                         "init_args": {"dirpath": "runs/x/checkpoints"}}]}}
    folder, said = tmp_path / "row", []
    (folder / "runs" / "x" / "checkpoints").mkdir(parents=True)
    (folder / "runs" / "x" / "checkpoints" / "last.ckpt").write_bytes(b"A")
    same = {"fp-a", "fp-a-text"}
    # a folder from before the marker: the state says resume, so it resumes (the committed runs stay resumable)
    assert runner.prepare_row_folder(folder, "fp-a", same, recipe, resume=True, log=said.append) == \
        "runs/x/checkpoints/last.ckpt"
    assert (folder / "fingerprint.txt").read_text() == "fp-a" and not said
    # another fingerprint's folder: never resumed, even when the state (written meanwhile) says resume
    assert runner.prepare_row_folder(folder, "fp-b", {"fp-b"}, recipe, resume=True, log=said.append) is None
    (aside,) = tmp_path.glob("row.superseded-*")
    assert (aside / "runs" / "x" / "checkpoints" / "last.ckpt").read_bytes() == b"A"
    assert (folder / "fingerprint.txt").read_text() == "fp-b" and not (folder / "runs").exists()
    assert "moved to row.superseded-" in said[0]


def test_several_ranks_without_device_flags_is_a_usage_error(tmp_path, monkeypatch, capsys):
    """Each rank would train its own copy of the row and write the same files: refused, one line, exit 2;
    so is ``--in-process`` with several ranks."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    code = main(["reproduce", TABLE, "--scale", "tiny", "--rows", ROW, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "--trainer.devices" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()
    # the other ranks run rank 0's row.json in a child process: --in-process cannot be theirs
    code = main(["reproduce", TABLE, "--scale", "tiny", "--rows", ROW, "--out", str(tmp_path / "out"), "--in-process", *DDP])
    err = capsys.readouterr().err
    assert code == 2 and "--in-process" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def _slurm_env(task: int) -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", SLURM_JOB_ID="4242", SLURM_ARRAY_JOB_ID="4240",
                SLURM_ARRAY_TASK_ID=str(task), SLURM_ARRAY_TASK_MIN="0", SLURM_ARRAY_TASK_MAX="1",
                SLURM_NTASKS="1", SLURM_PROCID="0")


@pytest.mark.slow
def test_list_rows_and_row_index_under_a_slurm_array(tmp_path, monkeypatch, capsys):
    """``--list-rows`` gives the array's rows; ``--row-index $SLURM_ARRAY_TASK_ID`` (0-based) trains that one."""
    assert main(["reproduce", TABLE, "--list-rows"]) == 0
    assert capsys.readouterr().out.split() == [f"g{i}" for i in range(1, 8)]
    assert main(["reproduce", TABLE, "--rows", f"g3,{ROW}", "--list-rows"]) == 0
    assert capsys.readouterr().out.split() == ["g3", ROW]

    out = tmp_path / "out"  # the job of array task 1, its index given as a batch script gives it
    script = f'{sys.executable} -m dsf_lightning.cli reproduce {TABLE} --scale tiny --rows g3,{ROW} ' \
             f'--row-index "$SLURM_ARRAY_TASK_ID" --out {out}'
    done = subprocess.run(["bash", "-c", script], env=_slurm_env(1), capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads((out / f"{TABLE}.state.json").read_text())
    assert list(state["rows"]) == [ROW] and state["rows"][ROW]["status"] == "done"
    assert f"--rows {ROW} " in state["command"]  # the recorded command reruns this one row

    for name, value in _slurm_env(2).items():  # task 2 of an array sized too big: one line, exit 2
        monkeypatch.setenv(name, value)
    argv = ["reproduce", TABLE, "--rows", f"g3,{ROW}", "--row-index", os.environ["SLURM_ARRAY_TASK_ID"], "--out", str(out)]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "dsf reproduce: error: --row-index 2 is not a row of this run: give 0 to 1 (0-based; 2 rows, see "
        "--list-rows; for a job array: #SBATCH --array=0-1)"]
