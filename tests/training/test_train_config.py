"""One training config (issue 36): TrainConfig beside LMConfig, the module built from the two, the checkpoint's
format-2 record of both, and the one migration of a checkpoint written before it (tests/data/pre_refactor)."""

import dataclasses
import inspect
import types
from pathlib import Path

import pytest
import torch

from dsf_lightning.data.vocab import Vocabulary
from dsf_lightning.model import LMConfig
from dsf_lightning.training import LanguageModelModule
from dsf_lightning.training.config import (
    CONFIG_KEY,
    FORMAT,
    TrainConfig,
    TrainConfigError,
    checkpoint_configs,
    migrate_hparams,
)

from .conftest import quiet_trainer, toy_modules

OLD = Path(__file__).resolve().parents[1] / "data" / "pre_refactor" / "mid_epoch.ckpt"  # format 1: no dsf_config
# options other than the defaults, for every kind of field (numbers, dicts, lists, None-or-int, a string budget)
OPTIONS = dict(optimizer="sgd", lr=0.5, momentum=0.9, weight_decay=1e-5, param_group_lr={"decoder": 0.25},
               lr_decay_after_epoch=3, lr_decay_factor=0.25, sobolev_weight=0.01, sobolev_layers=[0], l1_weight=1e-6,
               seed=7, state_reset_prob=0.05, carry_state_after_step=3, fused_loss=False, sampled_loss="nce",
               sampled_loss_samples=5, sampled_loss_noise="uniform", nce_log_z="learned")


def _old_hparams() -> dict:
    return dict(torch.load(OLD, map_location="cpu", weights_only=True)["hyper_parameters"])


def test_an_old_format_checkpoint_migrates_to_both_configs_with_what_it_trained_with():
    old = _old_hparams()
    assert "fused_loss" not in old and "state_reset_prob" not in old  # written before those options existed
    migrated = migrate_hparams(old)
    fields = {f.name for f in dataclasses.fields(LMConfig)} | {f.name for f in dataclasses.fields(TrainConfig)}
    assert fields <= set(migrated)
    assert {k: migrated[k] for k in old} == old  # what it recorded stays
    model, train = checkpoint_configs(torch.load(OLD, map_location="cpu", weights_only=True))
    assert model == LMConfig(vocab_size=13, cell="scrn", hidden_sizes=[16], cell_options={"context_size": 4},
                             embedding_size=8, dropout_input=0.3, dropout_output=0.3)
    # the run computed its loss the plain way (fused_loss came later, on by default): the migration says so
    assert train == TrainConfig(lr=0.003, iterative_inference_step=0.1, fused_loss=False)
    assert TrainConfig.from_dict(train.to_dict()) == train


def test_a_module_saved_now_round_trips_both_configs_exactly(tmp_path, toy_corpus):
    module, data = toy_modules(toy_corpus, **OPTIONS)
    trainer = quiet_trainer(max_steps=2, limit_val_batches=0)
    trainer.fit(module, data)
    path = tmp_path / "now.ckpt"
    trainer.save_checkpoint(path)
    ckpt = torch.load(path, map_location="cpu", weights_only=True)  # plain data: safe loading reads it
    assert ckpt[CONFIG_KEY]["format"] == FORMAT == 2
    assert checkpoint_configs(ckpt) == (module.model_config, module.train_config)
    assert module.train_config == TrainConfig(**OPTIONS)
    loaded = LanguageModelModule.load_from_checkpoint(path)
    assert (loaded.model_config, loaded.train_config) == (module.model_config, module.train_config)
    rebuilt = LanguageModelModule.from_configs(*checkpoint_configs(ckpt))
    assert (rebuilt.model_config, rebuilt.train_config) == (module.model_config, module.train_config)
    # the flat hyper_parameters (what the CLI resumes from) hold the same configs
    assert TrainConfig.from_hparams(dict(rebuilt.hparams)) == TrainConfig.from_hparams(ckpt["hyper_parameters"])
    assert LMConfig.from_hparams(dict(rebuilt.hparams)) == LMConfig.from_hparams(ckpt["hyper_parameters"])


def test_the_flat_signature_is_the_two_configs():
    """The module's keyword arguments (the recipes' and `--model.*` names) are the fields of the two configs,
    with the training options' defaults; a field added to one and not the other is caught here."""
    params = inspect.signature(LanguageModelModule.__init__).parameters
    names = set(params) - {"self"}
    model_fields = {f.name for f in dataclasses.fields(LMConfig)}
    train_fields = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    assert names == model_fields | set(train_fields) and not model_fields & set(train_fields)
    assert {k: params[k].default for k in train_fields} == train_fields
    assert LanguageModelModule.from_configs(LMConfig(vocab_size=11, hidden_sizes=[4])).train_config == TrainConfig()


