"""Variational (recurrent) dropout (Gal & Ghahramani 2016; SCRN paper eq. 9: Kabdolov, Assylbekov & Takhanov
2018, "Reproducing and Regularizing the SCRN Model"): one mask per sequence multiplies the hidden state
*where it enters the recurrent weight matrices* (``V h_{t-1}``, ``R h_{t-1}``, ``V_h (q_t * h_{t-1})``,
...), never the state the cell carries forward (Delta-RNN's ``r * h_{t-1}``, the GRU's ``(1 - r) h_{t-1}``,
the RAN's ``f * c_{t-1}``, the SCRN's context, the IRLM's diagonal recurrence).

(a) every cell under a fixed mask equals an implementation written here from its paper's equations
    with the mask where Gal & Ghahramani / SCRN eq. 9 put it (float64; whole sequence on the default
    path, the reference path and the step loop, over chunks with carried state);
(b) over T = 35 steps with slow units, the state under dropout stays on the scale of the state without
    it (it grew by up to (r / (1 - p))^T when the mask also multiplied the carried state);
(c) cells without a recurrent weight matrix (IRLM) refuse the option, naming the cells that take it.
"""

import pytest
import torch

from dsf_lightning.cells import get_cell, list_cells
from dsf_lightning.model import LMConfig, ModelConfigError, RecurrentLM

F64 = torch.float64
B, T, I, H = 3, 8, 6, 6
P = 0.5
sig, tanh = torch.sigmoid, torch.tanh


def lin(W, v):
    return v @ W.t()


# -- the papers' equations, one step each, with the recurrent-dropout mask m on h ---------------------
def delta_step(c, x, state, m):  # DSF eqs 11 (or 6 / 10), 5 (or 4), 3/8
    (h,) = state
    Wx, Vh = lin(c.W, x), lin(c.V, h * m)  # only the recurrent product V h_{t-1} reads the dropped h
    if c.inner == "elman":
        pre = Vh + Wx + c.b
    elif c.inner == "second-order":
        pre = Vh * Wx + c.b
    else:
        pre = c.alpha * Vh * Wx + c.beta1 * Vh + c.beta2 * Wx + c.b
    z = tanh(pre)
    r = sig(Wx + c.b_r) if c.gate == "data" else sig(c.b_r)
    h_new = (1 - r) * z + r * h  # the interpolation carries the undropped h_{t-1}
    h_new = {"identity": h_new, "tanh": tanh(h_new)}[c.outer_activation]
    return h_new, (h_new,)


def delta_simple_step(c, x, state, m):  # DSF eq. 7: V h_{t-1} dropped, the added h_{t-1} not
    (h,) = state
    h_new = tanh(lin(c.V, h * m) + lin(c.W, x) + c.b + h)
    return h_new, (h_new,)


def delta_ln_step(c, x, state, m):  # DSF Appendix A, eqs 20-23
    (h,) = state

    def ln(v, norm):
        mu, var = v.mean(-1, keepdim=True), v.var(-1, unbiased=False, keepdim=True)
        return (v - mu) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias

    d_rec, d_dat = ln(lin(c.V, h * m), c.norm_rec), ln(lin(c.W, x), c.norm_data)
    z = tanh(d_rec * d_dat + d_rec + d_dat)
    r = sig(d_dat + c.b_r)
    h_new = (1 - r) * z + r * h
    return h_new, (h_new,)


def scrn_step(c, x, state, m):  # SCRN eqs 1-2 and eq. 9: h R dropped, the context s never
    s, h = state
    a = c.alpha
    s_new = (1 - a) * lin(c.B, x) + a * s
    h_new = sig(lin(c.A, x) + lin(c.P, s_new) + lin(c.R, h * m) + c.b)
    return torch.cat((s_new, h_new), -1), (s_new, h_new)


def ran_step(c, x, state, m):  # RAN eq. 1: h_{t-1} = g(c_{t-1}) dropped in the gates, c_{t-1} carried
    (cc,) = state
    h = tanh(cc) * m
    i = sig(lin(c.W_ih, h) + lin(c.W_ix, x) + c.b_i)
    f = sig(lin(c.W_fh, h) + lin(c.W_fx, x) + c.b_f)
    c_new = i * lin(c.W_cx, x) + f * cc
    return tanh(c_new), (c_new,)


