"""Rough edges of ``dsf`` met by a new user (issue 15, item 7): a ``--trainer.max_steps`` smoke run of a
recipe with ``EarlyStopping``, LightningCLI's ``args`` warning, ``dsf list tasks``, loggers whose package is
missing, and LightningCLI's ``--optimizer`` / ``--lr_scheduler`` keys."""

import sys
import warnings
from pathlib import Path

import pytest
import torch

from dsf_lightning.cli import lightning_cli, main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_corpus")
    text = "the cat sat on the mat\nthe dog sat on the log\n" * 40
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text(text)
    return folder


def _lm_args(tiny_folder, recipe="ptb_char/delta_rnn.yaml"):
    """A shipped LM recipe (it has EarlyStopping on val_loss) shrunk to a tiny model on a tiny corpus:
    ~48 training windows per epoch."""
    return ["--config", str(ROOT / "recipes" / recipe), "--data.corpus", "text-folder", "--data.data_root",
            str(tiny_folder), "--data.corpus_options", "{}", "--model.hidden_sizes", "[8]", "--data.batch_size", "2",
            "--data.bptt", "5", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


# ---------------------------------------------------------------------------------- EarlyStopping + max_steps
def test_max_steps_smoke_run_of_an_early_stopping_recipe(tiny_folder, tmp_path, monkeypatch):
    """``--trainer.max_steps 20`` ends mid-epoch, before any validation: EarlyStopping must not raise
    "val_loss not available" at that training-epoch end."""
    monkeypatch.chdir(tmp_path)
    assert main(["fit", *_lm_args(tiny_folder), "--trainer.max_steps", "20"]) == 0
    assert (tmp_path / "runs" / "ptb_char" / "delta_rnn" / "checkpoints" / "last.ckpt").is_file()


def test_max_steps_smoke_run_of_an_early_stopping_task_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Tomita 1: 265 training strings, 9 batches per epoch
    small = ["--model.init_args.hidden_size", "8", "--model.init_args.cell_options", "{k: 3}",
             "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    assert main(["fit", "--config", str(ROOT / "recipes" / "tomita" / "sr_gru_g1.yaml"), *small,
                 "--trainer.max_steps", "3"]) == 0


def test_early_stopping_still_stops_after_validations(tiny_folder, tmp_path, monkeypatch):
    """Checked after every validation instead of at the training-epoch end: patience 0 with a stopping
    threshold no loss reaches ends the run after the first validation; an explicit
    ``check_on_train_epoch_end`` is kept."""
    from lightning.pytorch.callbacks import EarlyStopping

    monkeypatch.chdir(tmp_path)
    stop = ('[{class_path: lightning.pytorch.callbacks.EarlyStopping, init_args: {monitor: val_loss, '
            'divergence_threshold: -1.0}}]')
    cli = lightning_cli(["fit", *_lm_args(tiny_folder), "--trainer.callbacks", stop, "--trainer.max_epochs", "5",
                         "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "2"])
    early = [c for c in cli.trainer.callbacks if isinstance(c, EarlyStopping)]
    assert len(early) == 1 and early[0]._check_on_train_epoch_end is False
    assert cli.trainer.current_epoch == 1 and early[0].stopped_epoch == 0  # stopped after the first validation

    explicit = ('[{class_path: lightning.pytorch.callbacks.EarlyStopping, init_args: {monitor: val_loss, '
                'check_on_train_epoch_end: true}}]')
    cli = lightning_cli([*_lm_args(tiny_folder), "--trainer.callbacks", explicit], run=False)
    early = [c for c in cli.trainer.callbacks if isinstance(c, EarlyStopping)]
    assert early[0]._check_on_train_epoch_end is True


# ---------------------------------------------------------------------------------- LightningCLI's args warning
def test_dsf_prints_no_args_parameter_warning(tiny_folder, tmp_path, monkeypatch):
    """``dsf fit ...`` from a shell: sys.argv holds the command line and dsf hands it to LightningCLI as
    ``args``; LightningCLI's "args parameter is intended to run from within Python" warning is noise there."""
    monkeypatch.chdir(tmp_path)
    argv = ["validate", *_lm_args(tiny_folder), "--trainer.limit_val_batches", "2"]
    monkeypatch.setattr(sys, "argv", ["dsf", *argv])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main() == 0
        with pytest.raises(SystemExit):
            main(["fit", "--help"])
    assert not [w for w in seen if "args parameter" in str(w.message)], [str(w.message)[:120] for w in seen]
