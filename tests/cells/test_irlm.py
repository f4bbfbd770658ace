"""IRLM (Pachitariu & Sahani 2013, "Regularization and nonlinearities for neural language models: when are they
needed?"): secs 3, 5, 5.3."""

import math

import pytest
import torch

from dsf_lightning.cells import CellOptionError, get_cell

I, H, BATCH = 5, 4, 2


def make(**options):
    torch.manual_seed(0)
    return get_cell("irlm")(I, H, **options).double()


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def set_r(cell, values):
    """Set the self-connections to ``values`` by inverting r = lo + (hi - lo) sigmoid(rho)."""
    r = torch.tensor(values, dtype=torch.float64)
    low, high = cell.r_bounds()
    p = (r - low) / (high - low)
    with torch.no_grad():
        cell.rho.copy_(torch.log(p / (1 - p)))


def test_one_step_is_the_diagonal_linear_recurrence_of_sec_3():
    cell = make()
    with torch.no_grad():
        cell.W.copy_(randn(H, I, seed=1))
    set_r(cell, [0.9, -0.4, 0.0, 0.5])
    R = torch.diag(torch.tensor([0.9, -0.4, 0.0, 0.5], dtype=torch.float64))
    y, x0 = randn(BATCH, I, seed=2), randn(BATCH, H, seed=3)
    want = y @ cell.W.T + x0 @ R  # x_t = W y_t + R x_{t-1}, f = identity, R diagonal
    out, (x1,) = cell.step(y, (x0,))
    torch.testing.assert_close(x1, want)
    torch.testing.assert_close(out, want)  # the softmax reads x_t itself: no output nonlinearity


def test_one_step_with_long_context_units():
    cell = make(long_context_units=2, long_context_range=(0.7, 1.0))
    torch.testing.assert_close(cell.r, torch.tensor([0.9, 0.9, 0.0, 0.0], dtype=torch.float64))  # sec. 5.3 init
    set_r(cell, [0.75, 0.99, -0.9, 0.2])
    y, x0 = randn(BATCH, I, seed=4), randn(BATCH, H, seed=5)
    want = y @ cell.W.T + x0 * torch.tensor([0.75, 0.99, -0.9, 0.2], dtype=torch.float64)
    out, _ = cell.step(y, (x0,))
    torch.testing.assert_close(out, want)


def test_impulse_response_decays_like_r_to_the_tau():
    # sec. 5.1: the contribution of y_{t-tau} to x_t is R^tau W y_{t-tau}
    cell = make()
    r = [0.9, -0.5, 0.3, 0.99]
    set_r(cell, r)
    y = torch.zeros(BATCH, 8, I, dtype=torch.float64)
    y[:, 0] = randn(BATCH, I, seed=6)
    out, _ = cell(y)
    for tau in range(8):
        torch.testing.assert_close(out[:, tau], (y[:, 0] @ cell.W.T) * torch.tensor(r, dtype=torch.float64) ** tau)


def test_parameter_count():
    cell = make(long_context_units=2)
    assert sum(p.numel() for p in cell.parameters()) == H * I + H  # W [H, I] and diag(R) [H]
    assert dict(cell.named_parameters()).keys() == {"W", "rho"}


@pytest.mark.parametrize("vocab,approx_total", [(10_000, 10e6), (67_428, 70e6)])
def test_paper_model_sizes_sec_5(vocab, approx_total):
    # sec. 5: 512 hidden units -> "about 10 million" parameters on Penn (10k words) and
    # "about 70 million" on the large corpora (text8: 67428 words), encoder W + decoder Z + diag(R)
    with torch.device("meta"):
        cell = get_cell("irlm")(vocab, 512)
    total = sum(p.numel() for p in cell.parameters()) + 512 * vocab  # + Z [vocab, 512]
    assert total == 2 * 512 * vocab + 512
    assert abs(total - approx_total) / approx_total < 0.05


@pytest.mark.parametrize(
    "options,name",
    [
        ({"r_init": 1.0}, "r_init"),
        ({"r_init": -1.0}, "r_init"),
        ({"r_init": "0"}, "r_init"),
        ({"long_context_units": -1}, "long_context_units"),
        ({"long_context_units": H + 1}, "long_context_units"),
        ({"long_context_units": 2.0}, "long_context_units"),
        ({"long_context_units": True}, "long_context_units"),
        ({"long_context_range": (0.9, 0.7)}, "long_context_range"),
        ({"long_context_range": (0.7,)}, "long_context_range"),
        ({"long_context_range": (0.7, 1.2)}, "long_context_range"),
        ({"long_context_range": (-1.5, 0.5)}, "long_context_range"),
        ({"long_context_range": "ab"}, "long_context_range"),
        ({"long_context_range": (0.7, float("nan"))}, "long_context_range"),
        ({"long_context_range": (0.7, 0.85)}, "long_context_init"),  # default init 0.9 outside
        ({"long_context_init": 0.7}, "long_context_init"),  # the range is open
        ({"long_context_init": 1.0}, "long_context_init"),
    ],
)
def test_impossible_options_raise(options, name):
    with pytest.raises(CellOptionError, match=name):
        get_cell("irlm")(I, H, **options)


def test_timescales():
    cell = make()
    set_r(cell, [0.9, 0.7, -0.5, 0.0])
    want = [-1 / math.log(0.9), -1 / math.log(0.7), -1 / math.log(0.5), 0.0]
    torch.testing.assert_close(cell.timescales(), torch.tensor(want, dtype=torch.float64))
    # sec. 5.3: LCUs between 0.7 and 0.9 "suggest ... timescales between 3 and 10 words"
    ts = cell.timescales()
    assert 2.5 < ts[1] < 3.0 and 9.0 < ts[0] < 10.0
    assert not cell.timescales().requires_grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_r_stays_in_bounds_after_a_huge_gradient_step(dtype):
    torch.manual_seed(0)
    cell = get_cell("irlm")(I, 6, long_context_units=2).to(dtype)
    sign = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0], dtype=dtype)
    (sign * cell.r).sum().backward()  # pushes half of the units up, half down
    with torch.no_grad():
        cell.rho -= 1e6 * cell.rho.grad
    assert (cell.rho.abs() > 1e3).all()  # far into the sigmoid's saturation
    r = cell.r
    assert (r.abs() < 1).all()
    assert ((r[:2] > 0.7) & (r[:2] < 1.0)).all()  # LCUs stay in their range (sec. 5.3)
    assert torch.isfinite(cell.timescales()).all()
    out, _ = cell(torch.randn(BATCH, 50, I, dtype=dtype))
    assert torch.isfinite(out).all()


def test_long_context_mask_marks_the_first_units():
    cell = make(long_context_units=3)
    assert cell.long_context_mask.tolist() == [True, True, True, False]
    assert (cell.r[cell.long_context_mask] > 0.7).all()
