"""``dsf_lightning.ops.fast_linear`` agrees with ``F.linear`` (values and gradients) and falls back correctly."""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dsf_lightning.ops import (
    FastLinear,
    fast_linear,
    fast_linear_enabled,
    fast_linear_min_work,
    set_fast_linear_enabled,
    set_fast_linear_min_work,
    would_use_fast_path,
)

# the package re-exports the function ``fast_linear``, which shadows the submodule attribute
fl_mod = importlib.import_module("dsf_lightning.ops.fast_linear")

needs_onednn = pytest.mark.skipif(fl_mod._IP is None, reason="torch built without oneDNN")


@pytest.fixture(autouse=True)
def _one_thread_and_defaults():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    enabled, min_work = fast_linear_enabled(), fast_linear_min_work()
    set_fast_linear_enabled(True)
    set_fast_linear_min_work(0)  # exercise the oneDNN path even on the small test shapes
    yield
    set_fast_linear_enabled(enabled)
    set_fast_linear_min_work(min_work)
    torch.set_num_threads(threads)


def assert_close32(actual: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-5) -> None:
    """fp32 agreement up to summation order: relative (Frobenius) error and a scaled elementwise bound."""
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    scale = expected.abs().max().clamp_min(1e-30)
    rel = (actual - expected).norm() / expected.norm().clamp_min(1e-30)
    assert rel <= rtol, f"relative error {rel:.3g}"
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=rtol * scale.item())


def _grads(fn, x, w, b, g):
    leaves = [t for t in (x, w, b) if t is not None]
    y = fn(x, w, b)
    grads = torch.autograd.grad(y, leaves, g)
    return y, grads


SHAPES = [
    # (input shape, out_features)
    ((5, 7), 3),
    ((64, 32), 100),
    ((3, 11, 24), 257),  # [B, T, D]
    ((2, 35, 64), 1000),  # decoder-like
    ((24,), 50),  # 1-D input, like F.linear
]


