"""The DSF paper's LSTM: full peephole *matrices* ``U_i c_{t-1}``, ``U_f c_{t-1}``, ``U_r c_t`` (DSF eqs
16-17, ``peepholes: matrix``), whose LM count is the paper's Table 2 row (7H^2 + 5HV + 4H + V).

(a) one step against the equations written here in plain Python (matrix-vector products, ``math``);
(b) the fast whole-sequence path (sequence products) == the reference step loop, values and every
    gradient in float64, over chunks with carried state;
(c) the count of a one-layer one-hot LM and the budget reference ``lstm(peepholes=matrix):100``;
(d) bad input: unknown peephole kinds, and ``peepholes`` on a cell without a cell state.
"""

import math

import pytest
import torch

from dsf_lightning.cells import CellOptionError, build_cell, get_cell
from dsf_lightning.cells.base import RecurrentCell
from dsf_lightning.model import LMConfig, ModelConfigError, RecurrentLM, count_parameters

from .test_classic import add, matvec, mul, sigmoid  # the plain-Python helpers of the DSF-equation references

B, I, H = 2, 3, 4
F64 = torch.float64


def matrix_cell(seed=0, input_size=I, hidden=H):
    cell = get_cell("lstm")(input_size, hidden, peepholes="matrix").double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in cell.parameters():
            p.copy_(0.7 * torch.randn(p.shape, generator=g, dtype=F64))
    return cell


def lstm_eqs_16_17(W, V, b, U_i, U_f, U_r, x, h0, c0):
    """DSF sec. 3: i, f read U c_{t-1}; c_t = f c_{t-1} + i z; r_t reads U_r c_t (eq. 17); h = r tanh(c)."""
    blk = lambda M, k: M[k * H : (k + 1) * H]  # noqa: E731 - blocks stacked (i, f, z, r)
    z = [math.tanh(v) for v in add(matvec(blk(W, 2), x), matvec(blk(V, 2), h0), blk(b, 2))]
    i = [sigmoid(v) for v in add(matvec(blk(W, 0), x), matvec(blk(V, 0), h0), matvec(U_i, c0), blk(b, 0))]
    f = [sigmoid(v) for v in add(matvec(blk(W, 1), x), matvec(blk(V, 1), h0), matvec(U_f, c0), blk(b, 1))]
    c = add(mul(f, c0), mul(i, z))
    r = [sigmoid(v) for v in add(matvec(blk(W, 3), x), matvec(blk(V, 3), h0), matvec(U_r, c), blk(b, 3))]
    h = mul(r, [math.tanh(v) for v in c])
    return h, c


