"""The record of a ``dsf reproduce`` run: ``<out>/<table>.state.json`` and the run's summary.

:class:`TableState` is what the runner's steps tell what happened to each row (decided, queued, started,
measured, skipped, failed); each change is saved at once (atomically, under a lock, keeping the rows another
``dsf reproduce`` on the same ``--out`` wrote meanwhile) and the report is rewritten from it
(:func:`.report.write_outputs`: ``<table>.md`` / ``.csv`` / curves). Only global rank 0 keeps it (:mod:`.ranks`).
"""

from __future__ import annotations

import json
import logging
import math
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._fs import file_lock, write_atomic
from .report import (
    STATUS_DONE,
    STATUS_FAILED,
    STATUS_PENDING,
    STATUS_QUEUED,
    STATUS_RUNNING,
    STATUS_SKIPPED,
    WALL_OVER_SITTINGS,
    record_progress,
    write_outputs,
)
from .tables import Row, Table, metric_key

logger = logging.getLogger(__name__)


def read_state(path: Path, table: Table) -> dict:
    """The state file of ``table`` at ``path`` (a fresh one when it is missing, unreadable or another table's)."""
    if path.is_file():
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(state, dict) and state.get("table") == table.id:
                state.setdefault("rows", {})
                return state
        except (OSError, json.JSONDecodeError) as err:
            logger.warning("ignoring unreadable state %s: %s", path, err)
    return {"table": table.id, "rows": {}}


def take_others_rows(state: dict, on_disk: dict, mine: set[str]) -> None:
    """Update ``state`` with what another process wrote meanwhile: every row this run does not own (``mine``)
    and the runs those rows trained, as they are on disk now."""
    for key, entry in on_disk.get("rows", {}).items():
        if key not in mine:
            state["rows"][key] = entry
    for run_fp, run in on_disk.get("runs", {}).items():
        if run.get("row") not in mine:
            state.setdefault("runs", {})[run_fp] = run


def state_lock(table: Table, out: Path):
    """The lock every writer of ``<out>/<table>.state.json`` holds: other `dsf reproduce` runs and `--report-only`."""
    return file_lock(out / f".{table.id}.state.lock")


def write_state(table: Table, state: dict, out: Path) -> None:
    """Copy the unfinished rows' progress into ``state`` (:func:`record_progress`) and write the state file; the
    caller holds :func:`state_lock`."""
    record_progress(table, state, out)
    write_atomic(out / f"{table.id}.state.json", json.dumps(state, indent=1, sort_keys=True))


def report_table(table: Table, out: Path, scale: str) -> tuple[Path, Path]:
    """Rewrite ``<out>/<table>.md`` / ``.csv`` / curves from the state file and the rows' progress; trains nothing.
    The unfinished rows' progress it reads is copied into the state too (:func:`record_progress`): a row whose
    folder is lost later keeps what this report showed."""
    state_path = out / f"{table.id}.state.json"
    if not state_path.is_file():
        raise FileNotFoundError(f"no {state_path}: run `dsf reproduce {table.id} --out {out}` first")
    with state_lock(table, out):  # a running `dsf reproduce` saves under the same lock
        state = read_state(state_path, table)
        write_state(table, state, out)
    return write_outputs(table, state, out, scale)


