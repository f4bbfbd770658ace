"""The baseline cells of ``dsf_lightning.cells.classic`` against their papers' equations.

(a) one step of every cell equals a computation written straight from the equations in plain Python
    (scalar loops, ``math``), reading the parameters from the module after setting them to known,
    non-default values;
(b) the LSTM and the GRU (in its PyTorch convention) equal ``torch.nn.LSTMCell`` / ``GRUCell``;
(c) parameter counts of a one-layer LM with one-hot input against the DSF paper's formulas;
(d) impossible options raise ``CellOptionError`` naming the option;
(e) the smoothed rectifier at points worked out by hand.
"""

import math

import pytest
import torch

from dsf_lightning.cells import CellOptionError, get_cell
from dsf_lightning.cells.classic import smoothed_rectifier

B, I, H = 2, 3, 4


# -- plain-Python helpers (no torch in the reference computations) --------------------------------
def matvec(M, v):
    return [sum(m * x for m, x in zip(row, v)) for row in M]


def add(*vs):
    return [sum(xs) for xs in zip(*vs)]


def mul(*vs):
    return [math.prod(xs) for xs in zip(*vs)]


def sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v))


def apply(f, v):
    return [f(x) for x in v]


PHI = {
    "tanh": math.tanh,
    "relu": lambda v: max(0.0, v),
    "sigmoid": sigmoid,
    "identity": lambda v: v,
}


