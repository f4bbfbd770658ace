"""NaN / inf under the real Trainer: NonFiniteGuard skips the step (no optimizer update at all) or stops
the run with a clear error, resets the carried TBPTT state, and a resumed run stays exact; exploding
gradients are clipped and reported, non-finite ones counted and logged by GradientNormMonitor."""

from __future__ import annotations

import math
import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from dsf_lightning.training import LanguageModelModule
from dsf_lightning.training.callbacks import GradientNormMonitor
from dsf_lightning.training.datamodule import LanguageModelDataModule
from dsf_lightning.training.guards import NonFiniteError, NonFiniteGuard
from dsf_lightning.training.policy import TrainingPolicy
from tests.training.conftest import make_toy_corpus, quiet_trainer

STEPS_PER_EPOCH = 86


class Poisoned(LanguageModelModule):
    """A module whose forward pass turns NaN (loss, gradients and final state) at chosen global steps,
    as a corrupted batch or an overflowing activation would."""

    def __init__(self, poison_steps=(), **kwargs):
        super().__init__(**kwargs)
        self.poison_steps = set(poison_steps)

    def _training_loss(self, inputs, targets, state):
        loss, final = super()._training_loss(inputs, targets, state)
        if self.trainer.global_step in self.poison_steps:
            final = tuple(tuple(s * float("nan") for s in layer) for layer in final)
            # a NaN forward pass leaves its final state on the loss graph (iterative inference reads its
            # gradient there): the poisoned state feeds the poisoned loss
            loss = loss * float("nan") + 0 * sum(s.sum() for layer in final for s in layer)
        return loss, final


def modules(poison_steps=(), **kwargs):
    L.seed_everything(0, verbose=False)
    data = LanguageModelDataModule(make_toy_corpus(), batch_size=4, bptt=7, eval_batch_size=2)
    options = dict(vocab_size=data.vocab_size, hidden_sizes=[16], embedding_size=8, lr=3e-3,
                   dropout_input=0.2, iterative_inference_step=0.1)
    options.update(kwargs)
    return Poisoned(poison_steps, **options), data


class Watch(L.Callback):
    """Weights before / after, and the carried state after, the batches of chosen global steps."""

    def __init__(self, steps):
        self.steps, self.before, self.after, self.state_after, self.losses = set(steps), {}, {}, {}, {}

    def _weights(self, module):
        return {k: v.detach().clone() for k, v in module.model.state_dict().items()}

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.global_step in self.steps:
            self.before[trainer.global_step] = self._weights(module)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        step = trainer.global_step - 1  # the step this batch made
        self.losses[step] = float(outputs["loss"])
        if step in self.steps:
            self.after[step] = self._weights(module)
            self.state_after[step] = [s.clone() for layer in module._carried["train"] for s in layer]


def final_weights(module):
    return {k: v.detach().clone() for k, v in module.model.state_dict().items()}


def test_a_nan_step_is_skipped_without_any_update_and_the_state_restarts_from_zeros():
    poison = (10, 40, 95)  # mid epoch 0 twice, mid epoch 1
    module, data = modules(poison)
    guard, watch, monitor = NonFiniteGuard(action="skip", max_skips=5), Watch(poison), GradientNormMonitor()
    trainer = quiet_trainer(max_epochs=2, callbacks=[monitor, guard, watch])
    with pytest.warns(UserWarning, match="NonFiniteGuard: skipped the update"):
        trainer.fit(module, data)
    assert guard.num_skips == 3 and guard.skipped_steps == list(poison)
    for step in poison:
        assert math.isnan(watch.losses[step])
        for name, before in watch.before[step].items():  # no optimizer update at all on that step
            assert torch.equal(watch.after[step][name], before), (step, name)
        assert all(bool((s == 0).all()) for s in watch.state_after[step])  # the next window starts from zeros
        assert math.isfinite(watch.losses[step + 1])
    assert all(bool(torch.isfinite(p).all()) for p in module.parameters())
    assert math.isfinite(float(trainer.callback_metrics["val_loss"]))
    # Adam took one step per finite batch: the skipped steps left its moments untouched too
    state = trainer.optimizers[0].state[module.model.embedding.weight]
    assert int(state["step"]) == 2 * STEPS_PER_EPOCH - len(poison)
    # GradientNormMonitor, before the guard, saw and logged the non-finite gradients
    assert monitor.num_nonfinite == len(poison)
    assert float(trainer.callback_metrics["grad_nonfinite_steps"]) == len(poison)
    assert float(trainer.callback_metrics["nonfinite_skips"]) == len(poison)


def test_without_the_guard_one_nan_step_poisons_the_weights():
    module, data = modules((10,))
    module.training_policy = TrainingPolicy(nonfinite_guard=False)  # the module's own guard off (its opt-out)
    trainer = quiet_trainer(max_epochs=1, max_steps=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, data)
    assert not all(bool(torch.isfinite(p).all()) for p in module.parameters())


