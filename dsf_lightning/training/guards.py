"""Numerical fault guards for training: a non-finite loss or gradient never reaches the weights.

:class:`NonFiniteGuard` watches every training step of the real Lightning loop:

* the loss (``on_before_backward``) and the gradients (``on_before_optimizer_step``, after the backward
  pass and AMP's unscaling, *before* gradient clipping and the optimizer step);
* when either holds NaN or infinity, ``action="skip"`` drops that step's gradients (every ``p.grad`` is
  set to None, so the optimizer leaves every parameter *and* its moment estimates untouched: the step
  did not happen), and ``action="stop"`` raises :class:`NonFiniteError` with the step, epoch, window
  and values, ending the run;
* either way the carried truncated-BPTT state is reset (``LanguageModelModule.reset_carried_state``),
  so the NaN state of that window does not poison the rest of the epoch: the next window starts from
  zeros, as window 0 does. A carried state that turns non-finite on its own (a finite loss, an
  overflowing state) is reset too (``check_state``).

After ``max_skips`` skipped steps the guard stops the run (a model that keeps producing NaN is broken,
not unlucky). The counts are the callback's checkpoint state and are logged as ``nonfinite_skips``.

With a gradient scaler (``16-mixed``), infinite *gradients* with a finite loss are the scaler's
business (it skips the step and lowers its scale): the guard leaves them alone. Exploding but finite
gradients are clipped by the Trainer (``gradient_clip_val``) and reported by
:class:`~dsf_lightning.training.callbacks.GradientNormMonitor`; put the monitor *before* the guard in
the callbacks list so it sees (and counts) the non-finite gradients before the guard drops them.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.utilities import rank_zero_warn

__all__ = ["NonFiniteError", "NonFiniteGuard"]


class NonFiniteError(FloatingPointError):
    """Training produced a NaN / infinite loss or gradient and the guard stopped the run."""


def _finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t.detach()).all())


def _nonfinite(tensors: list[torch.Tensor]) -> list[int]:
    """The indices of the tensors that hold NaN or infinity.

    A sum holding a NaN or an infinity is never finite, so finite sums prove finite tensors in one pass
    that allocates nothing (``isfinite(t).all()`` builds a bool copy of every tensor: ~17x slower on a
    20M-parameter LSTM) and one device sync, not one per tensor. Only when a sum is not finite are the
    tensors checked one by one (a sum of finite values can overflow)."""
    if not tensors or bool(torch.stack([t.detach().sum() for t in tensors]).isfinite().all()):
        return []
    return [i for i, t in enumerate(tensors) if not _finite(t)]


class NonFiniteGuard(L.Callback):
    """Skip (or stop on) training steps whose loss or gradients are NaN / infinite; reset the carried
    state after them.

    Args:
        action: ``"skip"`` (drop the step's update and go on) or ``"stop"`` (raise
            :class:`NonFiniteError`).
        max_skips: with ``"skip"``, raise :class:`NonFiniteError` once more than this many steps were
            skipped in the run (None: never).
        check_grads: also check the gradients (not only the loss).
        check_state: reset a carried training state that became non-finite even with a finite loss.
        check_weights: after every optimizer step (at ``on_train_batch_end``, before any checkpoint of that
            step is written: Lightning runs checkpoint callbacks last), raise :class:`NonFiniteError` when a
            parameter holds NaN or infinity. A finite loss and finite gradients can still give non-finite
            weights (an infinite or overflowing learning rate); that step cannot be undone, so the run stops
            whatever ``action`` says.
        reset_state: reset the carried state after a skipped step (the module needs a
            ``reset_carried_state(stage)`` method, as :class:`LanguageModelModule` has).

    Under DDP keep ``check_grads=True``: the gradients are all-reduced before the check, so every rank
    sees the same non-finite gradients and skips the same step (a check of the local loss alone could
    let one rank skip while the others update).
    """

    def __init__(
        self,
        action: Literal["skip", "stop"] = "skip",
        max_skips: int | None = 10,
        check_grads: bool = True,
        check_state: bool = True,
        reset_state: bool = True,
        check_weights: bool = True,
    ) -> None:
        if action not in ("skip", "stop"):
            raise ValueError(f"action must be 'skip' or 'stop', got {action!r}")
        if max_skips is not None and (isinstance(max_skips, bool) or not isinstance(max_skips, int) or max_skips < 0):
            raise ValueError(f"max_skips must be None or a non-negative integer, got {max_skips!r}")
        self.action = action
        self.max_skips = max_skips
        self.check_grads = check_grads
        self.check_state = check_state
        self.check_weights = check_weights
        self.reset_state = reset_state
        self.num_skips = 0
        self.num_state_resets = 0
        self.skipped_steps: list[int] = []  # global steps whose update was dropped (first 1000)
        self._bad_loss: float | None = None  # the non-finite loss seen since the last optimizer step
        self._batch_idx: int | None = None

    @property
    def state_key(self) -> str:
        return self._generate_state_key(action=self.action)

    # -- detection -----------------------------------------------------------------------------
    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor) -> None:
        if not _finite(loss):
            self._bad_loss = float(loss.detach().float().reshape(-1)[0]) if loss.numel() else math.nan

    @staticmethod
    def _bad_gradients(optimizer) -> list[int]:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        with_grad = [i for i, p in enumerate(params) if p.grad is not None]
        return [with_grad[j] for j in _nonfinite([params[i].grad for i in with_grad])]

    @staticmethod
    def _has_scaler(trainer: L.Trainer) -> bool:
        return getattr(getattr(trainer, "precision_plugin", None), "scaler", None) is not None

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer) -> None:
        bad_loss, self._bad_loss = self._bad_loss, None
        bad_grads = self._bad_gradients(optimizer) if self.check_grads else []
        if bad_loss is None and (not bad_grads or self._has_scaler(trainer)):
            return
        what = f"loss {bad_loss}" if bad_loss is not None else f"non-finite gradients in {len(bad_grads)} parameter tensor(s)"
        where = f"at global step {trainer.global_step} (epoch {trainer.current_epoch}, batch {self._batch_idx})"
        if self.action == "stop":
            raise NonFiniteError(
                f"training produced a {what} {where}; stopping (NonFiniteGuard action='stop'). "
                "Lower the learning rate, set gradient_clip_val, or use NonFiniteGuard(action='skip')"
            )
        self.num_skips += 1
        if self.max_skips is not None and self.num_skips > self.max_skips:
            raise NonFiniteError(
                f"training produced a {what} {where}: {self.num_skips} steps skipped, more than "
                f"max_skips={self.max_skips}; the run is diverging. Lower the learning rate or set "
                "gradient_clip_val (last skipped steps: "
                f"{self.skipped_steps[-5:]})"
            )
        for group in optimizer.param_groups:
            for p in group["params"]:
                p.grad = None  # the optimizer skips parameters without a gradient: no update at all
        if len(self.skipped_steps) < 1000:
            self.skipped_steps.append(int(trainer.global_step))
        if self.reset_state:
            self._reset(pl_module)
        rank_zero_warn(f"NonFiniteGuard: skipped the update of a step with a {what} {where}; carried state reset")
        pl_module.log("nonfinite_skips", float(self.num_skips), on_step=True, on_epoch=False)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._batch_idx = batch_idx

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.check_weights:
            self._check_weights(trainer, pl_module)
        if not self.check_state:
            return
        carried = getattr(pl_module, "_carried", None)
        carried = carried.get("train") if isinstance(carried, dict) else None
        if carried is None:
            return
        if not all(_finite(s) for layer in carried for s in layer):
            self.num_state_resets += 1
            self._reset(pl_module)
            rank_zero_warn(
                f"NonFiniteGuard: the carried training state became non-finite at global step "
                f"{trainer.global_step}; the next window starts from zeros"
            )

    def _check_weights(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        params = [(n, p) for n, p in pl_module.named_parameters() if p.is_floating_point()]
        bad = [params[i][0] for i in _nonfinite([p for _, p in params])]
        if not bad:
            return
        rates = sorted({g["lr"] for opt in trainer.optimizers for g in opt.param_groups})
        raise NonFiniteError(
            f"the weights are non-finite after the optimizer step at global step {trainer.global_step} "
            f"(epoch {trainer.current_epoch}, batch {self._batch_idx}): {len(bad)} of {len(params)} parameter "
            f"tensors hold NaN or infinity (first: {bad[0]}); lr {rates}. A step that was taken cannot be "
            "skipped: stopping before any checkpoint of it is written (NonFiniteGuard). Lower the learning "
            "rate, or check what changed the rate or the weights (a scheduler, param_group_lr, a callback)"
        )

    @staticmethod
    def _reset(pl_module: L.LightningModule) -> None:
        reset = getattr(pl_module, "reset_carried_state", None)
        if callable(reset):
            reset("train")

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "num_skips": self.num_skips,
            "num_state_resets": self.num_state_resets,
            "skipped_steps": list(self.skipped_steps),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.num_skips = int(state_dict.get("num_skips", 0))
        self.num_state_resets = int(state_dict.get("num_state_resets", 0))
        self.skipped_steps = [int(s) for s in state_dict.get("skipped_steps", [])]


# =============================================================================================== recipes
# What a recipe, a command line or a checkpoint may make the `dsf` CLI import and build is enforced inside
# jsonargparse's name resolution while the CLI runs: see recipe_guard (re-exported here for old imports).
from .recipe_guard import UnsafeRecipeError  # noqa: E402,F401

MAX_DEVICES = 1024


def check_trainer_counts(trainer: Any) -> None:
    """Refuse (ValueError) ``trainer.devices`` / ``trainer.num_nodes`` beyond :data:`MAX_DEVICES`:
    Lightning builds a list of that many device indices up front, so a typo such as ``devices:
    24000000000`` would exhaust memory instead of failing."""
    if trainer is None:
        return
    for key in ("devices", "num_nodes"):
        try:
            value = trainer.get(key)
        except (AttributeError, TypeError):
            value = getattr(trainer, key, None)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_DEVICES:
            raise ValueError(
                f"trainer.{key}={value:,} is not a plausible count (at most {MAX_DEVICES:,}): "
                "give the number of devices per node (or a list of device indices)"
            )


class ValidateAtMaxSteps(L.Callback):
    """Validate once more when ``trainer.max_steps`` ends a run mid-epoch, so a short run (the README's
    ``--trainer.max_steps 20`` smoke run) still logs ``val_loss`` and its ``ModelCheckpoint(monitor=val_loss)``
    writes ``best.ckpt``.

    Why ``should_stop``: Lightning validates on a batch when the run is asked to stop (as EarlyStopping does);
    reaching ``max_steps`` alone ends the epoch loop without that validation. The run stops where it would
    anyway; nothing changes when the step count ends an epoch (its validation runs as always).
    """

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.max_steps is not None and trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps:
            trainer.should_stop = True


class LastCheckpointAtEveryValidation(Checkpoint):
    """Write every ``ModelCheckpoint(save_last=True)``'s ``last.ckpt`` after each validation, as a resume needs.

    Why: Lightning 2.6 writes ``last.ckpt`` only at a step where that callback saved some checkpoint; with
    ``monitor=val_loss`` and ``save_top_k=1`` an epoch that does not improve saves nothing, so ``last.ckpt`` stays
    the best epoch and a resume from it trains the later epochs again (a run killed at epoch 9 whose best was
    epoch 5 resumed at epoch 6). This writes the missing ``last.ckpt`` through that callback's own path, name and
    version counter, right after it had its turn: a :class:`~lightning.pytorch.callbacks.Checkpoint` runs after
    the other callbacks, and after the checkpoint callbacks listed before it (add it after the ModelCheckpoint;
    only with one, as Lightning adds no default ModelCheckpoint beside another Checkpoint).
    """

    def __init__(self) -> None:
        self._validated_at: int | None = None

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        self._validated_at = trainer.global_step
        self._write_missing_last(trainer, at_epoch_end=False)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._write_missing_last(trainer, at_epoch_end=True)

    def _write_missing_last(self, trainer, at_epoch_end: bool) -> None:
        from lightning.pytorch.callbacks import ModelCheckpoint

        if self._validated_at != trainer.global_step:
            return
        for callback in trainer.checkpoint_callbacks:
            # a ModelCheckpoint that saves at the epoch's end (validation every epoch) has its turn there
            if (isinstance(callback, ModelCheckpoint) and callback.save_last is True
                    and callback._should_save_on_train_epoch_end(trainer) == at_epoch_end
                    and not callback._should_skip_saving_checkpoint(trainer)):
                callback._save_last_checkpoint(trainer, callback._monitor_candidates(trainer))
