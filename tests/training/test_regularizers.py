"""Sobolev penalty (SCRN sec. 7), column normalization (IRLM sec. 4) and the training callbacks
(column normalization, Polyak averaging, gradient-norm monitor) under the real Lightning Trainer."""

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dsf_lightning.model import LMConfig, RecurrentLM
from dsf_lightning.regularizers import (
    column_normalization_targets,
    normalize_columns,
    sobolev_penalty,
    sobolev_penalty_estimate,
)
from dsf_lightning.training.callbacks import ColumnNormalization, GradientNormMonitor, PolyakAveraging

from .conftest import quiet_trainer, toy_modules


# ---------------------------------------------------------------------------------------------
# Sobolev penalty
# ---------------------------------------------------------------------------------------------
def lm(cell, hidden_sizes=(5, 4), vocab=9, embedding_size=0, **options):
    torch.manual_seed(0)
    model = RecurrentLM(
        LMConfig(vocab_size=vocab, cell=cell, hidden_sizes=list(hidden_sizes), cell_options=options,
                 embedding_size=embedding_size)
    ).double()
    for p in model.parameters():  # larger weights than the default init, so the Jacobians are not tiny
        with torch.no_grad():
            p.mul_(3.0)
    return model


def random_state(model, batch):
    g = torch.Generator().manual_seed(1)
    return tuple(
        tuple(torch.randn(batch, n, generator=g, dtype=torch.float64) * 0.5 for n in layer.state_sizes)
        for layer in model.layers
    )


def reference_penalty(model, tokens, state, layers=None):
    """Eq. 10 the slow way: torch.autograd.functional.jacobian of every step of every sequence."""
    model.eval()
    y = torch.nn.functional.one_hot(tokens, model.config.vocab_size).double() if model.embedding is None \
        else model.embedding(tokens)
    total = 0.0
    for i, layer in enumerate(model.layers):
        st, k = state[i], layer.recurrent_state_index
        projected = layer.project_inputs(y)
        outs = []
        for t in range(tokens.shape[1]):
            for b in range(tokens.shape[0]):
                def h_next(h_prev, b=b, t=t, st=st):
                    s = [x[b : b + 1] for x in st]
                    s[k] = h_prev.unsqueeze(0)
                    return layer.recur(projected[b : b + 1, t], tuple(s))[1][k].squeeze(0)

                jac = torch.autograd.functional.jacobian(h_next, st[k][b])
                if layers is None or i in layers:
                    total += float(jac.pow(2).sum()) / tokens.shape[0]
            out, st = layer.recur(projected[:, t], st)
            outs.append(out)
        y = torch.stack(outs, 1)
    return total


TOKENS = torch.tensor([[1, 4, 2, 8, 0], [3, 3, 7, 5, 6], [0, 1, 2, 3, 4]])


@pytest.mark.parametrize(
    "cell, options",
    [
        ("scrn", {"context_size": 3}),
        ("scrn", {"context_size": 2, "hidden_activation": "tanh", "output": "hidden"}),
        ("irlm", {"long_context_units": 2, "r_init": -0.4}),
        ("delta-rnn", {}),
    ],
    ids=["scrn-sigmoid", "scrn-tanh", "irlm-lcu", "delta-rnn-generic"],
)
def test_penalty_equals_explicit_jacobians(cell, options):
    model = lm(cell, **options)
    state = random_state(model, 3)
    expected = reference_penalty(model, TOKENS, state)
    auto = sobolev_penalty(model, TOKENS, state)  # closed form for scrn / irlm, Jacobians for delta-rnn
    jac = sobolev_penalty(model, TOKENS, state, method="autograd")
    assert auto.dtype == torch.float64
    assert expected > 1e-2  # a non-trivial value
    assert auto.item() == pytest.approx(expected, rel=1e-10)
    assert jac.item() == pytest.approx(expected, rel=1e-10)


