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
from lightning.pytorch.utilities import rank_zero_warn

__all__ = ["NonFiniteError", "NonFiniteGuard"]


class NonFiniteError(FloatingPointError):
    """Training produced a NaN / infinite loss or gradient and the guard stopped the run."""


def _finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t.detach()).all())


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
    ) -> None:
        if action not in ("skip", "stop"):
            raise ValueError(f"action must be 'skip' or 'stop', got {action!r}")
        if max_skips is not None and (isinstance(max_skips, bool) or not isinstance(max_skips, int) or max_skips < 0):
            raise ValueError(f"max_skips must be None or a non-negative integer, got {max_skips!r}")
        self.action = action
        self.max_skips = max_skips
        self.check_grads = check_grads
        self.check_state = check_state
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
        return [
            i
            for i, p in enumerate(p for group in optimizer.param_groups for p in group["params"])
            if p.grad is not None and not _finite(p.grad)
        ]

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
# jsonargparse (under LightningCLI) imports the module named by any ``class_path`` it is given before it
# checks the class, and resolves a dotted name given where a callable is expected (e.g. the hooks of
# lightning's LambdaCallback) to whatever object it names. A recipe could thus run the top-level code of
# any importable module, or hand ``os.system`` to a callback. The ``dsf`` command line refuses such
# recipes before jsonargparse sees them.

TRUSTED_MODULES = ("dsf_lightning", "lightning", "pytorch_lightning", "lightning_fabric", "torch")
TRUSTED_MODULES_ENV = "DSF_TRUSTED_MODULES"
_DOTTED = None


class UnsafeRecipeError(ValueError):
    """A recipe or command line names code outside the trusted modules (it would be imported or called)."""


def trusted_modules() -> tuple[str, ...]:
    """The top-level packages a recipe may name: :data:`TRUSTED_MODULES` plus the comma-separated
    names in ``$DSF_TRUSTED_MODULES`` (for your own callbacks, e.g. ``DSF_TRUSTED_MODULES=my_pkg``)."""
    import os

    extra = [m.strip() for m in os.environ.get(TRUSTED_MODULES_ENV, "").split(",") if m.strip()]
    return (*TRUSTED_MODULES, *extra)


def _is_trusted(path: str, trusted: tuple[str, ...]) -> bool:
    return any(path == t or path.startswith(t + ".") for t in trusted)


def _dotted(value: str) -> bool:
    global _DOTTED
    if _DOTTED is None:
        import re

        _DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
    return bool(_DOTTED.match(value.strip()))


def _importable_top(path: str) -> bool:
    import importlib.util

    top = path.strip().split(".")[0]
    try:
        return importlib.util.find_spec(top) is not None  # a top-level lookup imports nothing
    except (ImportError, ValueError):
        return False


def _walk(value: Any, where: str, trusted: tuple[str, ...], class_key: bool = False, depth: int = 0, base=None) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            key = str(key)
            _walk(item, f"{where}.{key}" if where else key, trusted, key in ("class_path", "_class_path"), depth, base)
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _walk(item, f"{where}[{i}]", trusted, False, depth, base)
        return
    if not isinstance(value, str) or _is_trusted(value.strip(), trusted):
        return
    if value.strip().lower().endswith((".yaml", ".yml", ".json")) and depth < 8:  # a nested config file
        parsed, source = _config_source(value.strip(), base)
        if source != "inline value":
            _walk(parsed, f"{where} ({source})", trusted, False, depth + 1, _parent(source))
            return
    if class_key and "." in value:
        raise UnsafeRecipeError(
            f"{where}: class_path {value!r} is outside the trusted modules {list(trusted)}: a recipe may only "
            f"name classes of those packages (nothing was imported). If you trust the module, add its package to "
            f"{TRUSTED_MODULES_ENV} (comma-separated)"
        )
    if _dotted(value) and _importable_top(value):
        raise UnsafeRecipeError(
            f"{where}: {value!r} names an importable object outside the trusted modules {list(trusted)}; "
            f"the command line could import or call it, so the recipe is refused (nothing was imported). "
            f"If you trust it, add its package to {TRUSTED_MODULES_ENV} (comma-separated)"
        )


