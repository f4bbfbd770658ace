"""``SequenceLinear`` (the recurrent products of the step-loop cells, weight gradient deferred to one
product over all steps) and ``fast_linear`` under ``torch.func``: the oneDNN fp32 path against the
reference step loop to fp32 round-off, and the fallbacks."""

import pytest
import torch
import torch.nn.functional as F

from dsf_lightning.cells import build_cell
from dsf_lightning.cells.base import RecurrentCell
from dsf_lightning.ops.fast_linear import (
    SequenceLinear,
    fast_linear,
    fast_linear_min_work,
    set_fast_linear_min_work,
    would_use_fast_path,
)


@pytest.fixture
def no_threshold():
    old = fast_linear_min_work()
    set_fast_linear_min_work(0)  # route the small test products through oneDNN too
    yield
    set_fast_linear_min_work(old)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sequence_linear_matches_per_step_products(no_threshold, dtype):
    g = torch.Generator().manual_seed(0)
    T, B, I, O = 5, 4, 7, 6
    W = torch.randn(O, I, generator=g, dtype=dtype, requires_grad=True)
    xs = torch.randn(T, B, I, generator=g, dtype=dtype, requires_grad=True)
    gy = torch.randn(T, B, O, generator=g, dtype=dtype)
    mm = SequenceLinear(W, T, B)
    assert mm.deferred
    y = torch.stack([mm(x) for x in xs.unbind(0)])
    ref = torch.stack([F.linear(x, W) for x in xs.unbind(0)])
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(y, ref, **tol)
    got = torch.autograd.grad((y * gy).sum(), (xs, W))
    want = torch.autograd.grad((ref * gy).sum(), (xs, W))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **tol)


def test_sequence_linear_is_plain_without_gradients():
    W = torch.randn(3, 2, requires_grad=True)
    with torch.no_grad():
        assert not SequenceLinear(W, 4, 2).deferred
    assert not SequenceLinear(W.detach(), 4, 2).deferred


@pytest.mark.parametrize("name", ["lstm", "gru", "mgu", "ran", "elman", "delta-rnn-ln", "sr-lstm-p"])
def test_fp32_onednn_sequence_equals_reference_loop(no_threshold, name):
    torch.manual_seed(0)
    cell = build_cell(name, 16, 16)
    x = torch.randn(3, 6, 16, requires_grad=True)
    assert would_use_fast_path(x[:, 0], torch.randn(16, 16))
    outs, grads = [], []
    for fn in (cell.forward, lambda x: RecurrentCell.forward_reference(cell, x)):
        out = fn(x)[0]
        outs.append(out)
        grads.append(torch.autograd.grad(out.square().sum(), [x, *cell.parameters()]))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-6)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_fast_linear_under_torch_func(no_threshold):
    W = torch.randn(5, 4)
    x = torch.randn(3, 4)
    out, vjp_fn = torch.func.vjp(lambda h: fast_linear(h, W), x)
    (jac_rows,) = torch.func.vmap(vjp_fn)(torch.eye(5).unsqueeze(1).expand(5, 3, 5))
    torch.testing.assert_close(out, F.linear(x, W))
    torch.testing.assert_close(jac_rows[:, 0], W)
    torch.testing.assert_close(torch.func.jacrev(lambda h: fast_linear(h, W).sum(0))(x)[:, 0], W)
