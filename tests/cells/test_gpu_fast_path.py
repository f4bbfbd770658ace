"""The fast GPU path (issue 37), checked on the CPU: which path a window takes on a CUDA device
(decided with device stand-ins), the graphed window with its capture emulated (static gradient buffers) equal to
the reference in float64, and torch's fused LSTM (cuDNN's on a GPU, also run on the CPU) equal to the
reference and to our own loop in values and gradients. ``tests/test_gpu_fast_path_cuda.py`` runs the real
capture and cuDNN on a GPU."""

import contextlib

import pytest
import torch

from dsf_lightning.cells import build_cell, list_cells
from dsf_lightning.cells.base import _WINDOW_GRAPHS, CellOptionError, SequenceLoopCell
from dsf_lightning.ops.cuda_graph import WindowGraphs, inside_window, window_path

from .test_cell_contract import CASES, build, inputs, random_state

ON = dict(cuda_graphs=True, training=True, grad_enabled=True, autocast=False)


@pytest.mark.parametrize("device", [torch.device("cuda"), torch.device("cuda", 1), "cuda:0"])
def test_a_training_window_on_a_cuda_device_runs_as_a_cuda_graph_by_default(device):
    assert window_path(device, **ON) == "cuda-graph"
    assert build_cell("delta-rnn", 4, 4).cuda_graphs is True  # the default every cell starts with


@pytest.mark.parametrize("change", [
    {"device": torch.device("cpu")},   # the CPU keeps its path
    {"cuda_graphs": False},            # the opt-out
    {"training": False},               # evaluation: no backward to capture
    {"grad_enabled": False},
    {"autocast": True},                # make_graphed_callables refuses autocast's weight cache
    {"capturing": True},               # inside another capture
    {"compiling": True},               # torch.compile traces the window (reduce-overhead: its own graphs)
])
def test_everything_else_stays_eager(change):
    args = {**ON, "device": torch.device("cuda"), **change}
    assert window_path(args.pop("device"), **args) == "eager"


def test_cuda_graphs_is_an_option_of_every_cell_and_takes_only_a_bool():
    for name in list_cells():
        assert build_cell(name, 6, 6, cuda_graphs=False).cuda_graphs is False, name
    with pytest.raises(CellOptionError, match="cuda_graphs must be true or false"):
        build_cell("lstm", 4, 4, cuda_graphs="no")


def _direct(module, sample_args):
    """The capture replaced by a direct call (what the replayed graph computes)."""
    return module


def _graphed(cell, captures):
    """``cell`` with its windows routed through :class:`WindowGraphs` as on a GPU, the capture emulated."""
    def capture(module, sample):
        captures.append(tuple(a.shape for a in sample))
        return _static_buffer_capture(module, sample)

    _WINDOW_GRAPHS[cell] = WindowGraphs(cell, type(cell).forward_fast, capture=capture)
    cell.window_path = lambda x: "cuda-graph"  # the stand-in for a CUDA device
    return cell


def _two_windows(cell, x, state, masks=None):
    """Two windows with the state carried (its graph kept, so gradients cross the boundary); every output,
    the final state and the gradients of the input, the first state and every parameter."""
    x = x.clone().requires_grad_()
    state = tuple(s.clone().requires_grad_() for s in state)
    out1, mid = cell(x[:, :4], state, masks)
    out2, last = cell(x[:, 4:], mid, masks)
    out = torch.cat((out1, out2), 1)
    loss = (out * torch.linspace(-1, 1, out.shape[-1], dtype=out.dtype)).sum() + sum((s**2).sum() for s in last)
    params = [p for p in cell.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [x, *state, *params], allow_unused=True)
    return [out, *last, *(g for g in grads if g is not None)]


@pytest.mark.parametrize("name,options,input_size", CASES)
def test_the_graphed_window_computes_the_references_values_and_gradients_in_float64(name, options, input_size):
    captures = []
    cell = _graphed(build(name, options, input_size), captures)
    ref = build(name, options, input_size)
    ref.implementation = "reference"
    x, state = torch.cat((inputs(input_size), inputs(input_size, seed=5)), 1), random_state(cell)
    got, want = _two_windows(cell, x, state), _two_windows(ref, x, state)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    assert len(captures) == 2  # windows of 4 and of 10 steps: one graph each, ...
    _two_windows(cell, x, state)
    assert len(captures) == 2 and _WINDOW_GRAPHS[cell].replays == 4  # ... replayed after that


