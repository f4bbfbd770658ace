"""Part 2: the recurrent matrix-multiply work of each cell's recurrence, in GFLOP/s, against the
fastest matmul path on this machine.

The peak is measured, not assumed: ``torch.mm``'s path (``F.linear``, MKL here) against oneDNN
(``fast_linear``, the library ``nn.LSTM`` uses), on a square ``N x N`` product and on the
recurrence's own shapes ``[B, H] x [H, kH]`` (forward and both backward products, as in training).

A cell's recurrence is isolated from its input projection in one of two ways (column "isolated"):

* exact: the cell's ``forward`` calls ``project_inputs`` (step-loop cells), which is made to return a
  precomputed leaf, so only the recurrence runs;
* fused: the cell computes its input products inside ``forward`` (the fused Delta-RNN / SCRN loops
  with a hand-written backward); the same product through oneDNN (``fast_linear``, forward +
  backward) is timed in the same round and subtracted. The cell's own product cannot beat that path,
  so the recurrence time is an upper bound and the achieved GFLOP/s a lower bound.

The matmul work is counted by ``torch.utils.flop_counter.FlopCounterMode`` (taught oneDNN's inner
product, which fused cells and ``fast_linear`` call directly), so element-wise work does not count:
achieved / peak says how close the recurrence comes to being matmul-bound. ``k`` is the recurrent
FLOP per step over ``2 B H^2``; the peak is the faster path at ``[B, H] x [H, kH]`` in the same round.

    OMP_NUM_THREADS=1 python -m benchmarks --only 2
"""

from __future__ import annotations

import math
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from dsf_lightning.cells import build_cell, list_cells

from ._settings import Settings
from ._timing import PartResult, Row, Stat, Target, fmt_ratio, interleave, md_table
from .bench_fast_linear import MKL, ONEDNN, linear_contenders, no_size_threshold

TARGET = 0.60  # achieved / peak at H >= 512 (issue 7)


def _inner_product_flop(x_shape, w_shape, *args, out_shape=None, **kwargs) -> int:
    """oneDNN's inner product ``x [..., K] x w [N, K]^T`` (``fast_linear`` and the fused cells use it;
    ``FlopCounterMode`` does not know it)."""
    return 2 * math.prod(x_shape[:-1]) * x_shape[-1] * w_shape[0]


def _flop_counter() -> FlopCounterMode:
    custom = {}
    op = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
    if op is not None:
        custom[op] = _inner_product_flop  # keyed by the overload packet
    return FlopCounterMode(display=False, custom_mapping=custom)


def _count(fn) -> int:
    counter = _flop_counter()
    with counter:
        fn()
    return counter.get_total_flops()


def recurrence(name: str, B: int, T: int, H: int, seed: int = 0):
    """``(whole, projection, flop, method)`` for the cell ``name`` at ``[B, T, H]``.

    ``whole``: forward + backward of the cell on a sequence. ``projection``: None when the recurrence
    is isolated exactly ("exact": the cell's ``forward`` calls ``project_inputs``, which then returns a
    precomputed leaf), else a closure to subtract ("fused": the cell computes its input products
    inside ``forward``, through oneDNN; ``projection`` is the same product through oneDNN,
    ``fast_linear``, forward + backward, and the recurrence's time is whole minus projection in the same
    round: an upper bound, since the cell's own products cannot beat that path, so the achieved
    GFLOP/s is a lower bound). ``flop``: the recurrence's matmul FLOP per call.
    """
    from dsf_lightning.ops import fast_linear

    torch.manual_seed(seed)
    cell = build_cell(name, H, H)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, H, generator=gen).requires_grad_()  # as a first layer: the input needs a gradient
    with torch.no_grad():
        projected = cell.project_inputs(x)
        g = torch.randn(cell(x)[0].shape, generator=gen)
    called = []

    def precomputed(_x):
        called.append(True)
        return projected

    cell.project_inputs = precomputed  # the instance attribute shadows the method
    with torch.no_grad():
        cell(x)
    exact = bool(called)
    if exact:
        projected.requires_grad_()
        leaves = [projected]
    else:
        del cell.project_inputs
        leaves = [x]

    def whole():
        for t in (*leaves, *cell.parameters()):
            t.grad = None
        cell(x)[0].backward(g)

    if exact:
        return whole, None, _count(whole), "exact"
    weight = torch.randn(projected.shape[-1], H, generator=gen).requires_grad_()
    g_proj = torch.randn(projected.shape, generator=gen)

    def projection():
        x.grad = weight.grad = None
        with no_size_threshold():
            fast_linear(x, weight).backward(g_proj)

    return whole, projection, _count(whole) - _count(projection), "fused"


