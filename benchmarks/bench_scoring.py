"""Part 4: the scorer (``dsf_lightning.scoring``) with the bundled ``delta-rnn-ptb``: tokens/s batched
vs one sentence at a time, and its peak memory streaming 10k vs 1M tokens.

Throughput: the first PTB valid sentences, each scored from a fresh state after ``<eos>``, one call
per sentence against one ``score(list)`` call at each batch size, round-robin. The batched numbers
are checked against the one-at-a-time ones (max |difference| of the per-token log-probabilities).

Memory: each size runs in a fresh interpreter: load the model, score a warm-up document, reset the
RSS high-water mark, then ``score_document(path)`` a file of PTB training text (repeated to the
size: real words, real sentence lengths) with running sums only. Reported: the peak RSS of the whole
process (VmHWM; model, torch, allocator and Python objects included) and its growth during the call.
Target: the 1M-token peak within 10% of the 10k-token peak (memory must not grow with the document).

    OMP_NUM_THREADS=1 python -m benchmarks --only 4
    OMP_NUM_THREADS=1 python benchmarks/bench_scoring.py --sentences 3370   # this part alone
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._settings import Settings  # noqa: E402
from benchmarks._timing import (  # noqa: E402
    PROC_STATUS_SNIPPET,
    PartResult,
    Row,
    Stat,
    Target,
    fmt_ratio,
    interleave,
    md_table,
    run_fresh,
)

MODEL = "delta-rnn-ptb"
TARGET = 0.10  # peak RSS at 1M tokens at most 10% above the peak at 10k (issue 7)


def valid_sentences(settings: Settings) -> list[str]:
    path = Path(settings.data_root) / "ptb" / "ptb.valid.txt"
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return lines[: settings.score_sentences]


def throughput(settings: Settings, scorer, lines: list[str]) -> tuple[list[Row], str]:
    n_tokens = sum(len(scorer.tokenizer.tokenize_line(ln)) + 1 for ln in lines)  # + <eos>
    single = [scorer.score(ln) for ln in lines]  # also the warm-up of the one-at-a-time path

    def one_at_a_time():
        for ln in lines:
            scorer.score(ln)

    def batched(bs):
        def go():
            scorer.batch_size = bs
            return scorer.score(lines)
        return go

    contenders = {"one at a time": one_at_a_time}
    diffs = {}
    for bs in settings.score_batch_sizes:
        contenders[f"batch {bs}"] = batched(bs)
        result = contenders[f"batch {bs}"]()
        diffs[f"batch {bs}"] = max(abs(a - b) for s, r in zip(single, result) for a, b in zip(s.logprobs, r.logprobs))
    t = interleave(contenders, rounds=settings.score_rounds, warmup=0)
    case = f"{MODEL}: {len(lines)} PTB valid sentences, {n_tokens:,} tokens"
    rows, body = [], []
    for name in contenders:
        rate, ratio = t.rate(name, n_tokens), t.speedup(name, "one at a time")
        rows.append(Row(4, case, name, "scoring tokens/s", "tokens/s", rate, "one at a time", ratio,
                        note=f"max |dlogprob| vs one at a time {diffs[name]:.1e}" if name in diffs else ""))
        body.append([name, f"{rate.median:,.0f} ({rate.min:,.0f}-{rate.max:,.0f})", fmt_ratio(ratio, 1),
                     f"{diffs[name]:.1e}" if name in diffs else "-"])
    md = (f"Throughput, {case} ({settings.score_rounds} rounds):\n\n"
          + md_table(["how", "tokens/s", "vs one at a time", "max abs difference of log-probs"], body))
    return rows, md


MEMORY_SCRIPT = PROC_STATUS_SNIPPET + textwrap.dedent(
    r"""
    import json, sys, time
    import torch
    torch.set_num_threads(1)
    from dsf_lightning.scoring import from_pretrained

    model, n_tokens, source, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    lines = [ln for ln in open(source, encoding="utf-8").read().splitlines() if ln.strip()]
    with open(path, "w", encoding="utf-8") as f:  # PTB text, repeated to n_tokens (<eos> counted)
        written, i = 0, 0
        while written < n_tokens:
            line = lines[i % len(lines)]
            f.write(line + "\n")
            written += len(line.split()) + 1
            i += 1
    del lines
    scorer = from_pretrained(model)
    scorer.score_document(["the company said"] * 300)  # warm-up: allocator and oneDNN caches
    import gc; gc.collect()
    reset = reset_peak_rss()
    before = proc_status("VmRSS")
    t0 = time.process_time()
    doc = scorer.score_document(path)
    seconds = time.process_time() - t0
    print(json.dumps({"tokens": doc.num_tokens, "peak_rss": proc_status("VmHWM"), "rss_before": before,
                      "rss_after": proc_status("VmRSS"), "hwm_reset": reset, "cpu_seconds": seconds,
                      "ppl": doc.ppl}))
    """
)


def memory(settings: Settings) -> tuple[list[Row], str, Target]:
    import tempfile

    source = Path(settings.data_root) / "ptb" / "ptb.train.txt"
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in settings.memory_tokens:
            results[n] = run_fresh(MEMORY_SCRIPT, MODEL, str(n), str(source), f"{tmp}/doc{n}.txt")
    small, large = settings.memory_tokens
    rows, body = [], []
    for n, r in results.items():
        case = f"{MODEL} score_document, PTB train text repeated to {n:,} tokens"
        rows.append(Row(4, case, f"{n} tokens", "peak RSS", "MiB", Stat([r["peak_rss"] / 2**20]),
                        f"{small} tokens", Stat([r["peak_rss"] / results[small]["peak_rss"]])))
        rows.append(Row(4, case, f"{n} tokens", "peak RSS growth during the call", "MiB",
                        Stat([(r["peak_rss"] - r["rss_before"]) / 2**20]),
                        note="" if r["hwm_reset"] else "VmHWM could not be reset: growth is vs the load peak"))
        rows.append(Row(4, case, f"{n} tokens", "streaming tokens/s (CPU time)", "tokens/s",
                        Stat([r["tokens"] / max(r["cpu_seconds"], 1e-9)])))
        body.append([f"{r['tokens']:,}", f"{r['peak_rss'] / 2**20:.1f}", f"{(r['peak_rss'] - r['rss_before']) / 2**20:+.1f}",
                     f"{r['peak_rss'] / results[small]['peak_rss']:.3f}x", f"{r['tokens'] / max(r['cpu_seconds'], 1e-9):,.0f}",
                     f"{r['ppl']:.1f}"])
    growth = results[large]["peak_rss"] / results[small]["peak_rss"] - 1
    md = ("Peak memory streaming a document with `score_document(path)` (running sums; window 256), each size "
          "in a fresh process:\n\n"
          + md_table(["tokens", "peak RSS MiB", "growth during the call MiB", f"peak vs {small:,} tokens",
                      "tokens/s", "PPL"], body))
    target = Target(f"scorer peak RSS at {large:,} vs {small:,} streamed tokens", f"{growth:+.1%}",
                    f"<= +{TARGET:.0%}", growth <= TARGET)
    return rows, md, target


def run(settings: Settings) -> PartResult:
    t_start = time.perf_counter()
    from dsf_lightning.scoring import from_pretrained

    try:
        lines = valid_sentences(settings)
    except OSError as err:
        note = f"skipped: PTB not found under {settings.data_root} ({err})"
        return PartResult(4, "The scorer", note, [Row(4, "ptb", MODEL, "scoring tokens/s", "tokens/s", note=note)],
                          [Target("scorer peak RSS, large vs small document", "not measured", f"<= +{TARGET:.0%}", None)],
                          time.perf_counter() - t_start)
    scorer = from_pretrained(MODEL)
    rows, md_t = throughput(settings, scorer, lines)
    mem_rows, md_m, target = memory(settings)
    return PartResult(4, f"The scorer ({MODEL}): batched vs one at a time; streaming memory", md_t + "\n\n" + md_m,
                      rows + mem_rows, [target], time.perf_counter() - t_start)


def main() -> None:
    import dataclasses

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--sentences", type=int, default=None, help="PTB valid sentences to score")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=None)
    p.add_argument("--memory-tokens", type=int, nargs=2, default=None, metavar=("SMALL", "LARGE"))
    args = p.parse_args()
    settings = Settings.for_mode("quick" if args.quick else "full")
    for field, value in (("score_sentences", args.sentences), ("score_batch_sizes", args.batch_sizes),
                         ("memory_tokens", args.memory_tokens)):
        if value is not None:
            settings = dataclasses.replace(settings, **{field: tuple(value) if isinstance(value, list) else value})
    part = run(settings)
    print(part.markdown)
    for t in part.targets:
        print(f"target: {t.what}: {t.measured} (goal {t.goal}, met: {t.met})")


if __name__ == "__main__":
    main()
