"""One row of ``dsf reproduce`` in a child process: the command that runs it and the result it reports back.

The row's spec goes to ``<row folder>/row.json``; the child (``python -m ENTRY row.json``, the entry named by the
CLI) trains the row and rank 0 writes ``result.json`` beside it. Used by the runner (``--isolate``, several
devices) and by :mod:`.parallel` (``--jobs N``), which is why it is a module of its own below both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


def run_child(argv: list[str], result_file: Path) -> dict:
    """Run a row's child process to its end (its output goes to this process's); return its result."""
    done = subprocess.run(argv, env=dict(os.environ))
    return read_child_result(done.returncode, result_file)
