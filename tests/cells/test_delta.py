"""DSF cells one step at a time against the paper's equations, parameter counts, bad options."""

import pytest
import torch

from dsf_lightning.cells import CellOptionError, get_cell

F64 = torch.float64
I, H, B = 4, 3, 2


def sig(v):
    return 1 / (1 + torch.exp(-v))


def fill(cell, seed=0):
    """Give every parameter distinct non-trivial values (zero biases would hide mistakes)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in cell.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.7)
    return cell


@pytest.fixture
def x_and_h():
    g = torch.Generator().manual_seed(11)
    return torch.randn(B, I, generator=g, dtype=F64), torch.randn(B, H, generator=g, dtype=F64)


@pytest.mark.parametrize("outer", ["identity", "tanh", "relu"])
def test_full_delta_rnn_step_is_eq11_with_eq5_gate(x_and_h, outer):
    x, h = x_and_h
    c = fill(get_cell("delta-rnn")(I, H, outer_activation=outer).double().eval())
    Wx, Vh = x @ c.W.T, h @ c.V.T
    d1 = c.alpha * Vh * Wx  # eq. 11
    d2 = c.beta1 * Vh + c.beta2 * Wx
    z = torch.tanh(d1 + d2 + c.b)
    r = sig(Wx + c.b_r)  # eq. 5, sharing W
    Phi = {"identity": lambda v: v, "tanh": torch.tanh, "relu": torch.relu}[outer]
    expected = Phi((1 - r) * z + r * h)  # eq. 8
    out, (h_new,) = c.step(x, (h,))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(h_new, expected)


def test_elman_inner_is_eq8(x_and_h):
    x, h = x_and_h
    c = fill(get_cell("delta-rnn")(I, H, inner="elman").double())
    z = torch.tanh(h @ c.V.T + x @ c.W.T + c.b)
    r = sig(x @ c.W.T + c.b_r)
    torch.testing.assert_close(c.step(x, (h,))[0], (1 - r) * z + r * h)


def test_second_order_inner_is_eq10_and_fixed_gate_is_eq4(x_and_h):
    x, h = x_and_h
    c = fill(get_cell("delta-rnn")(I, H, inner="second-order", gate="fixed").double())
    z = torch.tanh((h @ c.V.T) * (x @ c.W.T) + c.b)
    r = sig(c.b_r)  # eq. 4: does not depend on the data
    torch.testing.assert_close(c.step(x, (h,))[0], (1 - r) * z + r * h)


def test_simple_delta_rnn_is_eq7(x_and_h):
    x, h = x_and_h
    c = fill(get_cell("delta-rnn-simple")(I, H).double())
    torch.testing.assert_close(c.step(x, (h,))[0], torch.tanh(h @ c.V.T + x @ c.W.T + c.b + h))


def test_layer_norm_delta_rnn_is_eqs_20_to_23(x_and_h):
    x, h = x_and_h
    c = fill(get_cell("delta-rnn-ln")(I, H).double())

    def ln(v, norm):
        mu, var = v.mean(-1, keepdim=True), v.var(-1, unbiased=False, keepdim=True)
        return (v - mu) / torch.sqrt(var + 1e-5) * norm.weight + norm.bias

    d_rec, d_dat = ln(h @ c.V.T, c.norm_rec), ln(x @ c.W.T, c.norm_data)  # eq. 20
    z = torch.tanh(d_rec * d_dat + d_rec + d_dat)  # eq. 21
    r = sig(d_dat + c.b_r)  # eq. 23
    torch.testing.assert_close(c.step(x, (h,))[0], (1 - r) * z + r * h)  # eq. 22


def test_inner_dropout_masks_only_z_in_training(x_and_h):
    """Eq. 12: in training h = (1-r)*DROP(z) + r*h_prev, so dropped units fall back to r*h_prev."""
    x, h = x_and_h
    c = fill(get_cell("delta-rnn")(I, 50, dropout=0.5).double())
    h = torch.randn(B, 50, dtype=F64)
    Wx = x @ c.W.T
    r = sig(Wx + c.b_r)
    torch.manual_seed(0)
    out = c.train().step(x, (h,))[0]
    dropped = torch.isclose(out, r * h)
    assert 0.25 < dropped.double().mean() < 0.75  # about half the units lost their proposal
    eval_out = c.eval().step(x, (h,))[0]
    kept = ~dropped
    # kept units carry the proposal scaled by 1/(1-p) (inverted dropout)
    z = c.inner_function(Wx, h)
    torch.testing.assert_close(out[kept], ((1 - r) * z * 2 + r * h)[kept])
    torch.testing.assert_close(eval_out, (1 - r) * z + r * h)


def count(cell):
    return sum(p.numel() for p in cell.parameters())


@pytest.mark.parametrize("H_,V", [(3, 7), (100, 50), (256, 10000)])
def test_parameter_count_of_full_delta_rnn_lm_matches_paper(H_, V):
    """DSF sec 2.3: a one-layer full Delta-RNN LM has H*H + 2*H*V + 5H + V parameters; the cell's
    input matrix is the embedding of the one-hot input and the decoder adds H*V + V."""
    cell = get_cell("delta-rnn")(V, H_)
    decoder = H_ * V + V
    assert count(cell) + decoder == H_ * H_ + 2 * H_ * V + 5 * H_ + V


@pytest.mark.parametrize(
    "name,options,message",
    [
        ("delta-rnn", {"inner": "third-order"}, "inner"),
        ("delta-rnn", {"gate": "sometimes"}, "gate"),
        ("delta-rnn", {"outer_activation": "swish"}, "outer_activation"),
        ("delta-rnn", {"dropout": 1.0}, "dropout"),
        ("delta-rnn", {"dropout": -0.1}, "dropout"),
        ("delta-rnn-simple", {"outer_activation": "gelu"}, "outer_activation"),
        ("delta-rnn-ln", {"dropout": 2}, "dropout"),
    ],
)
def test_impossible_options_name_the_option(name, options, message):
    with pytest.raises(CellOptionError, match=message):
        get_cell(name)(I, H, **options)


def test_wrong_input_shape_is_a_clear_error():
    c = get_cell("delta-rnn")(I, H)
    with pytest.raises(ValueError, match=r"input_size=4"):
        c(torch.randn(2, 5, I + 1))
    with pytest.raises(ValueError, match=r"\[B, T, input_size\]"):
        c(torch.randn(5, I))
