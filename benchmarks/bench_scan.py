"""Part 5: each parallel scan of ``dsf_lightning.ops.scan.linear_recurrence`` against its step loop
(``h_t = a_t * h_{t-1} + b_t``) at T = 35, 256, 1024, for two sizes: the LM's ``B=64, H=512`` (every
``[B, T, H]`` tensor far larger than the caches at T=1024: the scan's few passes over memory are
bandwidth-bound) and a small ``B=8, H=64`` (the tensors fit in the caches, the loop's per-step cost
dominates and the scan's advantage grows with T).

Two coefficient layouts, as the cells use them: ``a`` ``[H]`` constant (IRLM's self-connections r,
SCRN's context decay alpha) and ``a`` ``[B, T, H]`` per step (gated recurrences such as RAN's
``c_t = f_t * c_{t-1} + ...`` once the gates are known). Timed forward + backward (training: ``a`` and
``b`` need gradients, ``h0`` is a carried, detached state) and forward alone under ``no_grad``
(scoring). ``method="loop"``, ``"scan"`` and ``"auto"`` run round-robin with a *hoisted* step loop
written here as the cells write theirs (``unbind`` over time), which is the bar a scan must clear;
ratios are tokens/s vs that loop.

    OMP_NUM_THREADS=1 python -m benchmarks --only 5
"""

from __future__ import annotations

import importlib
import time

import torch

from ._settings import Settings
from ._timing import PartResult, Row, Target, clock, fmt_ratio, interleave, md_table

METHODS = ("loop", "scan", "auto")
HOISTED = "hoisted loop"
LAYOUTS = ("a [H] (IRLM, SCRN)", "a [B, T, H] (gated)")
MAX_CALL_SECONDS = 3.0  # a contender slower than this per call is reported, not timed in rounds


def hoisted_loop(a, b, h0, method=None):
    """The step loop as the cells write theirs (``unbind`` over time: each step's backward touches its
    own slice only), the reference a scan has to beat."""
    steps = a.unbind(1) if a.dim() == 3 else [a] * b.shape[1]
    h, outs = h0, []
    for a_t, b_t in zip(steps, b.unbind(1)):
        h = torch.addcmul(b_t, a_t, h)
        outs.append(h)
    return torch.stack(outs, 1)


def _reading(rows: list[Row], settings: Settings) -> str:
    """Where the scan reaches >= 3x the hoisted loop at the longest T, and how its lead grows with T at
    each size, next to the size of one ``[B, T, H]`` fp32 tensor (against the caches)."""
    T_max = max(settings.scan_lengths)
    lines, reaches = [], {}
    for B, H in settings.scan_shapes:
        growth = []
        for T in settings.scan_lengths:
            scan = [r.ratio.median for r in rows if r.contender == "scan" and r.ratio is not None
                    and r.case.startswith(f"B={B} T={T} H={H} ")]
            if scan:
                growth.append((T, sorted(scan)))
        if not growth or growth[-1][0] != T_max:
            continue
        last = growth[-1][1]
        reaches[(B, H)] = sum(x >= 3.0 for x in last)
        mb = B * T_max * H * 4 / 2**20
        trend = ", ".join(f"{v[0]:.2f}-{v[-1]:.2f}x at T={T}" for T, v in growth)
        lines.append(
            f"- `B={B}, H={H}` (one `[B, T, H]` fp32 tensor at T={T_max}: {mb:,.1f} MiB): `scan` vs the hoisted "
            f"loop over the {len(last)} layout/pass cases {trend}; >= 3x at T={T_max} in {reaches[(B, H)]}/{len(last)}."
        )
    text = "Reading (scan vs hoisted loop, min-max over the layout/pass cases):\n\n" + "\n".join(lines)
    if len(reaches) >= 2:
        size = lambda kv: kv[0][0] * kv[0][1]  # noqa: E731 - B * H
        (big, n_big), (small, n_small) = max(reaches.items(), key=size), min(reaches.items(), key=size)
        if n_small > n_big:
            text += (
                f"\n\nThe scan reaches 3x at T={T_max} where the tensors fit in the caches (`B={small[0]}, "
                f"H={small[1]}`): there the loop's fixed per-step cost (Python, dispatch, one autograd node a "
                f"step) dominates and the scan's lead grows with T. At `B={big[0]}, H={big[1]}` every "
                f"`[B, T, H]` tensor is far larger than the caches, each of the scan's passes streams through "
                f"main memory, and its lead stays well under 3x: memory bandwidth, not the loop, caps it."
            )
    return text


def _contender(fn, method: str, a, b, h0, g, train: bool):
    if train:
        def run():
            a.grad = b.grad = None
            fn(a, b, h0, method=method).backward(g)
    else:
        def run():
            with torch.no_grad():
                fn(a, b, h0, method=method)
    return run