class TableState:
    """Rank 0's record of one run of ``table`` into ``out``: the state file as read at the start (``snapshot``,
    what every row is decided from), the state as it changes (``state``) and the summary the run returns.

    ``wanted``: the rows this run owns (``--rows``), in order; ``command`` / ``commit``: what the outputs
    record as having produced them."""

    def __init__(self, table: Table, out: Path, scale: str, wanted: Sequence[str], *,
                 log: Callable[[str], None], command: str | None, commit: str | None) -> None:
        self.table, self.out, self.scale, self.wanted, self.log = table, out, scale, list(wanted), log
        self.path = out / f"{table.id}.state.json"
        self.state = read_state(self.path, table)
        self.snapshot = json.loads(json.dumps(self.state))  # every rank decides from the same view
        self.summary: dict[str, Any] = {"ran": [], "skipped_done": [], "skipped": [], "failed": [], "pending": []}
        self.state.setdefault("runs", {})
        if command:
            self.state["command"] = command
        self.state["commit"] = commit
        self.command = command

    @property
    def runs(self) -> dict:
        """Each fit + test by its run fingerprint (rows that train the same model share one)."""
        return self.state["runs"]

    def say(self, key: str, message: str) -> None:
        self.log(f"[{self.table.id}] {key}: {message}")

    def save(self) -> None:
        """Write the state file (keeping the rows other processes own, as they are on disk) and the report."""
        with state_lock(self.table, self.out):  # another `dsf reproduce` may run other rows into `out`
            take_others_rows(self.state, read_state(self.path, self.table), set(self.wanted))
            write_state(self.table, self.state, self.out)
        write_outputs(self.table, self.state, self.out, self.scale)

    def put(self, row: Row, entry: dict) -> None:
        """Record ``entry`` as row ``row``'s and save."""
        self.state["rows"][row.key] = entry
        self.save()

    # ------------------------------------------------------------------------------ while deciding the rows
    def previous(self, row: Row, fp: str, same_row: set[str]) -> dict:
        """The row's entry as the run found it; an older fingerprint of the same row is brought up to ``fp``."""
        previous = self.snapshot["rows"].get(row.key, {})
        if previous.get("fingerprint") in same_row and row.key in self.state["rows"]:
            self.state["rows"][row.key]["fingerprint"] = fp  # an older state's text fingerprint, kept up to date
        return previous

    def done_before(self, row: Row, previous: dict, same_row: set[str]) -> bool:
        """Whether the row finished before with these settings (a dynamic row: of its parent's current run)."""
        if previous.get("status") != STATUS_DONE or previous.get("fingerprint") not in same_row:
            return False
        parent = self.snapshot["rows"].get(row.parent, {})
        return row.evaluation is None or previous.get("parent_finished") == parent.get("finished")

    def pending(self, row: Row) -> None:
        self.summary["pending"].append(row.key)
        self.state["rows"][row.key] = {"status": STATUS_PENDING, "message": f"pending: {row.pending}", "scale": self.scale}

    def skip_done(self, row: Row) -> None:
        self.summary["skipped_done"].append(row.key)
        self.say(row.key, "done before, skipped")

    def skip(self, row: Row, entry: dict, why: str) -> None:
        """The row cannot run here (``why``: its data is missing)."""
        entry.update(status=STATUS_SKIPPED, message=f"skipped: {why}")
        self.summary["skipped"].append(row.key)
        self.say(row.key, f"skipped: {why}")
        self.put(row, entry)

    # ------------------------------------------------------------------------------ while the rows run
    def queue(self, fits: Sequence[tuple], runner: dict) -> None:
        """Mark the rows to train ``queued`` by ``runner`` (this process: the report tells a row whose runner is gone)."""
        for row, entry, _, _ in fits:
            self.state["rows"][row.key] = dict(entry, status=STATUS_QUEUED, runner=runner)
        self.save()

    def start(self, row: Row, entry: dict, runner: dict) -> None:
        entry.update(status=STATUS_RUNNING, runner=runner)
        self.put(row, dict(entry))

    def trained(self, row: Row, entry: dict, run_fp: str, result: dict | None, err: BaseException | None,
                started: float) -> None:
        """Record a row's fit + test (``result``, or ``err``); ``started``: ``perf_counter`` at its start."""
        try:
            if err is not None:
                raise err
            if not result:
                return  # a non-zero rank under isolation: rank 0 reports
            result["wall_seconds"] = result.pop("earlier_wall_seconds", 0.0) + time.perf_counter() - started
            result["wall_scope"] = WALL_OVER_SITTINGS
            self.runs[run_fp] = {"row": row.key, **result}
            self.finish(row, entry, result)
        except Exception as failure:  # noqa: BLE001 - a failed row is recorded and retried next time
            self.fail(row, entry, failure, started)
        self.put(row, entry)

    def finish(self, row: Row, entry: dict, result: dict) -> None:
        """The row is done with ``result``; raises when it measured no finite value of its metric."""
        if result.get("measured") is None or not math.isfinite(result["measured"]):
            raise RuntimeError(f"no finite {metric_key(row)} measured (metrics: {result.get('metrics')})")
        entry.pop("runner", None)  # only an unfinished row needs to say who runs it
        entry.update(status=STATUS_DONE, message=(f"measured in the run of row {entry['shared_with']}"
                                                  if "shared_with" in entry else ""),
                     finished=time.time(), **result)
        self.summary["ran"].append(row.key)
        self.say(row.key, f"{row.metric} {result['measured']:.4f} (published {row.published}) in "
                          f"{result['wall_seconds']:.1f}s")

    def fail(self, row: Row, entry: dict, err: BaseException, started: float) -> None:
        """The row failed with ``err`` (skipped when it is a missing corpus): retried on the next run."""
        from ..data.corpora import CorpusError

        corpus_err = isinstance(err, CorpusError) or isinstance(getattr(err, "__cause__", None), CorpusError)
        entry.pop("runner", None)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if corpus_err:
            entry.update(status=STATUS_SKIPPED, message=f"skipped: corpus missing: {first}")
            self.summary["skipped"].append(row.key)
        else:
            entry.update(status=STATUS_FAILED, message=f"failed: {type(err).__name__}: {first}",
                         traceback="".join(traceback.format_exception(err, limit=20)))
            self.summary["failed"].append(row.key)
        entry["wall_seconds"] = time.perf_counter() - started
        self.say(row.key, entry["message"])

    def shared_result(self, run_fp: str, row: Row, entry: dict) -> dict:
        """The row's result read from the run it shares with another row (the same model, another test set)."""
        shared = self.runs[run_fp]
        result = {k: v for k, v in shared.items() if k != "row"}
        result["measured"] = result.get("metrics", {}).get(metric_key(row))
        entry["shared_with"] = shared["row"]
        self.say(row.key, f"measured in the run of row {shared['row']} (same model)")
        return result

    def close(self) -> dict:
        """Save a last time; the run's summary (row keys by outcome, the report's paths)."""
        self.save()
        return dict(self.summary, markdown=self.out / f"{self.table.id}.md", csv=self.out / f"{self.table.id}.csv")