def ran_simple_step(c, x, state, m):  # RAN eq. 2
    (cc,) = state
    i = sig(lin(c.W_ic, cc * m) + lin(c.W_ix, x) + c.b_i)
    f = sig(lin(c.W_fc, cc * m) + lin(c.W_fx, x) + c.b_f)
    c_new = i * x + f * cc
    return c_new, (c_new,)


def elman_step(c, x, state, m):  # DSF eq. 6
    (h,) = state
    h_new = tanh(lin(c.V, h * m) + lin(c.W, x) + c.b)
    return h_new, (h_new,)


def mi_step(c, x, state, m):  # DSF eq. 11 as a plain RNN
    (h,) = state
    Vh, Wx = lin(c.V, h * m), lin(c.W, x)
    h_new = tanh(c.alpha * Vh * Wx + c.beta1 * Vh + c.beta2 * Wx + c.b)
    return h_new, (h_new,)


def srelu_step(c, x, state, m):  # IRLM paper sec. 2.2: f(v) = max(0, v - a tanh(v / a))
    (h,) = state
    v = lin(c.W, x) + lin(c.V, h * m)
    h_new = torch.clamp_min(v - c.a * tanh(v / c.a), 0.0)
    return h_new, (h_new,)


def lstm_step(c, x, state, m):  # DSF eqs 16-17; G&G drop h in V h_{t-1}, never c (nor the U c peepholes)
    h, cc = state
    a_i, a_f, a_z, a_r = (lin(c.W, x) + lin(c.V, h * m) + c.b).chunk(4, -1)
    # diagonal peepholes U * c (vectors), or the DSF paper's matrices U c (eqs 16-17): both read the undropped c
    peek = (lambda U, v: lin(U, v)) if c.peepholes == "matrix" else (lambda U, v: U * v)
    if c.peepholes:
        a_i, a_f = a_i + peek(c.U_i, cc), a_f + peek(c.U_f, cc)
    c_new = sig(a_f) * cc + sig(a_i) * tanh(a_z)
    if c.peepholes:
        a_r = a_r + peek(c.U_r, c_new)
    h_new = sig(a_r) * tanh(c_new)
    return h_new, (h_new, c_new)


def gru_step(c, x, state, m):  # DSF eqs 18-19; G&G's GRU: U_h (q * (h * m)), (1 - r) h_{t-1} undropped
    (h,) = state
    W_q, W_r, W_h = c.W.chunk(3)
    V_q, V_r, V_h = c.V.chunk(3)
    b_q, b_r, b_h = c.b.chunk(3)
    hm = h * m
    q = sig(lin(V_q, hm) + lin(W_q, x) + b_q)
    r = sig(lin(V_r, hm) + lin(W_r, x) + b_r)
    if c.reset_after:
        g = tanh(q * lin(V_h, hm) + lin(W_h, x) + b_h)
    else:
        g = tanh(lin(V_h, q * hm) + lin(W_h, x) + b_h)
    h_new = r * g + (1 - r) * h
    return h_new, (h_new,)


def mgu_step(c, x, state, m):
    (h,) = state
    W_r, W_h = c.W.chunk(2)
    V_r, V_h = c.V.chunk(2)
    b_r, b_h = c.b.chunk(2)
    hm = h * m
    r = sig(lin(V_r, hm) + lin(W_r, x) + b_r)
    g = tanh(lin(V_h, r * hm) + lin(W_h, x) + b_h)
    h_new = r * g + (1 - r) * h
    return h_new, (h_new,)


def sr_gru_step(c, x, state, m):  # sr-RNN eqs 1-3, 6 over the GRU: the base reads the dropped h
    _, (u,) = gru_step(c.base, x, state, m)
    alpha = torch.softmax(u @ c.centroids.t() / c.tau, -1)
    h_new = alpha @ c.centroids
    return h_new, (h_new,)


