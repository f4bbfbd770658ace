"""SCRN (Kabdolov, Assylbekov & Takhanov 2018, "Reproducing and Regularizing the SCRN Model"): eqs 1-2, 5, 7,
sec. 6.1."""

import math

import pytest
import torch

from dsf_lightning.cells import CellOptionError, get_cell

I, H, S, BATCH = 5, 4, 3, 2


def make(**options):
    torch.manual_seed(0)
    return get_cell("scrn")(I, H, context_size=S, **options).double()


def known_params(cell):
    """Fill every parameter with fixed, distinct values (float64)."""
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in cell.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("alpha", [0.95, 0.3])
def test_one_step_is_eqs_1_and_2(alpha):
    cell = make(alpha=alpha)
    known_params(cell)
    x, s0, h0 = randn(BATCH, I, seed=1), randn(BATCH, S, seed=2), randn(BATCH, H, seed=3)
    # the paper's row-vector matrices: B [I, d_s], A [I, d_h], P [d_s, d_h], R [d_h, d_h]
    B, A, P, R = cell.B.T, cell.A.T, cell.P.T, cell.R.T
    s = (1 - alpha) * (x @ B) + alpha * s0  # eq. 1
    h = 1 / (1 + torch.exp(-(x @ A + s @ P + h0 @ R + cell.b)))  # eq. 2, logistic sigma
    out, (s1, h1) = cell.step(x, (s0, h0))
    torch.testing.assert_close(s1, s)
    torch.testing.assert_close(h1, h)
    torch.testing.assert_close(out, torch.cat([s, h], dim=1))  # eq. 7: y_t = [s_t; h_t]


def test_one_step_hidden_output_tanh_no_bias_learned_alpha():
    cell = make(output="hidden", hidden_activation="tanh", bias=False, learn_alpha=True, alpha=0.8)
    known_params(cell)
    with torch.no_grad():
        cell.alpha_logit.fill_(0.4)
    alpha = 1 / (1 + math.exp(-0.4))
    x, s0, h0 = randn(BATCH, I, seed=4), randn(BATCH, S, seed=5), randn(BATCH, H, seed=6)
    s = (1 - alpha) * (x @ cell.B.T) + alpha * s0
    h = torch.tanh(x @ cell.A.T + s @ cell.P.T + h0 @ cell.R.T)
    out, (s1, h1) = cell.step(x, (s0, h0))
    torch.testing.assert_close(s1, s)
    torch.testing.assert_close(out, h)  # sec. 6.1: the softmax reads h_t alone
    assert cell.output_size == H


def test_parameter_count_from_matrices_A_B_P_R():
    def n(cell):
        return sum(p.numel() for p in cell.parameters())
    assert n(make()) == I * (S + H) + S * H + H * H + H  # A, B, P, R + bias of eq. 2
    assert n(make(bias=False)) == I * (S + H) + S * H + H * H
    assert n(make(learn_alpha=True)) == I * (S + H) + S * H + H * H + H + 1
    assert dict(make().named_parameters()).keys() == {"A", "B", "P", "R", "b"}


def test_counts_match_eq_5_and_dense_embeddings():
    vocab, d_s, d_h = 50, 4, 7
    # one-hot inputs (I = |W|): input projections A, B plus a softmax over y_t = [s; h] (eqs 3, 8)
    # spend 2 |W| (d_s + d_h) parameters on embeddings, eq. 5
    cell = get_cell("scrn")(vocab, d_h, context_size=d_s)
    input_side = cell.A.numel() + cell.B.numel()
    softmax = cell.output_size * vocab  # [U; V] of eq. 8
    assert input_side + softmax == 2 * vocab * (d_s + d_h)
    # dense embeddings (sec. 3): E [|W|, d_h] in front, so A is [d_h, d_h] and B [d_h, d_s];
    # embeddings then cost |W| (2 d_h + d_s), d_s |W| less than eq. 5
    dense = get_cell("scrn")(d_h, d_h, context_size=d_s)
    assert dense.A.numel() + dense.B.numel() == d_h * (d_h + d_s)
    assert vocab * d_h + dense.output_size * vocab == vocab * (2 * d_h + d_s) == 2 * vocab * (d_s + d_h) - d_s * vocab
    # sec. 6.1: removing the context from the softmax saves d_s |W| more
    hidden_only = get_cell("scrn")(d_h, d_h, context_size=d_s, output="hidden")
    assert (dense.output_size - hidden_only.output_size) * vocab == d_s * vocab