def test_matrix_peepholes_step_is_eqs_16_17():
    cell = matrix_cell()
    assert cell.U_i.shape == cell.U_f.shape == cell.U_r.shape == (H, H)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, I, generator=g, dtype=F64)
    h0, c0 = (0.8 * torch.randn(B, H, generator=g, dtype=F64) for _ in range(2))
    P = [t.tolist() for t in (cell.W, cell.V, cell.b, cell.U_i, cell.U_f, cell.U_r)]
    want = [lstm_eqs_16_17(*P, xb, hb, cb) for xb, hb, cb in zip(x.tolist(), h0.tolist(), c0.tolist())]
    out, (h, c) = cell.step(x, (h0, c0))
    tol = dict(rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(h, torch.tensor([w[0] for w in want], dtype=F64), **tol)
    torch.testing.assert_close(out, h, rtol=0, atol=0)
    torch.testing.assert_close(c, torch.tensor([w[1] for w in want], dtype=F64), **tol)
    # the matrices really act as matrices: the diagonal reading gives another h
    diag = [lstm_eqs_16_17(P[0], P[1], P[2], *([[row[k] if k == j else 0.0 for k in range(H)]
                                                 for j, row in enumerate(M)] for M in P[3:]),
                           xb, hb, cb) for xb, hb, cb in zip(x.tolist(), h0.tolist(), c0.tolist())]
    assert (h - torch.tensor([w[0] for w in diag], dtype=F64)).abs().max() > 1e-3


@pytest.mark.parametrize("chunks", [1, 3])
def test_matrix_peepholes_fast_path_equals_reference(chunks):
    """The sequence-product loop (``forward``) against ``RecurrentCell.forward`` (the step loop of
    ``recur`` with per-step products): outputs, final state and every gradient, float64."""
    T = 9
    cell = matrix_cell(seed=3, input_size=5, hidden=6)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(B, T, 5, generator=g, dtype=F64)
    state0 = tuple(0.5 * torch.randn(B, 6, generator=g, dtype=F64) for _ in range(2))
    w = torch.randn(B, T, 6, generator=g, dtype=F64)

    def run(forward):
        cell.zero_grad()
        xs = x.clone().requires_grad_()
        s = tuple(t.clone().requires_grad_() for t in state0)
        state, outs = s, []
        for piece in xs.chunk(chunks, dim=1):
            out, state = forward(cell, piece, state)
            outs.append(out)
        out = torch.cat(outs, dim=1)
        ((out * w).sum() + state[0].sum() * 0.3 + state[1].pow(2).sum()).backward()
        grads = [p.grad.clone() for p in cell.parameters()]
        return out.detach(), [t.detach() for t in state], grads, xs.grad, [t.grad for t in s]

    fast = run(lambda c, xx, s: c(xx, s))
    ref = run(lambda c, xx, s: RecurrentCell.forward(c, xx, s))
    tol = dict(rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(fast[0], ref[0], **tol)
    for a, b in zip(fast[1], ref[1]):
        torch.testing.assert_close(a, b, **tol)
    for (name, _), a, b in zip(cell.named_parameters(), fast[2], ref[2]):
        torch.testing.assert_close(a, b, **tol, msg=lambda m, name=name: f"grad of {name}: {m}")
    torch.testing.assert_close(fast[3], ref[3], **tol)
    for a, b in zip(fast[4], ref[4]):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("Hs,Vs", [(7, 11), (100, 2404), (50, 1926)])
def test_lm_count_is_dsf_table2_formula(Hs, Vs):
    model = RecurrentLM(LMConfig(vocab_size=Vs, cell="lstm", hidden_sizes=[Hs], embedding_size=0,
                                 cell_options={"peepholes": "matrix"}))
    assert count_parameters(model) == 7 * Hs * Hs + 5 * Hs * Vs + 4 * Hs + Vs


def test_dsf_table2_lstm_row_is_the_matrix_peephole_budget():
    """DSF Table 2: the PTB-SW LSTM (H = 100) has 1,274,804 parameters, which is 7H^2 + 5HV + 4H + V at
    V = 2,404; the budget reference ``lstm(peepholes=matrix):100`` resolves to exactly that."""
    from dsf_lightning.model.budget import resolve_budget

    assert 7 * 100**2 + 5 * 100 * 2404 + 4 * 100 + 2404 == 1_274_804
    assert resolve_budget("lstm(peepholes=matrix):100", 2404, embedding_size=0) == 1_274_804
    assert resolve_budget("lstm:100", 2404, embedding_size=0) == 4 * 100**2 + 5 * 100 * 2404 + 4 * 100 + 2404


@pytest.mark.parametrize("bad", ["full", "Matrix", 1, None])
def test_unknown_peephole_kind_is_a_clear_error(bad):
    with pytest.raises(CellOptionError, match=r"peepholes.*'diagonal'.*'matrix'"):
        get_cell("lstm")(I, H, peepholes=bad)


@pytest.mark.parametrize("cell", ["gru", "elman", "delta-rnn", "mgu"])
def test_peepholes_on_a_cell_without_cell_state_names_the_cells_that_accept_it(cell):
    with pytest.raises(CellOptionError, match=r"'peepholes'.*accepted by.*\blstm\b"):
        build_cell(cell, I, H, peepholes="matrix")
    with pytest.raises(ModelConfigError, match=r"'peepholes'.*accepted by.*\blstm\b"):
        RecurrentLM(LMConfig(vocab_size=11, cell=cell, hidden_sizes=[H], cell_options={"peepholes": "matrix"}))


def test_diagonal_peepholes_unchanged():
    """``True`` still means the diagonal peepholes (sr-LSTM-p, existing checkpoints): vectors."""
    for value in (True, "diagonal"):
        cell = get_cell("lstm")(I, H, peepholes=value)
        assert cell.U_i.shape == cell.U_f.shape == cell.U_r.shape == (H,)
    assert not hasattr(get_cell("lstm")(I, H), "U_i")
