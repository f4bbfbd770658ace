"""The fast whole-sequence paths (Delta-RNN's fused loop, the IRLM / SCRN / RAN scans) against the
reference step loop of ``recur``: values and every gradient in float64, with carried state over chunks,
state masks (variational dropout on the recurrent state) and the Delta-RNN's eq. 12 dropout."""

import pytest
import torch

from dsf_lightning.cells import get_cell
from dsf_lightning.cells.base import RecurrentCell

F64 = torch.float64
B, T, I, H = 3, 9, 5, 6
TOL = dict(rtol=1e-10, atol=1e-12)


def _reference(cell, x, state, masks):
    return RecurrentCell.forward(cell, x, state, masks)


def _fill(cell, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in cell.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.6)
    return cell


def _data(cell, input_size, seed=1, masks=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, input_size, generator=g, dtype=F64, requires_grad=True)
    state = tuple((0.5 * torch.randn(B, n, generator=g, dtype=F64)).requires_grad_() for n in cell.state_sizes)
    state_masks = None
    if masks and cell.recurrent_dropout:  # a mask on the recurrent state h, as the model builds them
        k = cell.recurrent_state_index
        state_masks = tuple(
            (torch.rand(B, n, generator=g, dtype=F64) > 0.3).to(F64) / 0.7 if i == k else None
            for i, n in enumerate(cell.state_sizes)
        )
    return x, state, state_masks


def _run(fn, cell, x, state, masks, chunks, seed=5):
    """Outputs and final state over ``chunks`` (carried state), and gradients of a loss of both."""
    torch.manual_seed(seed)
    outs, st = [], state
    for lo, hi in chunks:
        out, st = fn(cell, x[:, lo:hi], st, masks)
        outs.append(out)
    out = torch.cat(outs, 1)
    w = torch.linspace(-1, 1, out.numel(), dtype=F64).reshape(out.shape)
    loss = (w * out).sum() + (out**2).sum() + sum((s.sin() * (i + 1)).sum() for i, s in enumerate(st))
    leaves = [x, *state, *cell.parameters()]
    leaves = [t for t in leaves if t.requires_grad]
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return out.detach(), [s.detach() for s in st], grads


def _assert_same(fast, ref):
    torch.testing.assert_close(fast[0], ref[0], **TOL)
    for a, b in zip(fast[1], ref[1]):
        torch.testing.assert_close(a, b, **TOL)
    assert len(fast[2]) == len(ref[2])
    for a, b in zip(fast[2], ref[2]):
        if b is None:
            assert a is None or torch.count_nonzero(a) == 0
        else:
            torch.testing.assert_close(a, b, **TOL)


CHUNKINGS = [((0, T),), ((0, 4), (4, 5), (5, T))]

DELTA_OPTIONS = [
    {},
    {"inner": "elman"},
    {"inner": "second-order"},
    {"gate": "fixed"},
    {"inner": "elman", "outer_activation": "tanh"},
    {"outer_activation": "tanh", "gate": "fixed"},
    {"outer_activation": "relu", "inner_activation": "sigmoid"},
    {"inner": "elman", "inner_activation": "identity"},
    {"dropout": 0.3},
    {"inner": "elman", "dropout": 0.5, "outer_activation": "tanh"},
]


@pytest.mark.parametrize("options", DELTA_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
@pytest.mark.parametrize("chunks", CHUNKINGS, ids=["whole", "chunks"])
@pytest.mark.parametrize("masks", [False, True], ids=["nomask", "mask"])
def test_delta_fast_equals_reference(options, chunks, masks):
    cell = _fill(get_cell("delta-rnn")(I, H, **options).double()).train()
    assert cell.implementation == "fast"
    x, state, state_masks = _data(cell, I, masks=masks)
    fast = _run(lambda c, *a: c(*a), cell, x, state, state_masks, chunks)
    ref = _run(_reference, cell, x, state, state_masks, chunks)
    _assert_same(fast, ref)
    # the option and the method name the same reference path
    cell.implementation = "reference"
    _assert_same(_run(lambda c, *a: c(*a), cell, x, state, state_masks, chunks), ref)
    _assert_same(_run(lambda c, *a: c.forward_reference(*a), cell, x, state, state_masks, chunks), ref)


def test_delta_fast_path_in_eval_and_no_grad_and_float32():
    cell = _fill(get_cell("delta-rnn")(I, H, dropout=0.4)).eval()  # eval: no dropout
    x = torch.randn(B, T, I)
    with torch.no_grad():
        fast = cell(x)[0]
        ref = cell.forward_reference(x)[0]
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-6)


