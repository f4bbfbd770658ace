"""Part 1: forward + backward tokens/s of every registered cell against ``torch.nn.LSTM`` and
``torch.nn.GRU`` at the same hidden size (input size = H, B=64, T=35 by default).

One contender is one whole-sequence forward ``[B, T, H] -> [B, T, H]`` from the zero state and the
backward of a fixed random output gradient (into the parameters and the input), as in a first layer.
All cells of one H run round-robin with the two torch baselines; the ratio is per round.

``--device cuda`` runs the same on a GPU (``nn.LSTM`` / ``nn.GRU`` are cuDNN's there), timed by wall
clock with the GPU synchronized, and adds ``torch.compile`` of the cells in ``Settings.cell_compiled``
and, side by side, every cell with its fast GPU path off (``cuda_graphs=False``; the ``lstm`` also on our
own loop instead of cuDNN): the issue 37 targets are read from the default (fast path on) rows.

    OMP_NUM_THREADS=1 python -m benchmarks --only 1
    python -m benchmarks --device cuda              # part 1 on the GPU, into benchmarks/cuda/
"""

from __future__ import annotations

import time

import torch
from torch import nn

from dsf_lightning.cells import build_cell, list_cells
from dsf_lightning.cells.base import SequenceLoopCell

from ._settings import Settings
from ._timing import PartResult, Row, Target, fmt_ratio, interleave, md_table

BASELINES = ("nn.LSTM", "nn.GRU")
OFF = " (fast path off)"
#: issue 37's goals on a GPU, fwd+bwd tokens/s against cuDNN's nn.LSTM: {cell: {H: ratio}}, others OTHERS
GPU_TARGETS = {"delta-rnn": {512: 1.5, 1024: 1.2}, "lstm": {512: 0.9, 1024: 0.9}, "gru": {512: 0.9, 1024: 0.9}}
GPU_TARGET_OTHERS = 0.5


def fast_path_off(cell):
    """``cell`` without the fast GPU path: no CUDA graphs, and the ``lstm`` on our own loop, not torch's kernel."""
    cell.cuda_graphs = False
    if getattr(cell, "torch_kernel_applies", None) is not None:
        cell.forward_fast = lambda x, state=None, masks=None: SequenceLoopCell.forward_fast(cell, x, state, masks)
    return cell


def _torch_rnn(kind: str, H: int) -> nn.Module:
    return (nn.LSTM if kind == "nn.LSTM" else nn.GRU)(H, H, batch_first=True)


def fwd_bwd(module: nn.Module, B: int, T: int, H: int, *, device: str = "cpu", seed: int = 0,
            forward=None):
    """A closure running one forward + backward of ``module`` (on ``device``) on fixed random data;
    ``forward``: what to call instead of ``module`` (e.g. its ``torch.compile``)."""
    module = module.to(device)
    forward = module if forward is None else forward
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, H, generator=gen).to(device).requires_grad_()
    with torch.no_grad():
        out = module(x)[0]
    g = torch.randn(out.shape, generator=gen).to(device)

    def run():
        x.grad = None
        for p in module.parameters():
            p.grad = None
        y = forward(x)[0]
        y.backward(g)

    return run


def run(settings: Settings) -> PartResult:
    t_start = time.perf_counter()
    B, T = settings.batch, settings.bptt
    cells = list_cells()
    rows: list[Row] = []
    table: dict[str, dict[int, tuple]] = {}
    for H in settings.cell_hidden:
        torch.manual_seed(0)
        contenders = {}
        for kind in BASELINES:
            contenders[kind] = fwd_bwd(_torch_rnn(kind, H), B, T, H, device=settings.device)
        for name in cells:
            contenders[name] = fwd_bwd(build_cell(name, H, H), B, T, H, device=settings.device)
            if settings.cell_fast_path_off:
                contenders[name + OFF] = fwd_bwd(fast_path_off(build_cell(name, H, H)), B, T, H, device=settings.device)
        for name in settings.cell_compiled:
            cell = build_cell(name, H, H, cuda_graphs=False)  # torch.compile makes its own graphs
            mode = settings.compile_mode if settings.compile_backend == "inductor" else None
            compiled = torch.compile(cell, backend=settings.compile_backend, mode=mode)
            label = f"{name} (torch.compile{'' if mode in (None, 'default') else ', ' + mode})"
            contenders[label] = fwd_bwd(cell, B, T, H, device=settings.device, forward=compiled)
        timings = interleave(contenders, rounds=settings.cell_rounds, warmup=1)
        case = f"B={B} T={T} H={H}"
        for name in contenders:
            rate = timings.rate(name, B * T)
            vs_lstm = timings.speedup(name, "nn.LSTM")
            vs_gru = timings.speedup(name, "nn.GRU")
            rows.append(Row(1, case, name, "fwd+bwd tokens/s", "tokens/s", rate, "nn.LSTM", vs_lstm))
            rows.append(Row(1, case, name, "fwd+bwd speed vs nn.GRU", "x", None, "nn.GRU", vs_gru))
            vs_off = timings.speedup(name, name + OFF) if name + OFF in contenders else None
            table.setdefault(name, {})[H] = (rate, vs_lstm, vs_gru, vs_off)
    Hs = settings.cell_hidden
    header = ["cell"] + [f"H={H} k tok/s" for H in Hs] + [f"H={H} vs nn.LSTM" for H in Hs] + [f"H={H} vs nn.GRU" for H in Hs]
    body = []
    for name in contenders:
        r = table[name]
        body.append([f"`{name}`"] + [f"{r[H][0].median / 1e3:.1f}" for H in Hs]
                    + [fmt_ratio(r[H][1]) for H in Hs] + [fmt_ratio(r[H][2]) for H in Hs])
    beat = {H: sum(1 for n in cells if table[n][H][1].median >= 1.0) for H in Hs}
    md = (
        f"Forward + backward of a whole `[B={B}, T={T}, H]` sequence (input size = H, gradient into the "
        f"input and every parameter), {settings.cell_rounds} rounds round-robin per H. Ratio > 1: faster "
        "than the torch module (tokens/s ratio)."
        + (f" Device: {settings.device} ({torch.cuda.get_device_name(settings.device)}; `nn.LSTM` / `nn.GRU` run "
           "cuDNN), wall time with the GPU synchronized." if settings.device.startswith("cuda") else "")
        + "\n\n" + md_table(header, body) + "\n\n"
        + "Cells at least as fast as `nn.LSTM`: "
        + ", ".join(f"{beat[H]}/{len(cells)} at H={H}" for H in Hs) + "."
    )
    targets = []
    off = [n for n in cells if n + OFF in table]
    if off:  # the fast GPU path on vs off, and issue 37's targets
        md += ("\n\nThe fast GPU path (CUDA graphs, cuDNN for the `lstm`) on vs off, same run:\n\n"
               + md_table(["cell"] + [f"H={H} on vs off" for H in Hs],
                          [[f"`{n}`"] + [fmt_ratio(table[n][H][3]) for H in Hs] for n in off]))
        for n in off:
            for H in Hs:
                goal = GPU_TARGETS.get(n, {}).get(H, GPU_TARGET_OTHERS)
                got = table[n][H][1].median
                targets.append(Target(f"{n} fwd+bwd vs cuDNN nn.LSTM, H={H}", f"{got:.2f}x", f">= {goal}x", got >= goal))
    return PartResult(1, "Cells vs torch.nn.LSTM / nn.GRU (forward + backward tokens/s)", md, rows, targets,
                      time.perf_counter() - t_start)