@needs_onednn
@pytest.mark.parametrize("shape,n_out", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_matches_f_linear_values_and_grads(shape, n_out, bias):
    gen = torch.Generator().manual_seed(hash((shape, n_out, bias)) % 2**31)
    x = torch.randn(*shape, generator=gen).requires_grad_()
    w = torch.randn(n_out, shape[-1], generator=gen).requires_grad_()
    b = torch.randn(n_out, generator=gen).requires_grad_() if bias else None
    assert would_use_fast_path(x, w, b)
    g = torch.randn(*shape[:-1], n_out, generator=gen)
    y, grads = _grads(fast_linear, x, w, b, g)
    y_ref, grads_ref = _grads(F.linear, x, w, b, g)
    assert_close32(y, y_ref)
    for got, ref in zip(grads, grads_ref):
        assert_close32(got, ref)


@needs_onednn
@pytest.mark.parametrize("kind", ["feature_slice", "transposed_bt", "expanded", "weight_transposed"])
def test_non_contiguous_inputs(kind):
    gen = torch.Generator().manual_seed(3)
    n_in, n_out = 32, 300
    w_base = torch.randn(n_out, n_in, generator=gen)
    if kind == "feature_slice":  # like y[..., -E:] in RecurrentLM.decode
        base = torch.randn(4, 9, n_in + 16, generator=gen).requires_grad_()
        make_x = lambda: base[..., -n_in:]  # noqa: E731
    elif kind == "transposed_bt":  # [T, B, D] stored, viewed as [B, T, D]
        base = torch.randn(9, 4, n_in, generator=gen).requires_grad_()
        make_x = lambda: base.transpose(0, 1)  # noqa: E731
    elif kind == "expanded":  # zero stride
        base = torch.randn(1, 1, n_in, generator=gen).requires_grad_()
        make_x = lambda: base.expand(3, 5, n_in)  # noqa: E731
    else:
        base = torch.randn(6, n_in, generator=gen).requires_grad_()
        make_x = lambda: base  # noqa: E731
    if kind == "weight_transposed":
        w_leaf = w_base.t().contiguous().requires_grad_()  # [in, out] storage, used as .t()
        make_w = lambda: w_leaf.t()  # noqa: E731
    else:
        w_leaf = w_base.clone().requires_grad_()
        make_w = lambda: w_leaf  # noqa: E731
    assert not make_x().is_contiguous() or kind == "weight_transposed"
    g = torch.randn(*make_x().shape[:-1], n_out, generator=gen)

    y = fast_linear(make_x(), make_w())
    got = torch.autograd.grad(y, (base, w_leaf), g)
    y_ref = F.linear(make_x(), make_w())
    ref = torch.autograd.grad(y_ref, (base, w_leaf), g)
    assert_close32(y, y_ref)
    for a, r in zip(got, ref):
        assert_close32(a, r)


@needs_onednn
def test_non_contiguous_grad_output():
    x = torch.randn(6, 16, requires_grad=True)
    w = torch.randn(40, 16, requires_grad=True)
    (fast_linear(x, w).sum()).backward()  # grad_out is an expanded (stride-0) tensor
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    F.linear(x, w).sum().backward()
    assert_close32(gx, x.grad)
    assert_close32(gw, w.grad)


@needs_onednn
def test_tied_weights_accumulate_both_gradients():
    torch.manual_seed(0)
    vocab, dim = 500, 48
    emb = nn.Embedding(vocab, dim)
    bias = nn.Parameter(torch.randn(vocab) * 0.1)
    tokens = torch.randint(0, vocab, (4, 13))

    def loss_with(linear):
        h = torch.tanh(emb(tokens[:, :-1]) * 1.5)
        logits = linear(h, emb.weight, bias)
        return F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))

    loss = loss_with(fast_linear)
    loss.backward()
    got_w, got_b = emb.weight.grad.clone(), bias.grad.clone()
    emb.weight.grad = bias.grad = None
    loss_ref = loss_with(F.linear)
    loss_ref.backward()
    torch.testing.assert_close(loss, loss_ref, rtol=1e-6, atol=1e-6)
    assert_close32(got_w, emb.weight.grad)
    assert_close32(got_b, bias.grad)
    # both uses really contributed: on the embedding rows looked up, the total differs from the
    # decoder-only gradient
    emb.weight.grad = None
    h = torch.tanh(emb(tokens[:, :-1]) * 1.5).detach()
    F.cross_entropy(fast_linear(h, emb.weight, bias).reshape(-1, vocab), tokens[:, 1:].reshape(-1)).backward()
    decoder_only = emb.weight.grad
    used = tokens[:, :-1].unique()
    assert not torch.allclose(got_w[used], decoder_only[used])


@needs_onednn
def test_gradient_accumulates_into_existing_grad():
    x = torch.randn(10, 20)
    w = torch.randn(30, 20, requires_grad=True)
    fast_linear(x, w).square().sum().backward()
    first = w.grad.clone()
    fast_linear(x, w).square().sum().backward()
    assert_close32(w.grad, 2 * first)
    assert w.grad.is_contiguous()


@needs_onednn
def test_no_grad_and_inference():
    x = torch.randn(3, 7, 16)
    w = torch.randn(50, 16, requires_grad=True)
    b = torch.randn(50, requires_grad=True)
    with torch.no_grad():
        y = fast_linear(x, w, b)
    assert not y.requires_grad
    assert_close32(y, F.linear(x, w, b).detach())
    with torch.inference_mode():
        y = fast_linear(x, w, b)
    assert_close32(y, F.linear(x, w, b).detach())


@needs_onednn
def test_only_weight_requires_grad():
    x = torch.randn(12, 8)
    w = torch.randn(20, 8, requires_grad=True)
    b = torch.randn(20)
    g = torch.randn(12, 20)
    (gw,) = torch.autograd.grad(fast_linear(x, w, b), (w,), g)
    (gw_ref,) = torch.autograd.grad(F.linear(x, w, b), (w,), g)
    assert_close32(gw, gw_ref)