def _load_yaml(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text  # not YAML: jsonargparse reports it; the raw string is still checked


def _parent(source: str):
    from pathlib import Path

    return Path(source).parent


def _config_source(value: str, base=None) -> tuple[Any, str]:
    """A ``--config`` (or group config) value: the parsed file when it names one (relative paths also
    tried against ``base``, the folder of the config that names it, as jsonargparse does), else inline YAML."""
    from pathlib import Path

    try:
        for path in (Path(value), *((Path(base) / value,) if base is not None and not Path(value).is_absolute() else ())):
            if path.suffix.lower() in (".yaml", ".yml", ".json", ".jsonnet") and path.is_file():
                return _load_yaml(path.read_text(encoding="utf-8", errors="replace")), str(path)
    except (OSError, ValueError):
        pass
    return _load_yaml(value), "inline value"


def _check_checkpoint_hparams(value: str, trusted: tuple[str, ...]) -> None:
    """LightningCLI parses a ``--ckpt_path`` checkpoint's ``hyper_parameters`` into its config, where
    jsonargparse imports any ``class_path`` they hold: check them like a recipe."""
    import pickle
    from pathlib import Path

    import torch

    path = Path(value)
    try:
        if not path.is_file():
            return
    except (OSError, ValueError):
        return
    try:
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except (RuntimeError, ValueError):  # not a zip checkpoint: mmap is unsupported
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise UnsafeRecipeError(
            f"--ckpt_path {value}: holds Python objects that weights-only loading refuses "
            f"({str(err).strip().splitlines()[0][:200]}); nothing was unpickled. Resume only from checkpoints you trust"
        ) from None
    except Exception:  # unreadable: Lightning reports it
        return
    if isinstance(ckpt, dict):
        _walk(ckpt.get("hyper_parameters"), f"--ckpt_path {value}: hyper_parameters", trusted)


def check_recipe_imports(argv, trusted: tuple[str, ...] | None = None) -> None:
    """Raise :class:`UnsafeRecipeError` when the LightningCLI arguments ``argv`` (and the config files
    they name) give a ``class_path`` outside ``trusted`` (default :func:`trusted_modules`), or any
    value naming an importable object outside it (a callable jsonargparse would resolve); the
    ``hyper_parameters`` of a ``--ckpt_path`` checkpoint are checked too (LightningCLI parses them)."""
    trusted = trusted_modules() if trusted is None else tuple(trusted)
    args = [str(a) for a in argv]
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-") or arg in ("-h", "--help"):
            i += 1
            continue
        if "=" in arg:
            key, value, step = *arg.split("=", 1), 1
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            key, value, step = arg, args[i + 1], 2
        else:
            i += 1
            continue
        key = key.lstrip("-").rstrip("+")
        if key == "ckpt_path":
            _check_checkpoint_hparams(value, trusted)
        elif key in ("c", "config") or value.strip().lower().endswith((".yaml", ".yml", ".json")):
            parsed, source = _config_source(value)
            base = _parent(source) if source != "inline value" else None
            _walk(parsed, f"{source}" if key in ("c", "config") else f"{key} ({source})", trusted, base=base)
        else:
            parsed = _load_yaml(value)
            class_key = key.split(".")[-1] in ("class_path", "_class_path")
            if isinstance(parsed, str) and not class_key and (key.endswith(("callbacks", "plugins", "logger")) or key.endswith(("optimizer", "lr_scheduler"))):
                class_key = True  # `--trainer.callbacks+=pkg.Class`: a class path in shorthand
            _walk(parsed, f"--{key}", trusted, class_key=class_key)
        i += step


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
