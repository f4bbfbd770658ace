"""Train several rows of a table at once (``dsf reproduce TABLE --jobs N``): one child process per row.

Each child runs ``python -m ENTRY`` (the row entry, ``dsf_lightning.reproduce.row``) with ``threads`` torch /
OpenMP threads and its output in ``<row folder>/row.log`` (appended across sittings); this process starts the next row when one
ends, reports each finished epoch from the row's ``progress.json`` and hands every result to ``on_done``.
Interrupted (Ctrl-C, SIGTERM), it stops its children: their rows stay ``running`` in the state file and the
next run resumes them from ``last.ckpt``.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .child import STOPPED, child_command, read_child_result, sigterm_raises, stop_children
from .progress import read_progress

POLL_SECONDS = 2.0


def _start(spec: dict, entry: str) -> tuple[subprocess.Popen, Path, Path]:
    threads = str(spec.get("threads") or 1)
    quiet = dict(spec, args=[*spec["args"], "--trainer.enable_progress_bar=false"])
    argv, result_file = child_command(quiet, entry)
    log_path = Path(spec["workdir"]) / "row.log"
    env = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    with open(log_path, "ab") as log_file:
        log_file.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(argv)}\n".encode())
        log_file.flush()
        child = subprocess.Popen(argv, env=env, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return child, result_file, log_path


def run_rows_in_parallel(fits: Sequence[tuple], jobs: int, *, on_start: Callable, on_done: Callable,
                         log: Callable[[str], None], on_epoch: Callable[[], None] | None = None,
                         poll_s: float = POLL_SECONDS, child_entry: str) -> None:
    """Run ``fits`` (row, entry, spec, run fingerprint) ``jobs`` at a time; ``on_start(row, entry, spec)`` before
    each and ``on_done(row, entry, spec, run_fp, result, error, started)`` after each, in this process;
    ``on_epoch()`` whenever a row finished an epoch (e.g. to rewrite the table); ``child_entry``: the module each
    child runs with ``python -m`` (:mod:`dsf_lightning.reproduce.row`)."""
    queue = list(fits)
    running: dict[str, dict] = {}
    with sigterm_raises():  # interrupted, the rows still running are stopped
        try:
            while queue or running:
                while queue and len(running) < jobs:
                    row, entry, spec, run_fp = queue.pop(0)
                    on_start(row, entry, spec)
                    Path(spec["workdir"]).mkdir(parents=True, exist_ok=True)
                    known = len(read_progress(Path(spec["workdir"]))["epochs"])  # earlier sittings' epochs are not news
                    child, result_file, log_path = _start(spec, child_entry)
                    log(f"{row.key}: started (pid {child.pid}, {spec.get('threads') or 1} thread(s), log {log_path})")
                    running[row.key] = dict(child=child, fit=(row, entry, spec, run_fp), result_file=result_file,
                                            log_path=log_path, started=time.perf_counter(), epochs=known)
                _wait(poll_s)
                for key, job in list(running.items()):
                    known = job["epochs"]
                    job["epochs"] = _report_epochs(key, Path(job["fit"][2]["workdir"]), known, log)
                    if job["epochs"] > known and on_epoch is not None:
                        on_epoch()
                    code = job["child"].poll()
                    if code is None:
                        continue
                    del running[key]
                    row, entry, spec, run_fp = job["fit"]
                    try:
                        result, err = read_child_result(code, job["result_file"], f"see {job['log_path']}"), None
                    except Exception as caught:  # noqa: BLE001 - recorded by on_done
                        result, err = None, caught
                    on_done(row, entry, spec, run_fp, result, err, job["started"])
        except BaseException:
            stop_children(job["child"] for job in running.values())
            for key in running:
                log(f"{key}: {STOPPED}")
            raise


@contextmanager
def epochs_watched(key: str, workdir: str | Path, *, log: Callable[[str], None], on_epoch: Callable[[], None]) -> Iterator[None]:
    """Within the block (one row training in this process or its one child, ``--jobs 1``), a thread reports each
    epoch the row's ``progress.json`` gains and calls ``on_epoch()``, as :func:`run_rows_in_parallel` does for
    its rows: the state keeps a row's epochs even when its folder is lost later. Stopped on leaving the block."""
    workdir, done = Path(workdir), threading.Event()
    known = len(read_progress(workdir)["epochs"])  # earlier sittings' epochs are not news

    def watch() -> None:
        nonlocal known
        while not done.wait(POLL_SECONDS):
            before, known = known, _report_epochs(key, workdir, known, log)
            if known > before:
                on_epoch()

    watcher = threading.Thread(target=watch, name=f"epochs of {key}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def _wait(seconds: float) -> None:
    """Sleep between looks at the children (a seam for tests that interrupt the loop)."""
    time.sleep(seconds)


def _report_epochs(key: str, workdir: Path, known: int, log: Callable[[str], None]) -> int:
    """Log the epochs the row's ``progress.json`` gained past the ``known`` first ones; return how many it holds."""
    epochs = read_progress(workdir).get("epochs", [])
    for record in epochs[known:]:
        ppl = record.get("val_ppl")
        shown = f"valid PPL {ppl:,.2f}" if isinstance(ppl, (int, float)) else "validated"
        log(f"{key}: epoch {record['epoch'] + 1} {shown} ({record.get('cpu_seconds', 0) / 60:.1f} CPU min so far)")
    return len(epochs)
