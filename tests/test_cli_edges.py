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


# ---------------------------------------------------------------------------------- --optimizer / --lr_scheduler
def _plateau(cli):
    configs = cli.trainer.lr_scheduler_configs
    assert len(configs) == 1, "the --lr_scheduler was not used"
    return configs[0].scheduler


@pytest.mark.parametrize("optimizer", [[], ["--optimizer", "SGD", "--optimizer.lr", "0.5"]], ids=["module-optimizer", "cli-optimizer"])
def test_lightning_cli_lr_scheduler_key_trains_with_the_plateau_schedule(tiny_folder, tmp_path, monkeypatch, optimizer):
    """The DSF paper's "halve when validation does not improve" as torch's own ReduceLROnPlateau through
    LightningCLI's keys: stepped with val_loss after every validation, with the module's optimizer (and its
    model.lr) or with --optimizer."""
    monkeypatch.chdir(tmp_path)
    cli = lightning_cli(["fit", *_lm_args(tiny_folder), "--model.lr_halving_patience", "null", *optimizer,
                         "--lr_scheduler", "ReduceLROnPlateau", "--lr_scheduler.monitor", "val_loss", "--lr_scheduler.patience", "0",
                         "--lr_scheduler.factor", "0.5", "--trainer.max_epochs", "3",
                         "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "2"])
    scheduler = _plateau(cli)
    assert isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau) and scheduler.factor == 0.5
    assert scheduler.best == pytest.approx(float(cli.trainer.callback_metrics["val_loss"]), rel=0.2)  # it was stepped
    optimizer_used = cli.trainer.optimizers[0]
    if optimizer:
        assert isinstance(optimizer_used, torch.optim.SGD) and optimizer_used.defaults["lr"] == 0.5
    else:
        assert isinstance(optimizer_used, torch.optim.Adam) and optimizer_used.defaults["lr"] == 0.001  # the recipe's


def test_lightning_cli_optimizer_keeps_the_modules_parameter_groups(tiny_folder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = lightning_cli(["fit", *_lm_args(tiny_folder), "--model.param_group_lr", "{decoder: 0.01}",
                         "--optimizer", "SGD", "--optimizer.lr", "0.5", "--trainer.max_steps", "1",
                         "--trainer.limit_val_batches", "1"])
    groups = cli.trainer.optimizers[0].param_groups
    assert [g["lr"] for g in groups][:2] == [pytest.approx(0.5 * 1), 0.01]  # the rest at --optimizer.lr
    assert sum(p.numel() for g in groups for p in g["params"]) == sum(p.numel() for p in cli.model.parameters())


def test_two_schedules_at_once_are_a_clear_error(tiny_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the recipe sets model.lr_halving_patience: 0
    assert main(["fit", *_lm_args(tiny_folder), "--lr_scheduler", "StepLR", "--lr_scheduler.step_size", "1",
                 "--trainer.max_steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "lr_halving_patience" in err and "--lr_scheduler" in err


# ---------------------------------------------------------------------------------- loggers and their extras
@pytest.mark.parametrize("logger, package, extra", [("TensorBoardLogger", "tensorboard", "tensorboard"),
                                                    ("WandbLogger", "wandb", "wandb")])
def test_a_logger_whose_package_is_missing_names_the_extra(tiny_folder, tmp_path, monkeypatch, capsys, logger, package, extra):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.split(".")[0] in (package, "tensorboardX") else real(name, *a))
    monkeypatch.chdir(tmp_path)
    assert main(["fit", *_lm_args(tiny_folder), "--trainer.logger", logger, "--trainer.max_steps", "1"]) == 2
    err = capsys.readouterr().err
    assert f"dsf-lightning[{extra}]" in err and logger in err


def test_the_optional_dependencies_declare_the_logger_extras():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("tensorboard") for r in extras["tensorboard"])
    assert any(r.startswith("wandb") for r in extras["wandb"])


def test_the_loggers_are_on_the_recipe_allowlist():
    from dsf_lightning.training.recipe_guard import ALLOWED_CLASSES

    for name in ("CSVLogger", "TensorBoardLogger", "WandbLogger"):
        assert f"lightning.pytorch.loggers.{name}" in ALLOWED_CLASSES


# ---------------------------------------------------------------------------------- dsf list tasks
def test_list_tasks_has_a_row_per_task_datamodule_with_its_recipes(capsys):
    import yaml

    import dsf_lightning.tasks as tasks
    from dsf_lightning.tasks.data import SequenceDataModule

    assert main(["list", "tasks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["task", "DataModule"]
    rows = {line.split()[1]: (line, nxt) for line, nxt in zip(lines[1:], lines[2:]) if not line.startswith(" ")}
    modules = {n for n in tasks.__all__ if isinstance(getattr(tasks, n), type)
               and issubclass(getattr(tasks, n), SequenceDataModule) and getattr(tasks, n) is not SequenceDataModule}
    assert set(rows) == modules  # every task DataModule, nothing else
    for name, (row, recipes_line) in rows.items():
        expected = sorted(str(p.relative_to(ROOT / "recipes")) for p in (ROOT / "recipes").rglob("*.yaml")
                          if str(((yaml.safe_load(p.read_text()) or {}).get("data") or {}).get("class_path", "")).endswith(f".{name}"))
        assert expected and recipes_line.split("recipes: ")[1].split(", ") == expected, name
        assert "sr-RNN" in row  # where the paper has it
    assert rows["CopyingMemoryDataModule"][0].split()[2:4] == ["10", "per"]
    assert rows["PixelMNISTDataModule"][0].split()[2] == "10" and rows["TomitaDataModule"][0].split()[2] == "2"
    assert "100,000 / 0 / 10,000" in rows["CopyingMemoryDataModule"][0]  # the DataModule's defaults
