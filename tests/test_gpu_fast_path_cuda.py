"""The fast GPU path on a real GPU (issue 37; skipped without CUDA): every cell's training windows are
captured as CUDA graphs by default and equal the eager path (``cuda_graphs=False``) and the reference
within fp32 tolerances, values and gradients, over windows with carried state; the peephole-free
``lstm`` runs cuDNN and stays within bf16 tolerances of our loop under ``bf16`` autocast.

Run by ``benchmarks/cuda/run_all.sh`` (``python -m pytest tests/test_gpu_fast_path_cuda.py``)."""

import copy

import pytest
import torch

from dsf_lightning.cells import build_cell, list_cells
from dsf_lightning.cells.base import _WINDOW_GRAPHS, SequenceLoopCell

from .cells.variants import VARIANTS

if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the fast GPU path is checked on the CPU by tests/cells/test_gpu_fast_path.py",
                allow_module_level=True)

DEVICE = torch.device("cuda")
B, H, WINDOWS, T = 8, 32, 3, 7


def _cell(name, options, **common):
    torch.manual_seed(0)
    cell = build_cell(name, H, H, **options, **common).to(DEVICE).train()  # input = H (ran-simple needs it)
    return cell, H


def _train_windows(cell, input_size, seed=1):
    """WINDOWS training windows with the state carried and detached between them (truncated BPTT), a
    backward after each; every output, state and parameter gradient, in order."""
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    state, results = None, []
    for _ in range(WINDOWS):
        x = torch.randn(B, T, input_size, device=DEVICE, generator=g).requires_grad_()
        for p in cell.parameters():
            p.grad = None
        out, state = cell(x, state)
        (out.square().mean() + sum(s.square().mean() for s in state)).backward()
        results += [out.detach().clone(), *(s.detach().clone() for s in state), x.grad.clone()]
        results += [p.grad.clone() for p in cell.parameters() if p.grad is not None]
        state = tuple(s.detach() for s in state)
    return results


def _deterministic(name):
    """Cells whose training windows draw no random numbers with their default options (for the others the
    graph's RNG stream differs from eager's, so only a run of the graph is checked)."""
    probe = build_cell(name, 4, 4)
    return not getattr(probe, "dropout", 0) and getattr(probe, "mode", None) != "sample"


@pytest.fixture(autouse=True)
def _no_tf32():
    """Full fp32 products in cuDNN as in our matmuls (cuDNN's RNN takes TF32 by default)."""
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("name", list_cells())
def test_every_cells_training_windows_run_as_cuda_graphs_equal_to_eager_in_fp32(name):
    options = VARIANTS[name][0][1]
    graphed, input_size = _cell(name, options)
    eager = copy.deepcopy(graphed)
    eager.cuda_graphs = False
    ref = copy.deepcopy(graphed)
    ref.implementation = "reference"
    torch.manual_seed(5)
    got = _train_windows(graphed, input_size)
    graphs = _WINDOW_GRAPHS.get(graphed)
    assert graphs is not None and graphs.graphs and not graphs.failed, f"{name}: no graph was captured"
    assert graphs.replays == WINDOWS, f"{name}: {WINDOWS - graphs.replays} window(s) ran eager"
    assert _WINDOW_GRAPHS.get(eager) is None
    if not _deterministic(name):
        assert all(torch.isfinite(t).all() for t in got)
        return
    torch.manual_seed(5)
    want = _train_windows(eager, input_size)
    torch.manual_seed(5)
    ref_out = _train_windows(ref, input_size)
    assert len(got) == len(want) == len(ref_out)
    for a, b, c in zip(got, want, ref_out):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(a, c, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cudnns_lstm_on_our_parameters_equals_our_loop(dtype):
    cell, input_size = _cell("lstm", {})
    with torch.no_grad():
        for p in cell.parameters():
            p.normal_(0, 0.3)
    x = torch.randn(B, T, input_size, device=DEVICE, requires_grad=True)
    assert cell.torch_kernel_applies(x, None)
    ours = copy.deepcopy(cell)
    ours.forward_fast = lambda x, s=None, m=None: SequenceLoopCell.forward_fast(ours, x, s, m)
    results = []
    for c in (cell, ours):
        c.cuda_graphs = False  # cuDNN against our loop, each eager
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            out, (h, cs) = c(x)
            loss = out.float().square().sum() + cs.float().square().sum()
        grads = torch.autograd.grad(loss, [x, *c.parameters()])
        results.append([out.float(), h.float(), cs.float(), *grads])
    for a, b in zip(*results):
        if dtype == torch.float32:  # another summation order: 2.9e-5 apart at most on an H200 (3 of 1792)
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
        else:  # bf16 has 8 bits of mantissa: the two roundings differ elementwise, not in norm
            assert (a - b).norm() <= 2e-2 * b.norm(), (a - b).norm() / b.norm()


def test_gradients_accumulated_over_graphed_windows_equal_eagers():
    """``.grad`` must not keep the graph's static gradient buffer, which the next replay overwrites
    (pytorch/pytorch#181723): two windows, one backward each, no zeroing in between."""
    graphed, input_size = _cell("delta-rnn", {})
    eager = copy.deepcopy(graphed)
    eager.cuda_graphs = False
    g = torch.Generator(device=DEVICE).manual_seed(3)
    xs = [torch.randn(B, T, input_size, device=DEVICE, generator=g) for _ in range(2)]
    for cell in (graphed, eager):
        state = None
        for x in xs:
            out, state = cell(x, state)
            out.square().mean().backward()
            state = tuple(s.detach() for s in state)
    assert _WINDOW_GRAPHS[graphed].replays == 2
    for a, b in zip(graphed.parameters(), eager.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6)

