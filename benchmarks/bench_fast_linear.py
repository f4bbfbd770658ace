"""``dsf_lightning.ops.fast_linear`` (oneDNN) against ``F.linear`` (torch.mm's MKL path here).

The suite's part 2 uses :func:`linear_contenders` to measure the fastest matmul path on this machine;
this file's own command keeps the two tables used to tune ``fast_linear``:

    OMP_NUM_THREADS=1 python benchmarks/bench_fast_linear.py            # decoder shapes
    OMP_NUM_THREADS=1 python benchmarks/bench_fast_linear.py --grid     # small/medium sizes (threshold)

Timing is :func:`benchmarks._timing.interleave` (round-robin, per-round ratios).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import fmt_ratio, interleave, md_table  # noqa: E402
from dsf_lightning.ops import fast_linear, fast_linear_min_work, set_fast_linear_min_work  # noqa: E402

MKL, ONEDNN = "F.linear (torch.mm path)", "fast_linear (oneDNN)"


@contextlib.contextmanager
def no_size_threshold():
    """Route every product through oneDNN, however small (``fast_linear``'s threshold off)."""
    old = fast_linear_min_work()
    set_fast_linear_min_work(0)
    try:
        yield
    finally:
        set_fast_linear_min_work(old)


def _onednn(x, w, b):
    with no_size_threshold():
        return fast_linear(x, w, b)


def linear_contenders(rows: int, n_in: int, n_out: int, *, bias: bool = True, mode: str = "fwdbwd",
                      seed: int = 0) -> tuple[dict, float]:
    """``({MKL: fn, ONEDNN: fn}, flop)``: closures computing ``y = x W^T (+ b)`` for
    ``x [rows, n_in]``, ``W [n_out, n_in]`` through each path, forward only (``mode="fwd"``) or forward
    and both backward products (``"fwdbwd"``), and the multiply-add FLOP of one call."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, n_in, generator=gen).requires_grad_(mode == "fwdbwd")
    w = (torch.randn(n_out, n_in, generator=gen) * n_in**-0.5).requires_grad_(mode == "fwdbwd")
    b = torch.randn(n_out, generator=gen).requires_grad_(mode == "fwdbwd") if bias else None
    g = torch.randn(rows, n_out, generator=gen)
    leaves = (x, w, b) if bias else (x, w)

    def make(fn):
        if mode == "fwd":
            def run():
                with torch.no_grad():
                    return fn(x, w, b)
        else:
            def run():
                return torch.autograd.grad(fn(x, w, b), leaves, g)
        return run

    flop = (3 if mode == "fwdbwd" else 1) * 2 * rows * n_in * n_out
    return {MKL: make(F.linear), ONEDNN: make(_onednn)}, flop


def decoder_table(rounds: int, vocab: int, mode: str) -> str:
    body = []
    for rows in (700, 2240):
        for hidden in (256, 512):
            fns, flop = linear_contenders(rows, hidden, vocab, mode=mode)
            t = interleave(fns, rounds=rounds)
            body.append([rows, hidden, f"{t.rate(MKL, flop).median / 1e9:.0f}",
                         f"{t.rate(ONEDNN, flop).median / 1e9:.0f}", fmt_ratio(t.speedup(ONEDNN, MKL))])
    return md_table(["B*T", "H", f"{MKL} GFLOP/s", f"{ONEDNN} GFLOP/s", "oneDNN speedup"], body)


def grid_table(rounds: int) -> str:
    """fwd+bwd speedup over small/medium sizes with the size threshold off (to choose it)."""
    body = []
    for rows in (8, 64, 256, 700):
        for n_in in (32, 128, 512):
            for n_out in (64, 512, 4096):
                fns, _ = linear_contenders(rows, n_in, n_out)
                t = interleave(fns, rounds=rounds, min_sample=0.02)
                body.append([rows, n_in, n_out, f"{rows * n_in * n_out:.2e}", f"{t[MKL].median * 1e6:.1f}",
                             f"{t[ONEDNN].median * 1e6:.1f}", fmt_ratio(t.speedup(ONEDNN, MKL))])
    return md_table(["rows", "in", "out", "MACs", "F.linear us", "oneDNN us", "speedup"], body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--fwd-only", action="store_true", help="time the no-grad forward only")
    parser.add_argument("--grid", action="store_true", help="small/medium size sweep (threshold choice)")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, rounds={args.rounds} (round-robin)")
    print(grid_table(args.rounds) if args.grid else decoder_table(args.rounds, args.vocab,
                                                                  "fwd" if args.fwd_only else "fwdbwd"))


if __name__ == "__main__":
    main()
