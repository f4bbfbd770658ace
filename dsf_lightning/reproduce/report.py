"""The outputs of ``dsf reproduce``: ``<table>.md`` / ``.csv`` (published, measured, difference, costs, each
row's command and commit), ``<table>.curves.csv`` (validation after every epoch of every row, finished or
still training) and ``<table>.curves.png`` (those curves; needs matplotlib, skipped without it).

Rows still training are shown from their ``progress.json`` (:mod:`.progress`): the table is a live view of
a long run, rewritten after every row and on every run of the command.
"""

from __future__ import annotations

import copy
import csv
import io
import logging
import math
import time
from pathlib import Path
from typing import Any

from .._fs import write_atomic
from .._plotting import pyplot, save_png
from .liveness import still_running
from .progress import read_progress, totals
from .tables import Row, Table

logger = logging.getLogger(__name__)

STATUS_DONE, STATUS_FAILED, STATUS_SKIPPED, STATUS_PENDING = "done", "failed", "skipped", "pending"
STATUS_RUNNING, STATUS_QUEUED, STATUS_STOPPED = "running", "queued", "stopped"
CSV_FIELDS = ("table", "row", "label", "metric", "split", "published", "measured", "difference", "published_valid",
              "measured_valid", "status", "wall_seconds", "cpu_seconds", "epochs", "tokens_per_second", "parameters",
              "recipe", "scale", "command", "commit", "message")


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:,.{digits}f}" if abs(value) < 1e6 else f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def row_folder(out: Path, table_id: str, row_key: str) -> Path:
    """Where a row trains: ``<out>/runs/<table>/<row>/`` (its checkpoints, logs and ``progress.json``)."""
    return Path(out) / "runs" / table_id / row_key


#: a finished row's ``wall_scope`` when its ``wall_seconds`` spans every sitting (the earlier sittings' training
#: wall plus the whole last process); entries written before hold the last sitting's process wall only
WALL_OVER_SITTINGS = "sittings"


def done_wall_seconds(entry: dict) -> float | None:
    """A finished row's wall seconds summed over its sittings. An entry written before ``wall_scope`` existed
    holds the last sitting's process only: its ``train_seconds`` (the training wall of every sitting) is taken
    where larger, a lower bound of the whole (it leaves out each earlier sitting's start-up and test)."""
    wall = entry.get("wall_seconds")
    if entry.get("wall_scope") == WALL_OVER_SITTINGS or wall is None:
        return wall
    return max(float(wall), float(entry.get("train_seconds") or 0.0))


#: what a state entry keeps of a row's progress.json (:func:`record_progress`, read back by :func:`row_progress`)
KEPT_PROGRESS = ("sittings", "epochs", "max_epochs")


def row_progress(entry: dict, folder: Path) -> dict:
    """A row's ``progress.json``, or, when its folder is gone (another machine, a cleaned disk), the copy the
    runner last recorded in the state (``entry["progress"]``, see :func:`record_progress`)."""
    progress = read_progress(folder) if folder.is_dir() else {"sittings": [], "epochs": []}
    if progress["sittings"] or progress["epochs"]:
        return progress
    kept = entry.get("progress") or {}
    return {"sittings": [], "epochs": [], **{k: copy.copy(kept[k]) for k in KEPT_PROGRESS if k in kept}}


def record_progress(table: Table, state: dict, out: Path) -> None:
    """Copy each unfinished row's ``progress.json`` into its state entry, so the table keeps a row's epochs
    and costs when its run folder is lost; a finished row's record is its own (``epochs``, costs)."""
    for row in table.rows:
        entry = state.get("rows", {}).get(row.key)
        if entry is None:
            continue
        if entry.get("status") == STATUS_DONE:
            entry.pop("progress", None)
            continue
        progress = read_progress(row_folder(out, table.id, row.key))
        if progress["sittings"] or progress["epochs"]:
            entry["progress"] = {k: progress[k] for k in KEPT_PROGRESS if k in progress}


