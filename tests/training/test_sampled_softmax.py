"""Sampled training objectives: sampled softmax (Jean et al. 2015) and NCE (Mnih & Teh 2012, the IRLM
paper sec. 5.2)."""

import math

import pytest
import torch
import torch.nn.functional as F

from dsf_lightning.model import LMConfig, RecurrentLM
from dsf_lightning.training.sampled_softmax import SampledLoss, decoder_parameters


def toy(V=100, D=16, N=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(V, D, generator=g).requires_grad_()
    b = (0.5 * torch.randn(V, generator=g)).requires_grad_()
    h = torch.randn(N, D, generator=g).requires_grad_()
    t = torch.randint(0, V, (N,), generator=g)
    return h, t, W, b


def flat_grad(loss, params):
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)])


def test_sampled_softmax_gradient_approaches_full_softmax():
    h, t, W, b = toy()
    full = flat_grad(F.cross_entropy(h @ W.t() + b, t), (h, W, b))
    cosines = {}
    for k in (20, 1000):
        torch.manual_seed(0)
        loss = SampledLoss("sampled_softmax", k, torch.ones(100))  # uniform proposal
        cosines[k] = F.cosine_similarity(flat_grad(loss(h, t, W, b), (h, W, b)), full, dim=0).item()
    assert cosines[1000] > 0.99  # 0.997
    assert cosines[20] < cosines[1000]


@pytest.mark.parametrize("log_z", [0.0, "learned"])
def test_nce_recovers_a_unigram_distribution(log_z):
    """A bias-only model (features = 1) trained with NCE on draws from p: exp(score - log Z) ~ p."""
    torch.manual_seed(0)
    V = 30
    p = torch.distributions.Dirichlet(torch.full((V,), 0.5)).sample()
    weight = torch.zeros(V, 1, requires_grad=True)
    bias = torch.zeros(V, requires_grad=True)
    loss_fn = SampledLoss("nce", 20, torch.ones(V), log_z=log_z)
    opt = torch.optim.Adam([weight, bias, *loss_fn.parameters()], lr=0.05)
    ones = torch.ones(256, 1)
    for _ in range(400):
        loss = loss_fn(ones, torch.multinomial(p, 256, replacement=True), weight, bias)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        scores = weight[:, 0] + bias - loss_fn.log_z
        model_p = scores.exp()
    assert model_p.sum().item() == pytest.approx(1.0, abs=0.1)  # self-normalized: 1.002 (fixed), ~1 (learned)
    total_variation = 0.5 * (model_p / model_p.sum() - p).abs().sum().item()
    assert total_variation < 0.12  # 0.08 / 0.07
    if log_z == "learned":
        assert list(loss_fn.parameters()) == [loss_fn.log_z] and loss_fn.log_z.abs() > 0.5


@pytest.mark.parametrize("kind", ["nce", "sampled_softmax"])
def test_finite_float32_loss_under_bf16_autocast(kind):
    h, t, W, b = toy()
    torch.manual_seed(3)
    reference = SampledLoss(kind, 64, "log-uniform")(h, t, W, b)
    torch.manual_seed(3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = SampledLoss(kind, 64, "log-uniform")(h.bfloat16(), t, W.bfloat16(), b.bfloat16())
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert loss.item() == pytest.approx(reference.item(), rel=0.03)  # only the bf16 rounding of the inputs
    loss.backward()
    assert torch.isfinite(W.grad).all() and W.grad.abs().sum() > 0


def test_accidental_hits_are_removed():
    h, _, W, b = toy(V=5)
    t = torch.zeros(h.shape[0], dtype=torch.long)
    noise = torch.tensor([1.0, 0, 0, 0, 0])  # every sample is the target
    removed = SampledLoss("sampled_softmax", 8, noise)(h, t, W, b)
    kept = SampledLoss("sampled_softmax", 8, noise, remove_accidental_hits=False)(h, t, W, b)
    assert removed.item() == 0.0  # the target alone
    assert kept.item() == pytest.approx(math.log(9), rel=1e-6)  # nine equal logits


def test_large_vocabulary_is_never_materialized():
    """[N, V] in float32 would be 16 GB here."""
    V, N, D = 1_000_000, 4096, 2
    W = torch.randn(V, D) * 0.01
    h, t = torch.randn(N, D), torch.randint(0, V, (N,))
    for kind in ("nce", "sampled_softmax"):
        assert torch.isfinite(SampledLoss(kind, 32, "log-uniform")(h, t, W))


def test_log_uniform_sampler_matches_its_probabilities():
    torch.manual_seed(0)
    V = 1000
    loss = SampledLoss("sampled_softmax", 200_000, "log-uniform")
    counts = torch.bincount(loss.sample(V), minlength=V).double() / 200_000
    q = loss.log_noise(torch.arange(V), V).double().exp()
    assert q.sum().item() == pytest.approx(1.0, abs=1e-5)
    assert torch.allclose(counts[:10], q[:10], atol=3e-3)  # q[0] = log 2 / log 1001 ~ 0.10
    assert (counts.cumsum(0) - q.cumsum(0)).abs().max().item() < 0.005  # Kolmogorov distance ~ 1/sqrt(n)


def test_tied_decoder_blocks_match_the_model_decoder():
    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=11, cell="scrn", hidden_sizes=[4], embedding_size=4, tie_weights=True,
                                 cell_options={"context_size": 3}))
    y, _ = model.features(torch.randint(0, 11, (2, 5)))
    weight, bias = decoder_parameters(model)
    assert isinstance(weight, tuple)
    flat = y.reshape(-1, y.shape[-1])
    assert torch.allclose(flat @ torch.cat(weight, 1).t() + bias, model.decode(flat), atol=1e-6)
    targets = torch.randint(0, 11, (flat.shape[0],))
    torch.manual_seed(1)
    blocks = SampledLoss("sampled_softmax", 6, "uniform")(flat, targets, weight, bias)
    torch.manual_seed(1)
    whole = SampledLoss("sampled_softmax", 6, "uniform")(flat, targets, torch.cat(weight, 1), bias)
    assert torch.allclose(blocks, whole)


def test_bad_arguments():
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="num_samples"):
            SampledLoss("nce", bad, "uniform")
    with pytest.raises(ValueError, match="kind"):
        SampledLoss("hierarchical", 5, "uniform")
    with pytest.raises(ValueError, match="noise"):
        SampledLoss("nce", 5, "zipf")
    with pytest.raises(ValueError, match="noise"):
        SampledLoss("nce", 5, torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="log_z"):
        SampledLoss("sampled_softmax", 5, "uniform", log_z="learned")
    h, t, W, b = toy(V=10)
    with pytest.raises(ValueError, match="noise counts cover 7"):
        SampledLoss("nce", 5, torch.ones(7))(h, t, W, b)
    with pytest.raises(ValueError, match="features"):
        SampledLoss("nce", 5, "uniform")(h, t[:3], W, b)