def build(name, seed=0, input_size=I, **options):
    """The cell in float64 with every parameter set to known values ~ 0.7 N(0, 1) (biases included)."""
    cell = get_cell(name)(input_size, H, **options).double().eval()
    g = torch.Generator().manual_seed(1000 + seed)
    with torch.no_grad():
        for p in cell.parameters():
            p.copy_(0.7 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    return cell


def data(n_state=1, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, I, generator=g, dtype=torch.float64)
    state = tuple(0.8 * torch.randn(B, H, generator=g, dtype=torch.float64) for _ in range(n_state))
    return x, state


def blocks(param, n):
    """Split a stacked [n*H, ...] parameter into n Python lists of H rows (or H values)."""
    return [param[k * H : (k + 1) * H].tolist() for k in range(n)]


def close(a, b):
    torch.testing.assert_close(a, torch.tensor(b, dtype=torch.float64), rtol=1e-12, atol=1e-13)


# -- (a) one step by hand -------------------------------------------------------------------------
@pytest.mark.parametrize("act", ["tanh", "relu", "sigmoid", "identity"])
def test_elman_step_by_hand(act):
    cell = build("elman", activation=act)
    x, (h0,) = data()
    W, V, b = cell.W.tolist(), cell.V.tolist(), cell.b.tolist()
    want = [apply(PHI[act], add(matvec(V, hb), matvec(W, xb), b)) for xb, hb in zip(x.tolist(), h0.tolist())]
    out, (h,) = cell.step(x, (h0,))  # eq. 6
    close(out, want)
    close(h, want)


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_mi_rnn_step_by_hand(act):
    cell = build("mi-rnn", activation=act)
    x, (h0,) = data()
    W, V, b = cell.W.tolist(), cell.V.tolist(), cell.b.tolist()
    alpha, beta1, beta2 = cell.alpha.tolist(), cell.beta1.tolist(), cell.beta2.tolist()
    want = []
    for xb, hb in zip(x.tolist(), h0.tolist()):
        Vh, Wx = matvec(V, hb), matvec(W, xb)
        d1 = mul(alpha, Vh, Wx)  # eq. 11
        d2 = add(mul(beta1, Vh), mul(beta2, Wx))
        want.append(apply(PHI[act], add(d1, d2, b)))
    out, (h,) = cell.step(x, (h0,))
    close(out, want)
    close(h, want)


def lstm_by_hand(cell, x, h0, c0, peepholes, output_peeks_at="c_t"):
    """DSF sec. 3 (eqs 16-17) / sr-RNN eqs 7-9, with blocks stacked (i, f, z, r)."""
    W_i, W_f, W_z, W_r = blocks(cell.W, 4)
    V_i, V_f, V_z, V_r = blocks(cell.V, 4)
    b_i, b_f, b_z, b_r = blocks(cell.b, 4)
    zero = [0.0] * H
    U_i, U_f, U_r = (cell.U_i.tolist(), cell.U_f.tolist(), cell.U_r.tolist()) if peepholes else (zero,) * 3
    hs, cs = [], []
    for xb, hb, cb in zip(x.tolist(), h0.tolist(), c0.tolist()):
        z = apply(math.tanh, add(matvec(W_z, xb), matvec(V_z, hb), b_z))
        i = apply(sigmoid, add(matvec(W_i, xb), matvec(V_i, hb), mul(U_i, cb), b_i))
        f = apply(sigmoid, add(matvec(W_f, xb), matvec(V_f, hb), mul(U_f, cb), b_f))
        c = add(mul(f, cb), mul(i, z))
        peek = c if output_peeks_at == "c_t" else cb
        r = apply(sigmoid, add(matvec(W_r, xb), matvec(V_r, hb), mul(U_r, peek), b_r))  # eq. 17
        hs.append(mul(r, apply(math.tanh, c)))  # eq. 16
        cs.append(c)
    return hs, cs


@pytest.mark.parametrize("peepholes", [False, True])
def test_lstm_step_by_hand(peepholes):
    cell = build("lstm", peepholes=peepholes)
    x, (h0, c0) = data(n_state=2)
    want_h, want_c = lstm_by_hand(cell, x, h0, c0, peepholes)
    out, (h, c) = cell.step(x, (h0, c0))
    close(out, want_h)
    close(h, want_h)
    close(c, want_c)


def test_lstm_output_gate_peephole_reads_the_new_cell_state():
    """DSF eq. 17 and sr-RNN eq. 9 peek at c_t, not c_{t-1}: the two readings really differ here."""
    cell = build("lstm", peepholes=True)
    x, (h0, c0) = data(n_state=2)
    new_h, _ = lstm_by_hand(cell, x, h0, c0, True, output_peeks_at="c_t")
    old_h, _ = lstm_by_hand(cell, x, h0, c0, True, output_peeks_at="c_prev")
    out, _ = cell.step(x, (h0, c0))
    close(out, new_h)
    assert (out - torch.tensor(old_h, dtype=torch.float64)).abs().max() > 1e-3


def test_lstm_forget_bias_initialises_only_the_forget_block():
    for fb in (0.0, 1.0, 2.5):
        b = get_cell("lstm")(I, H, forget_bias=fb).b.detach()
        assert torch.equal(b[H : 2 * H], torch.full((H,), fb))
        assert torch.equal(torch.cat([b[:H], b[2 * H :]]), torch.zeros(3 * H))
    assert get_cell("lstm")(I, H).forget_bias == 1.0  # the documented default


def gru_by_hand(cell, x, h0, reset_after):
    """DSF sec. 3: eqs 18-19 and the inner function with the reset gate q_t, blocks stacked (q, r, h)."""
    W_q, W_r, W_h = blocks(cell.W, 3)
    V_q, V_r, V_h = blocks(cell.V, 3)
    b_q, b_r, b_h = blocks(cell.b, 3)
    want = []
    for xb, hb in zip(x.tolist(), h0.tolist()):
        q = apply(sigmoid, add(matvec(V_q, hb), matvec(W_q, xb), b_q))
        r = apply(sigmoid, add(matvec(V_r, hb), matvec(W_r, xb), b_r))  # eq. 19
        if reset_after:  # PyTorch's placement: q * (V_h h)
            rec = mul(q, matvec(V_h, hb))
        else:  # the paper's: V_h (q * h)
            rec = matvec(V_h, mul(q, hb))
        g = apply(math.tanh, add(rec, matvec(W_h, xb), b_h))
        want.append(add(mul(r, g), mul([1 - v for v in r], hb)))  # eq. 18: r*g + (1-r)*h
    return want


@pytest.mark.parametrize("reset_after", [False, True])
def test_gru_step_by_hand(reset_after):
    cell = build("gru", reset_after=reset_after)
    x, (h0,) = data()
    want = gru_by_hand(cell, x, h0, reset_after)
    out, (h,) = cell.step(x, (h0,))
    close(out, want)
    close(h, want)


def test_gru_reset_placements_differ():
    """The two placements are different functions (so the option is not a no-op)."""
    paper, after = build("gru"), build("gru", reset_after=True)  # same seed: same parameter values
    assert torch.equal(paper.V, after.V)
    x, (h0,) = data()
    a, _ = paper.step(x, (h0,))
    b, _ = after.step(x, (h0,))
    assert (a - b).abs().max() > 1e-3


def test_mgu_step_by_hand():
    cell = build("mgu")
    x, (h0,) = data()
    W_r, W_h = blocks(cell.W, 2)
    V_r, V_h = blocks(cell.V, 2)
    b_r, b_h = blocks(cell.b, 2)
    want = []
    for xb, hb in zip(x.tolist(), h0.tolist()):
        r = apply(sigmoid, add(matvec(V_r, hb), matvec(W_r, xb), b_r))  # the single forget gate
        g = apply(math.tanh, add(matvec(V_h, mul(r, hb)), matvec(W_h, xb), b_h))  # also the reset
        want.append(add(mul(r, g), mul([1 - v for v in r], hb)))  # GRU outer function, eq. 18
    out, (h,) = cell.step(x, (h0,))
    close(out, want)
    close(h, want)


@pytest.mark.parametrize("a,bias", [(1.0, False), (0.3, True)])
def test_srelu_rnn_step_by_hand(a, bias):
    cell = build("srelu-rnn", a=a, bias=bias)
    x, (h0,) = data()
    W, V = cell.W.tolist(), cell.V.tolist()
    b = cell.b.tolist() if bias else [0.0] * H
    f = lambda v: max(0.0, v - a * math.tanh(v / a))  # noqa: E731  IRLM sec. 2.2
    want = [apply(f, add(matvec(W, xb), matvec(V, hb), b)) for xb, hb in zip(x.tolist(), h0.tolist())]
    assert any(v == 0.0 for row in want for v in row) and any(v > 0.0 for row in want for v in row)
    out, (h,) = cell.step(x, (h0,))
    close(out, want)
    close(h, want)


# -- (b) agreement with torch.nn ------------------------------------------------------------------
T = 6


def sequence(seed=5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, I, generator=g, dtype=torch.float64)


def test_lstm_matches_torch_lstmcell():
    ref = torch.nn.LSTMCell(I, H).double()
    cell = get_cell("lstm")(I, H, peepholes=False).double()
    with torch.no_grad():  # both stack (i, f, g=z, o=r); torch's two biases add up to our one
        cell.W.copy_(ref.weight_ih)
        cell.V.copy_(ref.weight_hh)
        cell.b.copy_(ref.bias_ih + ref.bias_hh)
    x = sequence()
    _, (h0, c0) = data(n_state=2, seed=9)
    h, c, outs = h0, c0, []
    with torch.no_grad():
        for t in range(T):
            h, c = ref(x[:, t], (h, c))
            outs.append(h)
        out, (h_ours, c_ours) = cell(x, (h0, c0))
    torch.testing.assert_close(out, torch.stack(outs, 1), rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(h_ours, h, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(c_ours, c, rtol=1e-12, atol=1e-13)


def gru_from_torch(ref, reset_after):
    """Map torch's GRUCell onto the paper's GRU: q = torch's r; r = 1 - torch's z (negated weights)."""
    cell = get_cell("gru")(I, H, reset_after=reset_after).double()
    w_r, w_z, w_n = ref.weight_ih.chunk(3)
    u_r, u_z, u_n = ref.weight_hh.chunk(3)
    bi_r, bi_z, bi_n = ref.bias_ih.chunk(3)
    bh_r, bh_z, _ = ref.bias_hh.chunk(3)
    with torch.no_grad():
        cell.W.copy_(torch.cat([w_r, -w_z, w_n]))  # sigmoid(-a) = 1 - sigmoid(a)
        cell.V.copy_(torch.cat([u_r, -u_z, u_n]))
        cell.b.copy_(torch.cat([bi_r + bh_r, -(bi_z + bh_z), bi_n]))
    return cell


def torch_gru_with_zero_candidate_recurrent_bias(seed=3):
    torch.manual_seed(seed)
    ref = torch.nn.GRUCell(I, H).double()
    with torch.no_grad():
        ref.bias_hh[2 * H :].zero_()  # b_hn sits inside the reset product; the paper has no such bias
    return ref


def run_torch(ref, x, h0):
    h, outs = h0, []
    with torch.no_grad():
        for t in range(x.shape[1]):
            h = ref(x[:, t], h)
            outs.append(h)
    return torch.stack(outs, 1)


def test_gru_reset_after_matches_torch_grucell_with_r_equal_one_minus_z():
    ref = torch_gru_with_zero_candidate_recurrent_bias()
    cell = gru_from_torch(ref, reset_after=True)
    x = sequence()
    _, (h0,) = data(seed=9)
    with torch.no_grad():
        out, (h,) = cell(x, (h0,))
    want = run_torch(ref, x, h0)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(h, want[:, -1], rtol=1e-12, atol=1e-13)


def test_gru_paper_form_differs_from_torch_only_through_the_reset_placement():
    """Under the same mapping the paper's GRU (reset before V_h) agrees with torch from a zero state
    on the first step (the reset then multiplies zeros either way) and departs from it afterwards."""
    ref = torch_gru_with_zero_candidate_recurrent_bias()
    cell = gru_from_torch(ref, reset_after=False)
    x = sequence()
    h0 = torch.zeros(B, H, dtype=torch.float64)
    with torch.no_grad():
        out, _ = cell(x, (h0,))
    want = run_torch(ref, x, h0)
    torch.testing.assert_close(out[:, 0], want[:, 0], rtol=1e-12, atol=1e-13)
    assert (out[:, 1:] - want[:, 1:]).abs().max() > 1e-4


# -- (c) parameter counts of a one-layer LM with one-hot input ----------------------------------
# The cell's input matrix is the embedding (input_size = V); the LM adds a decoder of H*V + V.
SIZES = [(7, 11), (100, 2405), (50, 1926)]  # small; the DSF subword runs (LSTM H=100 / 50, PTB / IMDB)


def lm_parameters(name, Hs, Vs, **options):
    cell = get_cell(name)(Vs, Hs, **options)
    return sum(p.numel() for p in cell.parameters()) + Hs * Vs + Vs


@pytest.mark.parametrize("Hs,Vs", SIZES)
def test_elman_count_is_the_papers_rnn_formula(Hs, Vs):
    assert lm_parameters("elman", Hs, Vs) == (Hs * Hs) + 2 * (Hs * Vs) + Hs + Vs


@pytest.mark.parametrize("Hs,Vs", SIZES)
@pytest.mark.parametrize("reset_after", [False, True])
def test_gru_count_is_the_papers_formula(Hs, Vs, reset_after):
    count = lm_parameters("gru", Hs, Vs, reset_after=reset_after)
    assert count == 3 * (Hs * Hs) + 4 * (Hs * Vs) + 3 * Hs + Vs


@pytest.mark.parametrize("Hs,Vs", SIZES)
def test_lstm_true_counts(Hs, Vs):
    # four gate blocks (W: 4HV, V: 4HH, b: 4H), three diagonal peepholes (3H), the decoder (HV + V)
    assert lm_parameters("lstm", Hs, Vs, peepholes=True) == 4 * (Hs * Hs) + 5 * (Hs * Vs) + 7 * Hs + Vs
    assert lm_parameters("lstm", Hs, Vs, peepholes=False) == 4 * (Hs * Hs) + 5 * (Hs * Vs) + 4 * Hs + Vs


@pytest.mark.parametrize("Hs,Vs", SIZES)
def test_lstm_papers_formula_is_not_reproducible(Hs, Vs):
    """DSF sec. 2.3 gives the LSTM with peepholes ``4(H*H) + 8(H*V) + 4H + V`` parameters.

    Its equations give ``4(H*H) + 5(H*V) + 7H + V`` with diagonal peepholes (Graves 2013, which the
    paper cites) and ``7(H*H) + 5(H*V) + 4H + V`` with full-matrix peepholes U_i, U_f, U_r; without
    peepholes ``4(H*H) + 5(H*V) + 4H + V``. The paper's ``8(H*V)`` needs eight matrices with V
    columns, but only the four input matrices W_* and the decoder read (or produce) V-sized vectors,
    and its ``4H`` counts the biases only. The formula coincides with counting the three peepholes as
    full matrices of size H*V, which is dimensionally impossible (U multiplies the H-sized c); with
    V == H the full-matrix reading happens to give the same number.
    """
    paper = 4 * (Hs * Hs) + 8 * (Hs * Vs) + 4 * Hs + Vs
    true = lm_parameters("lstm", Hs, Vs, peepholes=True)
    assert true != paper
    assert paper - true == 3 * Hs * Vs - 3 * Hs  # 3 phantom H*V matrices, 3 uncounted peepholes
    full_matrix_peepholes = 7 * (Hs * Hs) + 5 * (Hs * Vs) + 4 * Hs + Vs
    assert full_matrix_peepholes != paper  # (Hs != Vs in every size tested)
    assert lm_parameters("lstm", Hs, Vs, peepholes=False) != paper


@pytest.mark.parametrize("Hs,Vs", SIZES)
def test_other_baseline_counts(Hs, Vs):
    # MI-RNN: the Elman count + alpha, beta1, beta2 (the Delta-RNN's 5H minus the gate bias b_r)
    assert lm_parameters("mi-rnn", Hs, Vs) == (Hs * Hs) + 2 * (Hs * Vs) + 4 * Hs + Vs
    # MGU: two blocks (gate, candidate)
    assert lm_parameters("mgu", Hs, Vs) == 2 * (Hs * Hs) + 3 * (Hs * Vs) + 2 * Hs + Vs
    # IRLM-paper RNN: x_t = f(W y_t + R x_{t-1}) has no bias unless asked for
    assert lm_parameters("srelu-rnn", Hs, Vs) == (Hs * Hs) + 2 * (Hs * Vs) + Vs
    assert lm_parameters("srelu-rnn", Hs, Vs, bias=True) == (Hs * Hs) + 2 * (Hs * Vs) + Hs + Vs


# -- (d) impossible options ----------------------------------------------------------------------
BAD_OPTIONS = [
    ("elman", "activation", "softplus"),
    ("elman", "activation", None),
    ("mi-rnn", "activation", "gelu"),
    ("lstm", "peepholes", "yes"),
    ("lstm", "peepholes", 1),
    ("lstm", "forget_bias", "1"),
    ("lstm", "forget_bias", float("nan")),
    ("lstm", "forget_bias", float("inf")),
    ("lstm", "forget_bias", True),
    ("lstm", "forget_bias", None),
    ("gru", "reset_after", "after"),
    ("gru", "reset_after", 0),
    ("srelu-rnn", "a", 0),
    ("srelu-rnn", "a", 0.0),
    ("srelu-rnn", "a", -0.5),
    ("srelu-rnn", "a", float("nan")),
    ("srelu-rnn", "a", float("inf")),
    ("srelu-rnn", "a", "1"),
    ("srelu-rnn", "a", True),
    ("srelu-rnn", "bias", "no"),
]


@pytest.mark.parametrize("name,option,value", BAD_OPTIONS, ids=lambda v: repr(v))
def test_impossible_option_raises_naming_it(name, option, value):
    with pytest.raises(CellOptionError) as info:
        get_cell(name)(I, H, **{option: value})
    # the message starts with the option's name (a bare "a" could otherwise match any article)
    assert str(info.value).startswith(f"{option} "), str(info.value)


@pytest.mark.parametrize("name", ["elman", "mi-rnn", "lstm", "gru", "mgu", "srelu-rnn"])
def test_impossible_sizes_raise(name):
    with pytest.raises(CellOptionError, match="^hidden_size "):
        get_cell(name)(I, 0)
    with pytest.raises(CellOptionError, match="^input_size "):
        get_cell(name)(2.5, H)


def test_numeric_options_accept_ints_and_store_floats():
    assert get_cell("srelu-rnn")(I, H, a=2).a == 2.0
    assert get_cell("lstm")(I, H, forget_bias=0).forget_bias == 0.0
    assert get_cell("lstm")(I, H, forget_bias=-1.5).forget_bias == -1.5  # any finite value is possible


# -- (e) the smoothed rectifier -------------------------------------------------------------------
RECTIFIER_POINTS = [
    # x,   a,    f(x) = max(0, x - a tanh(x / a))
    (0.0, 1.0, 0.0),
    (-3.0, 1.0, 0.0),  # -3 + tanh(3) = -2.00494... < 0
    (2.0, 1.0, 1.035972419924183),  # 2 - tanh(2) = 2 - 0.9640275800758169
    (1.0, 0.5, 0.5179862099620915),  # 1 - 0.5 tanh(2) = 1 - 0.48201379003790845
    (0.5, 2.0, 0.010162675192581738),  # 0.5 - 2 tanh(0.25) = 0.5 - 2 * 0.24491866240370913
    (10.0, 0.1, 9.9),  # 10 - 0.1 tanh(100) = 10 - 0.1 * 1.0
]


@pytest.mark.parametrize("x,a,want", RECTIFIER_POINTS)
def test_smoothed_rectifier_values(x, a, want):
    got = smoothed_rectifier(torch.tensor([x], dtype=torch.float64), a)
    assert got.item() == pytest.approx(want, rel=1e-14, abs=1e-15)


def test_smoothed_rectifier_is_smooth_at_zero_and_tends_to_relu():
    x = torch.tensor([-1e-3, 0.0, 1e-3], dtype=torch.float64, requires_grad=True)
    smoothed_rectifier(x, 1.0).sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().max() < 1e-5  # f ~ x^3 / 3a^2 near 0
    grid = torch.linspace(-3, 3, 601, dtype=torch.float64)
    assert (smoothed_rectifier(grid, 1e-3) - torch.relu(grid)).abs().max() <= 1e-3 + 1e-12
    assert (smoothed_rectifier(grid, 1.0) <= torch.relu(grid)).all()


def test_srelu_rnn_uses_its_a():
    cell = build("srelu-rnn", a=0.25)
    x, (h0,) = data()
    pre = x @ cell.W.T + h0 @ cell.V.T
    out, _ = cell.step(x, (h0,))
    torch.testing.assert_close(out, smoothed_rectifier(pre, 0.25))
    assert not torch.allclose(out, smoothed_rectifier(pre, 1.0))
