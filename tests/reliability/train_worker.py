"""A small real training run for the crash / resume tests, meant to be SIGKILLed.

Run as ``python -m tests.reliability.train_worker OUT [--resume CKPT] [--kill SPEC]`` from the repository
root. It trains the toy counting stream of ``tests/training`` with dropout and iterative inference, the
real Lightning Trainer, ``ModelCheckpoint(save_last=True, every_n_train_steps=EVERY)`` and
:class:`~dsf_lightning.training.checkpoint_io.AtomicCheckpointIO`. Every step appends ``step loss`` to
``OUT/losses-<pid>.txt`` and rewrites ``OUT/progress`` (for a parent that kills at a random moment); at the
end ``OUT/weights.pt`` and ``OUT/metrics.json`` hold the final weights and metrics.

``--kill`` kills the process itself with SIGKILL (no cleanup, no ``finally``) at a chosen point:

* ``step:N``      right after optimizer step N (its checkpoint, if any, not yet written);
* ``midsave:K``   during the K-th checkpoint write of this process, half of the bytes in the temporary file;
* ``replaced:K``  right after the K-th checkpoint was renamed into place (before the folder fsync).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import sys
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from dsf_lightning.training import checkpoint_io
from dsf_lightning.training.checkpoint_io import AtomicCheckpointIO
from tests.training.conftest import make_toy_corpus, quiet_trainer, toy_modules

EVERY = 5
OPTIONS = dict(dropout_input=0.3, dropout_output=0.3, iterative_inference_step=0.1)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # pragma: no cover - never reached


class Record(L.Callback):
    def __init__(self, out: Path, kill_step: int | None, sleep: float):
        self.out, self.kill_step, self.sleep = out, kill_step, sleep
        self.stream = open(out / f"losses-{os.getpid()}.txt", "a", buffering=1)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        step = trainer.global_step
        self.stream.write(f"{step} {float(outputs['loss']).hex()}\n")
        (self.out / "progress").write_text(str(step))
        if self.kill_step is not None and step == self.kill_step:
            die()
        if self.sleep:
            time.sleep(self.sleep)

    def on_train_end(self, trainer, module):
        torch.save({k: v.detach().clone() for k, v in module.model.state_dict().items()}, self.out / "weights.pt")
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        (self.out / "metrics.json").write_text(json.dumps(metrics))


class KillingIO(AtomicCheckpointIO):
    """AtomicCheckpointIO that dies half-way through, or right after, the K-th save."""

    def __init__(self, mode: str | None, when: int | None):
        super().__init__()
        self.mode, self.when, self.saves = mode, when, 0

    def _write_atomically(self, checkpoint, path):
        self.saves += 1
        if self.mode == "midsave" and self.saves == self.when:
            def half_then_die(obj, f):
                buffer = io.BytesIO()
                torch.save(obj, buffer)
                data = buffer.getvalue()
                f.write(data[: len(data) // 2])
                f.flush()
                os.fsync(f.fileno())
                die()

            checkpoint_io.atomic_torch_save(checkpoint, path, write=half_then_die)
        super()._write_atomically(checkpoint, path)
        if self.mode == "replaced" and self.saves == self.when:
            die()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--ckpt-dir", type=Path, required=True)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--kill", default=None)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    mode, when = (args.kill.split(":") + [None])[:2] if args.kill else (None, None)
    when = int(when) if when is not None else None
    L.seed_everything(0, verbose=False)
    module, data = toy_modules(make_toy_corpus(), **OPTIONS)
    trainer = quiet_trainer(
        max_epochs=args.epochs,
        enable_checkpointing=True,
        plugins=[KillingIO(mode if mode in ("midsave", "replaced") else None, when)],
        callbacks=[
            Record(args.out, when if mode == "step" else None, args.sleep),
            ModelCheckpoint(dirpath=args.ckpt_dir, every_n_train_steps=EVERY, save_last=True),
        ],
    )
    trainer.fit(module, data, ckpt_path=args.resume)


if __name__ == "__main__":
    sys.exit(main())
