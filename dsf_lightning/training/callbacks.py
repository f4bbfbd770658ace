"""Lightning callbacks for the papers' training procedures.

* :class:`ColumnNormalization`: the IRLM paper's column normalization (sec. 4), applied after every
  optimizer step.
* :class:`PolyakAveraging`: a Polyak (running-mean) or exponential moving average of the weights, used
  for validation / test (the DSF paper, sec. 2.5, evaluates its subword models with a Polyak average).
* :class:`GradientNormMonitor`: logs the total gradient norm before clipping and counts clipped steps.
* :class:`CpuTimeBudget`: stops training after a budget of process CPU time spent in training batches
  (comparisons at equal compute on a shared, noisy machine, where wall time is not fair).
* :class:`LateDropout`: trains without dropout for the first epochs, then ramps every dropout rate of the
  language model up to the recipe's values (fast progress under a short budget, regularization later).

All three find the weights through the LightningModule they are attached to; the column normalization
needs the :class:`~dsf_lightning.model.RecurrentLM`, found as ``pl_module.model`` (``model_attr``).

Order: callbacks run in the order of the Trainer's ``callbacks`` list (``ModelCheckpoint`` always last),
so put :class:`ColumnNormalization` *before* :class:`PolyakAveraging` to average the normalized weights.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Iterator
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from ..model import RecurrentLM
from ..regularizers import NORM_TARGETS, _check_max_norm, _check_mode, column_normalization_targets, renormalize_


def _find_lm(pl_module: L.LightningModule, model_attr: str) -> RecurrentLM:
    model = pl_module if isinstance(pl_module, RecurrentLM) else getattr(pl_module, model_attr, None)
    if not isinstance(model, RecurrentLM):
        raise TypeError(
            f"{type(pl_module).__name__}.{model_attr} is not a RecurrentLM (got {type(model).__name__}): "
            "pass model_attr naming the attribute that holds the language model"
        )
    return model


# ---------------------------------------------------------------------------------------------
class ColumnNormalization(L.Callback):
    """Column normalization of the IRLM paper (Pachitariu & Sahani, sec. 4): after every optimizer
    step, the incoming weights of each hidden unit (encoding matrix W) and its outgoing weights
    (decoding matrix Z) are rescaled to L2 norm ``max_norm`` (15 in the paper).

    It runs in ``on_train_batch_end``, which Lightning calls after the batch's optimizer step (and
    only acts when ``trainer.global_step`` advanced, so gradient accumulation batches are skipped), and
    once in ``on_train_start`` so training starts from normalized weights.

    Args:
        max_norm: the norm, > 0 (15 in the paper).
        mode: ``"fixed"`` (every vector rescaled to exactly ``max_norm``, the paper's "fixing the L2
            norm") or ``"max"`` (only vectors longer than ``max_norm`` are shrunk).
        which: ``"encoder"`` and / or ``"decoder"``; see
            :func:`dsf_lightning.regularizers.column_normalization_targets` for the exact matrices.
        model_attr: the attribute of the LightningModule holding the RecurrentLM.
    """

    def __init__(
        self,
        max_norm: float = 15.0,
        mode: str = "fixed",
        which: tuple[str, ...] | list[str] = NORM_TARGETS,
        model_attr: str = "model",
    ) -> None:
        self.max_norm = _check_max_norm(max_norm)
        self.mode = _check_mode(mode)
        self.which = (which,) if isinstance(which, str) else tuple(which)
        if not self.which or any(w not in NORM_TARGETS for w in self.which):
            raise ValueError(f"which must be a non-empty subset of {NORM_TARGETS}, got {which!r}")
        self.model_attr = model_attr
        self._targets: list[tuple[str, nn.Parameter, int]] | None = None
        self._last_step: int | None = None
        self.applied_steps = 0  # how many optimizer steps it followed (for tests and logs)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._targets = column_normalization_targets(_find_lm(pl_module, self.model_attr), self.which)

    @property
    def target_names(self) -> list[str]:
        """The matrices it normalizes (names relative to the RecurrentLM), known after ``setup``."""
        return [name for name, _, _ in self._targets or []]

    def _apply(self) -> None:
        for _, weight, dim in self._targets or []:
            renormalize_(weight, dim, self.max_norm, self.mode)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._apply()
        self._last_step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self._last_step:  # no optimizer step in this batch (accumulation)
            return
        self._last_step = trainer.global_step
        self._apply()
        self.applied_steps += 1


# ---------------------------------------------------------------------------------------------
def _check_decay(decay: object) -> float | None:
    if decay is None:
        return None
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0.0 < decay < 1.0:
        raise ValueError(f"decay must be None (arithmetic mean) or a number in (0, 1), got {decay!r}")
    return float(decay)


class PolyakAveraging(L.Callback):
    """Polyak averaging of the weights for evaluation (the DSF paper, sec. 2.5, uses a Polyak average
    of the parameters for its subword models; Polyak & Juditsky 1992).

    After every optimizer step ``n > start_step`` the average takes in the new weights ``w_n``:

    * ``decay=None``: the arithmetic mean ``(w_{s+1} + ... + w_n) / (n - s)`` with ``s = start_step``,
      kept as the running update ``avg += (w_n - avg) / count``;
    * ``decay`` in (0, 1): the exponential moving average ``avg = decay * avg + (1 - decay) * w_n``,
      started at ``w_{s+1}``;
    * ``decay`` with ``warmup=True``: the k-th iterate in (k = 2, 3, ...) is taken in with the decay
      ``min(decay, (1 + k) / (10 + k))`` (the warm-up of TensorFlow's ExponentialMovingAverage with
      ``num_updates``), so early on the average spans about the last k / 9 iterates instead of holding on
      to the first, untrained ones (from step 0 with decay 0.998 they still weigh 0.2 after 800 steps).

    Every floating-point parameter of the LightningModule is averaged (buffers are not: they keep
    their current values). For validation, test and predict the averaged weights are copied into the
    parameters (``on_*_start``) and the training weights copied back after (``on_*_end``), so the
    logged ``val_loss`` etc. are those of the averaged model while training continues from the raw
    iterates. Before the first averaged step evaluation uses the raw weights.

    Checkpoints: the averages, their count and the last step seen are the callback's state
    (``state_dict`` / ``load_state_dict``, stored under ``checkpoint["callbacks"][state_key]``), so a
    resumed run continues the same average exactly; ``on_save_checkpoint`` also makes sure a checkpoint
    written while the averages are swapped in stores the *training* weights as the model's state.

    Args:
        start_step: optimizer steps to skip before averaging starts (>= 0).
        decay: None for the arithmetic mean, or the EMA decay in (0, 1).
        warmup: with ``decay``, lower the decay while the average holds few iterates (above).
    """

    def __init__(self, start_step: int = 0, decay: float | None = None, warmup: bool = False) -> None:
        if isinstance(start_step, bool) or not isinstance(start_step, int) or start_step < 0:
            raise ValueError(f"start_step must be a non-negative integer, got {start_step!r}")
        self.start_step = start_step
        self.decay = _check_decay(decay)
        if not isinstance(warmup, bool):
            raise ValueError(f"warmup must be true or false, got {warmup!r}")
        if warmup and self.decay is None:
            raise ValueError("warmup=True needs a decay: the arithmetic mean (decay None) has no decay to warm up")
        self.warmup = warmup
        self._averages: dict[str, Tensor] | None = None
        self.num_averaged = 0  # how many iterates the average holds
        self._last_step: int | None = None
        self._backup: dict[str, Tensor] | None = None  # training weights while the averages are in
        self._module: L.LightningModule | None = None

    @property
    def state_key(self) -> str:
        warmup = {"warmup": True} if self.warmup else {}  # without it, the key of checkpoints made before it existed
        return self._generate_state_key(start_step=self.start_step, decay=self.decay, **warmup)

    def _decay_now(self) -> float:
        """The decay for the iterate just counted in (``num_averaged`` of them)."""
        if not self.warmup:
            return self.decay
        return min(self.decay, (1.0 + self.num_averaged) / (10.0 + self.num_averaged))

    # -- bookkeeping ---------------------------------------------------------------------------
    @staticmethod
    def _parameters(pl_module: nn.Module) -> dict[str, nn.Parameter]:
        return {n: p for n, p in pl_module.named_parameters() if p.dtype.is_floating_point}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._module = pl_module

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._last_step is None:
            self._last_step = trainer.global_step

    @torch.no_grad()
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self._last_step:  # no optimizer step in this batch (gradient accumulation)
            return
        self._last_step = step
        if step <= self.start_step:
            return
        params = self._parameters(pl_module)
        if self._averages is None:
            self._averages = {n: p.detach().clone() for n, p in params.items()}
            self.num_averaged = 1
            return
        self.num_averaged += 1
        decay = None if self.decay is None else self._decay_now()
        for n, p in params.items():
            avg = self._averages[n]
            if avg.device != p.device:
                avg = self._averages[n] = avg.to(p.device)
            if self.decay is None:
                avg.add_(p.detach().to(avg.dtype) - avg, alpha=1.0 / self.num_averaged)
            else:
                avg.lerp_(p.detach().to(avg.dtype), 1.0 - decay)

    # -- the averaged weights ------------------------------------------------------------------
    def averaged_state_dict(self, pl_module: nn.Module | None = None) -> dict[str, Tensor]:
        """The module's ``state_dict()`` (copies) with every averaged parameter replaced by its
        average: load it into a fresh module to evaluate or export the averaged model. Keys are the
        LightningModule's (``"model.layers.0.W"``...); strip ``"model."`` for the RecurrentLM alone.

        Raises RuntimeError before the first averaged step."""
        module = pl_module if pl_module is not None else self._module
        if module is None:
            raise RuntimeError("PolyakAveraging has not been attached to a module yet: pass pl_module")
        if self._averages is None:
            raise RuntimeError(
                f"no averaged weights yet: averaging starts after optimizer step start_step={self.start_step}"
            )
        state = {k: v.detach().clone() for k, v in module.state_dict().items()}
        by_id = {id(p): name for name, p in self._parameters(module).items()}
        for key, p in module.named_parameters(remove_duplicate=False):
            name = by_id.get(id(p))
            if name is not None and key in state:
                state[key] = self._averages[name].detach().clone().to(state[key].device, state[key].dtype)
        return state

    @contextlib.contextmanager
    def averaged(self, pl_module: L.LightningModule | None = None) -> Iterator[bool]:
        """Within the block the module holds the averaged weights (what validation sees); the training
        weights come back after it. Yields False, and changes nothing, before the first averaged step."""
        module = pl_module if pl_module is not None else self._module
        if module is None:
            raise RuntimeError("PolyakAveraging has not been attached to a module yet: pass pl_module")
        if self._averages is None or self._backup is not None:  # nothing to swap, or swapped in already
            yield self._backup is not None
            return
        self._swap_in(module)
        try:
            yield True
        finally:
            self._swap_out(module)

    @torch.no_grad()
    def _swap_in(self, pl_module: L.LightningModule) -> None:
        if self._averages is None or self._backup is not None:
            return
        params = self._parameters(pl_module)
        self._backup = {n: p.detach().clone() for n, p in params.items()}
        for n, p in params.items():
            p.copy_(self._averages[n])

    @torch.no_grad()
    def _swap_out(self, pl_module: L.LightningModule) -> None:
        if self._backup is None:
            return
        for n, p in self._parameters(pl_module).items():
            p.copy_(self._backup[n])
        self._backup = None

    def on_validation_start(self, trainer, pl_module) -> None:
        self._swap_in(pl_module)

    def on_validation_end(self, trainer, pl_module) -> None:
        self._swap_out(pl_module)

    def on_test_start(self, trainer, pl_module) -> None:
        self._swap_in(pl_module)

    def on_test_end(self, trainer, pl_module) -> None:
        self._swap_out(pl_module)

    def on_predict_start(self, trainer, pl_module) -> None:
        self._swap_in(pl_module)

    def on_predict_end(self, trainer, pl_module) -> None:
        self._swap_out(pl_module)

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._swap_out(pl_module)

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "start_step": self.start_step,
            "decay": self.decay,
            "warmup": self.warmup,
            "num_averaged": self.num_averaged,
            "last_step": self._last_step,
            "averages": None if self._averages is None else {n: t.detach().clone() for n, t in self._averages.items()},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        built = (state_dict.get("start_step"), state_dict.get("decay"), state_dict.get("warmup", False))
        if built != (self.start_step, self.decay, self.warmup):
            warnings.warn(
                f"PolyakAveraging: the checkpoint's average was built with start_step={built[0]}, decay={built[1]}, "
                f"warmup={built[2]}; continuing it with start_step={self.start_step}, decay={self.decay}, "
                f"warmup={self.warmup}",
                stacklevel=2,
            )
        self.num_averaged = int(state_dict["num_averaged"])
        self._last_step = state_dict["last_step"]
        averages = state_dict["averages"]
        self._averages = None if averages is None else {n: t.clone() for n, t in averages.items()}

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        """If the averages are swapped in right now, store the training weights as the model's."""
        if self._backup is None or "state_dict" not in checkpoint:
            return
        by_id = {id(p): name for name, p in self._parameters(pl_module).items()}
        for key, p in pl_module.named_parameters(remove_duplicate=False):
            name = by_id.get(id(p))
            if name is not None and key in checkpoint["state_dict"]:
                checkpoint["state_dict"][key] = self._backup[name].detach().clone()


# ---------------------------------------------------------------------------------------------
class GradientNormMonitor(L.Callback):
    """Log the total gradient 2-norm *before* clipping and count the clipped optimizer steps.

    Lightning (2.x, ``Precision._after_closure``) calls ``on_before_optimizer_step`` after the backward
    pass (and after AMP's ``scaler.unscale_``) and *before* ``configure_gradient_clipping``, so the
    gradients seen here are unclipped and unscaled. A step counts as clipped when the trainer clips:
    ``gradient_clip_val > 0`` and, for ``gradient_clip_algorithm="norm"`` (the default), the total
    2-norm over the optimizer's parameters exceeds it (``torch.nn.utils.clip_grad_norm_``), or for
    ``"value"``, some gradient entry exceeds it in absolute value. (A LightningModule overriding
    ``configure_gradient_clipping`` clips on its own terms, which this cannot see.)

    Logs, per optimizer step: ``grad_norm`` (pre-clip total norm) and ``grad_clipped_fraction``
    (clipped steps / steps so far) and ``grad_nonfinite_steps`` (steps so far whose gradient norm was
    NaN / inf; each one also warns); attributes ``last_norm``, ``num_steps``, ``num_clipped``,
    ``num_nonfinite`` (steps whose norm was inf / nan, which an AMP scaler skips). The counts are in
    the checkpoint.

    Args:
        prefix: prepended to the logged names.
        prog_bar: show ``grad_norm`` in the progress bar.
    """

    def __init__(self, prefix: str = "", prog_bar: bool = False) -> None:
        self.prefix = prefix
        self.prog_bar = prog_bar
        self.last_norm: float | None = None
        self.num_steps = 0
        self.num_clipped = 0
        self.num_nonfinite = 0

    @torch.no_grad()
    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if not grads:
            return
        norms = torch.stack([torch.linalg.vector_norm(g.detach().float()) for g in grads])
        norm = torch.linalg.vector_norm(norms)
        value = float(norm)
        clip = trainer.gradient_clip_val
        algorithm = str(getattr(trainer.gradient_clip_algorithm, "value", trainer.gradient_clip_algorithm) or "norm")
        clipped = False
        if clip is not None and clip > 0:
            if algorithm == "value":
                clipped = max(float(g.detach().abs().max()) for g in grads) > clip
            else:
                clipped = value > clip
        self.last_norm = value
        self.num_steps += 1
        self.num_clipped += int(clipped)
        self.num_nonfinite += int(not math.isfinite(value))
        pl_module.log(f"{self.prefix}grad_norm", norm, on_step=True, on_epoch=False, prog_bar=self.prog_bar)
        pl_module.log(
            f"{self.prefix}grad_clipped_fraction",
            self.num_clipped / self.num_steps,
            on_step=True,
            on_epoch=False,
        )
        pl_module.log(f"{self.prefix}grad_nonfinite_steps", float(self.num_nonfinite), on_step=True, on_epoch=False)
        if not math.isfinite(value) and getattr(trainer.precision_plugin, "scaler", None) is None:  # a scaler skips these
            warnings.warn(
                f"GradientNormMonitor: the gradient norm is {value} at global step {trainer.global_step} "
                f"({self.num_nonfinite} non-finite step(s) so far); see NonFiniteGuard to skip such steps",
                RuntimeWarning,
                stacklevel=2,
            )

    def state_dict(self) -> dict[str, Any]:
        return {"num_steps": self.num_steps, "num_clipped": self.num_clipped, "num_nonfinite": self.num_nonfinite}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.num_steps = int(state_dict["num_steps"])
        self.num_clipped = int(state_dict["num_clipped"])
        self.num_nonfinite = int(state_dict.get("num_nonfinite", 0))


# ---------------------------------------------------------------------------------------------
class CpuTimeBudget(L.Callback):
    """Stop training once the training batches have used ``seconds`` of process CPU time.

    CPU time (``time.process_time``: all threads of this process) is counted from the start to the end
    of each training batch (forward, backward, optimizer step), so validation and data loading are not
    charged, and time the process spends waiting for a busy core is not charged either: models trained
    side by side with other jobs still get equal compute. With ``include_validation`` the clock runs from
    the start of ``fit`` instead (validation charged too). Every ``record_every`` steps the callback
    appends ``{"step", "cpu_seconds", "tokens", "train_loss"}`` to :attr:`curve` (a training curve
    against compute). The budget survives a resume (``state_dict``).

    Args:
        seconds: the CPU-time budget, > 0.
        record_every: steps between curve points (>= 1).
        include_validation: charge all CPU time since ``fit`` began, not only the training batches.
    """

    def __init__(self, seconds: float, record_every: int = 50, include_validation: bool = False) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
            raise ValueError(f"CpuTimeBudget: seconds must be a positive number, got {seconds!r}")
        if isinstance(record_every, bool) or not isinstance(record_every, int) or record_every < 1:
            raise ValueError(f"CpuTimeBudget: record_every must be a positive integer, got {record_every!r}")
        self.seconds = float(seconds)
        self.record_every = record_every
        self.include_validation = bool(include_validation)
        self.used = 0.0
        self.tokens = 0
        self.steps = 0
        self.curve: list[dict[str, float]] = []
        self._started: float | None = None  # start of the running batch, or of fit (include_validation)

    @property
    def exhausted(self) -> bool:
        """Whether the budget is spent."""
        return self.used >= self.seconds

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.include_validation:
            self._started = time.process_time() - self.used  # a resumed budget keeps what it had used

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        if not self.include_validation:
            self._started = time.process_time()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._started is None:
            return
        if self.include_validation:
            self.used = time.process_time() - self._started
        else:
            self.used += time.process_time() - self._started
            self._started = None
        self.steps += 1
        targets = batch[1] if isinstance(batch, (tuple, list)) and len(batch) > 1 else None
        if isinstance(targets, Tensor):
            self.tokens += int(targets.numel())
        if self.steps % self.record_every == 0:
            loss = outputs["loss"] if isinstance(outputs, dict) else outputs
            self.curve.append({
                "step": self.steps, "cpu_seconds": self.used, "tokens": self.tokens,
                "train_loss": float(loss.detach()) if isinstance(loss, Tensor) else float("nan"),
            })
        if self.exhausted:
            trainer.should_stop = True

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.include_validation and self._started is not None:
            self.used = time.process_time() - self._started

    def state_dict(self) -> dict[str, Any]:
        return {"used": self.used, "tokens": self.tokens, "steps": self.steps, "curve": list(self.curve)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.used = float(state_dict["used"])
        self.tokens = int(state_dict["tokens"])
        self.steps = int(state_dict["steps"])
        self.curve = list(state_dict.get("curve", []))


# ---------------------------------------------------------------------------------------------
#: the LMConfig rates :class:`LateDropout` scales (the cells' own rates, e.g. DSF eq. 12, are scaled too)
_MODEL_DROPOUTS = ("dropout_embedding", "dropout_input", "dropout_hidden", "dropout_output")


def epochs_trained(trainer: L.Trainer, batch_idx: int) -> float:
    """Where training is, in epochs with fractions: ``epoch + batch_idx / batches`` (the epoch alone where the
    number of batches is not known); a function of the position, so a resumed run reads the same."""
    batches = trainer.num_training_batches
    return trainer.current_epoch + (batch_idx / batches if isinstance(batches, int) and batches > 0 else 0.0)


class LateDropout(L.Callback):
    """No dropout for the first ``start`` epochs, then every dropout rate ramps linearly up to the recipe's
    values over ``ramp`` epochs ("late dropout", Liu et al. 2023, *Dropout Reduces Underfitting*, sec. 5).

    Dropout slows the first epochs (it fights overfitting that has not begun yet); a model trained for
    a short budget learns faster without it and one trained for long still needs it. The rates scaled are
    the model's (``dropout_embedding``, ``dropout_input``, ``dropout_hidden``, ``dropout_output``) and every
    cell's own ``dropout`` (the Delta-RNN's eq. 12). Progress is counted in epochs, fractions included
    (``epoch + batch / batches``), so the factor is a function of the training position and a resumed run
    gets the same rates. The recipe's rates are restored when ``fit`` ends.

    Args:
        start: epochs trained with no dropout at all (>= 0).
        ramp: epochs over which the rates then grow linearly to the recipe's values (>= 0; 0: at once).
        model_attr: the attribute of the LightningModule that holds the :class:`RecurrentLM`.
    """

    def __init__(self, start: float = 1.0, ramp: float = 1.0, model_attr: str = "model") -> None:
        for name, value in (("start", start), ("ramp", ramp)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"LateDropout: {name} must be a non-negative number of epochs, got {value!r}")
        self.start, self.ramp, self.model_attr = float(start), float(ramp), model_attr
        self._targets: list[tuple[Any, str, float]] | None = None  # (object, attribute, recipe rate)
        self.factor = 1.0

    def factor_at(self, epochs: float) -> float:
        """The fraction of the recipe's rates in force after ``epochs`` (fractional) epochs of training."""
        if epochs < self.start:
            return 0.0
        return 1.0 if self.ramp == 0 else min(1.0, (epochs - self.start) / self.ramp)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        model = _find_lm(pl_module, self.model_attr)
        targets = [(model.config, name, float(getattr(model.config, name))) for name in _MODEL_DROPOUTS]
        targets += [(layer, "dropout", float(layer.dropout)) for layer in model.layers
                    if isinstance(getattr(layer, "dropout", None), float)]
        self._targets = [t for t in targets if t[2] > 0]
        if not self._targets:
            warnings.warn("LateDropout: the model has no dropout to schedule (every rate is 0); it changes nothing", stacklevel=2)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        self._apply(self.factor_at(epochs_trained(trainer, batch_idx)))

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._apply(1.0)  # the recipe's rates again: a checkpoint or export after fit sees the configured model

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._apply(1.0)

    def _apply(self, factor: float) -> None:
        self.factor = factor
        for owner, name, rate in self._targets or ():
            setattr(owner, name, rate * factor)
