"""What a row's training cost and how it went, kept across sittings: ``<row folder>/progress.json``.

A paper-scale row runs for hours and may be stopped and resumed (``last.ckpt``) several times. The
:class:`RowProgress` callback writes, atomically and at least every ``every_s`` seconds:

* ``sittings``: one record per process that trained the row (tokens, training wall seconds, process CPU
  seconds), so the totals include the work of a sitting that was killed mid-epoch;
* ``epochs``: one record per finished validation (epoch, every logged ``val_*`` number (loss, perplexity, a
  classifier's accuracy), cumulative tokens,
  CPU and wall seconds at that point); a resumed run drops the records of epochs it trains again;
* ``max_epochs``: the Trainer's, for the table's "of at most N epochs" and the time that may be left.

:func:`totals` sums the sittings. Wall and CPU seconds are the training loop's (fit: train and validation),
not the process start-up or the final test.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import lightning as L

from .._fs import write_atomic

PROGRESS_FILE = "progress.json"


def read_progress(path: str | Path) -> dict:
    """The progress record in ``path`` (a row folder or the file itself); empty when there is none."""
    path = Path(path)
    path = path / PROGRESS_FILE if path.is_dir() else path
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {"sittings": [], "epochs": []}
    if not isinstance(data, dict):
        return {"sittings": [], "epochs": []}
    data.setdefault("sittings", [])
    data.setdefault("epochs", [])
    return data


def totals(progress: dict) -> dict[str, float]:
    """Tokens, training wall seconds and CPU seconds summed over every sitting."""
    keys = ("tokens", "wall_seconds", "cpu_seconds")
    return {k: sum(float(s.get(k, 0.0)) for s in progress.get("sittings", [])) for k in keys}


def _steps(batch: Any) -> int:
    """Tokens of a language-model window ``(inputs, targets)``, or real steps of a task batch (its mask)."""
    return int(batch["mask"].sum()) if isinstance(batch, dict) else int(batch[0].numel())


class RowProgress(L.Callback):
    """Count tokens, wall and process CPU seconds of training; log each validation to ``progress.json``."""

    def __init__(self, folder: str | Path, every_s: float = 30.0) -> None:
        self.path = Path(folder) / PROGRESS_FILE
        self.every_s = every_s
        self.progress = read_progress(self.path)
        self.sitting = {"started": time.time(), "tokens": 0, "wall_seconds": 0.0, "cpu_seconds": 0.0}
        self.progress["sittings"].append(self.sitting)
        self._wall0 = self._cpu0 = None
        self._last_write = 0.0

    # ------------------------------------------------------------------ accounting
    def _tick(self) -> None:
        if self._wall0 is None:
            return
        wall, cpu = time.perf_counter(), time.process_time()
        self.sitting["wall_seconds"] += wall - self._wall0
        self.sitting["cpu_seconds"] += cpu - self._cpu0
        self._wall0, self._cpu0 = wall, cpu

    def _write(self, trainer, force: bool = False) -> None:
        if trainer.global_rank != 0:
            return
        now = time.perf_counter()
        if force or now - self._last_write >= self.every_s:
            self._last_write = now
            write_atomic(self.path, json.dumps(self.progress, indent=1))

    def on_train_start(self, trainer, pl_module) -> None:
        # a resumed fit (its state restored by now) trains again from the checkpoint's epoch: drop what was
        # logged from that epoch on
        start = trainer.current_epoch
        self.progress["epochs"] = [e for e in self.progress["epochs"] if e["epoch"] < start]
        if trainer.max_epochs is not None and trainer.max_epochs >= 0:  # the table's "of at most N" and time left
            self.progress["max_epochs"] = int(trainer.max_epochs)
        self._wall0, self._cpu0 = time.perf_counter(), time.process_time()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.sitting["tokens"] += _steps(batch) * trainer.world_size
        self._tick()
        self._write(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        self._tick()
        record: dict[str, Any] = {"epoch": trainer.current_epoch, "step": trainer.global_step}
        for name, value in trainer.callback_metrics.items():  # val_loss, and val_acc of a classifier
            if name.startswith("val_") and getattr(value, "numel", lambda: 1)() == 1:
                record[name] = float(value)
        if "val_loss" in record and "val_ppl" not in record:
            record["val_ppl"] = math.exp(record["val_loss"]) if record["val_loss"] < 700 else math.inf
        record.update(totals(self.progress))
        self.progress["epochs"] = [e for e in self.progress["epochs"] if e["epoch"] != record["epoch"]] + [record]
        self._write(trainer, force=True)

    def on_fit_end(self, trainer, pl_module) -> None:
        self._tick()
        self._wall0 = None
        self._write(trainer, force=True)

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._tick()
        self._wall0 = None
        self._write(trainer, force=True)