EQUATIONS = [
    ("delta-rnn", {}, delta_step),
    ("delta-rnn", {"inner": "elman", "outer_activation": "tanh"}, delta_step),
    ("delta-rnn", {"inner": "second-order", "gate": "fixed"}, delta_step),
    ("delta-rnn-simple", {}, delta_simple_step),
    ("delta-rnn-ln", {}, delta_ln_step),
    ("scrn", {}, scrn_step),
    ("ran", {}, ran_step),
    ("ran-simple", {}, ran_simple_step),
    ("elman", {}, elman_step),
    ("mi-rnn", {}, mi_step),
    ("srelu-rnn", {"bias": False}, srelu_step),
    ("lstm", {}, lstm_step),
    ("lstm", {"peepholes": True}, lstm_step),
    ("lstm", {"peepholes": "matrix"}, lstm_step),
    ("gru", {}, gru_step),
    ("gru", {"reset_after": True}, gru_step),
    ("mgu", {}, mgu_step),
    ("sr-gru", {}, sr_gru_step),
]


def _filled(name, options, seed=0):
    cell = get_cell(name)(I, H, **options).double().train()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in cell.named_parameters():
            p.copy_(0.6 * torch.randn(p.shape, generator=g, dtype=F64))
            if "norm" in pname and pname.endswith("weight"):
                p.add_(1.0)
    return cell


def _masks(cell, g):
    """One mask on the state the model drops (the cell's ``recurrent_state_index``), as the LM draws it."""
    k = cell.recurrent_state_index
    return tuple(
        ((torch.rand(B, n, generator=g, dtype=F64) > P).to(F64) / (1 - P)) if i == k else None
        for i, n in enumerate(cell.state_sizes)
    )


@pytest.mark.parametrize("name,options,equation", EQUATIONS, ids=lambda v: v if isinstance(v, str) else None)
def test_mask_only_where_the_recurrent_weights_read_the_state(name, options, equation):
    cell = _filled(name, options)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(B, T, I, generator=g, dtype=F64)
    state0 = tuple(0.5 * torch.randn(B, n, generator=g, dtype=F64) for n in cell.state_sizes)
    masks = _masks(cell, g)
    m = masks[cell.recurrent_state_index]
    with torch.no_grad():
        outs, st = [], state0
        for t in range(T):
            out, st = equation(cell, x[:, t], st, m)
            outs.append(out)
        want_out, want_state = torch.stack(outs, 1), st
        runs = {
            "default": lambda xs, s: cell(xs, s, state_masks=masks),
            "reference": lambda xs, s: cell.forward_reference(xs, s, state_masks=masks),
        }
        for path, run in runs.items():
            got, s = [], state0
            for lo, hi in ((0, 3), (3, T)):  # chunks with carried state
                o, s = run(x[:, lo:hi], s)
                got.append(o)
            torch.testing.assert_close(torch.cat(got, 1), want_out, rtol=1e-10, atol=1e-12, msg=path)
            for a, b in zip(s, want_state):
                torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=path)
        s = state0
        for t in range(T):
            o, s = cell.step(x[:, t], s, state_masks=masks)
            torch.testing.assert_close(o, want_out[:, t], rtol=1e-10, atol=1e-12)
    # gradients: the default path (fused loop / sequence products with masked operands) == the step loop
    grads = []
    for run in (cell.forward, cell.forward_reference):
        xs = x.clone().requires_grad_()
        st = tuple(v.clone().requires_grad_() for v in state0)
        out, fin = run(xs, st, state_masks=masks)
        loss = (out * torch.linspace(-1, 1, out.shape[-1], dtype=F64)).sum() + sum((v**2).sum() for v in fin)
        grads.append(torch.autograd.grad(loss, [xs, *st, *cell.parameters()], allow_unused=True))
    for a, b in zip(*grads):
        if b is None:
            assert a is None or torch.count_nonzero(a) == 0
        else:
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_every_cell_with_a_recurrent_matrix_is_checked_against_its_equations():
    checked = {name for name, _, _ in EQUATIONS}
    # IRLM has no recurrent matrix (refuses the option, below); sr / sr-lstm / sr-lstm-p wrap cells above
    assert set(list_cells()) - checked <= {"irlm", "sr", "sr-lstm", "sr-lstm-p"}, set(list_cells()) - checked


