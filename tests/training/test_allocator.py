"""``keep_freed_memory``: the glibc tuning `dsf fit` and the modules' training policy apply (benchmarks part 3 measures
what it is worth: the kernel's page faults on every step's large buffers), and its opt-out."""

import platform
import sys

import pytest

from dsf_lightning.training import allocator as lm


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_applied_on_glibc(monkeypatch):
    monkeypatch.delenv(lm.MALLOC_TUNING_ENV, raising=False)
    monkeypatch.setattr(lm, "_malloc_tuned", False)
    assert lm.malloc_tuned() is False
    assert lm.keep_freed_memory() is True
    assert lm.keep_freed_memory() is True and lm.malloc_tuned() is True  # idempotent


def test_opt_out(monkeypatch):
    monkeypatch.setenv(lm.MALLOC_TUNING_ENV, "0")
    monkeypatch.setattr(lm, "_malloc_tuned", False)
    assert lm.keep_freed_memory() is False


def test_training_from_python_tunes_the_allocator_through_the_modules_policy_unless_told_not_to(monkeypatch, toy_corpus):
    """Importing the library and building the module never call mallopt; fitting does, through the module's
    training policy (issue 36: a plain Trainer trains as `dsf fit` does), unless the policy turns it off
    (``TrainingPolicy(keep_freed_memory=False)``) or ``DSF_MALLOC_TUNING=0`` does."""
    from dsf_lightning.training.policy import TrainingPolicy

    from .conftest import quiet_trainer, toy_modules

    monkeypatch.delenv(lm.MALLOC_TUNING_ENV, raising=False)
    monkeypatch.setattr(lm, "_malloc_tuned", False)
    module, data = toy_modules(toy_corpus)
    assert lm._malloc_tuned is False  # building the module changed nothing
    module.training_policy = TrainingPolicy(keep_freed_memory=False)
    quiet_trainer(max_steps=2, limit_val_batches=1).fit(module, data)
    assert lm._malloc_tuned is False
    monkeypatch.setenv(lm.MALLOC_TUNING_ENV, "0")
    module, data = toy_modules(toy_corpus)
    quiet_trainer(max_steps=2, limit_val_batches=1).fit(module, data)
    assert lm._malloc_tuned is False
    monkeypatch.delenv(lm.MALLOC_TUNING_ENV)
    module, data = toy_modules(toy_corpus)
    quiet_trainer(max_steps=2, limit_val_batches=1).fit(module, data)
    assert lm._malloc_tuned is (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc")


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
@pytest.mark.parametrize("setting, tuned", [(None, True), ("0", False)])
def test_dsf_fit_tunes_the_allocator_unless_opted_out(monkeypatch, tmp_path, setting, tuned):
    from dsf_lightning.cli import main

    folder = tmp_path / "corpus"
    folder.mkdir()
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text("a b c d e f\n" * 30)
    if setting is None:
        monkeypatch.delenv(lm.MALLOC_TUNING_ENV, raising=False)
    else:
        monkeypatch.setenv(lm.MALLOC_TUNING_ENV, setting)
    monkeypatch.setattr(lm, "_malloc_tuned", False)
    monkeypatch.chdir(tmp_path)
    args = ["--data.corpus", "text-folder", "--data.data_root", str(folder), "--model.hidden_sizes", "[4]",
            "--data.batch_size", "2", "--data.bptt", "4", "--trainer.max_steps", "1", "--trainer.logger", "false",
            "--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false",
            "--trainer.enable_model_summary", "false", "--trainer.limit_val_batches", "1"]
    assert main(["validate", *args]) == 0
    assert lm._malloc_tuned is False  # only `fit` trains
    assert main(["fit", *args]) == 0
    assert lm._malloc_tuned is tuned
