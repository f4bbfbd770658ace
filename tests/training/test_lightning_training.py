"""The LM module under the real Lightning Trainer: learning, DDP equivalence, exact resume, AMP."""

import json
import math

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins import MixedPrecision

from .conftest import quiet_trainer, toy_modules


class RecordLosses(L.Callback):
    """Write every rank's per-step training loss, and rank 0's final weights, into a folder."""

    def __init__(self, folder):
        self.folder, self.losses = folder, []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))

    def on_train_end(self, trainer, module):
        (self.folder / f"losses_rank{trainer.global_rank}.json").write_text(json.dumps(self.losses))
        if trainer.global_rank == 0:
            torch.save({k: v.detach().clone() for k, v in module.model.state_dict().items()}, self.folder / "weights.pt")
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
            (self.folder / "metrics.json").write_text(json.dumps(metrics))


def run(folder, corpus, trainer_kwargs=None, callbacks=(), ckpt_path=None, **model_kwargs):
    folder.mkdir(parents=True, exist_ok=True)
    L.seed_everything(0, verbose=False)
    module, data = toy_modules(corpus, **model_kwargs)
    trainer = quiet_trainer(**{"max_epochs": 2, **(trainer_kwargs or {})}, callbacks=[RecordLosses(folder), *callbacks])
    trainer.fit(module, data, ckpt_path=ckpt_path)
    return module, trainer


def read(folder):
    losses = [json.loads(p.read_text()) for p in sorted(folder.glob("losses_rank*.json"))]
    return losses, torch.load(folder / "weights.pt"), json.loads((folder / "metrics.json").read_text())


def assert_two_ranks_equal_one(one_folder, two_folder, min_steps):
    """The per-step losses of a 2-process run average to the 1-process run's (each rank's loss is the mean over its
    half of the batch) and both end with the same weights; returns both runs' metrics."""
    (one,), w1, m1 = read(one_folder)
    (rank0, rank1), w2, m2 = read(two_folder)
    assert len(one) == len(rank0) == len(rank1) > min_steps
    torch.testing.assert_close(torch.tensor(one), (torch.tensor(rank0) + torch.tensor(rank1)) / 2, rtol=1e-5, atol=1e-6)
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], rtol=1e-4, atol=1e-5, msg=name)
    return m1, m2


def test_training_lowers_validation_perplexity(tmp_path, toy_corpus):
    module, trainer = run(tmp_path, toy_corpus, trainer_kwargs={"max_epochs": 3})
    assert trainer.callback_metrics["val_ppl"] < 6.0  # 13 symbols: uniform is 13, the stream is ~80% predictable
    assert trainer.callback_metrics["val_tokens"] == 2 * (400 // 2 - 1)


def test_ddp_two_processes_equal_one_process_with_the_same_streams(tmp_path, toy_corpus):
    run(tmp_path / "one", toy_corpus, trainer_kwargs={"max_epochs": 1})
    run(tmp_path / "two", toy_corpus, trainer_kwargs={"max_epochs": 1, "devices": 2, "strategy": "ddp_fork"})
    # each rank's loss is the mean over its half of the streams; together they are the global mean
    m1, m2 = assert_two_ranks_equal_one(tmp_path / "one", tmp_path / "two", min_steps=10)
    assert m1["val_tokens"] == m2["val_tokens"]  # exact sums over ranks, not a mean of means
    assert math.isclose(m1["val_loss"], m2["val_loss"], rel_tol=1e-5)


class CrashAt(L.Callback):
    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            raise KeyboardInterrupt  # Lightning's graceful-shutdown path would also run; a hard stop is what we test
    # (SIGKILL at random points is covered by the reliability tests)


@pytest.mark.parametrize("crash_step", [5, 13])  # mid first epoch; mid second epoch
def test_resume_mid_epoch_ends_with_the_same_weights(tmp_path, toy_corpus, crash_step):
    options = dict(dropout_input=0.3, dropout_output=0.3, iterative_inference_step=0.1)
    run(tmp_path / "straight", toy_corpus, **options)
    _, straight, straight_metrics = read(tmp_path / "straight")

    ckpts = tmp_path / "ckpts"
    save = dict(dirpath=ckpts, every_n_train_steps=2, save_top_k=-1, save_last=True)
    with pytest.raises(BaseException):
        run(tmp_path / "crashed", toy_corpus, callbacks=[ModelCheckpoint(**save), CrashAt(crash_step)],
            trainer_kwargs={"enable_checkpointing": True}, **options)
    last = ckpts / "last.ckpt"
    assert last.exists()
    step_in_ckpt = torch.load(last, weights_only=False)["global_step"]
    assert 0 < step_in_ckpt < crash_step + 1
    run(tmp_path / "resumed", toy_corpus, callbacks=[ModelCheckpoint(**save)], ckpt_path=str(last),
        trainer_kwargs={"enable_checkpointing": True}, **options)
    _, resumed, resumed_metrics = read(tmp_path / "resumed")
    for name in straight:
        torch.testing.assert_close(resumed[name], straight[name], rtol=0, atol=0, msg=name)
    assert resumed_metrics["val_loss"] == straight_metrics["val_loss"]


@pytest.mark.parametrize(
    "precision",
    [{"precision": "bf16-mixed"}, {"plugins": [MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))]}],
    ids=["bf16-mixed", "16-mixed-with-scaler"],
)
def test_mixed_precision_trains_with_finite_metrics_and_fp32_state(tmp_path, toy_corpus, precision):
    module, trainer = run(tmp_path, toy_corpus, trainer_kwargs={"max_epochs": 1, **precision}, iterative_inference_step=0.05)
    metrics = trainer.callback_metrics
    for key in ("train_loss", "val_loss", "val_ppl"):
        assert torch.isfinite(metrics[key]), key
    assert metrics["val_ppl"] < 12.0
    carried = module._carried["train"]
    assert all(s.dtype == torch.float32 for layer in carried for s in layer)


