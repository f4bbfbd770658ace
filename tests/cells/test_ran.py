"""RAN (Lee, Levy & Zettlemoyer 2017, "Recurrent Additive Networks"): eqs 1-3, sec. 2.1, Table 1."""

import pytest
import torch

from dsf_lightning.cells import CellOptionError, get_cell

I, H, BATCH, T = 5, 4, 2, 6


def make(name, input_size=I, **options):
    torch.manual_seed(0)
    return get_cell(name)(input_size, H, **options).double()


def known_params(cell):
    g = torch.Generator().manual_seed(21)
    with torch.no_grad():
        for p in cell.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def sigmoid(v):
    return 1 / (1 + torch.exp(-v))


@pytest.mark.parametrize("g_name,g", [("tanh", torch.tanh), ("identity", lambda v: v)])
def test_one_step_is_eq_1(g_name, g):
    cell = make("ran", g=g_name)
    known_params(cell)
    x, c0 = randn(BATCH, I, seed=1), randn(BATCH, H, seed=2)
    h0 = g(c0)  # h_{t-1} = g(c_{t-1})
    content = x @ cell.W_cx.T
    i = sigmoid(h0 @ cell.W_ih.T + x @ cell.W_ix.T + cell.b_i)
    f = sigmoid(h0 @ cell.W_fh.T + x @ cell.W_fx.T + cell.b_f)
    c = i * content + f * c0
    out, (c1,) = cell.step(x, (c0,))
    torch.testing.assert_close(c1, c)
    torch.testing.assert_close(out, g(c))


def test_one_step_is_eq_2():
    cell = make("ran-simple", input_size=H)
    known_params(cell)
    x, c0 = randn(BATCH, H, seed=3), randn(BATCH, H, seed=4)
    i = sigmoid(c0 @ cell.W_ic.T + x @ cell.W_ix.T + cell.b_i)  # the gates read c_{t-1}
    f = sigmoid(c0 @ cell.W_fc.T + x @ cell.W_fx.T + cell.b_f)
    c = i * x + f * c0
    out, (c1,) = cell.step(x, (c0,))
    torch.testing.assert_close(c1, c)
    torch.testing.assert_close(out, c)


def test_parameter_counts():
    def n(cell, biases=True):
        return sum(p.numel() for name, p in cell.named_parameters() if biases or name[0] != "b")
    ran = make("ran")
    assert n(ran, biases=False) == 2 * H * H + 3 * H * I  # sec. 2.1: "2 d_h^2 + 3 d_h d_i in a RAN"
    assert n(ran) == 2 * H * H + 3 * H * I + 2 * H
    simple = make("ran-simple", input_size=H)
    assert n(simple) == 2 * H * H + 2 * H * H + 2 * H  # W_ic, W_fc, W_ix, W_fx, b_i, b_f


def test_table_1_medium_rnn_parameter_count():
    # Table 1: two layers of 650-dimension RANs (embedding size 650) -> 4.23M RNN parameters
    layer = get_cell("ran")(650, 650)
    total = 2 * sum(p.numel() for p in layer.parameters())
    assert round(total / 1e6, 2) == 4.23


@pytest.mark.parametrize("g", ["relu", "sigmoid", "Tanh", None])
def test_impossible_g_raises(g):
    with pytest.raises(CellOptionError, match="g must be one of"):
        get_cell("ran")(I, H, g=g)


def test_ran_simple_needs_input_size_equal_hidden_size():
    with pytest.raises(CellOptionError, match="input_size must equal hidden_size"):
        get_cell("ran-simple")(I, H)


def _gates_along(cell, x):
    """Run the cell from c_0 = 0 and collect its content, input and forget gates at every step."""
    c = cell.init_state(BATCH)[0]
    contents, inputs, forgets, outs = [], [], [], []
    for t in range(x.shape[1]):
        content, i, f = cell.gates(cell.project_inputs(x[:, t]), c)
        out, (c,) = cell.step(x[:, t], (c,))
        contents.append(content), inputs.append(i), forgets.append(f), outs.append(c)
    return contents, inputs, forgets, outs


def _weighted_sum(contents, inputs, forgets, t):
    """eq. 3: sum_j w_j^t * content_j with w_j^t = i_j * prod_{k=j+1..t} f_k."""
    total = torch.zeros_like(contents[0])
    for j in range(t + 1):
        w = inputs[j].clone()
        for k in range(j + 1, t + 1):
            w = w * forgets[k]
        assert ((w > 0) & (w < 1)).all()  # soft component-wise binary filters
        total = total + w * contents[j]
    return total


def test_ran_simple_state_is_a_weighted_sum_of_the_inputs_eq_3():
    cell = make("ran-simple", input_size=H)
    x = randn(BATCH, T, H, seed=5)
    contents, inputs, forgets, states = _gates_along(cell, x)
    seq_out, _ = cell(x)
    for t in range(T):
        torch.testing.assert_close(contents[t], x[:, t])  # the content is x_t itself
        want = _weighted_sum(contents, inputs, forgets, t)
        torch.testing.assert_close(states[t], want)
        torch.testing.assert_close(seq_out[:, t], want)


@pytest.mark.parametrize("g", ["tanh", "identity"])
def test_ran_state_is_a_weighted_sum_of_projected_inputs_footnote_2(g):
    cell = make("ran", g=g)
    x = randn(BATCH, T, I, seed=6)
    contents, inputs, forgets, states = _gates_along(cell, x)
    seq_out, _ = cell(x)
    for t in range(T):
        torch.testing.assert_close(contents[t], x[:, t] @ cell.W_cx.T)
        want = _weighted_sum(contents, inputs, forgets, t)
        torch.testing.assert_close(states[t], want)
        torch.testing.assert_close(seq_out[:, t], torch.tanh(want) if g == "tanh" else want)