def run(settings: Settings) -> PartResult:
    t_start = time.perf_counter()
    B, T = settings.batch, settings.bptt
    rows: list[Row] = []
    md: list[str] = []

    # the peak of each path on a square product (forward only: one product)
    N = settings.matmul_square
    fns, flop = linear_contenders(N, N, N, bias=False, mode="fwd")
    t = interleave(fns, rounds=max(settings.flops_rounds, 3), warmup=1, min_sample=0.05)
    peak_rows = []
    for path in (MKL, ONEDNN):
        rate = t.rate(path, flop).scaled(1e-9)
        rows.append(Row(2, f"square {N}x{N} fwd", path, "GFLOP/s", "GFLOP/s", rate, MKL, t.speedup(path, MKL)))
        peak_rows.append([f"{N}x{N} x {N}x{N} (forward)", path, f"{rate.median:.0f} ({rate.min:.0f}-{rate.max:.0f})",
                          fmt_ratio(t.speedup(path, MKL))])
    # the decoder of a word-level LM (what fast_linear exists for)
    n, h, v = settings.decoder_shape
    fns, flop = linear_contenders(n, h, v, mode="fwdbwd")
    t = interleave(fns, rounds=max(settings.flops_rounds, 3), warmup=1)
    for path in (MKL, ONEDNN):
        rate = t.rate(path, flop).scaled(1e-9)
        rows.append(Row(2, f"decoder [{n},{h}]x[{h},{v}] fwd+bwd", path, "GFLOP/s", "GFLOP/s", rate, MKL,
                        t.speedup(path, MKL)))
        peak_rows.append([f"decoder [{n}, {h}] x [{h}, {v}] (fwd+bwd)", path,
                          f"{rate.median:.0f} ({rate.min:.0f}-{rate.max:.0f})", fmt_ratio(t.speedup(path, MKL))])

    cells = list_cells()
    result_rows, targets_rows, no_matmul = [], [], set()
    for H in settings.flops_hidden:
        contenders, flops, ks, methods = {}, {}, {}, {}
        for name in cells:
            whole, projection, f, methods[name] = recurrence(name, B, T, H)
            if f <= 0:
                no_matmul.add(name)
                continue
            contenders[name], flops[name] = whole, f
            if projection is not None:
                contenders[f"{name} input projection"] = projection
            ks[name] = max(1, round(f / 3 / T / (2 * B * H * H)))
        peak_flop = {}
        for k in sorted(set(ks.values())):
            fns, peak_flop[k] = linear_contenders(B, H, k * H, bias=False, mode="fwdbwd")
            contenders[f"{MKL} k={k}"], contenders[f"{ONEDNN} k={k}"] = fns[MKL], fns[ONEDNN]
        t = interleave(contenders, rounds=settings.flops_rounds, warmup=1)
        case = f"B={B} T={T} H={H}"
        for k, f in peak_flop.items():
            for path in (MKL, ONEDNN):
                rate = t.rate(f"{path} k={k}", f).scaled(1e-9)
                rows.append(Row(2, f"{case} [{B},{H}]x[{H},{k * H}] fwd+bwd", path, "GFLOP/s", "GFLOP/s", rate,
                                f"{MKL} k={k}", t.speedup(f"{path} k={k}", f"{MKL} k={k}")))
                peak_rows.append([f"[{B}, {H}] x [{H}, {k * H}] (fwd+bwd)", path,
                                  f"{rate.median:.0f} ({rate.min:.0f}-{rate.max:.0f})",
                                  fmt_ratio(t.speedup(f"{path} k={k}", f"{MKL} k={k}"))])
        for name in flops:
            k = ks[name]
            # the recurrence's time (fused cells: the whole sequence minus its input projection, same round)
            proj = t.rounds.get(f"{name} input projection", [0.0] * len(t.rounds[name]))
            recur_seconds = [w - p for w, p in zip(t.rounds[name], proj)]
            achieved = Stat([flops[name] / max(s, 1e-9) / 1e9 for s in recur_seconds])

            def frac(i, name=name, k=k):
                best = max(peak_flop[k] / t.rounds[f"{p} k={k}"][i] for p in (MKL, ONEDNN)) / 1e9
                return achieved.samples[i] / best

            fraction = t.per_round(frac)
            peak = t.per_round(lambda i, k=k: max(peak_flop[k] / t.rounds[f"{p} k={k}"][i] for p in (MKL, ONEDNN)) / 1e9)
            rows.append(Row(2, case, name, "recurrent matmul GFLOP/s", "GFLOP/s", achieved,
                            f"peak k={k}", fraction, note=f"{flops[name] / 1e9:.3f} GFLOP per fwd+bwd"))
            result_rows.append([f"`{name}`", H, methods[name], k, f"{flops[name] / 1e9:.2f}",
                                f"{achieved.median:.0f} ({achieved.min:.0f}-{achieved.max:.0f})",
                                f"{peak.median:.0f}", f"{fraction.median:.0%} ({fraction.min:.0%}-{fraction.max:.0%})",
                                "yes" if fraction.median >= TARGET else "no"])
            if H >= 512:
                targets_rows.append((name, H, fraction))
    md.append(
        "Peak of each matmul path (GFLOP/s, median and range over rounds; speedup vs the torch.mm path):\n\n"
        + md_table(["product", "path", "GFLOP/s", "vs torch.mm path"], peak_rows)
    )
    md.append(
        f"Recurrent matmul work of each recurrence (`B={B}`, `T={T}`, forward + backward, input projection "
        "isolated as the column says: exact, or fused = a lower bound), against the faster path at "
        f"`[B, H] x [H, kH]` in the same round; target {TARGET:.0%} at H >= 512:\n\n"
        + md_table(["cell", "H", "isolated", "k", "GFLOP per fwd+bwd", "achieved GFLOP/s", "peak GFLOP/s", "achieved / peak",
                    f">= {TARGET:.0%}"], result_rows)
    )
    if no_matmul:
        md.append("No recurrent matmul (diagonal / element-wise recurrence, nothing to compare with a matmul "
                  f"peak): {', '.join(f'`{n}`' for n in sorted(no_matmul))}.")
    targets = []
    if targets_rows:
        met = [n for n, H, f in targets_rows if f.median >= TARGET]
        worst = min(targets_rows, key=lambda r: r[2].median)
        best = max(targets_rows, key=lambda r: r[2].median)
        targets.append(Target(
            "recurrent matmul achieved / peak, every matmul cell at H >= 512",
            f"{len(met)}/{len(targets_rows)} (cell, H) pairs meet it; best {best[0]} H={best[1]} "
            f"{best[2].median:.0%}, worst {worst[0]} H={worst[1]} {worst[2].median:.0%}",
            f">= {TARGET:.0%}", len(met) == len(targets_rows)))
    return PartResult(2, "Recurrent matmul GFLOP/s against the measured peak", "\n\n".join(md), rows, targets,
                      time.perf_counter() - t_start)
