"""The contract battery, run for every registered cell and every variant in ``variants.py``:
shapes, step loop == whole sequence == chunks with carried state (float64), gradients reach every
parameter, determinism, and stacking one cell on another."""

import pytest
import torch

from dsf_lightning.cells import get_cell, list_cells

from .variants import VARIANTS

B, T, INPUT, HIDDEN = 3, 7, 5, 6


def _cases():
    for name in list_cells():
        for variant in VARIANTS.get(name, []):
            vid, options, *rest = variant
            yield pytest.param(name, options, rest[0] if rest else INPUT, id=f"{name}[{vid}]")


CASES = list(_cases())


def build(name, options, input_size, seed=0):
    torch.manual_seed(seed)
    cell = get_cell(name)(input_size, HIDDEN, **options).double()
    return cell.eval()


def inputs(input_size, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, input_size, generator=g, dtype=torch.float64)


def random_state(cell, seed=2):
    g = torch.Generator().manual_seed(seed)
    return tuple(0.5 * torch.randn(B, n, generator=g, dtype=torch.float64) for n in cell.state_sizes)


def test_every_registered_cell_has_variants():
    missing = [name for name in list_cells() if not VARIANTS.get(name)]
    assert not missing, f"registered cells without test variants in tests/cells/variants.py: {missing}"


@pytest.mark.parametrize("name,options,input_size", CASES)
def test_shapes(name, options, input_size):
    cell = build(name, options, input_size)
    x = inputs(input_size)
    out, state = cell(x)
    assert out.shape == (B, T, cell.output_size)
    assert isinstance(state, tuple) and len(state) == len(cell.state_sizes)
    for s, n in zip(state, cell.state_sizes):
        assert s.shape == (B, n) and s.dtype == torch.float64
    out_t, state_t = cell.step(x[:, 0])
    assert out_t.shape == (B, cell.output_size)
    assert [tuple(s.shape) for s in cell.init_state(B)] == [(B, n) for n in cell.state_sizes]


@pytest.mark.parametrize("name,options,input_size", CASES)
def test_step_loop_equals_sequence_equals_chunks(name, options, input_size):
    cell = build(name, options, input_size)
    x, h0 = inputs(input_size), random_state(cell)
    with torch.no_grad():
        seq_out, seq_state = cell(x, h0)

        state, step_outs = h0, []
        for t in range(T):
            out_t, state = cell.step(x[:, t], state)
            step_outs.append(out_t)
        torch.testing.assert_close(torch.stack(step_outs, 1), seq_out, rtol=1e-10, atol=1e-12)
        for a, b in zip(state, seq_state):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)

        state, chunk_outs = h0, []
        for lo, hi in ((0, 3), (3, 4), (4, T)):
            out_c, state = cell(x[:, lo:hi], state)
            chunk_outs.append(out_c)
        torch.testing.assert_close(torch.cat(chunk_outs, 1), seq_out, rtol=1e-10, atol=1e-12)
        for a, b in zip(state, seq_state):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name,options,input_size", CASES)
def test_gradients_reach_every_parameter(name, options, input_size):
    cell = build(name, options, input_size).train()
    torch.manual_seed(3)
    out, state = cell(inputs(input_size), random_state(cell))
    loss = (out**2).sum() + sum((s**2).sum() for s in state)
    loss.backward()
    params = dict(cell.named_parameters())
    assert params, f"{name} has no parameters"
    dead = [n for n, p in params.items() if p.grad is None or not torch.isfinite(p.grad).all() or p.grad.abs().sum() == 0]
    assert not dead, f"parameters with no (finite, non-zero) gradient: {dead}"


@pytest.mark.parametrize("name,options,input_size", CASES)
def test_deterministic(name, options, input_size):
    a, b = build(name, options, input_size, seed=7), build(name, options, input_size, seed=7)
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert na == nb and torch.equal(pa, pb)
    x = inputs(input_size)
    with torch.no_grad():
        out_a, _ = a(x)
        out_b, _ = b(x)
        out_a2, _ = a(x)
    assert torch.equal(out_a, out_b) and torch.equal(out_a, out_a2)


@pytest.mark.parametrize("name,options,input_size", CASES)
def test_cell_output_feeds_another_cell(name, options, input_size):
    first = build(name, options, input_size)
    second = get_cell("delta-rnn")(first.output_size, 4).double().eval()
    out, _ = first(inputs(input_size))
    out2, _ = second(out)
    assert out2.shape == (B, T, 4)
    if input_size == first.output_size:  # the same cell stacked on itself
        out3, _ = build(name, options, first.output_size)(out)
        assert out3.shape == out.shape