def test_irlm_closed_form_is_T_sum_r_squared():
    model = lm("irlm", long_context_units=2, r_init=0.3)
    T = TOKENS.shape[1]
    expected = sum(T * layer.r.pow(2).sum() for layer in model.layers)
    assert torch.allclose(sobolev_penalty(model, TOKENS), expected)


def test_closed_form_gradient_equals_autograd_gradient_and_reaches_R():
    model = lm("scrn", context_size=3)
    state = random_state(model, 3)
    grads = []
    for method in ("closed", "autograd"):
        model.zero_grad()
        sobolev_penalty(model, TOKENS, state, method=method).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    closed, jac = grads
    assert closed.keys() == jac.keys()
    for name in closed:
        assert torch.allclose(closed[name], jac[name], rtol=1e-9, atol=1e-12), name
    for i in range(2):  # the recurrent weights of both layers get a non-zero gradient
        assert closed[f"layers.{i}.R"].abs().sum() > 1e-3
        assert jac[f"layers.{i}.R"].abs().sum() > 1e-3
    assert "decoder.weight" not in closed  # the penalty does not touch the decoder


@pytest.mark.parametrize(
    "cell, options, recurrent",
    [("irlm", {"r_init": 0.2}, "rho"), ("delta-rnn", {}, "V"), ("lstm", {}, None)],
)
def test_gradient_reaches_recurrent_weights(cell, options, recurrent):
    model = lm(cell, **options)
    sobolev_penalty(model, TOKENS, random_state(model, 3)).backward()
    for i, layer in enumerate(model.layers):
        square = [n for n, p in layer.named_parameters() if p.dim() == 2 and p.shape[-1] == layer.hidden_size]
        names = [recurrent] if recurrent else square
        assert names, "no recurrent matrix found"
        for n in names:
            grad = dict(layer.named_parameters())[n].grad
            assert grad is not None and grad.abs().sum() > 1e-4, (i, n)


def test_layers_option_and_batch_average():
    model = lm("scrn", context_size=3)
    state = random_state(model, 3)
    whole = sobolev_penalty(model, TOKENS, state)
    parts = [sobolev_penalty(model, TOKENS, state, layers=[i]) for i in range(2)]
    assert torch.allclose(whole, parts[0] + parts[1])
    assert torch.allclose(parts[1], sobolev_penalty(model, TOKENS, state, layers=[-1]))
    assert parts[1].item() == pytest.approx(reference_penalty(model, TOKENS, state, layers=[1]), rel=1e-10)
    # averaged over the batch: duplicating every sequence leaves the value unchanged
    doubled = tuple(tuple(torch.cat([s, s]) for s in layer) for layer in state)
    assert torch.allclose(sobolev_penalty(model, torch.cat([TOKENS, TOKENS]), doubled), whole)


def test_penalty_runs_without_dropout_and_restores_training_mode():
    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=9, cell="delta-rnn", hidden_sizes=[6], embedding_size=4,
                                 cell_options={"dropout": 0.5}, dropout_input=0.5, dropout_hidden=0.5,
                                 dropout_embedding=0.3, variational=True)).double()
    model.train()
    a, b = sobolev_penalty(model, TOKENS), sobolev_penalty(model, TOKENS)
    assert torch.equal(a, b)  # no dropout masks drawn
    assert all(m.training for m in model.modules())
    model.eval()
    assert torch.equal(sobolev_penalty(model, TOKENS), a)
    assert not any(m.training for m in model.modules())


def test_estimate_is_unbiased_and_differentiable():
    model = lm("delta-rnn")
    state = random_state(model, 3)
    exact = sobolev_penalty(model, TOKENS, state).item()
    torch.manual_seed(0)
    estimate = sobolev_penalty_estimate(model, TOKENS, state, samples=4000)
    assert estimate.item() == pytest.approx(exact, rel=0.03)
    torch.manual_seed(0)
    gaussian = sobolev_penalty_estimate(model, TOKENS, state, samples=4000, probes="gaussian")
    assert gaussian.item() == pytest.approx(exact, rel=0.05)
    torch.manual_seed(0)
    sobolev_penalty_estimate(model, TOKENS, state, samples=2).backward()
    assert model.layers[0].V.grad.abs().sum() > 0