def test_the_dropout_mask_reaches_the_graphed_window_as_an_input():
    captures = []
    cell = _graphed(build("delta-rnn", {}, 5), captures)
    ref = build("delta-rnn", {}, 5)
    ref.implementation = "reference"
    x, state = torch.cat((inputs(5), inputs(5, seed=5)), 1), random_state(cell)
    for seed in (0, 1):  # a new mask each step of training: the graph reads the one it is given
        mask = (torch.rand(state[0].shape, generator=torch.Generator().manual_seed(seed)) > 0.3).double() / 0.7
        for a, b in zip(_two_windows(cell, x, state, (mask,)), _two_windows(ref, x, state, (mask,))):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    assert [len(s) for s in captures] == [3, 3]  # (x, h0, mask) for the windows of 4 and 10 steps


def test_a_second_call_before_the_first_ones_backward_runs_eager():
    captures, calls = [], []
    cell = _graphed(build("elman", {}, 5), captures)
    graphs = _WINDOW_GRAPHS[cell]
    graphs.capture = lambda module, sample: (captures.append(1), lambda *a: (calls.append(1), module(*a))[1])[1]
    x, state = inputs(5).requires_grad_(), random_state(cell)
    out1, _ = cell(x, state)
    out2, _ = cell(x, state)  # the first replay's buffers are still waiting for its backward
    assert (len(captures), len(calls)) == (1, 1)
    (out1.sum() + out2.sum()).backward()
    cell(x, state)[0].sum().backward()  # after the backward the graph replays again
    assert (len(captures), len(calls)) == (1, 2)


def test_a_layer_called_inside_another_layers_window_is_part_of_its_graph():
    seen = []

    def window(layer, x, state, masks):
        seen.append(inside_window())  # a nested RecurrentCell.window_path reads this: eager, no graph of its own
        return type(layer).forward_fast(layer, x, state, masks)

    cell = build("elman", {}, 5)
    _WINDOW_GRAPHS[cell] = WindowGraphs(cell, window, capture=_direct)
    cell.window_path = lambda x: "cuda-graph"
    cell(inputs(5), random_state(cell))
    assert seen == [True] and not inside_window()


def _static_buffer_capture(module, sample):
    """What a replayed graph hands autograd, emulated on the CPU: every gradient out of one static buffer
    per input, overwritten by the next backward (``make_graphed_callables``' Graphed.backward)."""
    inputs = (*sample, *module.parameters())
    static = [torch.zeros_like(t) for t in inputs]

    class Replay(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *given):
            with torch.enable_grad():
                args = [g.detach().requires_grad_(g.requires_grad) for g in given[: len(sample)]]
                ctx.outs, ctx.args = module(*args), args
            return tuple(o.detach() for o in ctx.outs)

        @staticmethod
        def backward(ctx, *grads):
            wanted = [a for a in (*ctx.args, *module.parameters()) if a.requires_grad]
            got = iter(torch.autograd.grad(ctx.outs, wanted, grads, allow_unused=True))
            for buf, t in zip(static, (*ctx.args, *module.parameters())):
                g = next(got) if t.requires_grad else None
                buf.copy_(g if g is not None else torch.zeros_like(buf))
            return tuple(b.detach() for b in static)

    return lambda *args: Replay.apply(*args, *module.parameters())


def test_gradients_accumulated_over_replayed_windows_are_not_overwritten():
    """``.grad`` keeps a gradient handed out of a graph's static buffer unless it is copied; the next
    replay's backward would overwrite it (pytorch/pytorch#181723: accumulate_grad_batches > 1)."""
    cell = build("delta-rnn", {}, 5).train()
    _WINDOW_GRAPHS[cell] = WindowGraphs(cell, type(cell).forward_fast, capture=_static_buffer_capture)
    cell.window_path = lambda x: "cuda-graph"
    ref = build("delta-rnn", {}, 5).train()
    for c in (cell, ref):
        state = random_state(c)
        for seed in (1, 5):
            out, state = c(inputs(5, seed=seed), state)
            out.square().sum().backward()
            state = tuple(s.detach() for s in state)
    assert _WINDOW_GRAPHS[cell].replays == 2
    for (name, a), b in zip(cell.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-12, msg=name)


