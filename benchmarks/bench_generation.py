"""Part 6: text generation (``Scorer.generate``) with the bundled ``delta-rnn-ptb``: new tokens per
second at batch 1 (one sample) and batch 8 (eight samples drawn as one batch).

Each call reads the prompt once and then takes one recurrent step and one decoder row per sample and
new token (temperature 1, fixed seed); tokens/s counts new tokens of all samples. The 10k-word decoder
(a 512 x 10,000 product per token, 20 MB of weights read per step) dominates a step, so batching the
samples amortizes the weight reads.

    OMP_NUM_THREADS=1 python -m benchmarks --only 6
    OMP_NUM_THREADS=1 python benchmarks/bench_generation.py --tokens 200    # this part alone
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._settings import Settings  # noqa: E402
from benchmarks._timing import PartResult, Row, fmt_ratio, interleave, md_table  # noqa: E402

MODEL = "delta-rnn-ptb"
PROMPT = "the market"


def run(settings: Settings) -> PartResult:
    t_start = time.perf_counter()
    from dsf_lightning.scoring import from_pretrained

    scorer = from_pretrained(MODEL)
    n = settings.gen_tokens

    def batch(b):
        return lambda: scorer.generate(PROMPT, max_new_tokens=n, seed=0, num_samples=b)

    contenders = {f"batch {b}": batch(b) for b in settings.gen_batch_sizes}
    t = interleave(contenders, rounds=settings.gen_rounds, warmup=1)
    base = next(iter(contenders))
    case = f"{MODEL}: generate {n} new tokens after {PROMPT!r} (temperature 1, seed 0)"
    rows, body = [], []
    for name in contenders:
        b = int(name.split()[1])
        rate = t.rate(name, b * n)
        ratio = t.speedup(name, base).scaled(b / int(base.split()[1]))  # tokens/s relative to the first batch size
        rows.append(Row(6, case, name, "generated tokens/s", "tokens/s", rate, base, ratio))
        body.append([name, f"{rate.median:,.0f} ({rate.min:,.0f}-{rate.max:,.0f})",
                     f"{1e3 / rate.median * b:.2f}", fmt_ratio(ratio, 1)])
    md = (f"Generation, {case} ({settings.gen_rounds} rounds):\n\n"
          + md_table(["samples", "new tokens/s (all samples)", "ms per step", f"tokens/s vs {base}"], body))
    sizes = ", ".join(str(b) for b in settings.gen_batch_sizes)
    return PartResult(6, f"Text generation ({MODEL}): new tokens/s at batch {sizes}", md, rows, [],
                      time.perf_counter() - t_start)


def main() -> None:
    import dataclasses

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--tokens", type=int, default=None, help="new tokens per call")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=None)
    args = p.parse_args()
    settings = Settings.for_mode("quick" if args.quick else "full")
    if args.tokens is not None:
        settings = dataclasses.replace(settings, gen_tokens=args.tokens)
    if args.batch_sizes is not None:
        settings = dataclasses.replace(settings, gen_batch_sizes=tuple(args.batch_sizes))
    part = run(settings)
    print(part.markdown)


if __name__ == "__main__":
    main()