def test_sobolev_bad_arguments():
    model = lm("delta-rnn")
    with pytest.raises(ValueError, match="layers"):
        sobolev_penalty(model, TOKENS, layers=[2])
    with pytest.raises(ValueError, match="layers"):
        sobolev_penalty(model, TOKENS, layers=[])
    with pytest.raises(ValueError, match="method"):
        sobolev_penalty(model, TOKENS, method="fast")
    with pytest.raises(ValueError, match="closed"):
        sobolev_penalty(model, TOKENS, method="closed")  # no closed form for the Delta-RNN
    with pytest.raises(ValueError, match="tokens"):
        sobolev_penalty(model, TOKENS[0])
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="samples"):
            sobolev_penalty_estimate(model, TOKENS, samples=bad)


# ---------------------------------------------------------------------------------------------
# Column normalization
# ---------------------------------------------------------------------------------------------
def test_column_normalization_targets_per_model():
    irlm = lm("irlm")
    assert [(n, d) for n, _, d in column_normalization_targets(irlm)] == [("layers.0.W", 1), ("decoder.weight", 0)]
    scrn = lm("scrn", context_size=3)
    encoder = sorted(n for n, _, _ in column_normalization_targets(scrn, which=("encoder",)))
    assert encoder == ["layers.0.A", "layers.0.B"]
    torch.manual_seed(0)
    tied = RecurrentLM(LMConfig(vocab_size=9, cell="scrn", hidden_sizes=[4], embedding_size=4, tie_weights=True,
                                cell_options={"context_size": 2}))
    assert sorted((n, d) for n, _, d in column_normalization_targets(tied)) == [  # W into each unit, Z out of it
        ("embedding.weight", 0), ("layers.0.A", 1), ("layers.0.B", 1), ("untied_decoder.weight", 0)]


@pytest.mark.parametrize("mode", ["fixed", "max"])
def test_normalize_columns(mode):
    model = lm("irlm", hidden_sizes=(6,))
    W, Z = model.layers[0].W, model.decoder.weight
    with torch.no_grad():
        W[0].zero_()  # a zero unit stays zero
        W[1] *= 1e-3  # a short unit
    before_short = W[1].norm().item()
    names = normalize_columns(model, 2.0, mode=mode)
    assert names == ["layers.0.W", "decoder.weight"]
    w_norms, z_norms = W.norm(dim=1), Z.norm(dim=0)  # per hidden unit: incoming rows of W, outgoing columns of Z
    assert w_norms[0] == 0
    if mode == "fixed":
        assert torch.allclose(w_norms[1:], torch.full_like(w_norms[1:], 2.0))
        assert torch.allclose(z_norms, torch.full_like(z_norms, 2.0))
    else:
        assert (w_norms <= 2.0 + 1e-12).all() and (z_norms <= 2.0 + 1e-12).all()
        assert w_norms[1].item() == pytest.approx(before_short)  # short vectors untouched
        assert torch.isclose(w_norms[2:], torch.tensor(2.0, dtype=w_norms.dtype)).any()  # long ones clipped


def test_normalize_columns_bad_arguments():
    model = lm("irlm")
    for bad in (-1.0, 0, float("nan"), "15"):
        with pytest.raises(ValueError, match="max_norm"):
            normalize_columns(model, bad)
    with pytest.raises(ValueError, match="mode"):
        normalize_columns(model, 15.0, mode="clip")
    with pytest.raises(ValueError, match="which"):
        normalize_columns(model, 15.0, which=("softmax",))
    with pytest.raises(ValueError, match="max_norm"):
        ColumnNormalization(-3.0)
    with pytest.raises(ValueError, match="mode"):
        ColumnNormalization(15.0, mode="exact")