def test_a_capture_that_fails_leaves_the_layer_eager(caplog):
    cell = _graphed(build("elman", {}, 5), [])

    def refuse(module, sample):
        raise RuntimeError("operation not permitted when stream is capturing")

    _WINDOW_GRAPHS[cell].capture = refuse
    ref = build("elman", {}, 5)
    x, state = inputs(5), random_state(cell)
    torch.testing.assert_close(cell(x, state)[0], ref(x, state)[0], rtol=0, atol=0)
    assert _WINDOW_GRAPHS[cell].failed and "CUDA graph capture of ElmanCell failed" in caplog.text



@pytest.mark.parametrize("fails", [False, True])
def test_the_capture_runs_with_the_garbage_collector_paused(monkeypatch, fails):
    """Python's cyclic GC collecting an earlier graph inside a capture frees CUDA memory, which a capturing
    stream refuses: on an H200 irlm's and sr-lstm-p's captures failed that way after other cells' graphs
    (tests/test_gpu_fast_path_cuda.py). The capture runs with the collector off, and on again after, also
    when the capture raises; a collector the caller had switched off stays off."""
    import gc

    seen = []

    def capture(module, sample, allow_unused_input):
        seen.append(gc.isenabled())
        if fails:
            raise RuntimeError("capture failed")
        return module

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", capture)
    assert gc.isenabled()
    with pytest.raises(RuntimeError) if fails else contextlib.nullcontext():
        WindowGraphs._make_graphed(torch.nn.Identity(), (torch.zeros(1),))
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(RuntimeError) if fails else contextlib.nullcontext():
            WindowGraphs._make_graphed(torch.nn.Identity(), (torch.zeros(1),))
        assert seen == [False, False] and not gc.isenabled()
    finally:
        gc.enable()

# -- torch's fused LSTM for the peephole-free lstm ----------------------------------------------------
def _random_lstm(**options):
    cell = build("lstm", options, 5)
    with torch.no_grad():
        for p in cell.parameters():
            p.normal_(0, 0.6)  # every block far from its initial value: a swapped block would show
    return cell


@pytest.mark.parametrize("forget_bias", [1.0, 0.0])
def test_torchs_lstm_kernel_equals_the_reference_and_our_loop_over_two_windows_in_float64(forget_bias):
    cell = _random_lstm(forget_bias=forget_bias)
    x = torch.cat((inputs(5), inputs(5, seed=5)), 1)
    assert cell.torch_kernel_applies(x, None)
    ours = build("lstm", {"forget_bias": forget_bias}, 5)
    ours.load_state_dict(cell.state_dict())
    ours.forward_fast = lambda x, s=None, m=None: SequenceLoopCell.forward_fast(ours, x, s, m)  # our fused loop
    ref = build("lstm", {"forget_bias": forget_bias}, 5)
    ref.load_state_dict(cell.state_dict())
    ref.implementation = "reference"
    got, loop, want = (_two_windows(c, x, random_state(cell)) for c in (cell, ours, ref))
    assert len(got) == len(want) == 3 + 1 + 2 + 3  # out, h_T, c_T; dx; dh0, dc0; dW, dV, db
    for a, b, c in zip(got, loop, want):
        torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(b, c, rtol=1e-10, atol=1e-12)


def test_the_gradient_reaches_the_lstms_own_parameters():
    cell = _random_lstm()
    out, (h, c) = cell(inputs(5))
    (out.sum() + c.sum()).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in (cell.W, cell.V, cell.b))


@pytest.mark.parametrize("options,masks,ids", [
    ({"peepholes": True}, False, False), ({"peepholes": "matrix"}, False, False),
    ({}, True, False), ({}, False, True),
])
def test_what_torchs_lstm_cannot_express_keeps_our_path(options, masks, ids):
    cell = build("lstm", options, 5)
    x = torch.randint(0, 5, (3, 7)) if ids else inputs(5)
    state_masks = (torch.full((3, 6), 2.0, dtype=torch.float64), None) if masks else None
    assert not cell.torch_kernel_applies(x, state_masks)


def test_torchs_lstm_kernel_under_cpu_autocast_stays_near_float32():
    cell = _random_lstm().float()
    x = inputs(5).float()
    want, (want_h, want_c) = cell(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, (h, c) = cell(x)
    assert h.dtype == c.dtype == torch.float32  # the carried state keeps its dtype
    for a, b in ((got.float(), want), (h, want_h), (c, want_c)):
        torch.testing.assert_close(a, b, rtol=0.05, atol=0.05)
