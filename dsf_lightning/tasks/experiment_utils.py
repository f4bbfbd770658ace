"""What the sr-RNN task experiments share (:mod:`.tomita_experiment`, :mod:`.parentheses_experiment`).

* :func:`prepare_run`: one CPU thread, Lightning's chatter off, the output folder made;
* :func:`quiet_trainer`: a CPU ``Trainer`` without logger, checkpoints, progress bar or sanity check;
* :func:`predict_strings_sorted` / :func:`accuracy`: classify raw strings in length order (little padding);
* :class:`BestWeights`: keep the weights of the best validation accuracy, stop after ``patience`` epochs
  without a better one (the paper's "validation error as stopping criterion");
* :func:`machine_line`, :func:`args_to_json`, :func:`write_results`: the report's provenance and files.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import platform
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch


def prepare_run(out: Path) -> None:
    """One CPU thread (the experiments are single-core by design), quiet Lightning, ``out`` created."""
    torch.set_num_threads(1)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    Path(out).mkdir(parents=True, exist_ok=True)


def quiet_trainer(max_epochs: int, seconds: float, clip: float | None, callbacks: Sequence[L.Callback] = (),
                  **kwargs: Any) -> L.Trainer:
    """A single-device CPU Trainer for an experiment loop: no logger, checkpoints, bars or sanity check."""
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=max_epochs,
        max_time={"seconds": max(1, int(seconds))},
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        gradient_clip_val=clip,
        callbacks=list(callbacks),
        **kwargs,
    )


@torch.no_grad()
def predict_strings_sorted(module, strings: Sequence, vocab, batch_size: int = 256) -> torch.Tensor:
    """The classifier's decision for every string, in the given order; batches are formed in length
    order, so a test set of lengths 40-1000 is not padded to 1000 everywhere."""
    order = sorted(range(len(strings)), key=lambda i: len(strings[i]))
    out = torch.empty(len(strings), dtype=torch.long)
    for lo in range(0, len(order), batch_size):
        idx = order[lo : lo + batch_size]
        out[idx] = module.predict_strings([strings[i] for i in idx], vocab, batch_size=batch_size)
    return out


def accuracy(module, strings: Sequence, labels: Sequence[int], vocab) -> float:
    """Fraction of ``strings`` the classifier labels correctly."""
    if not strings:
        return float("nan")
    return float((predict_strings_sorted(module, strings, vocab) == torch.tensor(labels)).float().mean())


class BestWeights(L.Callback):
    """Keep the weights with the best ``monitor`` (higher is better) and stop after ``patience``
    validations without an improvement; no stopping before epoch ``min_epochs`` (e.g. the end of a
    curriculum). :meth:`restore` puts the best weights back into the module."""

    def __init__(self, patience: int, monitor: str = "val_acc", min_epochs: int = 0) -> None:
        self.patience, self.monitor, self.min_epochs = patience, monitor, min_epochs
        self.best, self.best_epoch = -float("inf"), -1
        self.state: dict[str, torch.Tensor] | None = None
        self.history: list[float] = []
        self.stopped_early = False

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        value = float(trainer.callback_metrics.get(self.monitor, float("nan")))
        epoch = trainer.current_epoch
        self.history.append(value)
        if value > self.best:
            self.best, self.best_epoch = value, epoch
            self.state = copy.deepcopy(module.state_dict())
        elif epoch >= self.min_epochs and epoch - max(self.best_epoch, self.min_epochs) >= self.patience:
            self.stopped_early = True
            trainer.should_stop = True

    def restore(self, module: L.LightningModule) -> None:
        if self.state is not None:
            module.load_state_dict(self.state)


def machine_line(note: str = "another job shared the machine") -> str:
    return f"Machine: one CPU thread ({platform.machine()}), torch {torch.__version__}; {note}."


def args_to_json(args: argparse.Namespace) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


def write_results(out: Path, stem: str, summary: dict[str, Any], markdown: str) -> tuple[Path, Path]:
    """``<out>/<stem>.json`` (everything) and ``<out>/<stem>.md`` (the report)."""
    out = Path(out)
    js, md = out / f"{stem}.json", out / f"{stem}.md"
    js.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    md.write_text(markdown, encoding="utf-8")
    return js, md