@pytest.mark.parametrize("mode", ["fixed", "max"])
def test_column_normalization_callback_after_every_step(toy_corpus, mode):
    L.seed_everything(0, verbose=False)
    module, data = toy_modules(toy_corpus, cell="irlm", hidden_sizes=[8], embedding_size=0, lr=0.5, optimizer="sgd")
    initial = {k: v.clone() for k, v in module.model.state_dict().items()}
    callback = ColumnNormalization(0.7, mode=mode)
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=5, limit_val_batches=0, callbacks=[callback])
    trainer.fit(module, data)
    assert callback.target_names == ["layers.0.W", "decoder.weight"]
    assert callback.applied_steps == 5 == trainer.global_step
    W, Z = module.model.layers[0].W, module.model.decoder.weight
    assert not torch.equal(W, initial["layers.0.W"])  # it trained
    # the last update came before the last normalization, so the final weights are normalized
    if mode == "fixed":
        assert torch.allclose(W.norm(dim=1), torch.tensor(0.7), atol=1e-5)
        assert torch.allclose(Z.norm(dim=0), torch.tensor(0.7), atol=1e-5)
    else:
        assert (W.norm(dim=1) <= 0.7 + 1e-5).all() and (Z.norm(dim=0) <= 0.7 + 1e-5).all()


# ---------------------------------------------------------------------------------------------
# Polyak averaging
# ---------------------------------------------------------------------------------------------
class RecordWeights(L.Callback):
    """The weights after every optimizer step (put it after PolyakAveraging)."""

    def __init__(self):
        self.weights = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.weights.append({n: p.detach().clone() for n, p in module.named_parameters()})


def test_polyak_mean_is_used_for_validation(toy_corpus):
    L.seed_everything(0, verbose=False)
    module, data = toy_modules(toy_corpus, optimizer="sgd", lr=1.0)
    polyak, record = PolyakAveraging(start_step=2), RecordWeights()
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=8, limit_val_batches=6, callbacks=[polyak, record])
    trainer.fit(module, data)
    logged = trainer.callback_metrics["val_loss"].item()

    assert polyak.num_averaged == 6  # steps 3..8
    manual = {n: torch.stack([w[n] for w in record.weights[2:]]).mean(0) for n in record.weights[0]}
    averaged = polyak.averaged_state_dict()
    for n, value in manual.items():
        assert torch.allclose(averaged[n], value, atol=1e-6), n
        assert torch.equal(dict(module.named_parameters())[n], record.weights[-1][n])  # training weights back

    def validate(state_dict):
        fresh, _ = toy_modules(toy_corpus, optimizer="sgd", lr=1.0)
        fresh.load_state_dict(state_dict)
        return quiet_trainer(limit_val_batches=6).validate(fresh, data, verbose=False)[0]["val_loss"]

    assert validate(averaged) == pytest.approx(logged, rel=1e-6)
    raw = validate(module.state_dict())
    assert abs(raw - logged) > 1e-3  # the logged metric is not the raw weights'


def total_grad_norm(module):
    return float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in module.parameters()])))


class Regression(L.LightningModule):
    """y = x . w on fixed data, plain SGD: deterministic, so two runs can be compared exactly."""

    def __init__(self, lr=0.1):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(3, 1)
        self.lr = lr
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(12, 3, generator=g)
        self.y = self.x @ torch.tensor([[2.0], [-1.0], [0.5]]) + 1.0
        self.post_clip_norms, self.pre_clip_seen = [], []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        self.post_clip_norms.append(total_grad_norm(self))

    def loader(self):
        return DataLoader(TensorDataset(self.x, self.y), batch_size=4, shuffle=False)

    def train_dataloader(self):
        return self.loader()

    def val_dataloader(self):
        return self.loader()


