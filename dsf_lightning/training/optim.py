"""The one optimizer builder: an optimizer name and its settings to a ``torch.optim`` optimizer, and an optional
learning-rate scheduler to what a LightningModule's ``configure_optimizers`` returns. The language model, the
sequence-task modules and ``dsf fit --optimizer / --lr_scheduler`` all go through it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from lightning.pytorch.utilities import GradClipAlgorithmType

#: the optimizers a module's ``optimizer`` option names
OPTIMIZERS = {"adam": torch.optim.Adam, "rmsprop": torch.optim.RMSprop, "sgd": torch.optim.SGD}


def build_optimizer(
    name: str,
    params: Iterable[Any],
    *,
    lr: float,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    choices: Sequence[str] = tuple(OPTIMIZERS),
    fused: bool = True,
) -> torch.optim.Optimizer:
    """``name`` (one of ``choices``) over ``params`` (parameters or parameter groups). Adam takes no momentum.

    Adam and SGD take torch's fused implementation (one kernel over all parameters) where every parameter
    allows it (:func:`fusable`): the same update to round-off, ~8x cheaper for Adam on one CPU thread
    (36 -> 4 ms per step for a 5.7M-parameter PTB model), ~12% of that model's training step. ``fused=False``
    takes torch's default implementation instead (see :func:`fused_allowed`)."""
    if name not in choices or name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {tuple(choices)}, got {name!r}")
    params = [_listed(p) for p in params]
    kernel = {"fused": True} if fused and name in ("adam", "sgd") and fusable(params) else {}
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, **kernel)
    return OPTIMIZERS[name](params, lr=lr, momentum=momentum, weight_decay=weight_decay, **kernel)


def fused_allowed(trainer: Any) -> bool:
    """Whether a module trained by ``trainer`` (None: not attached) may take a fused optimizer.

    Torch's fused Adam / SGD unscale a gradient scaler's gradients inside their step, so under a
    mixed-precision plugin with a scaler (real fp16) gradients cannot be clipped before that step: with
    ``gradient_clip_val`` set there the optimizer takes torch's non-fused implementation, which the plugin
    unscales first and then clips. Without a scaler (bf16) the fused one stays (see :class:`FusedClipping`)."""
    if trainer is None:
        return True
    clipping = bool(getattr(trainer, "gradient_clip_val", None))
    return not (clipping and _mixed_precision(trainer, scaled=True))


def _mixed_precision(trainer: Any, *, scaled: bool) -> bool:
    """Whether ``trainer`` runs Lightning's mixed-precision plugin with (``scaled``) or without a gradient scaler."""
    plugin = getattr(trainer, "precision_plugin", None)
    return isinstance(plugin, MixedPrecision) and (plugin.scaler is not None) is scaled


class FusedClipping:
    """LightningModule mixin: clip a fused optimizer's gradients under bf16 mixed precision.

    Lightning's mixed-precision plugin refuses to clip any optimizer that unscales inside its step ("does not
    allow for gradient clipping because it performs unscaling of gradients internally"), a fused one included,
    so a recipe with ``gradient_clip_val`` stopped at its first step under ``--trainer.precision bf16-mixed``.
    With no gradient scaler (bf16) nothing is scaled: the gradients are clipped as full precision clips them
    (by norm or by value). Anything else goes to Lightning's own clipping."""

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        if (gradient_clip_val and getattr(optimizer, "_step_supports_amp_scaling", False)
                and _mixed_precision(self.trainer, scaled=False)):
            algorithm = GradClipAlgorithmType(gradient_clip_algorithm or GradClipAlgorithmType.NORM)
            Precision.clip_gradients(self.trainer.precision_plugin, optimizer, gradient_clip_val, algorithm)  # no refusal
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)


def _listed(item: Any) -> Any:
    """A parameter group with its ``params`` as a list (a generator there would be spent by a first look)."""
    if not isinstance(item, dict):
        return item
    group = item["params"]
    return dict(item, params=[group] if isinstance(group, torch.Tensor) else list(group))


def fusable(params: Sequence[Any]) -> bool:
    """Whether torch's fused optimizers take ``params`` (tensors or parameter groups): every one a dense
    floating-point tensor on the CPU or a CUDA device, all on one device."""
    tensors = [t for p in params for t in (p["params"] if isinstance(p, dict) else [p])]
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    return (bool(tensors) and all(t.is_floating_point() and t.layout == torch.strided for t in tensors)
            and len({t.device for t in tensors}) == 1 and tensors[0].device.type in ("cpu", "cuda"))


def with_schedule(optimizer: torch.optim.Optimizer, scheduler: Any = None, *, monitor: str = "val_loss"):
    """What ``configure_optimizers`` returns: ``optimizer`` alone, or with ``scheduler`` stepped every epoch;
    a ``ReduceLROnPlateau`` (the DSF paper's "halve when validation does not improve") on ``monitor`` (or the
    scheduler's own ``monitor``, as LightningCLI's subclass has). ``strict=False``: a run that ends before a
    validation, or an epoch without one, is no error."""
    if scheduler is None:
        return optimizer
    if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        config = {"scheduler": scheduler, "monitor": getattr(scheduler, "monitor", None) or monitor, "strict": False}
    else:
        config = {"scheduler": scheduler, "interval": "epoch"}
    return {"optimizer": optimizer, "lr_scheduler": config}