@pytest.mark.parametrize(
    "options",
    [
        {"sobolev_weight": 0.01, "cell": "scrn", "cell_options": {"context_size": 4}},
        {"sobolev_weight": 0.01},
        {"sampled_loss": "nce", "sampled_loss_samples": 8, "nce_log_z": "learned", "lr": 1e-2},
        {"sampled_loss": "sampled_softmax", "sampled_loss_samples": 8, "sampled_loss_noise": "log-uniform"},
    ],
    ids=["sobolev-scrn-closed-form", "sobolev-delta-autograd", "nce-unigram", "sampled-softmax"],
)
def test_training_objectives_learn_the_toy_stream(tmp_path, toy_corpus, options):
    module, trainer = run(tmp_path, toy_corpus, trainer_kwargs={"max_epochs": 3}, **options)
    assert trainer.callback_metrics["val_ppl"] < 8.0  # uniform guessing is 13
    if "sobolev_weight" in options:
        assert float(trainer.callback_metrics["train_sobolev"]) > 0


def test_param_group_learning_rates(toy_corpus):
    module, _ = toy_modules(toy_corpus, cell="irlm", param_group_lr={"rho": 1e-6})
    optimizer = module.configure_optimizers()
    rates = {p.data_ptr(): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    rho = module.model.layers[0].rho
    assert rates[rho.data_ptr()] == 1e-6
    assert sorted(set(rates.values())) == [1e-6, 3e-3]
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(module.parameters()))
    bad, _ = toy_modules(toy_corpus, param_group_lr={"log_r": 1e-5})
    with pytest.raises(ValueError, match="'log_r' matches no parameter"):
        bad.configure_optimizers()


def test_double_precision_trains_with_a_float64_carried_state(tmp_path, toy_corpus):
    module, trainer = run(tmp_path, toy_corpus, trainer_kwargs={"max_epochs": 1, "precision": "64-true"})
    assert torch.isfinite(trainer.callback_metrics["val_ppl"])
    assert all(p.dtype == torch.float64 for p in module.parameters())
    assert all(s.dtype == torch.float64 for layer in module._carried["train"] for s in layer)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
@pytest.mark.parametrize(
    "precision",
    [{"precision": "bf16-mixed"}, {"plugins": [MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))]}],
    ids=["bf16-mixed", "16-mixed-with-scaler"],
)
def test_mixed_precision_with_gradient_clipping_trains(tmp_path, toy_corpus, precision, optimizer):
    """Lightning's mixed-precision plugin refuses to clip a fused optimizer's gradients: such a recipe (Adam,
    ``gradient_clip_val``, ``--trainer.precision bf16-mixed``) stopped at its first step. Under bf16 the fused
    optimizer stays (FusedClipping clips it); with a gradient scaler it gives way to the non-fused one."""
    module, trainer = run(tmp_path, toy_corpus, trainer_kwargs={"max_epochs": 1, "gradient_clip_val": 0.25, **precision},
                          optimizer=optimizer, lr=3e-3 if optimizer == "adam" else 1.0)
    assert torch.isfinite(trainer.callback_metrics["val_ppl"])
    assert trainer.callback_metrics["val_ppl"] < 13.0  # learned something: uniform guessing is 13
    # fused unless a gradient scaler must unscale before clipping (then torch's default implementation)
    assert bool(trainer.optimizers[0].defaults.get("fused")) is ("plugins" not in precision)