def test_delta_reference_option_is_checked():
    from dsf_lightning.cells import CellOptionError

    with pytest.raises(CellOptionError, match="implementation"):
        get_cell("delta-rnn")(I, H, implementation="turbo")


SCAN_CELLS = [
    ("irlm", {}),
    ("irlm", {"long_context_units": 4, "r_init": -0.5}),
    ("scrn", {}),
    ("scrn", {"output": "hidden"}),
    ("scrn", {"learn_alpha": True, "alpha": 0.9}),
    ("scrn", {"hidden_activation": "tanh", "bias": False, "context_size": 3}),
    ("scrn", {"alpha": 0.0}),
    ("scrn", {"alpha": 1.0, "hidden_activation": "relu"}),
]


@pytest.mark.parametrize("name,options", SCAN_CELLS, ids=lambda v: str(v))
@pytest.mark.parametrize("chunks", CHUNKINGS, ids=["whole", "chunks"])
@pytest.mark.parametrize("masks", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("method", ["loop", "scan"])
def test_scan_cells_fast_equal_reference(name, options, chunks, masks, method):
    cell = get_cell(name)(I, H, **options).double().train()
    if name == "scrn":
        _fill(cell)
        if cell.learn_alpha:
            with torch.no_grad():
                cell.alpha_logit.fill_(1.3)
    else:  # keep the IRLM's rho as built (r inside its bounds) but make W non-trivial
        with torch.no_grad():
            cell.W.normal_(0, 0.6, generator=torch.Generator().manual_seed(0))
            cell.rho.add_(torch.linspace(-1, 1, H, dtype=F64))
    assert cell.implementation == "fast"
    cell.scan_method = method
    x, state, state_masks = _data(cell, I, masks=masks)
    fast = _run(lambda c, *a: c(*a), cell, x, state, state_masks, chunks)
    ref = _run(_reference, cell, x, state, state_masks, chunks)
    _assert_same(fast, ref)
    cell.implementation = "reference"
    _assert_same(_run(lambda c, *a: c(*a), cell, x, state, state_masks, chunks), ref)
    _assert_same(_run(lambda c, *a: c.forward_reference(*a), cell, x, state, state_masks, chunks), ref)


def test_long_sequences_take_the_blocked_scan():
    """T and B*H where the blocked scan (several chunks) runs, not only the one-chunk loop."""
    cell = get_cell("irlm")(I, H).double()
    x = torch.randn(2, 200, I, dtype=F64)
    with torch.no_grad():
        torch.testing.assert_close(cell(x)[0], cell.forward_reference(x)[0], **TOL)


@pytest.mark.parametrize("name,options,size", [("ran", {}, I), ("ran", {"g": "identity"}, I), ("ran-simple", {}, H)])
def test_ran_states_from_recorded_gates_by_scan(name, options, size):
    cell = _fill(get_cell(name)(size, H, **options).double())
    x, (c0,), _ = _data(cell, size)
    projected = cell.project_inputs(x)
    c, contents, ins, fs = c0, [], [], []
    for p_t in projected.unbind(1):
        content, i, f = cell.gates(p_t, c)
        c = i * content + f * c
        contents.append(content), ins.append(i), fs.append(f)
    ref_out, (ref_c,) = cell(x, (c0,))
    gates = [torch.stack(v, 1) for v in (contents, ins, fs)]
    for method in ("loop", "scan"):
        states = cell.states_from_gates(*gates, c0, method=method)
        torch.testing.assert_close(states[:, -1], ref_c, **TOL)
        torch.testing.assert_close(cell.g(states) if name == "ran" else states, ref_out, **TOL)
    g_scan = torch.autograd.grad(cell.states_from_gates(*gates, c0, method="scan").sum(), [x, c0], retain_graph=True)
    g_loop = torch.autograd.grad(cell.states_from_gates(*gates, c0, method="loop").sum(), [x, c0])
    for a, b in zip(g_scan, g_loop):
        torch.testing.assert_close(a, b, **TOL)
