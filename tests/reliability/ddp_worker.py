"""Two DDP processes (``ddp_fork``, gloo on CPU) where one rank raises in ``training_step`` at a chosen step.

Run as ``python -m tests.reliability.ddp_worker RANK STEP`` from the repository root; the test expects the
whole run to stop with that rank's error instead of the other rank waiting forever in an all-reduce.
"""

from __future__ import annotations

import sys

import lightning as L

from dsf_lightning.training import LanguageModelModule
from tests.training.conftest import make_toy_corpus, quiet_trainer, toy_modules


class FailingRank(LanguageModelModule):
    def __init__(self, fail_rank: int, fail_step: int, **kwargs):
        super().__init__(**kwargs)
        self.fail_rank, self.fail_step = fail_rank, fail_step

    def training_step(self, batch, batch_idx):
        if self.trainer.global_rank == self.fail_rank and self.trainer.global_step == self.fail_step:
            raise RuntimeError(f"rank {self.fail_rank} exploded at step {self.fail_step}")
        return super().training_step(batch, batch_idx)


def main(argv=None) -> None:
    rank, step = (int(a) for a in (argv or sys.argv[1:]))
    L.seed_everything(0, verbose=False)
    _, data = toy_modules(make_toy_corpus())
    module = FailingRank(rank, step, vocab_size=data.vocab_size, hidden_sizes=[16], embedding_size=8)
    trainer = quiet_trainer(max_epochs=1, devices=2, strategy="ddp_fork")
    trainer.fit(module, data)


if __name__ == "__main__":
    main()
