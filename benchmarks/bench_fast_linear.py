"""Benchmark ``dsf_lightning.ops.fast_linear`` against ``F.linear`` (forward + backward).

    OMP_NUM_THREADS=2 python benchmarks/bench_fast_linear.py            # decoder shapes
    OMP_NUM_THREADS=2 python benchmarks/bench_fast_linear.py --grid     # small/medium sizes (threshold)

The machine may be noisy (other jobs), so the two implementations are timed side by side, alternating
(and alternating which one goes first) within every trial; the table reports the ratio of the medians
over trials, plus the median of the per-trial ratios as a robustness check.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from dsf_lightning.ops import fast_linear, set_fast_linear_min_work


def _step(fn, x, w, b, g):
    y = fn(x, w, b)
    return torch.autograd.grad(y, (x, w, b) if b is not None else (x, w), g)


def _fwd(fn, x, w, b, g):
    with torch.no_grad():
        return fn(x, w, b)


def _time(callable_, inner: int) -> float:
    t0 = time.perf_counter()
    for _ in range(inner):
        callable_()
    return (time.perf_counter() - t0) / inner


def compare(rows: int, n_in: int, n_out: int, *, trials: int, bias: bool = True, mode: str = "fwdbwd",
            inner: int | None = None, seed: int = 0):
    """Alternating timing of fast_linear vs F.linear; returns dict of medians (seconds) and ratios."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, n_in, generator=gen).requires_grad_()
    w = (torch.randn(n_out, n_in, generator=gen) * n_in**-0.5).requires_grad_()
    b = torch.randn(n_out, generator=gen).requires_grad_() if bias else None
    g = torch.randn(rows, n_out, generator=gen)
    run = _step if mode == "fwdbwd" else _fwd
    fast = lambda: run(fast_linear, x, w, b, g)  # noqa: E731
    ref = lambda: run(F.linear, x, w, b, g)  # noqa: E731
    for _ in range(2):  # warm-up (oneDNN primitive creation, allocator)
        fast()
        ref()
    if inner is None:  # aim for >= ~20 ms per timed sample
        one = max(_time(ref, 1), 1e-6)
        inner = max(1, int(0.02 / one))
    t_fast, t_ref, ratios = [], [], []
    for i in range(trials):
        if i % 2 == 0:
            a = _time(fast, inner)
            r = _time(ref, inner)
        else:
            r = _time(ref, inner)
            a = _time(fast, inner)
        t_fast.append(a)
        t_ref.append(r)
        ratios.append(r / a)
    med_fast, med_ref = statistics.median(t_fast), statistics.median(t_ref)
    return {
        "fast": med_fast,
        "ref": med_ref,
        "speedup": med_ref / med_fast,
        "median_trial_speedup": statistics.median(ratios),
    }


def decoder_table(trials: int, vocab: int, mode: str) -> None:
    n_products = 3 if mode == "fwdbwd" else 1
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, mode={mode}, V={vocab}, "
          f"trials={trials} (alternating)")
    header = (f"{'B*T':>6} {'H':>5} {'F.linear ms':>12} {'fast ms':>9} {'speedup':>8} {'(per-trial)':>11} "
              f"{'F.linear GF/s':>14} {'fast GF/s':>10}")
    print(header)
    print("-" * len(header))
    for rows in (700, 2240):
        for hidden in (256, 512):
            r = compare(rows, hidden, vocab, trials=trials, mode=mode, inner=1)
            gflop = n_products * 2 * rows * hidden * vocab / 1e9
            print(f"{rows:>6} {hidden:>5} {r['ref'] * 1e3:>12.1f} {r['fast'] * 1e3:>9.1f} {r['speedup']:>7.2f}x "
                  f"{r['median_trial_speedup']:>10.2f}x {gflop / r['ref']:>14.0f} {gflop / r['fast']:>10.0f}",
                  flush=True)


def grid_table(trials: int) -> None:
    """fwd+bwd speedup over small/medium sizes with the size threshold disabled (to choose it)."""
    set_fast_linear_min_work(0)
    print(f"threshold disabled; threads={torch.get_num_threads()}; fwd+bwd speedup of oneDNN path vs F.linear")
    print(f"{'rows':>6} {'in':>5} {'out':>6} {'MACs':>11} {'F.linear us':>12} {'fast us':>9} {'speedup':>8}")
    for rows in (8, 64, 256, 700):
        for n_in in (32, 128, 512):
            for n_out in (64, 512, 4096):
                r = compare(rows, n_in, n_out, trials=trials)
                macs = rows * n_in * n_out
                print(f"{rows:>6} {n_in:>5} {n_out:>6} {macs:>11.2e} {r['ref'] * 1e6:>12.1f} "
                      f"{r['fast'] * 1e6:>9.1f} {r['speedup']:>7.2f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=11)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--fwd-only", action="store_true", help="time the no-grad forward only")
    parser.add_argument("--grid", action="store_true", help="small/medium size sweep (threshold choice)")
    args = parser.parse_args()
    if args.grid:
        grid_table(args.trials)
    else:
        decoder_table(args.trials, args.vocab, "fwd" if args.fwd_only else "fwdbwd")


if __name__ == "__main__":
    main()
