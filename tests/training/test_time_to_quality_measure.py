"""The time-to-quality benchmark measures what a recipe delivers: a run with PolyakAveraging is measured on its
averaged weights (what its own validation reads and ``dsf export`` writes), a run without it on its weights."""

import math

import pytest
import torch

from benchmarks.time_to_quality import Tracker, batchify, evaluate, measure_callback
from dsf_lightning.training.callbacks import PolyakAveraging

from .conftest import quiet_trainer, toy_modules


def _lm_step(module):
    state = [None]

    def step(x):
        logits, state[0] = module.model(x.t().contiguous(), state[0])
        return logits.transpose(0, 1)
    return step


@pytest.mark.parametrize("averaged", [True, False])
def test_the_last_measurement_is_of_the_weights_the_recipe_delivers(toy_corpus, tmp_path, averaged):
    torch.manual_seed(0)
    module, data = toy_modules(toy_corpus, lr=3e-2)
    valid = batchify(toy_corpus.splits["valid"], 10)
    tracker = Tracker("ours", tmp_path, (1e9,), 1e-12, valid, valid, 35)  # measures after every step
    polyak = PolyakAveraging(decay=0.9)
    callbacks = [polyak] if averaged else []
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=12, limit_val_batches=0,
                            callbacks=[*callbacks, measure_callback(tracker, module)])
    trainer.fit(module, data)
    assert len(tracker.curve) == 12  # measured after its last step: training's end adds no second measurement
    assert [r["stopped_at_cpu_seconds"] for r in tracker.at_budget] == [tracker.curve[-1]["cpu_seconds"]]
    module.eval()
    training = evaluate(_lm_step(module), valid, 35)
    with polyak.averaged(module):
        average = evaluate(_lm_step(module), valid, 35)
    assert averaged == (average != training)  # without the callback there is no average to differ
    assert tracker.curve[-1]["val_loss"] == pytest.approx(average if averaged else training, rel=1e-6)
    assert math.isclose(tracker.curve[-1]["val_ppl"], math.exp(tracker.curve[-1]["val_loss"]))
