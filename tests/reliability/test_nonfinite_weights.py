"""Non-finite weights never reach a checkpoint (issue 13, item 8): a non-finite learning rate or other
hyper-parameter is refused up front; NonFiniteGuard checks the weights after every optimizer step (before
any checkpoint of that step is written) and stops the run; the checkpoint writer refuses a checkpoint
with NaN / infinite tensors; the ``dsf`` command line turns the guard on by default."""

from __future__ import annotations

import math
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from dsf_lightning.model import ModelConfigError
from dsf_lightning.training import LanguageModelModule
from dsf_lightning.training.checkpoint_io import AtomicCheckpointIO, NonFiniteCheckpointError
from dsf_lightning.training.guards import NonFiniteError, NonFiniteGuard
from dsf_lightning.training.policy import TrainingPolicy
from tests.training.conftest import make_toy_corpus, quiet_trainer, toy_modules


@pytest.mark.parametrize(
    "option,value",
    [("lr", math.inf), ("lr", math.nan), ("lr", -1e-3), ("momentum", math.nan), ("weight_decay", math.inf),
     ("dropout_input", math.nan), ("dropout_hidden", 1.5), ("iterative_inference_step", math.inf),
     ("sobolev_weight", math.nan), ("param_group_lr", {"rho": math.inf})],
)
def test_a_non_finite_or_impossible_hyperparameter_is_refused_up_front(option, value):
    with pytest.raises(ModelConfigError, match=rf"^{option}.* got "):
        LanguageModelModule(vocab_size=13, hidden_sizes=[8], **{option: value})


class BlowUp(L.Callback):
    """Set the learning rate to ``lr`` before the step of batch ``at`` (at run time, past the up-front check:
    a scheduler or a callback could do the same); the loss and gradients of that step stay finite."""

    def __init__(self, at: int, lr: float = math.inf):
        self.at, self.lr = at, lr

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.global_step == self.at:
            for group in trainer.optimizers[0].param_groups:
                group["lr"] = self.lr


def finite(path: Path) -> bool:
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    return all(torch.isfinite(t).all() for t in ckpt["state_dict"].values() if t.is_floating_point())


def fit_until_blow_up(tmp_path, callbacks, plugins=(), policy=None):
    L.seed_everything(0, verbose=False)
    module, data = toy_modules(make_toy_corpus(), optimizer="sgd")
    if policy is not None:
        module.training_policy = policy
    save = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_last=True)
    trainer = quiet_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[*callbacks, save, BlowUp(at=3)],
                            plugins=list(plugins))
    trainer.fit(module, data)
    return trainer


def test_the_guard_stops_on_non_finite_weights_before_their_checkpoint_is_written(tmp_path):
    with pytest.raises(NonFiniteError, match=r"weights are non-finite after the optimizer step at global step 4 .*lr \[inf\]"):
        fit_until_blow_up(tmp_path, [NonFiniteGuard(action="skip")])  # a finite loss and gradients: nothing to skip
    last = tmp_path / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 3 and finite(last)


def test_the_checkpoint_writer_refuses_non_finite_weights(tmp_path):
    with pytest.raises(NonFiniteCheckpointError, match=r"not written: NaN or infinite values in state_dict\['model"):
        # the module's own guard off (its documented opt-out): the writer is the last line
        fit_until_blow_up(tmp_path, [], plugins=[AtomicCheckpointIO()], policy=TrainingPolicy(nonfinite_guard=False))
    last = tmp_path / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 3 and finite(last)
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    io = AtomicCheckpointIO()
    with pytest.raises(NonFiniteCheckpointError, match=r"optimizer_states"):
        io.save_checkpoint({"state_dict": {"w": torch.ones(2)}, "optimizer_states": [{"state": {0: {"m": torch.tensor([math.nan])}}}]},
                           tmp_path / "x.ckpt")
    assert not (tmp_path / "x.ckpt").exists()
    AtomicCheckpointIO(allow_nonfinite=True).save_checkpoint({"state_dict": {"w": torch.tensor([math.inf])}}, tmp_path / "x.ckpt")
    assert (tmp_path / "x.ckpt").exists()  # the documented opt-out (e.g. to keep a diverged run for a post-mortem)


@pytest.fixture
def cli_base(tmp_path, monkeypatch):
    from tests.reliability.conftest import write_text_folder

    monkeypatch.setenv("DSF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    corpus = write_text_folder(tmp_path / "corpus", lines=40)
    return ["--data.corpus", "text-folder", "--data.data_root", str(corpus), "--model.hidden_sizes", "[8]",
            "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"]


def test_the_cli_turns_the_guard_on_by_default(cli_base):
    from dsf_lightning.cli import lightning_cli

    guards = lambda cli: [c for c in cli.trainer.callbacks if isinstance(c, NonFiniteGuard)]  # noqa: E731
    (guard,) = guards(lightning_cli(cli_base, run=False))
    assert guard.action == "skip"
    assert guards(lightning_cli([*cli_base, "--nonfinite_guard", "false"], run=False)) == []
    (own,) = guards(lightning_cli([*cli_base, "--trainer.callbacks+=dsf_lightning.training.guards.NonFiniteGuard",
                                   "--trainer.callbacks.action", "stop"], run=False))
    assert own.action == "stop"  # a guard the recipe gives is the only one


def test_a_recipe_with_an_infinite_learning_rate_fails_clearly(cli_base, tmp_path, capsys):
    from dsf_lightning.cli import main

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model:\n  lr: .inf\ntrainer:\n  max_steps: 2\n")
    assert main(["fit", "--config", str(recipe), *cli_base, "--trainer.default_root_dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "lr must be a finite number >= 0, got inf" in err, err
    assert not list((tmp_path / "run").rglob("*.ckpt")) if (tmp_path / "run").exists() else True


class _Stub:
    """Just what ``NonFiniteGuard._check_weights`` reads of a trainer."""

    global_step, current_epoch, optimizers = 0, 0, []


@pytest.mark.parametrize("bad", [None, math.nan, math.inf, -math.inf])
def test_the_weight_check_tells_huge_finite_weights_from_non_finite_ones(bad):
    # two entries of 3e38 sum to infinity in float32: the guard's one-pass sum test must not call them
    # non-finite; a NaN or an infinity anywhere must still stop the run
    module = torch.nn.Linear(4, 3)
    with torch.no_grad():
        module.weight[0, :2] = 3e38
        if bad is not None:
            module.bias[1] = bad
    guard = NonFiniteGuard()
    guard._batch_idx = 0
    if bad is None:
        guard._check_weights(_Stub(), module)
    else:
        with pytest.raises(NonFiniteError, match=r"1 of 2 parameter tensors hold NaN or infinity \(first: bias\)"):
            guard._check_weights(_Stub(), module)