def row_epochs(entry: dict, folder: Path) -> list[dict]:
    """A row's validation after every epoch: from the state when it is done, else from its progress."""
    if entry.get("status") == STATUS_DONE and entry.get("epochs") is not None:
        return list(entry["epochs"])
    return row_progress(entry, folder)["epochs"]


def _epochs_left(progress: dict) -> str:
    """`` of at most N (at most ~H h M min more at this row's mean epoch)``, from ``progress.json``'s
    ``max_epochs`` and the wall time of its epochs so far; empty when either is unknown."""
    epochs, most = progress["epochs"], progress.get("max_epochs")
    if not isinstance(most, int) or not epochs:
        return ""
    text = f" of at most {most}"
    per_epoch = float(epochs[-1].get("wall_seconds", 0.0)) / len(epochs)
    if most > len(epochs) and per_epoch > 0:
        minutes = round(per_epoch * (most - len(epochs)) / 60)
        text += f" (at most ~{minutes // 60} h {minutes % 60} min more at its mean epoch's wall time)"
    return text


def _live(entry: dict, folder: Path) -> dict:
    """Costs and a one-line status of a row that has not finished (running, queued, stopped or failed)."""
    progress = row_progress(entry, folder)
    if not progress["sittings"]:
        return {}
    spent, epochs = totals(progress), progress["epochs"]
    last = epochs[-1] if epochs else {}
    text = f"{len(epochs)} epoch(s) so far" + _epochs_left(progress)
    if "val_acc" in last:
        text += f", last valid accuracy {last['val_acc']:.4f}"
    elif "val_loss" in last:
        text += f", last valid loss {last['val_loss']:.4f} (PPL {math.exp(min(last['val_loss'], 700.0)):,.2f})"
    sitting = progress["sittings"][-1]
    if isinstance(sitting.get("started"), (int, float)):  # a committed table says when it was last heard of
        reported = sitting["started"] + float(sitting.get("wall_seconds", 0.0))
        text += f"; last progress {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(reported))}"
    return {"cpu_seconds": spent["cpu_seconds"], "wall_seconds": spent["wall_seconds"], "epochs": len(epochs) or None,
            "message": text}


def table_rows(table: Table, state: dict, scale: str, out: Path | None = None) -> list[dict]:
    rows_out = []
    for row in table.rows:
        entry = state.get("rows", {}).get(row.key, {})
        status = entry.get("status") or (STATUS_PENDING if row.pending else "not run")
        message = entry.get("message") or (f"pending: {row.pending}" if row.pending else row.note)
        if status in (STATUS_RUNNING, STATUS_QUEUED) and still_running(entry.get("runner")) is False:
            status = STATUS_STOPPED
            again = "resumes it from last.ckpt" if entry.get("status") == STATUS_RUNNING else "starts it"
            message = f"its `dsf reproduce` process is gone; the same command {again}" + (f" -- {message}" if message else "")
        done = status == STATUS_DONE
        live = _live(entry, row_folder(out, table.id, row.key)) if out is not None and not done else {}
        if live:
            message = f"{status}: {live['message']}" + (f" -- {message}" if message else "")
        measured = entry.get("measured") if done else None
        best = {k[len("best_"):]: v for k, v in entry.get("metrics", {}).items() if k.startswith("best_val_")}
        best_val = validation_metric(best, row.metric) if done and best else None
        rows_out.append({
            "table": table.id, "row": row.key, "label": row.label, "metric": row.metric, "split": row.split,
            "published": row.published, "measured": measured,
            "difference": (measured - row.published) if measured is not None else None,
            "published_valid": row.published_valid,
            "measured_valid": best_val,
            "status": status, "wall_seconds": live.get("wall_seconds", done_wall_seconds(entry) if done else entry.get("wall_seconds")),
            "cpu_seconds": live.get("cpu_seconds", entry.get("cpu_seconds")),
            "epochs": live.get("epochs", len(entry.get("epochs") or []) or None),
            "tokens_per_second": entry.get("tokens_per_second"), "parameters": entry.get("parameters"),
            "recipe": row.recipe or (f"(evaluation of {row.parent})" if row.evaluation else ""),
            "scale": entry.get("scale", scale), "command": entry.get("command", ""),
            "commit": entry.get("commit") or "", "message": message,
            "converted": converted_units(row, measured),
        })
    return rows_out