# -- (b) the state keeps its scale under dropout ---------------------------------------------------
def _slow(name, cell):
    """Bias the carried path towards keeping the state (slow units), where the cell has one."""
    with torch.no_grad():
        base = getattr(cell, "base", cell)
        Hs = base.hidden_size
        if name in ("delta-rnn", "delta-rnn-ln", "sr"):
            base.b_r.fill_(4.0)  # r ~ 0.98 of h_{t-1} carried
        elif name in ("gru", "sr-gru"):
            base.b[Hs : 2 * Hs].fill_(-4.0)  # 1 - r ~ 0.98 carried
        elif name == "mgu":
            base.b[:Hs].fill_(-4.0)
        elif name in ("ran", "ran-simple"):
            base.b_f.fill_(4.0)  # f ~ 0.98 of c_{t-1} carried
        elif name in ("lstm", "sr-lstm", "sr-lstm-p"):
            base.b[Hs : 2 * Hs].fill_(4.0)


STATE_SCALE_CELLS = sorted(set(list_cells()) - {"irlm"})


@pytest.mark.parametrize("name", STATE_SCALE_CELLS)
def test_state_under_dropout_keeps_the_scale_of_the_state_without(name):
    """1 layer, 6 units, p = 0.5, T = 35, slow units: mean over 64 masks of max_t |state| against the
    same without dropout. Masking the carried state multiplied it by up to r / (1 - p) ~ 2 per step
    (~1e9 over 35 steps for delta-rnn, ran, gru, mgu); masking only the recurrent products keeps it
    within the 1 / (1 - p) = 2 a kept unit's input is scaled by."""
    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=5, cell=name, hidden_sizes=[H], embedding_size=H,
                                 variational=True, dropout_hidden=P)).double()
    cell = model.layers[0]
    _slow(name, cell)
    n_masks, steps = 64, 35
    x = torch.randn(1, steps, H, dtype=F64).expand(n_masks, steps, H)  # one input, 64 masks

    def max_state(train):
        model.train(train)
        state = cell.init_state(n_masks, dtype=F64)
        masks = model._state_masks(cell, state)
        biggest = torch.zeros(n_masks, dtype=F64)
        with torch.no_grad():
            for t in range(steps):
                _, state = cell.step(x[:, t], state, state_masks=masks)
                for s in state:
                    biggest = torch.maximum(biggest, s.abs().amax(-1))
        return biggest.mean()

    ratio = float(max_state(True) / max_state(False))
    assert ratio < 2.5, f"{name}: max|state| under dropout is {ratio:.3g}x its value without"


# -- (c) no recurrent weight matrix, no recurrent dropout ---------------------------------------------
def test_irlm_refuses_recurrent_dropout_naming_the_cells_that_take_it():
    with pytest.raises(ModelConfigError, match=r"dropout_hidden.*irlm.*(?s:.*)accepted by.*delta-rnn.*lstm"):
        RecurrentLM(LMConfig(vocab_size=5, cell="irlm", hidden_sizes=[H], variational=True, dropout_hidden=0.3))
    RecurrentLM(LMConfig(vocab_size=5, cell="irlm", hidden_sizes=[H], variational=True, dropout_output=0.3))
    cell = get_cell("irlm")(I, H)
    with pytest.raises(ValueError, match="irlm.*no recurrent weight matrix"):
        cell(torch.randn(B, T, I), state_masks=(torch.ones(B, H),))


def test_masks_on_a_carried_only_state_are_refused():
    """The SCRN context s and the LSTM cell c enter no recurrent matrix: a mask there is an error."""
    scrn = get_cell("scrn")(I, H, context_size=3)
    with pytest.raises(ValueError, match="state 0"):
        scrn(torch.randn(B, T, I), state_masks=(torch.ones(B, 3), None))
    lstm = get_cell("lstm")(I, H)
    with pytest.raises(ValueError, match="state 1"):
        lstm.step(torch.randn(B, I), state_masks=(None, torch.ones(B, H)))


def _variant_cases():
    from .variants import VARIANTS

    for name in list_cells():
        for vid, options, *rest in VARIANTS.get(name, []):
            yield pytest.param(name, options, rest[0] if rest else I, id=f"{name}[{vid}]")


