"""Part 5: each parallel scan of ``dsf_lightning.ops.scan.linear_recurrence`` against its step loop
(``h_t = a_t * h_{t-1} + b_t``) at T = 35, 256, 1024.

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
    B, H = settings.scan_batch, settings.scan_hidden
    rows, body = [], []
    last_call: dict[tuple, tuple[int, float]] = {}  # (layout, train, method) -> (T, seconds a call)
    for T in settings.scan_lengths:
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
                    prev = last_call.get((layout, train, m))
                    if prev is not None and prev[1] * (T / prev[0]) ** 2 > MAX_CALL_SECONDS:
                        # would take too long even once (if its cost grows like T^2): not run at all
                        slow[m] = f"not run: {prev[1]:.1f} s a call at T={prev[0]}"
                        del contenders[m]
                        continue
                    seconds = clock(contenders[m])  # also a warm-up
                    last_call[(layout, train, m)] = (T, seconds)
                    if seconds > MAX_CALL_SECONDS:
                        slow[m] = f"not timed in rounds: {seconds:.1f} s a call"
                        del contenders[m]
                t = interleave(contenders, rounds=settings.scan_rounds, warmup=1, min_sample=0.02)
                cells = [T, layout, mode]
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
    md = (
        f"`linear_recurrence(a, b, h0, method)` with `B={B}`, `H={H}` (k tokens/s = B*T per second). The "
        f"reference is a *hoisted loop* written as the cells write theirs (`unbind` over time, one "
        f"`addcmul` a step); ratios vs it, median and range over {settings.scan_rounds} rounds. `auto` "
        f"uses the scan from T >= {getattr(scan, 'AUTO_SCAN_MIN_T', '?')} or without gradients. "
        f"A method slower than {MAX_CALL_SECONDS:.0f} s a call (or predicted to be, growing like T^2 from the "
        "previous T) is not timed in rounds.\n\n"
        + md_table(["T", "a", "pass", "hoisted loop k tok/s", "`loop` k tok/s", "`scan` k tok/s", "`auto` k tok/s",
                    "`loop` vs hoisted", "`scan` vs hoisted", "`auto` vs hoisted"], body)
    )
    auto_ok = [r for r in rows if r.contender == "auto" and r.ratio is not None]
    worst = min(auto_ok, key=lambda r: r.ratio.median)
    target = Target("`auto` never slower than the hoisted loop by more than 10% (a check of this suite, not an issue target)",
                    f"worst case {worst.ratio.median:.2f}x at {worst.case}", ">= 0.90x",
                    worst.ratio.median >= 0.90)
    return PartResult(5, "Parallel scans (ops.scan) vs their loops", md, rows, [target], time.perf_counter() - t_start)