def validation_metric(record: dict, metric: str) -> float | None:
    """An epoch's validation in the row's metric: error = 1 - val_acc, else from the mean cross-entropy."""
    if metric == "error":
        return 1.0 - record["val_acc"] if "val_acc" in record else None
    return _metric_from_loss(record["val_loss"], metric) if "val_loss" in record else None


def _metric_from_loss(loss: float, metric: str) -> float:
    """A mean cross-entropy in nats as the row's metric (PPL, BPC or NLL)."""
    return {"ppl": lambda x: math.exp(min(x, 700.0)), "bpc": lambda x: x / math.log(2), "nll": float}.get(
        metric, float)(loss)


#: an ``nll`` row's test NLL in units that do not depend on the segmentation (:func:`converted_units`), in the CSV
#: of a table with such rows: bits per character (Mikolov's count, and without spaces), perplexity per word
CONVERTED_FIELDS = ("measured_bpc", "measured_bits_per_char_no_space", "published_as_bits_per_char_no_space",
                    "difference_bits_per_char_no_space", "measured_word_ppl")


def converted_units(row: Row, measured: float | None) -> dict | None:
    """``measured`` (mean nats per symbol) of an ``nll`` row with :attr:`Row.counts` as bits per character
    (Mikolov's count: spaces and line ends included; and without spaces), and as perplexity per word; the
    published number read as bits per character without spaces (the reading the DSF Table 2 notes argue for).
    None for other rows."""
    counts = row.counts
    if counts is None or row.metric != "nll":
        return None
    out = {"published_as_bits_per_char_no_space": row.published, "measured_bpc": None,
           "measured_bits_per_char_no_space": None, "difference_bits_per_char_no_space": None, "measured_word_ppl": None}
    if measured is None:
        return out
    nats = measured * counts.symbols  # the split's total NLL (the metric is its mean per symbol)
    no_space = nats / counts.chars_no_space / math.log(2)
    out.update(measured_bpc=nats / counts.chars / math.log(2), measured_bits_per_char_no_space=no_space,
               difference_bits_per_char_no_space=no_space - row.published,
               measured_word_ppl=math.exp(min(nats / counts.words, 700.0)))
    return out


def render_csv(rows: list[dict]) -> str:
    converted = any(r.get("converted") for r in rows)
    if not converted:
        return _csv(rows, CSV_FIELDS)
    return _csv([{**r, **dict.fromkeys(CONVERTED_FIELDS), **(r.get("converted") or {})} for r in rows],
                CSV_FIELDS + CONVERTED_FIELDS)


def usage_footer(table_id: str) -> str:
    return f"""## How to run

```bash
dsf reproduce {table_id} --scale paper --data-root /path/to/data --out results        # one GPU or CPU
dsf reproduce {table_id} --rows ROW1,ROW2 --scale small --out results-small             # some rows, capped sizes
dsf reproduce {table_id} --scale paper --out results --trainer.accelerator gpu --trainer.devices 4 --trainer.strategy ddp
# several nodes with torchrun (every node runs the same line; each row's fit joins the group)
torchrun --nnodes 2 --nproc-per-node 4 --node-rank $NODE_RANK --master-addr $MASTER --master-port 29500 \\
  $(which dsf) reproduce {table_id} --scale paper --out results --trainer.devices 4 --trainer.num_nodes 2 --trainer.strategy ddp
# SLURM (one task per GPU; Lightning reads the SLURM environment)
srun --nodes 2 --ntasks-per-node 4 --gpus-per-node 4 dsf reproduce {table_id} --scale paper --out results \\
  --trainer.devices 4 --trainer.num_nodes 2 --trainer.strategy ddp
# a SLURM job array, one row per job into a shared --out (#SBATCH --array=0-<rows - 1>; see docs/cluster.md)
dsf reproduce {table_id} --scale paper --out results --row-index $SLURM_ARRAY_TASK_ID
```

Re-running the same command skips finished rows (state in `{table_id}.state.json`) and retries failed ones
from their `last.ckpt`; a row runs again when its recipe's values, its overrides or these options change (the
recipe's comments do not count); under torchrun / srun rank 0 decides every row and alone writes the files. `--trainer.*`, `--model.*` and `--data.*`
options after the table id go to every row's `dsf fit`. Scales: `tiny` (a CPU smoke run, numbers
meaningless), `small` (sizes capped at 256, <= 5 epochs / 30 min per row), `paper` (the recipes as written).
"""


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return ""
    minutes = int(round(seconds / 60))
    return f"{minutes // 60}:{minutes % 60:02d}" if seconds >= 60 else f"{seconds:.0f}s"


