"""Training from plain Python, as docs/python.md "Resume after a crash" shows: ``lightning.Trainer`` +
``LanguageModelModule`` + ``LanguageModelDataModule``, no ``dsf`` command and no LightningCLI; rerunning the same
script after a crash resumes from ``last.ckpt``. Meant to be SIGKILLed (issue 36).

``python -m tests.reliability.plain_trainer_worker OUT TEXT_FOLDER [--kill-at STEP]``: trains 2 epochs with the
checkpoints in ``OUT/ckpt``; ``--kill-at`` SIGKILLs this process right after optimizer step STEP. At the start of
training ``OUT/policy-<pid>.json`` says what the module's policy put in the trainer (callback and checkpoint-IO
types) and whether ``jsonargparse`` was imported; at the end ``OUT/weights.pt`` holds every weight.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from dsf_lightning.training import LanguageModelModule
from dsf_lightning.training.datamodule import LanguageModelDataModule


class Probe(L.Callback):
    """Reports the trainer the module's policy made; SIGKILLs the process after step ``kill_at``."""

    def __init__(self, out: Path, kill_at: int | None) -> None:
        self.out, self.kill_at = out, kill_at

    def on_train_start(self, trainer, module) -> None:
        report = {
            "jsonargparse": "jsonargparse" in sys.modules,
            "callbacks": [type(c).__name__ for c in trainer.callbacks],
            "checkpoint_io": type(trainer.strategy.checkpoint_io).__name__,
            "global_step": trainer.global_step,
        }
        (self.out / f"policy-{os.getpid()}.json").write_text(json.dumps(report))

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if self.kill_at is not None and trainer.global_step == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # pragma: no cover - never reached


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("text", type=Path)
    parser.add_argument("--kill-at", type=int, default=None)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    # the docs' "Resume after a crash" snippet, with the probe beside the checkpoint callback
    L.seed_everything(0, verbose=False)
    data = LanguageModelDataModule(corpus="text-folder", corpus_options={"path": str(args.text)},
                                   batch_size=4, bptt=8, eval_batch_size=2)
    data.setup("fit")
    model = LanguageModelModule(vocab_size=data.vocab_size, cell="delta-rnn", hidden_sizes=[16],
                                dropout_output=0.2, lr=3e-3)
    checkpoints = ModelCheckpoint(dirpath=args.out / "ckpt", save_last=True, every_n_train_steps=3)
    trainer = L.Trainer(max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[checkpoints, Probe(args.out, args.kill_at)])
    last = args.out / "ckpt" / "last.ckpt"
    trainer.fit(model, datamodule=data, ckpt_path=last if last.exists() else None)

    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, args.out / "weights.pt")
    (args.out / "metrics.json").write_text(json.dumps({k: float(v) for k, v in trainer.callback_metrics.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
