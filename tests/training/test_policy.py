"""The training policy comes with the module (issue 36, :mod:`dsf_lightning.training.policy`): a plain
``lightning.Trainer`` gets the non-finite guard, the atomic checkpoint writer and the rest from
``configure_callbacks``; what the user gives the trainer wins, and each part can be turned off."""

from __future__ import annotations

import dataclasses

import pytest
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from dsf_lightning.tasks import SequenceClassifier
from dsf_lightning.training.checkpoint_io import AtomicCheckpointIO
from dsf_lightning.training.guards import LastCheckpointAtEveryValidation, NonFiniteGuard, ValidateAtMaxSteps
from dsf_lightning.training.policy import AtomicCheckpointIOPolicy, TrainingPolicy

from .conftest import quiet_trainer, toy_modules

POLICY_TYPES = (AtomicCheckpointIOPolicy, NonFiniteGuard, ValidateAtMaxSteps)


def of(trainer, kind):
    return [c for c in trainer.callbacks if isinstance(c, kind)]


def test_a_plain_trainer_gets_the_policy_from_the_module(toy_corpus):
    module, data = toy_modules(toy_corpus)
    trainer = quiet_trainer(max_steps=2, limit_val_batches=1)
    assert type(trainer.strategy).__name__ == "SingleDeviceStrategy" and not of(trainer, NonFiniteGuard)
    trainer.fit(module, data)
    assert [len(of(trainer, kind)) for kind in POLICY_TYPES] == [1, 1, 1]
    assert type(trainer.strategy.checkpoint_io) is AtomicCheckpointIO
    assert "val_loss" in trainer.callback_metrics  # ValidateAtMaxSteps: a max_steps run still validates
    trainer.validate(module, data)  # a second run on the same trainer adds nothing twice
    assert [len(of(trainer, kind)) for kind in POLICY_TYPES] == [1, 1, 1]


def test_what_the_user_gives_the_trainer_wins(toy_corpus, tmp_path):
    module, data = toy_modules(toy_corpus)
    own = NonFiniteGuard(action="stop")
    trainer = quiet_trainer(max_steps=2, limit_val_batches=1, callbacks=[own], plugins=[TorchCheckpointIO()])
    trainer.fit(module, data)
    assert of(trainer, NonFiniteGuard) == [own]  # Lightning's own merge would have replaced it with the module's
    assert type(trainer.strategy.checkpoint_io) is TorchCheckpointIO  # a CheckpointIO the user gave is kept


def test_each_part_of_the_policy_turns_off(toy_corpus, tmp_path):
    module, data = toy_modules(toy_corpus)
    module.training_policy = TrainingPolicy.off()
    trainer = quiet_trainer(max_steps=2, limit_val_batches=1, enable_checkpointing=True,
                            callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)])
    trainer.fit(module, data)
    assert not any(of(trainer, kind) for kind in (*POLICY_TYPES, LastCheckpointAtEveryValidation))
    assert type(trainer.strategy.checkpoint_io) is TorchCheckpointIO
    assert "val_loss" not in trainer.callback_metrics  # no validation at max_steps without ValidateAtMaxSteps

    module, data = toy_modules(toy_corpus)
    module.training_policy = TrainingPolicy(nonfinite_guard=False)  # one part off, the others on
    trainer = quiet_trainer(max_steps=2, limit_val_batches=1)
    trainer.fit(module, data)
    assert not of(trainer, NonFiniteGuard) and of(trainer, ValidateAtMaxSteps)
    assert type(trainer.strategy.checkpoint_io) is AtomicCheckpointIO
    assert {f.name for f in dataclasses.fields(TrainingPolicy)} == {
        "nonfinite_guard", "atomic_checkpoints", "validate_at_max_steps", "last_checkpoint_at_every_validation",
        "early_stopping_after_validation", "keep_freed_memory"}


def test_last_checkpoint_at_every_validation_runs_after_a_save_last_checkpoint(toy_corpus, tmp_path):
    module, data = toy_modules(toy_corpus)
    trainer = quiet_trainer(max_steps=2, limit_val_batches=1, enable_checkpointing=True,
                            callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True, monitor="val_loss")])
    trainer.fit(module, data)
    kinds = [type(c) for c in trainer.callbacks]
    assert kinds.index(LastCheckpointAtEveryValidation) > kinds.index(ModelCheckpoint)
    assert (tmp_path / "last.ckpt").is_file()
    # without a save_last ModelCheckpoint there is nothing for it to write
    module, data = toy_modules(toy_corpus)
    trainer = quiet_trainer(max_steps=2, limit_val_batches=1, enable_checkpointing=True,
                            callbacks=[ModelCheckpoint(dirpath=tmp_path / "other")])
    trainer.fit(module, data)
    assert not of(trainer, LastCheckpointAtEveryValidation)


@pytest.mark.parametrize("given, checks_after_validation", [(None, True), (True, False)])
def test_early_stopping_left_at_its_default_checks_after_validation(toy_corpus, given, checks_after_validation):
    module, data = toy_modules(toy_corpus)
    stop = EarlyStopping(monitor="val_loss", check_on_train_epoch_end=given)
    trainer = quiet_trainer(max_steps=3, limit_val_batches=1, callbacks=[stop])
    trainer.fit(module, data)  # Lightning's default would raise "val_loss not available" at a mid-epoch end
    assert stop._check_on_train_epoch_end is (not checks_after_validation)


def test_the_task_modules_carry_the_same_policy():
    module = SequenceClassifier(num_classes=2, vocab_size=5, cell="gru", hidden_size=4, end_token=False)
    assert [type(c) for c in module.configure_callbacks()] == [AtomicCheckpointIOPolicy, NonFiniteGuard]
    module.training_policy = TrainingPolicy.off()
    assert module.configure_callbacks() == []
    module.training_policy = None  # "no policy" said the other way
    assert module.configure_callbacks() == []


@pytest.mark.parametrize("content", [b"hello\n", b"\x80\x04garbage", b""])
def test_a_plain_trainer_resumed_from_a_file_that_is_no_checkpoint_says_so_in_one_line(toy_corpus, tmp_path, content):
    from dsf_lightning.training.checkpoint_io import CheckpointLoadError

    bogus = tmp_path / "last.ckpt"
    bogus.write_bytes(content)
    module, data = toy_modules(toy_corpus)
    with pytest.raises(CheckpointLoadError, match=r"last.ckpt: not a readable checkpoint .*is it a .ckpt file a run wrote|"
                                                  r"last.ckpt: not a readable checkpoint .*is the file complete"):
        quiet_trainer(max_steps=2).fit(module, data, ckpt_path=bogus)