def test_polyak_ema_and_exact_resume(tmp_path):
    def fit(max_epochs, callback, ckpt_path=None):
        model = Regression()
        trainer = quiet_trainer(max_epochs=max_epochs, callbacks=[callback, record := RecordWeights()])
        trainer.fit(model, ckpt_path=ckpt_path)
        return model, trainer, record

    whole, whole_trainer, record = fit(4, PolyakAveraging(start_step=1, decay=0.8))
    # the EMA by hand: started at the weights after step 2, then avg = 0.8 avg + 0.2 w
    ema = None
    for w in record.weights[1:]:
        ema = dict(w) if ema is None else {n: 0.8 * ema[n] + 0.2 * w[n] for n in w}
    averaged = whole_trainer.callbacks[0].averaged_state_dict()
    for n in ema:
        assert torch.allclose(averaged[n], ema[n], atol=1e-6)

    first, first_trainer, _ = fit(2, PolyakAveraging(start_step=1, decay=0.8))
    path = tmp_path / "half.ckpt"
    first_trainer.save_checkpoint(path)
    resumed_cb = PolyakAveraging(start_step=1, decay=0.8)
    resumed, resumed_trainer, _ = fit(4, resumed_cb, ckpt_path=path)
    assert resumed_cb.num_averaged == whole_trainer.callbacks[0].num_averaged == 11
    for n, value in whole_trainer.callbacks[0].averaged_state_dict().items():
        assert torch.equal(resumed_cb.averaged_state_dict()[n], value), n
    assert resumed_trainer.callback_metrics["val_loss"] == whole_trainer.callback_metrics["val_loss"]


def test_polyak_ema_warmup_by_hand_and_exact_resume(tmp_path):
    """warmup=True: the k-th iterate in is taken in with decay min(decay, (1 + k) / (10 + k)); with decay 0.5
    that is 0.25, 0.31, ... for k = 2..7 and 0.5 from k = 8 on, so both regimes are checked."""
    def fit(max_epochs, callback, ckpt_path=None):
        trainer = quiet_trainer(max_epochs=max_epochs, callbacks=[callback, record := RecordWeights()])
        trainer.fit(Regression(), ckpt_path=ckpt_path)
        return trainer, record

    whole_cb = PolyakAveraging(start_step=1, decay=0.5, warmup=True)
    whole_trainer, record = fit(4, whole_cb)
    ema = None
    for k, w in enumerate(record.weights[1:], start=1):
        decay = min(0.5, (1 + k) / (10 + k))
        ema = dict(w) if ema is None else {n: decay * ema[n] + (1 - decay) * w[n] for n in w}
    plain = None  # the EMA without warm-up, to show the two differ
    for w in record.weights[1:]:
        plain = dict(w) if plain is None else {n: 0.5 * plain[n] + 0.5 * w[n] for n in w}
    averaged = whole_cb.averaged_state_dict()
    for n in ema:
        assert torch.allclose(averaged[n], ema[n], atol=1e-6), n
    assert not torch.allclose(averaged["net.weight"], plain["net.weight"], atol=1e-4)

    first_trainer, _ = fit(2, PolyakAveraging(start_step=1, decay=0.5, warmup=True))
    first_trainer.save_checkpoint(tmp_path / "half.ckpt")
    resumed_cb = PolyakAveraging(start_step=1, decay=0.5, warmup=True)
    fit(4, resumed_cb, ckpt_path=tmp_path / "half.ckpt")
    assert resumed_cb.num_averaged == whole_cb.num_averaged == 11
    for n, value in averaged.items():
        assert torch.equal(resumed_cb.averaged_state_dict()[n], value), n
    assert resumed_cb.state_key != PolyakAveraging(start_step=1, decay=0.5).state_key  # no mix-up on resume
    assert PolyakAveraging(start_step=1, decay=0.5).state_key == "PolyakAveraging{'start_step': 1, 'decay': 0.5}"


def test_polyak_checkpoint_while_swapped_stores_training_weights(tmp_path):
    model = Regression()
    polyak = PolyakAveraging()
    trainer = quiet_trainer(max_epochs=1, callbacks=[polyak])
    trainer.fit(model)
    raw = {k: v.clone() for k, v in model.state_dict().items()}
    polyak._swap_in(model)
    assert not torch.equal(model.net.weight, raw["net.weight"])
    trainer.save_checkpoint(tmp_path / "c.ckpt")
    polyak._swap_out(model)
    saved = torch.load(tmp_path / "c.ckpt", weights_only=False)
    for k, v in raw.items():
        assert torch.equal(saved["state_dict"][k], v)
        assert torch.equal(model.state_dict()[k], v)


