"""The training policy a plain ``lightning.Trainer`` gets from dsf-lightning's modules (issue 36).

``LanguageModelModule`` and the sequence-task modules return :func:`module_callbacks` from their
``configure_callbacks``, which Lightning merges into ``trainer.callbacks`` at every ``fit`` / ``validate`` /
``test`` / ``predict``. So ``Trainer(...).fit(LanguageModelModule(...), datamodule)`` trains as ``dsf fit`` does:

* :class:`~.guards.NonFiniteGuard`: NaN / inf steps skipped, non-finite weights stop the run;
* atomic, fsynced, weights-only checkpoint files (:class:`~.checkpoint_io.AtomicCheckpointIO`), installed by
  :class:`AtomicCheckpointIOPolicy` when the trainer still has Lightning's default ``TorchCheckpointIO``;
* fit only: :class:`~.guards.ValidateAtMaxSteps` (a ``max_steps`` run still validates and writes its best
  checkpoint) and, beside a ``ModelCheckpoint(save_last=True)``, :class:`~.guards.LastCheckpointAtEveryValidation`
  (``last.ckpt`` after every validation, as an exact resume needs);
* every ``EarlyStopping`` whose ``check_on_train_epoch_end`` was not given checks after each validation;
* fit only: the glibc allocator keeps freed memory (:func:`~.allocator.keep_freed_memory`; ``DSF_MALLOC_TUNING=0``
  leaves it alone).

A callback of the same type the trainer already has (the user's own ``NonFiniteGuard(action="stop")``) wins:
the module adds none of that type (Lightning's own merge would do the opposite: the module's replaces the
trainer's). Opt out per part with ``module.training_policy = TrainingPolicy(nonfinite_guard=False, ...)``
(an attribute, not a hyper-parameter: not saved in checkpoints), or all at once with ``TrainingPolicy.off()`` (or
``None``).
The exact resume itself (carried state, position, RNG per window) and the resume-mismatch checks are the
module's own ``on_save_checkpoint`` / ``on_load_checkpoint`` and the DataModule's ``state_dict``: they need no
opt-in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import lightning as L


@dataclass(frozen=True)
class TrainingPolicy:
    """Which parts of the training policy a module adds to its trainer (each True: on)."""

    #: add :class:`~.guards.NonFiniteGuard` (skip NaN / inf steps, stop on non-finite weights)
    nonfinite_guard: bool = True
    #: write checkpoints through :class:`~.checkpoint_io.AtomicCheckpointIO` when the trainer has Lightning's default IO
    atomic_checkpoints: bool = True
    #: fit: validate once more when ``max_steps`` ends a run mid-epoch (:class:`~.guards.ValidateAtMaxSteps`)
    validate_at_max_steps: bool = True
    #: fit: ``last.ckpt`` after every validation beside a ``ModelCheckpoint(save_last=True)``
    last_checkpoint_at_every_validation: bool = True
    #: an ``EarlyStopping`` left at its default checks after each validation, not at the training epoch's end
    early_stopping_after_validation: bool = True
    #: fit: glibc keeps freed memory for reuse (:func:`~.allocator.keep_freed_memory`; process-wide)
    keep_freed_memory: bool = True

    @classmethod
    def off(cls) -> TrainingPolicy:
        """A policy that adds nothing: the trainer runs exactly as configured."""
        return cls(**{field.name: False for field in dataclasses.fields(cls)})


class AtomicCheckpointIOPolicy(L.Callback):
    """Install :class:`~.checkpoint_io.AtomicCheckpointIO` as the strategy's checkpoint IO at ``setup`` when the
    trainer was given none (Lightning would make its default ``TorchCheckpointIO``; a ``CheckpointIO`` plugin the
    user passed, ``TorchCheckpointIO`` included, is kept), and for ``fit`` tune the allocator when the policy says so.

    Why a callback's ``setup``: it is the first hook that runs with the strategy built and before Lightning
    restores a checkpoint (``Trainer._run``: ``setup`` hooks, then ``_restore_modules_and_callbacks``), and
    ``Strategy.checkpoint_io`` has a public setter for exactly this; a module cannot pass a Trainer plugin, and
    the module's own ``setup`` is the user's to override. "Given none" is the strategy's ``_checkpoint_io`` still
    unset: Lightning's accelerator connector sets it only from a plugin, and the public getter would create the
    default in its place.
    """

    def __init__(self, atomic_checkpoints: bool = True, keep_freed_memory: bool = True) -> None:
        self.atomic_checkpoints = atomic_checkpoints
        self.keep_freed_memory = keep_freed_memory

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        strategy = trainer.strategy
        if self.atomic_checkpoints and getattr(strategy, "_checkpoint_io", False) is None:
            from .checkpoint_io import AtomicCheckpointIO

            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        if self.keep_freed_memory and stage == "fit":
            from .allocator import keep_freed_memory

            keep_freed_memory()


def module_callbacks(module: L.LightningModule) -> list[L.Callback]:
    """What ``module.configure_callbacks()`` returns: :func:`policy_callbacks` of ``module.training_policy``
    beside the callbacks its trainer already has."""
    trainer = module._trainer
    policy = getattr(module, "training_policy", TrainingPolicy())
    if policy is None:  # "no policy" said the other way: as TrainingPolicy.off()
        return []
    have = list(trainer.callbacks) if trainer is not None else []
    return policy_callbacks(policy, have, fitting=trainer is not None and trainer.state.fn == "fit")


def policy_callbacks(policy: TrainingPolicy, have: list[Any], fitting: bool) -> list[L.Callback]:
    """The callbacks of ``policy`` (see the module docstring) that ``have``, a trainer's callbacks, lacks: none of
    a type it already has. Sets the ``EarlyStopping`` in ``have`` to check after validation (before their
    ``setup`` reads the flag). ``fitting``: for ``fit`` (else the fit-only parts are left out)."""
    from .guards import LastCheckpointAtEveryValidation, NonFiniteGuard, ValidateAtMaxSteps

    def missing(kind: type) -> bool:
        return not any(isinstance(c, kind) for c in have)

    if policy.early_stopping_after_validation:
        early_stopping_after_validation(have)
    callbacks: list[L.Callback] = []
    if (policy.atomic_checkpoints or policy.keep_freed_memory) and missing(AtomicCheckpointIOPolicy):
        callbacks.append(AtomicCheckpointIOPolicy(policy.atomic_checkpoints, policy.keep_freed_memory))
    if policy.nonfinite_guard and missing(NonFiniteGuard):
        callbacks.append(NonFiniteGuard())
    if fitting and policy.validate_at_max_steps and missing(ValidateAtMaxSteps):
        callbacks.append(ValidateAtMaxSteps())  # a max_steps run still writes best.ckpt
    if (fitting and policy.last_checkpoint_at_every_validation and missing(LastCheckpointAtEveryValidation)
            and any(getattr(c, "save_last", None) is True for c in have)):
        # a Checkpoint: it must run after the ModelCheckpoint, and Lightning orders checkpoint callbacks as listed
        # (the module's after the trainer's)
        callbacks.append(LastCheckpointAtEveryValidation())
    return callbacks


def early_stopping_after_validation(callbacks) -> None:
    """Make every ``EarlyStopping`` whose ``check_on_train_epoch_end`` was not given check after each
    validation. Lightning's default checks at the training-epoch end, which raises "val_loss not available"
    when a run ends mid-epoch before any validation (``--trainer.max_steps 20``, the usual smoke test); after
    each validation is the same check whenever validation runs at every epoch end (the recipes' setting)."""
    from lightning.pytorch.callbacks import EarlyStopping

    for callback in callbacks:
        if isinstance(callback, EarlyStopping) and getattr(callback, "_check_on_train_epoch_end", False) is None:
            callback._check_on_train_epoch_end = False
