"""One row of ``dsf reproduce`` in a child process: the command that runs it and the result it reports back.

The row's spec goes to ``<row folder>/row.json``; the child (``python -m ENTRY row.json``, the entry named by the
CLI) trains the row and rank 0 writes ``result.json`` beside it. Used by the runner (``--isolate``, several
devices) and by :mod:`.parallel` (``--jobs N``), which is why it is a module of its own below both. Whichever
runs them, a SIGTERM (``kill``, a scheduler's time limit) or Ctrl-C to ``dsf reproduce`` stops its row
processes too: none is left training on its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .._fs import write_atomic
from .ranks import global_rank


def child_command(spec: dict, entry: str) -> tuple[list[str], Path]:
    """Write the row's spec beside it; return the command that runs it in a child process (``python -m ENTRY
    SPEC.json``; the CLI names the entry) and its result file."""
    result_file = Path(spec["workdir"]) / "result.json"
    result_file.unlink(missing_ok=True)
    spec = dict(spec, result_file=str(result_file))
    spec_file = Path(spec["workdir"]) / "row.json"
    write_atomic(spec_file, json.dumps(spec, indent=1))
    return [sys.executable, "-m", entry, str(spec_file)], result_file


def read_child_result(returncode: int, result_file: Path, where: str = "log above") -> dict:
    """The result a row's child process wrote ({} on a non-zero rank), or why there is none."""
    if returncode != 0:
        raise RuntimeError(f"the row's process exited with code {returncode} ({where})")
    if not result_file.is_file():
        if global_rank() != 0:
            return {}
        raise RuntimeError(f"the row's process wrote no {result_file.name}")
    return json.loads(result_file.read_text())


#: the log line of a row whose process was stopped
STOPPED = "stopped; the next run resumes it from last.ckpt"


class Terminated(KeyboardInterrupt):
    """SIGTERM reached ``dsf reproduce``: raised like Ctrl-C, so that its row processes are stopped on the way out."""


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in this process (the main thread only: elsewhere
    handlers cannot be set and nothing changes); the previous handler comes back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_children(children: Iterable[subprocess.Popen], grace_s: float = 30.0) -> None:
    """SIGTERM every child, then wait up to ``grace_s`` for each and SIGKILL the ones still running."""
    children = list(children)
    for child in children:
        child.terminate()
    for child in children:
        try:
            child.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def run_to_end(argv: list[str], log: Callable[[str], None] | None = None) -> int:
    """Run a row's child process to its end (its output goes to this process's) and return its exit code;
    ``log`` gets its pid at the start. Interrupted here (SIGTERM, Ctrl-C), the child is stopped too."""
    with sigterm_raises():
        child = subprocess.Popen(argv, env=dict(os.environ))
        if log is not None:
            log(f"started (pid {child.pid})")
        try:
            return child.wait()
        except BaseException:
            stop_children([child])
            if log is not None:
                log(STOPPED)
            raise


def run_child(argv: list[str], result_file: Path, log: Callable[[str], None] | None = None) -> dict:
    """Run a row's child process to its end (:func:`run_to_end`); return its result."""
    return read_child_result(run_to_end(argv, log), result_file)
