"""CpuTimeBudget stops training on process CPU time spent in training batches and records a curve."""

import lightning as L
import pytest

from dsf_lightning.training.callbacks import CpuTimeBudget

from .conftest import quiet_trainer, toy_modules


class _CountTargets(L.Callback):
    def __init__(self):
        self.tokens = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.tokens += batch[1].numel()


def test_training_stops_once_the_cpu_budget_is_spent(toy_corpus):
    module, data = toy_modules(toy_corpus)
    budget, counted = CpuTimeBudget(seconds=0.2, record_every=2), _CountTargets()
    trainer = quiet_trainer(max_epochs=10_000, limit_val_batches=0, callbacks=[budget, counted])
    trainer.fit(module, datamodule=data)
    assert budget.used >= 0.2  # it ran until the budget was spent ...
    assert trainer.current_epoch < 9_999  # ... and stopped there, long before max_epochs
    assert budget.steps == trainer.global_step
    assert budget.tokens == counted.tokens  # every target token of the windows trained (the last is shorter)
    assert budget.steps * 4 * 6 < budget.tokens <= budget.steps * 4 * 7  # batch 4 x bptt 7 (at most)
    assert [p["step"] for p in budget.curve] == list(range(2, budget.steps + 1, 2))
    assert all(p["cpu_seconds"] <= budget.used for p in budget.curve)
    assert all(p["train_loss"] > 0 for p in budget.curve)


def test_budget_state_round_trips():
    budget = CpuTimeBudget(seconds=5)
    budget.used, budget.tokens, budget.steps = 1.5, 700, 25
    budget.curve = [{"step": 25, "cpu_seconds": 1.5, "tokens": 700, "train_loss": 2.0}]
    other = CpuTimeBudget(seconds=5)
    other.load_state_dict(budget.state_dict())
    assert (other.used, other.tokens, other.steps, other.curve) == (1.5, 700, 25, budget.curve)


@pytest.mark.parametrize("kwargs", [{"seconds": 0}, {"seconds": -1}, {"seconds": True}, {"seconds": 1, "record_every": 0}])
def test_bad_budgets_are_refused(kwargs):
    with pytest.raises(ValueError, match="CpuTimeBudget"):
        CpuTimeBudget(**kwargs)


def test_include_validation_charges_the_whole_fit(toy_corpus):
    module, data = toy_modules(toy_corpus)
    budget = CpuTimeBudget(seconds=0.3, include_validation=True)
    trainer = quiet_trainer(max_epochs=10_000, callbacks=[budget])  # validates every epoch
    trainer.fit(module, datamodule=data)
    assert budget.exhausted and budget.used >= 0.3
    assert trainer.current_epoch < 9_999 and budget.steps == trainer.global_step