@pytest.mark.parametrize("name,options,input_size", list(_variant_cases()))
def test_with_masks_step_loop_equals_sequence_equals_chunks(name, options, input_size):
    """The central contract under variational dropout, for every registered cell variant (float64)."""
    torch.manual_seed(0)
    cell = get_cell(name)(input_size, H, **options).double().eval()  # masks act in any mode
    if not cell.recurrent_dropout:
        pytest.skip(f"{name} has no recurrent weight matrix (refuses masks)")
    g = torch.Generator().manual_seed(3)
    x = torch.randn(B, T, input_size, generator=g, dtype=F64)
    state0 = tuple(0.5 * torch.randn(B, n, generator=g, dtype=F64) for n in cell.state_sizes)
    masks = _masks(cell, g)
    with torch.no_grad():
        whole, whole_state = cell(x, state0, state_masks=masks)
        ref, ref_state = cell.forward_reference(x, state0, state_masks=masks)
        parts, s = [], state0
        for lo, hi in ((0, 2), (2, 3), (3, T)):
            o, s = cell(x[:, lo:hi], s, state_masks=masks)
            parts.append(o)
        steps, st = [], state0
        for t in range(T):
            o, st = cell.step(x[:, t], st, state_masks=masks)
            steps.append(o)
        unmasked, _ = cell(x, state0)
    for got, got_state in ((ref, ref_state), (torch.cat(parts, 1), s), (torch.stack(steps, 1), st)):
        torch.testing.assert_close(got, whole, rtol=1e-10, atol=1e-12)
        for a, b in zip(got_state, whole_state):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(unmasked, whole)  # the masks do act


def test_a_cell_whose_recur_takes_no_masks_runs_without_them_and_names_what_it_lacks_with_them():
    from torch import nn

    from dsf_lightning.cells import base

    class Plain(base.RecurrentCell):  # an old-style cell: recur(projected_t, state), no state_masks
        def __init__(self):
            super().__init__(3, 4)
            self.W = nn.Linear(3, 4)
            self.V = nn.Linear(4, 4, bias=False)

        def project_inputs(self, x):
            return self.W(x)

        def recur(self, projected_t, state):
            h = torch.tanh(projected_t + self.V(state[0]))
            return h, (h,)

    cell, x = Plain(), torch.randn(2, 5, 3)
    out, (h,) = cell.forward_reference(x)
    h_ref = torch.zeros(2, 4)
    for t in range(5):  # h_t = tanh(W x_t + V h_{t-1})
        h_ref = torch.tanh(cell.W(x[:, t]) + cell.V(h_ref))
    torch.testing.assert_close(h, h_ref)
    cell.forward_reference(x, None, (None,))  # no mask at all: still the plain recur
    for _ in range(2):  # the answer is looked up once per recur function, the same on every call
        with pytest.raises(ValueError, match=r"Plain\.recur\(projected_t, state\) takes no state_masks"):
            cell.forward_reference(x, None, (torch.ones(2, 4),))


def test_the_sr_wrapper_runs_a_registered_cell_whose_recur_takes_no_masks(monkeypatch):
    # the sr-RNN (eq. 1) calls its base cell's step through the same shim as the plain step loop, so a
    # plug-in cell written as recur(projected_t, state) keeps working inside it without dropout
    from torch import nn

    from dsf_lightning.cells import base, registry
    from dsf_lightning.cells.state_reg import StateRegularizedCell

    class PlainBase(base.RecurrentCell):
        def __init__(self, input_size, hidden_size):
            super().__init__(input_size, hidden_size)
            self.W = nn.Linear(input_size, hidden_size)

        def project_inputs(self, x):
            return self.W(x)

        def recur(self, projected_t, state):
            h = torch.tanh(projected_t + 0.5 * state[0])
            return h, (h,)

    monkeypatch.setitem(registry._CELLS, "plain-test-cell", PlainBase)
    cell = StateRegularizedCell(3, 4, base="plain-test-cell", k=2).eval()
    out, state = cell.forward_reference(torch.randn(2, 5, 3))
    assert out.shape == (2, 5, 4) and torch.isfinite(out).all()
    with pytest.raises(ValueError, match=r"PlainBase\.recur\(projected_t, state\) takes no state_masks"):
        cell.forward_reference(torch.randn(2, 5, 3), None, (torch.ones(2, 4),))