def test_stop_action_ends_the_run_with_a_clear_error():
    module, data = modules((7,))
    trainer = quiet_trainer(max_epochs=1, callbacks=[NonFiniteGuard(action="stop")])
    with pytest.raises(NonFiniteError) as info:
        trainer.fit(module, data)
    message = str(info.value)
    assert "loss nan" in message and "global step 7" in message and "epoch 0" in message
    assert "learning rate" in message and "gradient_clip_val" in message
    assert isinstance(info.value, FloatingPointError)


def test_a_parameter_set_to_inf_mid_run_stops_after_max_skips():
    class Corrupt(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if trainer.global_step == 12:
                with torch.no_grad():
                    module.model.decoder.bias[3] = float("inf")

    module, data = modules()
    guard = NonFiniteGuard(action="skip", max_skips=3, check_weights=False)
    trainer = quiet_trainer(max_epochs=1, callbacks=[Corrupt(), guard])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NonFiniteError, match=r"4 steps skipped, more than max_skips=3.*diverging"):
            trainer.fit(module, data)
    assert guard.skipped_steps == [12, 13, 14]  # the step counter advances (the optimizer ran, with no gradient)

    # checking the weights (the default) stops at the first step: skipping cannot repair a weight
    module, data = modules()
    guard = NonFiniteGuard(action="skip", max_skips=3)
    trainer = quiet_trainer(max_epochs=1, callbacks=[Corrupt(), guard])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NonFiniteError, match=r"weights are non-finite after the optimizer step at global step 13 .*model\.decoder\.bias"):
            trainer.fit(module, data)
    assert guard.skipped_steps == [12]


def test_resume_after_a_skipped_step_is_exact(tmp_path):
    class CrashAt(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if trainer.global_step == 13:
                raise KeyboardInterrupt

    def run(ckpt_path=None, crash=False, folder="ckpt"):
        module, data = modules((11,))
        callbacks = [NonFiniteGuard(), ModelCheckpoint(dirpath=tmp_path / folder, every_n_train_steps=12, save_last=True)]
        if crash:
            callbacks.append(CrashAt())
        trainer = quiet_trainer(max_epochs=1, enable_checkpointing=True, callbacks=callbacks)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(module, data, ckpt_path=ckpt_path)
        return module, trainer

    straight, _ = run(folder="straight")
    with pytest.raises(BaseException):
        run(crash=True)
    last = tmp_path / "ckpt" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["global_step"] == 12  # written right after the skipped step 11: its state is the reset zeros
    assert all(bool((t == 0).all()) for t in ckpt["dsf_carried_train_state"])
    resumed, trainer = run(ckpt_path=str(last))
    for name, value in final_weights(straight).items():
        torch.testing.assert_close(final_weights(resumed)[name], value, rtol=0, atol=0, msg=name)
    guard = next(c for c in trainer.callbacks if isinstance(c, NonFiniteGuard))
    assert guard.num_skips == 1  # restored from the checkpoint


def test_exploding_gradients_are_clipped_and_reported():
    module, data = modules(lr=0.5)
    monitor = GradientNormMonitor()
    trainer = quiet_trainer(max_epochs=1, max_steps=30, gradient_clip_val=0.05, callbacks=[monitor])
    trainer.fit(module, data)
    assert monitor.num_steps == 30 and monitor.num_clipped > 0
    assert float(trainer.callback_metrics["grad_clipped_fraction"]) == monitor.num_clipped / 30
    assert float(trainer.callback_metrics["grad_nonfinite_steps"]) == 0
    assert all(bool(torch.isfinite(p).all()) for p in module.parameters())


def test_reset_carried_state_without_a_state_is_honoured_across_a_checkpoint():
    module, _ = modules()
    with pytest.raises(RuntimeError, match="arrived without the carried state"):
        module._state_for("train", 5, 4)
    module.reset_carried_state("train")
    checkpoint = {}
    module.on_save_checkpoint(checkpoint)
    assert checkpoint.get("dsf_reset_train_state") is True and "dsf_carried_train_state" not in checkpoint
    fresh, _ = modules()
    fresh.on_load_checkpoint(checkpoint)
    state = fresh._state_for("train", 5, 4)  # window 5 of a resumed epoch: zeros, no error
    assert all(bool((s == 0).all()) and s.shape[0] == 4 for layer in state for s in layer)
    with pytest.raises(ValueError, match="stage must be one of"):
        module.reset_carried_state("training")


def test_guard_arguments_are_checked():
    with pytest.raises(ValueError, match="action must be 'skip' or 'stop'"):
        NonFiniteGuard(action="ignore")
    with pytest.raises(ValueError, match="max_skips"):
        NonFiniteGuard(max_skips=-1)