def test_the_old_checkpoint_exports_with_its_migrated_training_settings(tmp_path):
    from dsf_lightning.model.pretrained import load_pretrained, save_pretrained
    from dsf_lightning.training.read_checkpoint import pretrained_from_checkpoint

    corpus = types.SimpleNamespace(name="toy", vocab=Vocabulary([str(i) for i in range(12)] + ["<eos>"]),
                                   tokenizer_name="word")
    pretrained = pretrained_from_checkpoint(OLD, corpus)
    assert pretrained.info["training"] == TrainConfig(lr=0.003, iterative_inference_step=0.1, fused_loss=False).to_dict()
    save_pretrained(pretrained, tmp_path / "folder")
    again = load_pretrained(tmp_path / "folder")
    tokens = torch.tensor([[1, 2, 3, 4, 5]])
    torch.testing.assert_close(again.model(tokens)[0], pretrained.model(tokens)[0])


def test_a_newer_format_or_a_bad_option_is_one_clear_error(tmp_path):
    from dsf_lightning.hub.folder import CheckpointError
    from dsf_lightning.training.read_checkpoint import pretrained_from_checkpoint

    ckpt = torch.load(OLD, map_location="cpu", weights_only=True)
    ckpt[CONFIG_KEY] = {"format": FORMAT + 1, "model": {}, "train": {}}
    with pytest.raises(ValueError, match=r"dsf_config format 3: this dsf-lightning reads format 2 .* upgrade it"):
        checkpoint_configs(ckpt)
    path = tmp_path / "newer.ckpt"
    torch.save(ckpt, path)
    with pytest.raises(ValueError, match=r"dsf_config format 3: .* upgrade it"):
        LanguageModelModule.load_from_checkpoint(path, weights_only=True)
    with pytest.raises(CheckpointError, match=r"newer.ckpt: dsf_config format 3: .* upgrade it"):
        pretrained_from_checkpoint(path, "ptb")
    with pytest.raises(ValueError, match=r"unknown training config field\(s\) \['lr_rate'\]"):
        TrainConfig.from_dict({"lr_rate": 0.1})
    with pytest.raises(TrainConfigError, match="lr must be a finite number >= 0, got nan"):
        TrainConfig(lr=float("nan"))
    with pytest.raises(ValueError, match="lr_decay_after_epoch and lr_halving_patience are two schedules"):
        TrainConfig(lr_decay_after_epoch=1, lr_halving_patience=1)
    # checked on construction now, not when the first optimizer step or window needs them
    for options, message in ((dict(optimizer="rmsprop"), r"optimizer must be one of \('adam', 'sgd'\), got 'rmsprop'"),
                             (dict(seed=1.5), "seed must be an integer, got 1.5"),
                             (dict(lr_decay_factor="x"), r"lr_decay_factor must be in \(0, 1\], got 'x'"),
                             (dict(lr_halving_patience=-1), r"lr_halving_patience must be an integer >= 0 \(None: off\)"),
                             (dict(lr_halving_threshold=1.0), r"lr_halving_threshold must be a relative improvement in \[0, 1\)"),
                             (dict(lr_halving_threshold=-0.1), r"lr_halving_threshold must be a relative improvement"),
                             (dict(sampled_loss_samples=0), "sampled_loss_samples must be an integer >= 1, got 0"),
                             (dict(param_group_lr=[1e-6]), "param_group_lr must map a parameter-name fragment")):
        with pytest.raises(ValueError, match=message):
            LanguageModelModule(vocab_size=11, hidden_sizes=[4], **options)



@pytest.mark.parametrize("threshold, halved", [(None, False), (1e-4, False), (0.01, True)])
def test_the_plateau_threshold_decides_what_counts_as_an_improvement(threshold, halved):
    """An epoch whose val_loss falls by 0.5 %: an improvement under torch's default threshold (1e-4), no
    improvement under 0.01, so patience 0 divides the rate (the SGD Delta-RNN of issue 39 gained 0.2-0.6 % an
    epoch for ten epochs and its rate was never divided)."""
    options = {} if threshold is None else dict(lr_halving_threshold=threshold)
    module = LanguageModelModule(vocab_size=11, hidden_sizes=[4], optimizer="sgd", lr=1.0, lr_halving_patience=0,
                                 lr_decay_factor=0.25, **options)
    config = module.configure_optimizers()
    scheduler, optimizer = config["lr_scheduler"]["scheduler"], config["optimizer"]
    scheduler.step(4.7)
    scheduler.step(4.7 * 0.995)
    assert optimizer.param_groups[0]["lr"] == (0.25 if halved else 1.0)
    assert module.hparams.lr_halving_threshold == (1e-4 if threshold is None else threshold)
