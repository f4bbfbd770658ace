"""LateDropout: no dropout for the first epochs, then the recipe's rates ramped in (Liu et al. 2023)."""

import lightning as L
import pytest
import torch

from dsf_lightning.training.callbacks import LateDropout

from ..test_time_to_quality import time_to_quality_recipes
from .conftest import quiet_trainer, toy_modules

DROPPING = dict(dropout_input=0.5, dropout_output=0.4, cell_options={"dropout": 0.3})


class _Rates(L.Callback):
    """Records (epoch, batch, dropout_input, dropout_output, cell dropout) at every training batch."""

    def __init__(self):
        self.seen = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        cfg, cell = pl_module.model.config, pl_module.model.layers[0]
        self.seen.append((trainer.current_epoch, batch_idx, cfg.dropout_input, cfg.dropout_output, cell.dropout))


def _fit(corpus, callbacks, epochs, **model_kwargs):
    L.seed_everything(0)
    module, data = toy_modules(corpus, **model_kwargs)
    trainer = quiet_trainer(max_epochs=epochs, limit_val_batches=0, callbacks=callbacks)
    trainer.fit(module, datamodule=data)
    return module, trainer


def test_the_rates_are_zero_then_ramp_to_the_recipes_then_are_restored(toy_corpus):
    rates = _Rates()
    module, trainer = _fit(toy_corpus, [LateDropout(start=1, ramp=1), rates], epochs=3, **DROPPING)
    batches = trainer.num_training_batches
    assert batches > 2
    for epoch, batch, d_in, d_out, d_cell in rates.seen:
        factor = min(1.0, max(0.0, epoch - 1 + batch / batches))
        assert (d_in, d_out, d_cell) == pytest.approx((0.5 * factor, 0.4 * factor, 0.3 * factor))
    assert {r[0] for r in rates.seen} == {0, 1, 2}
    assert all(r[2:] == (0.0, 0.0, 0.0) for r in rates.seen if r[0] == 0)
    assert rates.seen[-1][2:] == pytest.approx((0.5, 0.4, 0.3))
    cfg = module.model.config  # fit ended: the recipe's rates again
    assert (cfg.dropout_input, cfg.dropout_output, module.model.layers[0].dropout) == (0.5, 0.4, 0.3)


def test_before_start_training_is_exactly_training_without_dropout(toy_corpus):
    late, _ = _fit(toy_corpus, [LateDropout(start=1, ramp=1)], epochs=1, **DROPPING)
    plain, _ = _fit(toy_corpus, [], epochs=1, dropout_input=0.0, dropout_output=0.0, cell_options={"dropout": 0.0})
    dropping, _ = _fit(toy_corpus, [], epochs=1, **DROPPING)
    for (name, a), b in zip(late.state_dict().items(), plain.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert any(not torch.equal(a, c) for a, c in zip(late.state_dict().values(), dropping.state_dict().values()))


def test_ramp_zero_switches_the_rates_on_at_once():
    late = LateDropout(start=2, ramp=0)
    assert [late.factor_at(e) for e in (0, 1.99, 2, 5)] == [0, 0, 1, 1]
    assert [LateDropout(start=0, ramp=4).factor_at(e) for e in (0, 1, 4, 9)] == [0, 0.25, 1, 1]


@pytest.mark.parametrize("kwargs", [{"start": -1}, {"ramp": -0.5}, {"start": True}, {"ramp": float("nan")}, {"start": "1"}])
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError, match="LateDropout: .* non-negative number of epochs"):
        LateDropout(**kwargs)


def test_a_model_without_dropout_is_warned_about(toy_corpus):
    with pytest.warns(UserWarning, match="no dropout to schedule"):
        _fit(toy_corpus, [LateDropout()], epochs=1)


@pytest.mark.parametrize("name", time_to_quality_recipes())
def test_the_budget_recipes_schedule_their_dropout_and_match_the_peers_parameter_count(name):
    """The time-to-quality recipes (recipes/ptb/{delta_rnn_budget{,_sgd,_tied},lstm_80min,lstm_budget}.yaml, each with
    a Bench line): LateDropout (a class the recipe guard allows) and, with PTB's 10k words, pytorch/examples' LSTM's
    5,656,336 parameters +-1% (the time-to-quality benchmark's rule)."""
    from pathlib import Path

    import yaml

    from dsf_lightning.training import LanguageModelModule
    from dsf_lightning.training.recipe_guard import ALLOWED_CLASSES

    recipe = yaml.safe_load((Path(__file__).parents[2] / "recipes" / name).read_text())
    late = [c for c in recipe["trainer"]["callbacks"] if c["class_path"].endswith("LateDropout")]
    assert len(late) == 1 and late[0]["class_path"] in ALLOWED_CLASSES
    assert LateDropout(**late[0]["init_args"]).factor_at(0.99) == 0.0
    module = LanguageModelModule(vocab_size=10_000, **recipe["model"])
    assert abs(module.num_parameters / 5_656_336 - 1) < 0.01


@pytest.mark.parametrize("crash_step", [4, 13])  # in the dropout-free start; in the ramp (second epoch)
def test_a_run_resumed_mid_ramp_ends_with_the_same_weights(tmp_path, toy_corpus, crash_step):
    from lightning.pytorch.callbacks import ModelCheckpoint

    from .test_lightning_training import CrashAt, read, run

    def late():
        return LateDropout(start=0.5, ramp=1.0)

    run(tmp_path / "straight", toy_corpus, callbacks=[late()], **DROPPING)
    _, straight, _ = read(tmp_path / "straight")
    save = dict(dirpath=tmp_path / "ckpts", every_n_train_steps=2, save_top_k=-1, save_last=True)
    with pytest.raises(BaseException):
        run(tmp_path / "crashed", toy_corpus, callbacks=[late(), ModelCheckpoint(**save), CrashAt(crash_step)],
            trainer_kwargs={"enable_checkpointing": True}, **DROPPING)
    run(tmp_path / "resumed", toy_corpus, callbacks=[late(), ModelCheckpoint(**save)],
        ckpt_path=str(tmp_path / "ckpts" / "last.ckpt"), trainer_kwargs={"enable_checkpointing": True}, **DROPPING)
    _, resumed, _ = read(tmp_path / "resumed")
    for name in straight:
        torch.testing.assert_close(resumed[name], straight[name], rtol=0, atol=0, msg=name)
