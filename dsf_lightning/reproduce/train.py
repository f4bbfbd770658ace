"""The run step of ``dsf reproduce``: train the rows the plan decided, then measure the rows that wait on them.

A row trains in this process, in a child process of its own (``--isolate``, several devices: every rank runs
the ``row.json`` rank 0 wrote) or ``jobs`` at a time in child processes (:mod:`.parallel`). Rows measured in
another row's run, and dynamic evaluations of a finished parent's checkpoint, come after. Every outcome goes
to the :class:`~.state.TableState`. How a row is trained in this process and how a dynamic row is evaluated
are handed in by the runner (``fit_here``, ``evaluate``), which knows the CLI's entry points.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .child import child_command, run_child, run_to_end
from .liveness import this_process
from .parallel import epochs_watched, run_rows_in_parallel
from .ranks import share_decision
from .report import STATUS_DONE
from .state import TableState
from .tables import Table


def fit_line(table_id: str, key: str, recipe: str, scale: str, resume: str | bool, rank: int, world: int) -> str:
    """The log line of a row's start: what it trains, and rank 0's decision (the same line on every rank)."""
    how = f"resuming from {resume}" if resume else "starting fresh"
    ranks = f" [rank {rank} of {world}, as rank 0 decided]" if world > 1 else ""
    return f"[{table_id}] {key}: fit + test of {recipe} ({scale}), {how}{ranks}"


def follow_rank_zero(table: Table, out: Path, rank: int, world: int, scale: str, log: Callable[[str], None]) -> dict:
    """A rank other than 0: train (in step with rank 0) the rows rank 0 decided, from the specs it wrote; write
    nothing. Its summary lists those rows as ran or failed; rank 0's lists the results."""
    decision = share_decision(None, table.id, out / "runs" / table.id)
    summary: dict[str, Any] = {"ran": [], "skipped_done": [], "skipped": [], "failed": [], "pending": []}
    for fit in decision["fits"]:
        log(fit_line(table.id, fit["row"], fit["recipe"], scale, fit["resume"], rank, world))
        code = run_to_end(fit["argv"])
        summary["ran" if code == 0 else "failed"].append(fit["row"])
    summary["markdown"], summary["csv"] = out / f"{table.id}.md", out / f"{table.id}.csv"
    return summary


def train_rows(fits: Sequence[tuple], record: TableState, *, jobs: int, isolate: bool, rank: int, world: int,
               fit_here: Callable[[dict], dict], child_entry: str | None,
               on_trained: Callable[[str], None] = lambda run_fp: None) -> None:
    """Train ``fits`` (row, entry, spec, run fingerprint) and record each outcome: ``jobs`` at once in child
    processes, else one after the other, each in a child process (``isolate``) or here (``fit_here(spec)``).
    ``on_trained(run_fp)`` follows each recorded outcome (the rows measured in that run, at once).
    The other ranks get the rows' specs (:func:`.ranks.share_decision`) and train each in step."""
    runner = this_process()  # who runs this table's rows: the report tells a row whose runner is gone

    def starting(row, entry: dict, spec: dict) -> None:
        record.start(row, entry, runner)
        record.log(fit_line(record.table.id, row.key, row.recipe, record.scale, spec["resume"], rank, world))

    def trained(row, entry: dict, spec: dict, run_fp: str, result: dict | None, err: BaseException | None,
                started: float) -> None:
        record.trained(row, entry, run_fp, result, err, started)
        on_trained(run_fp)

    def table_log(message: str) -> None:
        record.log(f"[{record.table.id}] {message}")

    def row_log(key: str) -> Callable[[str], None]:
        return lambda message: table_log(f"{key}: {message}")

    record.queue(fits, runner)
    children: dict[str, tuple[list[str], Path]] = {}
    if isolate and jobs == 1:  # each row's spec (row.json) written once, here, by rank 0; every rank runs it
        children = {row.key: child_command(spec, child_entry) for row, _, spec, _ in fits}
    share_decision({"fits": [{"row": row.key, "recipe": row.recipe, "resume": spec["resume"],
                              "argv": children[row.key][0] if row.key in children else None}
                             for row, _, spec, _ in fits]}, record.table.id, record.out / "runs" / record.table.id)
    try:
        if jobs > 1:
            run_rows_in_parallel(fits, jobs, on_start=starting, on_done=trained, on_epoch=record.save,
                                 child_entry=child_entry, log=table_log)
            return
        for row, entry, spec, run_fp in fits:
            starting(row, entry, spec)
            started = time.perf_counter()
            try:
                with epochs_watched(row.key, spec["workdir"], log=table_log, on_epoch=record.save):
                    result, err = (run_child(*children[row.key], log=row_log(row.key)) if isolate else fit_here(spec)), None
            except Exception as caught:  # noqa: BLE001 - recorded by `trained`
                result, err = None, caught
            trained(row, entry, spec, run_fp, result, err, started)
    except BaseException:  # stopped (Ctrl-C, SIGTERM): the state keeps the epochs the stopped rows finished
        record.save()
        raise


def measure_in_run(later: list, run_fp: str, record: TableState) -> None:
    """Measure (and take out of ``later``) the rows read from run ``run_fp`` as soon as it is trained, so a
    table stopped before its last fit keeps them (a test set of a trained model costs no training)."""
    ready = [item for item in later if run_fp is not None and item[3] == run_fp]
    for item in ready:
        later.remove(item)
    measure_later(ready, record, evaluate=_not_a_dynamic_row)


def _not_a_dynamic_row(row, *_) -> dict:
    raise RuntimeError(f"row {row.key} evaluates another row's checkpoint; it is measured after the fits")


def measure_later(later: Sequence[tuple], record: TableState, evaluate: Callable[..., dict]) -> None:
    """Measure ``later`` (row, entry, recipe, run fingerprint) once the rows they wait on are trained: rows
    measured in another row's run first, then dynamic evaluations (``evaluate(row, parent_entry, recipe)``) of
    finished parents; record each outcome."""
    for row, entry, recipe, run_fp in sorted(later, key=lambda item: item[0].evaluation is not None):
        started = time.perf_counter()
        try:
            if row.evaluation:
                result = _evaluate_dynamic(row, entry, recipe, record, evaluate)
                result["wall_seconds"] = time.perf_counter() - started
            else:
                if run_fp not in record.runs:
                    raise RuntimeError("the row whose run it shares failed (see that row)")
                result = record.shared_result(run_fp, row, entry)
            record.finish(row, entry, result)
        except Exception as err:  # noqa: BLE001 - a failed row is recorded and retried next time
            record.fail(row, entry, err, started)
        record.put(row, entry)


def _evaluate_dynamic(row, entry: dict, recipe: dict, record: TableState, evaluate: Callable[..., dict]) -> dict:
    """Dynamic evaluation of the parent row's best checkpoint (the parent must be done)."""
    parent_state = record.state["rows"].get(row.parent, {})
    if parent_state.get("status") != STATUS_DONE:
        raise RuntimeError(f"needs row {row.parent} to be done first (its checkpoint is evaluated)")
    record.say(row.key, f"dynamic evaluation of {row.parent}'s checkpoint ({record.scale})")
    result = evaluate(row, parent_state, recipe)
    entry["parent_finished"] = parent_state.get("finished")
    return result