def test_polyak_bad_arguments_and_no_average_yet():
    for bad in (0.0, 1.0, -0.5, 2, True):
        with pytest.raises(ValueError, match="decay"):
            PolyakAveraging(decay=bad)
    with pytest.raises(ValueError, match="start_step"):
        PolyakAveraging(start_step=-1)
    with pytest.raises(ValueError, match="warmup must be true or false"):
        PolyakAveraging(decay=0.9, warmup="yes")
    with pytest.raises(ValueError, match="warmup=True needs a decay"):
        PolyakAveraging(warmup=True)
    with pytest.raises(RuntimeError, match="start_step"):
        PolyakAveraging(start_step=5).averaged_state_dict(Regression())


# ---------------------------------------------------------------------------------------------
# Gradient-norm monitor
# ---------------------------------------------------------------------------------------------
def test_gradient_norm_monitor_measures_before_clipping():
    model = Regression(lr=0.05)
    monitor = GradientNormMonitor()

    class Pre(L.Callback):  # runs after the monitor, still before clipping
        def on_before_optimizer_step(self, trainer, module, optimizer):
            module.pre_clip_seen.append((monitor.last_norm, total_grad_norm(module)))

    clip = 3.0
    trainer = quiet_trainer(max_epochs=6, gradient_clip_val=clip, callbacks=[monitor, Pre()])
    trainer.fit(model)
    assert monitor.num_steps == 18 == len(model.post_clip_norms)
    pre = [p for _, p in model.pre_clip_seen]
    assert [m for m, _ in model.pre_clip_seen] == pytest.approx(pre, rel=1e-6)  # the monitor saw unclipped norms
    for before, after in zip(pre, model.post_clip_norms):
        assert after == pytest.approx(min(before, clip), rel=1e-4)  # and Lightning clipped after it
    clipped = sum(p > clip for p in pre)
    assert 0 < clipped < len(pre)
    assert monitor.num_clipped == clipped
    assert trainer.callback_metrics["grad_norm"].item() == pytest.approx(pre[-1], rel=1e-6)
    assert trainer.callback_metrics["grad_clipped_fraction"].item() == pytest.approx(clipped / 18)
    assert monitor.state_dict() == {"num_steps": 18, "num_clipped": clipped, "num_nonfinite": 0}


def test_gradient_norm_monitor_without_clipping_counts_none():
    monitor = GradientNormMonitor()
    quiet_trainer(max_epochs=1, callbacks=[monitor]).fit(Regression())
    assert monitor.num_steps == 3 and monitor.num_clipped == 0 and monitor.last_norm > 0


def test_polyak_averaged_block_holds_the_average_then_gives_the_training_weights_back():
    model = Regression()
    polyak = PolyakAveraging(start_step=1, decay=0.5)
    with polyak.averaged(model) as swapped:  # before fit: nothing to swap in, nothing changed
        assert swapped is False
    trainer = quiet_trainer(max_epochs=2, callbacks=[polyak])
    trainer.fit(model)
    raw = {k: v.clone() for k, v in model.state_dict().items()}
    average = polyak.averaged_state_dict()
    assert not torch.equal(average["net.weight"], raw["net.weight"])
    with polyak.averaged() as swapped:
        assert swapped is True
        for k, v in average.items():
            assert torch.equal(model.state_dict()[k], v), k
        with polyak.averaged() as again:  # nested: already in, left in
            assert again is True and torch.equal(model.net.weight, average["net.weight"])
        assert torch.equal(model.net.weight, average["net.weight"])
    for k, v in raw.items():
        assert torch.equal(model.state_dict()[k], v), k
    with pytest.raises(ZeroDivisionError), polyak.averaged():  # an error inside still gives the weights back
        1 / 0
    assert torch.equal(model.net.weight, raw["net.weight"])