def run(settings: Settings) -> PartResult:
    t_start = time.perf_counter()
    try:
        scan = importlib.import_module("dsf_lightning.ops.scan")
        fn = scan.linear_recurrence
    except (ImportError, AttributeError) as err:
        note = f"not measured: dsf_lightning.ops.scan.linear_recurrence is not available ({type(err).__name__}: {err})"
        return PartResult(5, "Parallel scans vs their loops", note,
                          [Row(5, "linear_recurrence", "scan", "tokens/s", "tokens/s", note=note)],
                          [Target("scan vs loop", "not measured", "report", None)], time.perf_counter() - t_start)
    rows, body = [], []
    last_call: dict[tuple, tuple[int, float]] = {}  # (B, H, layout, train, method) -> (T, seconds a call)
    for (B, H), T in ((shape, T) for shape in settings.scan_shapes for T in settings.scan_lengths):
        gen = torch.Generator().manual_seed(T)
        b = torch.randn(B, T, H, generator=gen).requires_grad_()
        h0 = torch.randn(B, H, generator=gen)
        g = torch.randn(B, T, H, generator=gen)
        coefficients = {
            LAYOUTS[0]: (torch.rand(H, generator=gen) * 0.98).requires_grad_(),
            LAYOUTS[1]: (torch.rand(B, T, H, generator=gen) * 0.98).requires_grad_(),
        }
        for layout, a in coefficients.items():
            for train in (True, False):
                mode = "fwd+bwd" if train else "fwd (no_grad)"
                contenders = {HOISTED: _contender(hoisted_loop, None, a, b, h0, g, train)}
                contenders.update({m: _contender(fn, m, a, b, h0, g, train) for m in METHODS})
                case = f"B={B} T={T} H={H} {layout} {mode}"
                slow = {}
                for m in METHODS:
                    prev = last_call.get((B, H, layout, train, m))
                    if prev is not None and prev[1] * (T / prev[0]) ** 2 > MAX_CALL_SECONDS:
                        # would take too long even once (if its cost grows like T^2): not run at all
                        slow[m] = f"not run: {prev[1]:.1f} s a call at T={prev[0]}"
                        del contenders[m]
                        continue
                    seconds = clock(contenders[m])  # also a warm-up
                    if seconds * (max(settings.scan_lengths) / T) ** 2 > MAX_CALL_SECONDS:
                        seconds = min(seconds, clock(contenders[m]))  # the first call can be a slow one-off
                    last_call[(B, H, layout, train, m)] = (T, seconds)
                    if seconds > MAX_CALL_SECONDS:
                        slow[m] = f"not timed in rounds: {seconds:.1f} s a call"
                        del contenders[m]
                t = interleave(contenders, rounds=settings.scan_rounds, warmup=1, min_sample=0.02)
                cells = [B, H, T, layout, mode]
                for m in (HOISTED, *METHODS):
                    if m in slow:
                        rows.append(Row(5, case, m, "tokens/s", "tokens/s", note=slow[m]))
                        cells.append(f"({slow[m]})")
                        continue
                    rate, ratio = t.rate(m, B * T), t.speedup(m, HOISTED)
                    rows.append(Row(5, case, m, "tokens/s", "tokens/s", rate, HOISTED, ratio))
                    cells.append(f"{rate.median / 1e3:,.0f}")
                cells += [fmt_ratio(t.speedup(m, HOISTED)) if m not in slow else "-" for m in METHODS]
                body.append(cells)
    shapes = ", ".join(f"`B={b}, H={h}`" for b, h in settings.scan_shapes)
    md = (
        f"`linear_recurrence(a, b, h0, method)` at {shapes} (k tokens/s = B*T per second). The "
        f"reference is a *hoisted loop* written as the cells write theirs (`unbind` over time, one "
        f"`addcmul` a step); ratios vs it, median and range over {settings.scan_rounds} rounds. `auto` "
        f"uses the scan from T >= {getattr(scan, 'AUTO_SCAN_MIN_T', '?')} or without gradients. "
        f"A method slower than {MAX_CALL_SECONDS:.0f} s a call (or predicted to be, growing like T^2 from the "
        "previous T) is not timed in rounds.\n\n"
        + md_table(["B", "H", "T", "a", "pass", "hoisted loop k tok/s", "`loop` k tok/s", "`scan` k tok/s", "`auto` k tok/s",
                    "`loop` vs hoisted", "`scan` vs hoisted", "`auto` vs hoisted"], body)
    )
    md += "\n\n" + _reading(rows, settings)
    auto_ok = [r for r in rows if r.contender == "auto" and r.ratio is not None]
    worst = min(auto_ok, key=lambda r: r.ratio.median)
    target = Target("`auto` never slower than the hoisted loop by more than 10% (a check of this suite, not an issue target)",
                    f"worst case {worst.ratio.median:.2f}x at {worst.case}", ">= 0.90x",
                    worst.ratio.median >= 0.90)
    return PartResult(5, "Parallel scans (ops.scan) vs their loops", md, rows, [target], time.perf_counter() - t_start)