def render_markdown(table: Table, rows: list[dict], scale: str, state: dict | None = None,
                    plot: Path | None = None) -> str:
    unit = {"ppl": "PPL", "bpc": "BPC", "nll": "NLL", "error": "error"}
    state = state or {}
    split = ("test" if all(r["split"] == "test" for r in rows)
             else "each row's test set (`split` in the CSV; the metric is `test_<metric>/<split>`)")
    valid = any(r["published_valid"] is not None or r["measured_valid"] is not None for r in rows)
    lines = [f"# {table.title}", "", f"Paper: {table.paper}. Scale: `{scale}`. Split: {split}. "
             "Difference = measured - published (lower is better for every metric here)."]
    if state.get("command"):
        lines += ["", f"Produced by `{state['command']}` at commit `{state.get('commit') or 'unknown'}` "
                      "(each row's own command and commit: the CSV, `command` and `commit`)."]
    lines += ["", "Wall and CPU time (h:mm) are the training loop's, summed over every sitting of a resumed row; "
                  "tokens/s = training tokens / training wall seconds.", ""]
    head = ["row", "metric", "published", "measured", "difference"]
    head += ["valid published", "valid measured"] if valid else []
    head += ["epochs", "wall", "CPU", "tokens/s", "parameters", "status"]
    lines += ["| " + " | ".join(head) + " |", "| --- | --- | " + " | ".join(["---:"] * (len(head) - 3)) + " | --- |"]
    for r in rows:
        cells = [f"{r['label']} (`{r['row']}`)", unit[r["metric"]], _fmt(r["published"]), _fmt(r["measured"]),
                 _fmt(r["difference"])]
        cells += [_fmt(r["published_valid"]), _fmt(r["measured_valid"])] if valid else []
        cells += [_fmt(r["epochs"]), _duration(r["wall_seconds"]), _duration(r["cpu_seconds"]),
                  _fmt(r["tokens_per_second"], 0), _fmt(r["parameters"]), r["status"]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += _converted_section(rows)
    lines += ["", "## Rows", ""]
    for r in rows:
        text = f"- `{r['row']}`: {r['recipe'] or 'no recipe'}"
        if r["message"]:
            text += f" -- {r['message']}"
        if r["command"]:
            text += f"\n  `{r['command']}`"
        lines.append(text)
    if table.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in table.notes]
    if plot is not None:
        lines += ["", f"![validation after every epoch]({plot.name})", "",
                  f"Every epoch's validation number: `{table.id}.curves.csv`."]
    lines += ["", usage_footer(table.id)]
    return "\n".join(lines)