def test_float64_falls_back_exactly():
    x = torch.randn(4, 9, 32, dtype=torch.float64, requires_grad=True)
    w = torch.randn(100, 32, dtype=torch.float64, requires_grad=True)
    b = torch.randn(100, dtype=torch.float64, requires_grad=True)
    assert not would_use_fast_path(x, w, b)
    g = torch.randn(4, 9, 100, dtype=torch.float64)
    y, grads = _grads(fast_linear, x, w, b, g)
    y_ref, grads_ref = _grads(F.linear, x, w, b, g)
    assert torch.equal(y, y_ref)
    for a, r in zip(grads, grads_ref):
        assert torch.equal(a, r)


def test_autocast_bf16_falls_back_to_torch():
    x = torch.randn(8, 32)
    w = torch.randn(64, 32)
    b = torch.randn(64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not would_use_fast_path(x, w, b)
        y = fast_linear(x, w, b)
        y_ref = F.linear(x, w, b)
    assert y.dtype == torch.bfloat16
    assert torch.equal(y, y_ref)


def test_other_fallbacks():
    w = torch.randn(64, 32)
    assert not would_use_fast_path(torch.randn(8, 32, dtype=torch.bfloat16), w.bfloat16())
    assert not would_use_fast_path(torch.randn(0, 32), w)  # empty
    assert not would_use_fast_path(torch.randn(8, 31), w)  # shape mismatch -> F.linear raises
    with pytest.raises(RuntimeError):
        fast_linear(torch.randn(8, 31), w)
    set_fast_linear_min_work(8 * 32 * 64 + 1)
    assert not would_use_fast_path(torch.randn(8, 32), w)  # below threshold
    set_fast_linear_min_work(8 * 32 * 64)
    assert would_use_fast_path(torch.randn(8, 32), w) == (fl_mod._IP is not None)


@needs_onednn
def test_switch_and_env(monkeypatch):
    x = torch.randn(8, 32)
    w = torch.randn(64, 32)
    assert would_use_fast_path(x, w)
    set_fast_linear_enabled(False)
    assert not fast_linear_enabled()
    assert not would_use_fast_path(x, w)
    calls = []
    real_linear = F.linear
    monkeypatch.setattr(fl_mod.F, "linear", lambda *a: calls.append(1) or real_linear(*a))
    assert torch.equal(fast_linear(x, w), real_linear(x, w))
    assert calls == [1]
    set_fast_linear_enabled(True)
    fast_linear(x, w)
    assert calls == [1]  # fast path did not call F.linear
    for value, expected in [("0", False), ("off", False), ("1", True), ("", True)]:
        monkeypatch.setenv("DSF_FAST_LINEAR", value)
        assert fl_mod._env_enabled() is expected
    monkeypatch.delenv("DSF_FAST_LINEAR")
    assert fl_mod._env_enabled() is True


def test_min_work_validation():
    with pytest.raises(ValueError):
        set_fast_linear_min_work(-1)


@needs_onednn
def test_fast_linear_module_matches_nn_linear():
    torch.manual_seed(1)
    ref = nn.Linear(24, 70)
    mod = FastLinear(24, 70)
    mod.load_state_dict(ref.state_dict())
    x = torch.randn(5, 6, 24)
    y, y_ref = mod(x), ref(x)
    assert_close32(y, y_ref)
    y.square().mean().backward()
    y_ref.square().mean().backward()
    assert_close32(mod.weight.grad, ref.weight.grad)
    assert_close32(mod.bias.grad, ref.bias.grad)


@needs_onednn
def test_double_backward_is_rejected():
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(16, 8, requires_grad=True)
    (gx,) = torch.autograd.grad(fast_linear(x, w).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError):
        gx.sum().backward()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's own jvp decompositions use jit.script
def test_forward_mode_ad_falls_back():
    import torch.autograd.forward_ad as fwAD

    x, t = torch.randn(6, 16), torch.randn(6, 16)
    w = torch.randn(40, 16)
    with fwAD.dual_level():
        y = fast_linear(fwAD.make_dual(x, t), w)
        tangent = fwAD.unpack_dual(y).tangent
    assert torch.equal(tangent, F.linear(t, w))
