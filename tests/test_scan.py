"""``dsf_lightning.ops.scan.linear_recurrence``: the blocked scan and its reverse-scan backward against
the reference step loop (values and gradients, float64), every shape of ``a``, and numerical safety."""

import pytest
import torch

import dsf_lightning.ops.scan as scan_module
from dsf_lightning.ops.scan import AUTO_SCAN_MIN_T, linear_recurrence

F64 = torch.float64
TOL = dict(rtol=1e-10, atol=1e-12)


def _a(kind, B, T, H, g, low=-0.95, high=0.95):
    shape = {"scalar": (), "const": (H,), "batch2": (B, H), "batch": (B, 1, H), "full": (B, T, H)}[kind]
    return (low + (high - low) * torch.rand(shape, generator=g, dtype=F64)).requires_grad_()


def _case(kind, B, T, H, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = _a(kind, B, T, H, g)
    b = torch.randn(B, T, H, generator=g, dtype=F64, requires_grad=True)
    h0 = torch.randn(B, H, generator=g, dtype=F64, requires_grad=True)
    return a, b, h0


def _value_and_grads(a, b, h0, method):
    h = linear_recurrence(a, b, h0, method=method)
    loss = (h * torch.cos(h)).sum() + h[:, -1].pow(2).sum()
    return (h.detach(), *torch.autograd.grad(loss, (a, b, h0)))


KINDS = ["scalar", "const", "batch2", "batch", "full"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("T", [1, 2, 7, 35])
def test_scan_equals_loop(kind, T):
    a, b, h0 = _case(kind, 3, T, 4)
    for got, want in zip(_value_and_grads(a, b, h0, "scan"), _value_and_grads(a, b, h0, "loop")):
        torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("T,chunk", [(100, None), (100, 7), (64, 8), (10, 3), (5, 1)])
def test_blocked_scan_equals_loop(kind, T, chunk, monkeypatch):
    """Several chunks (with and without padding of the last one); chunk=None is the automatic size."""
    monkeypatch.setattr(scan_module, "_CHUNK_OVERRIDE", chunk)
    a, b, h0 = _case(kind, 2, T, 3)
    assert scan_module._chunk_size(T, 2 * 3, "full" if kind == "full" else "const") < T
    for got, want in zip(_value_and_grads(a, b, h0, "scan"), _value_and_grads(a, b, h0, "loop")):
        torch.testing.assert_close(got, want, **TOL)


def test_gradcheck_of_the_autograd_function():
    for kind in ("const", "full"):
        a, b, h0 = _case(kind, 2, 6, 3)
        assert torch.autograd.gradcheck(lambda a, b, h0: linear_recurrence(a, b, h0, method="scan"), (a, b, h0))


def test_carried_state_over_chunks():
    a, b, h0 = _case("full", 2, 20, 3)
    whole = linear_recurrence(a, b, h0, method="scan")
    first = linear_recurrence(a[:, :8], b[:, :8], h0, method="scan")
    second = linear_recurrence(a[:, 8:], b[:, 8:], first[:, -1], method="scan")
    torch.testing.assert_close(torch.cat((first, second), 1), whole, **TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_no_underflow_trouble_with_small_or_negative_a(dtype, monkeypatch):
    """Products of many |a| < 1 underflow to 0: the scan multiplies by them, never divides."""
    monkeypatch.setattr(scan_module, "_CHUNK_OVERRIDE", 40)
    T = 1600
    b = torch.ones(1, T, 2, dtype=dtype)
    h0 = torch.zeros(1, 2, dtype=dtype)
    for a in (torch.tensor([1e-30, -1e-30], dtype=dtype), torch.tensor([0.5, -0.5], dtype=dtype)):
        h = linear_recurrence(a, b, h0, method="scan")
        ref = linear_recurrence(a, b, h0, method="loop")
        assert torch.isfinite(h).all()
        torch.testing.assert_close(h, ref)


def test_float32_long_sequence_close_to_float64():
    a, b, h0 = _case("const", 2, 1024, 8)
    with torch.no_grad():
        ref = linear_recurrence(a, b, h0, method="loop")
        got = linear_recurrence(a.float(), b.float(), h0.float(), method="scan")
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-5)


def test_auto_picks_by_length_and_grad(monkeypatch):
    calls = []
    monkeypatch.setattr(scan_module, "linear_recurrence_loop", lambda *a: calls.append("loop") or a[1])
    monkeypatch.setattr(scan_module, "linear_recurrence_scan", lambda *a: calls.append("scan") or a[1])
    a, b, h0 = _case("const", 2, AUTO_SCAN_MIN_T, 3)
    linear_recurrence(a, b, h0)
    a, b, h0 = _case("const", 2, max(AUTO_SCAN_MIN_T - 1, 1), 3)
    linear_recurrence(a, b, h0)
    with torch.no_grad():
        linear_recurrence(a, b, h0)
    expected_short = "scan" if AUTO_SCAN_MIN_T <= 1 else "loop"
    assert calls == ["scan", expected_short, "scan"]


def test_bad_arguments():
    b, h0 = torch.zeros(2, 3, 4), torch.zeros(2, 4)
    with pytest.raises(ValueError, match="method"):
        linear_recurrence(torch.zeros(4), b, h0, method="fft")
    with pytest.raises(ValueError, match="h0"):
        linear_recurrence(torch.zeros(4), b, torch.zeros(3, 4))
    with pytest.raises(ValueError, match="b must be"):
        linear_recurrence(torch.zeros(4), torch.zeros(2, 4), h0)