def _converted_section(rows: list[dict]) -> list[str]:
    """The ``nll`` rows again in bits per character and perplexity per word (:func:`converted_units`)."""
    converted = [r for r in rows if r.get("converted")]
    if not converted:
        return []
    lines = ["", "## In units that do not depend on the segmentation", "",
             "Bits per character in Mikolov's count (ptb.char: spaces and line ends are characters) and without "
             "spaces (the characters of the text the model predicts; the published column is the paper's NLL read "
             "in this unit, as the notes argue), perplexity per word (line ends counted as words); how each is "
             "counted: the notes.", "",
             "| row | NLL measured | BPC measured | bits/char no spaces published | bits/char no spaces measured "
             "| difference | word PPL measured | status |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in converted:
        c = r["converted"]
        cells = [f"{r['label']} (`{r['row']}`)", _fmt(r["measured"]), _fmt(c["measured_bpc"]),
                 _fmt(c["published_as_bits_per_char_no_space"]), _fmt(c["measured_bits_per_char_no_space"]),
                 _fmt(c["difference_bits_per_char_no_space"]), _fmt(c["measured_word_ppl"], 1), r["status"]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


CURVE_FIELDS = ("table", "row", "epoch", "val_loss", "val_metric", "tokens", "cpu_seconds", "wall_seconds")


def curve_rows(table: Table, state: dict, out: Path) -> list[dict]:
    """One record per (row, epoch) with a validation: loss, the row's metric from it, cumulative costs; a row
    measured in another row's run (``shared_with``) has no curve of its own."""
    records = []
    for row in table.rows:
        entry = state.get("rows", {}).get(row.key, {})
        if entry.get("shared_with"):
            continue
        for e in row_epochs(entry, row_folder(out, table.id, row.key)):
            value = validation_metric(e, row.metric)
            if value is None:
                continue
            records.append({"table": table.id, "row": row.key, "epoch": e["epoch"] + 1, "val_loss": e.get("val_loss"),
                            "val_metric": value, "tokens": e.get("tokens"),
                            "cpu_seconds": e.get("cpu_seconds"), "wall_seconds": e.get("wall_seconds")})
    return records


def _csv(records: list[dict], fields: tuple[str, ...]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow({k: ("" if r[k] is None else (round(r[k], 6) if isinstance(r[k], float) else r[k])) for k in fields})
    return buffer.getvalue()


def _has_published_valid(row: Row) -> bool:
    """Whether the paper gives ``row`` a validation number (the plot's dashed line)."""
    return row.published_valid is not None and math.isfinite(row.published_valid)


def curves_title(table: Table, records: list[dict]) -> str:
    """The curve plot's title: what the dashed lines are, where a plotted row has a published validation number."""
    plotted = {r["row"] for r in records}
    dashed = any(row.key in plotted and _has_published_valid(row) for row in table.rows)
    key = "dashed: the paper's validation number" if dashed else "the paper gives no validation number"
    return f"{table.id}: validation after every epoch ({key})"


def plot_curves(table: Table, records: list[dict], path: Path) -> Path | None:
    """Validation metric against training CPU hours, one line per row, the published numbers dashed; None
    (and a log line) without matplotlib."""
    try:
        plt = pyplot(path.name)
    except ImportError as err:
        logger.info("no %s: %s", path.name, err)
        return None
    unit = {"ppl": "perplexity", "bpc": "bits per character", "nll": "nats per symbol", "error": "error"}
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=100, layout="constrained")
    for i, row in enumerate(table.rows):
        points = [r for r in records if r["row"] == row.key]
        if not points:
            continue
        color = f"C{i % 10}"
        ax.plot([p["cpu_seconds"] / 3600 for p in points], [p["val_metric"] for p in points], "o-", ms=3,
                color=color, label=row.label)
        if _has_published_valid(row):
            ax.axhline(row.published_valid, color=color, ls="--", lw=0.8)
    metric = table.rows[0].metric if table.rows else "ppl"
    ax.set_xlabel("training CPU hours (one thread per row)")
    ax.set_ylabel(f"validation {unit.get(metric, metric)}")
    if metric == "ppl":
        ax.set_yscale("log")
    ax.set_title(curves_title(table, records), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return save_png(fig, path)


def write_outputs(table: Table, state: dict, out: Path, scale: str) -> tuple[Path, Path]:
    rows = table_rows(table, state, scale, out)
    md, csv_path = out / f"{table.id}.md", out / f"{table.id}.csv"
    write_atomic(csv_path, render_csv(rows))
    records = curve_rows(table, state, out)
    plot = None
    if records:
        write_atomic(out / f"{table.id}.curves.csv", _csv(records, CURVE_FIELDS))
        plot = plot_curves(table, records, out / f"{table.id}.curves.png")
    write_atomic(md, render_markdown(table, rows, scale, state, plot))
    return md, csv_path
