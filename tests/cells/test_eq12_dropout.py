"""DSF eq. 12 dropout on the Delta-RNN's inner function, against the equation written here (float64):

    h_t = Phi((1 - r) * DROP(g(x_t, h_{t-1}), p) + r * h_{t-1}),   DROP(x, p) = x * (~B(1, p))   (12)

The paper's DROP is a plain 0/1 mask (``dropout_scaling: "test-time"``): kept units are not scaled in
training and, as Srivastava et al. (2014, the dropout the paper cites) do at test time, the proposal is
multiplied by the keep probability ``1 - p`` in evaluation (the paper itself says nothing about test
time). The library's default, ``"inverted"``, scales kept units by ``1 / (1 - p)`` in training and
leaves evaluation alone (same expectation; the bundled model was trained so)."""

import pytest
import torch

from dsf_lightning.cells import CellOptionError, UnknownCellOptionError, get_cell

F64 = torch.float64
B, T, I, H = 3, 7, 5, 6
P = 0.4


def _cell(name, scaling, **options):
    cell = get_cell(name)(I, H, dropout=P, **({} if scaling is None else {"dropout_scaling": scaling}), **options)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for pname, p in cell.named_parameters():
            p.copy_(0.6 * torch.randn(p.shape, generator=g, dtype=p.dtype))
            if "norm" in pname and pname.endswith("weight"):
                p.add_(1.0)
    return cell.double()


def _g_delta(c, x, h):  # eq. 11 with the eq. 5 gate
    Wx, Vh = x @ c.W.t(), h @ c.V.t()
    z = torch.tanh(c.alpha * Vh * Wx + c.beta1 * Vh + c.beta2 * Wx + c.b)
    return z, torch.sigmoid(Wx + c.b_r)


def _g_ln(c, x, h):  # Appendix A, eqs 20-21, 23
    def ln(v, norm):
        mu, var = v.mean(-1, keepdim=True), v.var(-1, unbiased=False, keepdim=True)
        return (v - mu) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias

    d_rec, d_dat = ln(h @ c.V.t(), c.norm_rec), ln(x @ c.W.t(), c.norm_data)
    return torch.tanh(d_rec * d_dat + d_rec + d_dat), torch.sigmoid(d_dat + c.b_r)


INNER = {"delta-rnn": _g_delta, "delta-rnn-ln": _g_ln}


def _equation(cell, name, x, h, masks, drop):
    """Eq. 12 step by step; ``drop(z, t)`` is DROP(g, p) (training) or its test-time counterpart."""
    outs = []
    for t in range(x.shape[1]):
        z, r = INNER[name](cell, x[:, t], h)
        h = (1 - r) * drop(z, t) + r * h  # Phi = identity (word models)
        outs.append(h)
    return torch.stack(outs, 1), h


def _paths(cell):
    yield "default", lambda x, s: cell(x, (s,))
    yield "reference", lambda x, s: cell.forward_reference(x, (s,))


@pytest.mark.parametrize("name", ["delta-rnn", "delta-rnn-ln"])
@pytest.mark.parametrize("scaling", [None, "inverted", "test-time"])
def test_eq12_dropout_against_the_equation(name, scaling):
    cell = _cell(name, scaling)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, T, I, generator=g, dtype=F64)
    h0 = 0.5 * torch.randn(B, H, generator=g, dtype=F64)
    keep = 1 - P
    torch.manual_seed(11)  # the masks the cell will draw: one Bernoulli(1 - p) [B, H] per step, in order
    masks = [torch.empty(B, H, dtype=F64).bernoulli_(keep) for _ in range(T)]
    assert 0 < sum(float(m.sum()) for m in masks) < B * H * T
    if scaling == "test-time":  # the paper's 0/1 mask; evaluation multiplies by 1 - p
        train_drop, eval_drop = (lambda z, t: z * masks[t]), (lambda z, t: z * keep)
    else:  # inverted (the default): kept units scaled by 1 / (1 - p); evaluation unchanged
        train_drop, eval_drop = (lambda z, t: z * masks[t] / keep), (lambda z, t: z)
    with torch.no_grad():
        for mode, drop in (("train", train_drop), ("eval", eval_drop)):
            want_out, want_h = _equation(cell, name, x, h0, masks, drop)
            cell.train(mode == "train")
            for path, run in _paths(cell):
                torch.manual_seed(11)
                out, (h,) = run(x, h0)
                torch.testing.assert_close(out, want_out, rtol=1e-10, atol=1e-12, msg=f"{mode} {path}")
                torch.testing.assert_close(h, want_h, rtol=1e-10, atol=1e-12, msg=f"{mode} {path}")
            torch.manual_seed(11)
            s = h0
            for t in range(T):  # the single step reads the same rule
                o, (s,) = cell.step(x[:, t], (s,))
                torch.testing.assert_close(o, want_out[:, t], rtol=1e-10, atol=1e-12, msg=f"{mode} step")


def test_eq12_gradients_fast_equal_reference_with_test_time_scaling():
    cell = _cell("delta-rnn", "test-time").train()
    g = torch.Generator().manual_seed(2)
    x = torch.randn(B, T, I, generator=g, dtype=F64, requires_grad=True)
    grads = []
    for run in (cell.forward, cell.forward_reference):
        torch.manual_seed(5)
        out, _ = run(x)
        grads.append(torch.autograd.grad((out**2).sum(), [x, *cell.parameters()]))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_dropout_scaling_is_checked_and_only_where_eq12_dropout_exists():
    with pytest.raises(CellOptionError, match="dropout_scaling.*'inverted', 'test-time'"):
        get_cell("delta-rnn")(I, H, dropout=0.5, dropout_scaling="none")
    with pytest.raises(UnknownCellOptionError, match="dropout_scaling.*accepted by: delta-rnn, delta-rnn-ln"):
        from dsf_lightning.cells import build_cell

        build_cell("gru", I, H, dropout_scaling="test-time")


@pytest.mark.parametrize("name", ["delta-rnn", "delta-rnn-ln"])
def test_test_time_scaling_without_dropout_is_not_silent(name, caplog):
    with caplog.at_level("WARNING"):
        get_cell(name)(3, 4, dropout_scaling="test-time")
    assert "no effect with dropout=0" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        get_cell(name)(3, 4, dropout=0.2, dropout_scaling="test-time")
    assert "no effect" not in caplog.text