def test_fixed_alpha_is_a_buffer_learned_alpha_a_parameter():
    fixed = make(alpha=0.9)
    assert "alpha_fixed" in dict(fixed.named_buffers()) and "alpha_fixed" in fixed.state_dict()
    assert all("alpha" not in name for name, _ in fixed.named_parameters())
    assert fixed.alpha.item() == pytest.approx(0.9)
    learned = make(alpha=0.9, learn_alpha=True)
    assert "alpha_logit" in dict(learned.named_parameters())
    assert learned.alpha.item() == pytest.approx(0.9)


@pytest.mark.parametrize(
    "options,name",
    [
        ({"context_size": 0}, "context_size"),
        ({"context_size": 2.5}, "context_size"),
        ({"alpha": 1.5}, "alpha"),
        ({"alpha": -0.1}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"alpha": 1.0, "learn_alpha": True}, "alpha"),
        ({"alpha": 0.0, "learn_alpha": True}, "alpha"),
        ({"learn_alpha": "yes"}, "learn_alpha"),
        ({"output": "context"}, "output"),
        ({"hidden_activation": "softplus"}, "hidden_activation"),
        ({"bias": 1}, "bias"),
    ],
)
def test_impossible_options_raise(options, name):
    with pytest.raises(CellOptionError, match=name):
        get_cell("scrn")(I, H, **options)


def test_alpha_one_freezes_the_context_and_alpha_zero_forgets_it():
    x, s0, h0 = randn(BATCH, 6, I, seed=7), randn(BATCH, S, seed=8), randn(BATCH, H, seed=9)
    frozen = make(alpha=1.0)
    out, (s, _) = frozen(x, (s0, h0))
    for t in range(x.shape[1]):  # s_t = s_{t-1} whatever the inputs
        torch.testing.assert_close(out[:, t, :S], s0, rtol=0, atol=0)
    memoryless = make(alpha=0.0)
    out, _ = memoryless(x, (s0, h0))
    torch.testing.assert_close(out[:, :, :S], x @ memoryless.B.T)  # s_t = x_t B


def test_context_is_a_leaky_average_of_the_inputs_independent_of_h():
    alpha, T = 0.7, 6
    cell = make(alpha=alpha)
    x, s0 = randn(BATCH, T, I, seed=10), randn(BATCH, S, seed=11)
    out_a, _ = cell(x, (s0, randn(BATCH, H, seed=12)))
    out_b, _ = cell(x, (s0, randn(BATCH, H, seed=13)))
    torch.testing.assert_close(out_a[:, :, :S], out_b[:, :, :S])  # no path from h to s
    assert not torch.allclose(out_a[:, :, S:], out_b[:, :, S:])
    xB = x @ cell.B.T  # [B, T, d_s]
    for t in range(T):  # unrolling eq. 1: s_t = (1-a) sum_j a^(t-j) x_j B + a^(t+1) s_0 (0-based t)
        want = (1 - alpha) * sum(alpha ** (t - j) * xB[:, j] for j in range(t + 1)) + alpha ** (t + 1) * s0
        torch.testing.assert_close(out_a[:, t, :S], want)


def test_hidden_output_is_the_h_half_of_both():
    both, hidden = make(), make(output="hidden")
    hidden.load_state_dict(both.state_dict())
    x = randn(BATCH, 5, I, seed=14)
    out_both, state_both = both(x)
    out_hidden, state_hidden = hidden(x)
    torch.testing.assert_close(out_hidden, out_both[:, :, S:])
    for a, b in zip(state_both, state_hidden):
        torch.testing.assert_close(a, b)


def test_learned_alpha_stays_in_open_unit_interval_after_a_huge_step():
    for direction in (1.0, -1.0):
        cell = make(learn_alpha=True, alpha=0.5)
        (direction * cell.alpha).backward()
        with torch.no_grad():
            cell.alpha_logit -= 1e6 * cell.alpha_logit.grad  # drives the sigmoid into saturation
        assert abs(cell.alpha_logit.item()) > 1e3
        assert 0.0 < cell.alpha.item() < 1.0
        out, (s, h) = cell(randn(BATCH, 5, I, seed=15))
        assert torch.isfinite(out).all()
