"""Part 8 (``--only score-document``): scoring one long document fast (issue 18), with the bundled
``delta-rnn-ptb`` on PTB test (82,430 tokens), at one thread.

Tokens per CPU second of four contenders, round-robin (:func:`benchmarks._timing.interleave`), each
scoring the same file:

* **before**: ``score_document(path)`` with the no-grad recurrence as it ran before issue 18
  (:func:`loop_before_issue_18`: the autograd path's forward loop, ``z`` and ``q`` kept, an indexing op
  per operand and step, oneDNN's inner product at batch one), the baseline the ratios are taken against;
* **exact**: ``score_document(path)`` (``streams=1``, the default): the same numbers, the lean loop;
* **parallel**: ``score_document(path, streams=S, warmup=W)`` at the default ``S`` and ``W`` of this part;
* **decoder alone**: only the softmax decoder (``[N, 512] x [512, 10000]`` and the log-softmax) over the
  document's features, computed once beforehand: what no mode that scores every token exactly can beat.

Then the perplexity of the parallel mode against the exact score for a grid of ``(S, W)`` on PTB test
and on a long document, wikitext-2 test (its tokens/s there come from one run each, not rounds).

    OMP_NUM_THREADS=1 python -m benchmarks --only score-document
    OMP_NUM_THREADS=1 python benchmarks/bench_score_document.py --quick     # this part alone, smaller
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._settings import Settings  # noqa: E402
from benchmarks._timing import PartResult, Row, Stat, Target, fmt_ratio, interleave, md_table, now  # noqa: E402

NUMBER = 8
MODEL = "delta-rnn-ptb"
GOAL_PARALLEL = 15_000  # tokens/s (issue 18)
GOAL_EXACT = 2.0  # x before
GOAL_PPL = 0.005  # parallel within 0.5% of the exact perplexity


@contextlib.contextmanager
def loop_before_issue_18():
    """Run the no-grad recurrence as it ran before issue 18 (the baseline kept for comparison):
    :func:`dsf_lightning.ops.fused_rnn._forward_loop`, the loop the autograd path still runs."""
    from dsf_lightning.ops import fused_rnn

    lean = fused_rnn._inference_loop
    fused_rnn._inference_loop = lambda *args: fused_rnn._forward_loop(*args, False)[0]
    try:
        yield
    finally:
        fused_rnn._inference_loop = lean


def document(settings: Settings, tmp: str) -> Path:
    """PTB test, or its first ``sdoc_lines`` lines (quick / tiny runs) in a temporary file."""
    path = Path(settings.data_root) / "ptb" / "ptb.test.txt"
    if settings.sdoc_lines is None:
        return path
    lines = path.read_text(encoding="utf-8").splitlines()[: settings.sdoc_lines]
    short = Path(tmp) / "ptb.test.head.txt"
    short.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return short


def decoder_alone(scorer, path: Path):
    """A callable running only the decoder over ``path``'s features (computed here, once)."""
    import torch

    feats, targets, state = [], [], None
    with torch.inference_mode():
        for prev, ids, _ in scorer._iter_chunks(scorer._document_lines(path, False)[0], scorer.window):
            x = torch.tensor([[prev, *ids[:-1]]])
            f, state = scorer.model.features(x, state)
            feats.append(f[0])
            targets.append(torch.tensor(ids))

    def run():
        with torch.inference_mode():
            return sum(float(scorer._target_logprobs(f, y).double().sum()) for f, y in zip(feats, targets))

    return run


def throughput(settings: Settings, scorer, path: Path):
    S, W = settings.sdoc_streams, settings.sdoc_warmup
    exact = scorer.score_document(path)
    n = exact.num_tokens

    def before():
        with loop_before_issue_18():
            return scorer.score_document(path)

    contenders = {
        "before (window loop)": before,
        "exact": lambda: scorer.score_document(path),
        f"parallel S={S} W={W}": lambda: scorer.score_document(path, streams=S, warmup=W),
        "decoder alone": decoder_alone(scorer, path),
    }
    check = {"before (window loop)": before().ppl, "exact": exact.ppl,
             f"parallel S={S} W={W}": contenders[f"parallel S={S} W={W}"]().ppl,
             "decoder alone": math.exp(-contenders["decoder alone"]() / n)}
    t = interleave(contenders, rounds=settings.sdoc_rounds, warmup=0)
    case = f"{MODEL}: score_document(PTB test{'' if settings.sdoc_lines is None else f', first {settings.sdoc_lines} lines'}), {n:,} tokens"
    rows, body = [], []
    for name in contenders:
        rate, ratio = t.rate(name, n), t.speedup(name, "before (window loop)")
        dppl = check[name] / exact.ppl - 1
        rows.append(Row(NUMBER, case, name, "tokens/s", "tokens/s", rate, "before (window loop)", ratio,
                        note=f"PPL {check[name]:.4f} ({dppl:+.3%} vs exact)"))
        body.append([name, f"{rate.median:,.0f} ({rate.min:,.0f}-{rate.max:,.0f})", fmt_ratio(ratio),
                     f"{check[name]:.4f}", f"{dppl:+.3%}"])
    flops = 2 * scorer.model.config.embedding_size * len(scorer.vocab)  # the decoder's product, per token
    gflops = t.rate("decoder alone", n * flops / 1e9).median
    try:
        loads = os.getloadavg()
    except OSError:  # pragma: no cover
        loads = (math.nan,) * 3
    cores = os.cpu_count() or 1
    busy = (": other jobs competed for the cores, so these absolute numbers were taken under load and are low"
            if loads[0] > cores else "")
    md = (f"Tokens per CPU second, {case}, {settings.sdoc_rounds} rounds round-robin:\n\n"
          + md_table(["how", "tokens/s", "vs before", "PPL", "PPL vs exact"], body)
          + f"\n\nThe decoder alone ran at {gflops:.0f} GFLOP/s ({flops / 1e6:.2f} MFLOP a token, log-softmax "
          f"included; compare part 2's decoder peak). Absolute tokens/s depend on what else runs on the machine "
          f"(load average {', '.join(f'{x:.2f}' for x in loads)} at the end of the rounds, {cores} cores{busy}); "
          "under load every contender slows down, and the ratios, taken round by round side by side, are what to "
          "compare.")
    return t, n, rows, md, check


def ppl_grid(settings: Settings, scorer, path: Path, name: str, grid) -> tuple[list[Row], str, dict]:
    """Perplexity (and tokens/s of one run) of the parallel mode for every (S, W) of ``grid`` vs exact."""
    t0 = now()
    exact = scorer.score_document(path)
    exact_rate = exact.num_tokens / max(now() - t0, 1e-9)
    case = f"{MODEL}: {name}, {exact.num_tokens:,} tokens"
    rows = [Row(NUMBER, case, "exact", "perplexity", "", Stat([exact.ppl]), note=f"{exact_rate:,.0f} tokens/s (one run)")]
    body, diffs = [["exact", "-", f"{exact.ppl:.4f}", "-", f"{exact_rate:,.0f}"]], {}
    for S, W in grid:
        t0 = now()
        doc = scorer.score_document(path, streams=S, warmup=W)
        rate = doc.num_tokens / max(now() - t0, 1e-9)
        assert doc.num_tokens == exact.num_tokens, "the parallel mode must count every token once"
        diffs[S, W] = d = doc.ppl / exact.ppl - 1
        rows.append(Row(NUMBER, case, f"parallel S={S} W={W}", "perplexity", "", Stat([doc.ppl]), "exact",
                        Stat([doc.ppl / exact.ppl]), note=f"{rate:,.0f} tokens/s (one run)"))
        body.append([str(S), str(W), f"{doc.ppl:.4f}", f"{d:+.3%}", f"{rate:,.0f}"])
    md = (f"Parallel mode vs exact, {case}:\n\n"
          + md_table(["streams S", "warm-up W", "PPL", "vs exact", "tokens/s (one run)"], body))
    return rows, md, diffs


def run(settings: Settings) -> PartResult:
    t_start = time.perf_counter()
    title = "Scoring a long document: exact and parallel modes (issue 18)"
    S, W = settings.sdoc_streams, settings.sdoc_warmup
    ptb = Path(settings.data_root) / "ptb" / "ptb.test.txt"
    if not ptb.exists():
        note = f"skipped: PTB not found under {settings.data_root}"
        return PartResult(NUMBER, title, note, [Row(NUMBER, "ptb", MODEL, "tokens/s", "tokens/s", note=note)],
                          [Target("parallel mode tokens/s", "not measured", f">= {GOAL_PARALLEL:,}", None)],
                          time.perf_counter() - t_start)
    from dsf_lightning.scoring import from_pretrained

    scorer = from_pretrained(MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        path = document(settings, tmp)
        t, n, rows, md_t, check = throughput(settings, scorer, path)
        grid_rows, md_g, diffs = ppl_grid(settings, scorer, path, "PTB test" if settings.sdoc_lines is None
                                          else f"PTB test, first {settings.sdoc_lines} lines", settings.sdoc_grid)
        rows += grid_rows
        parts = [md_t, md_g]
        long_doc = Path(settings.data_root) / "wikitext2" / "wiki.test.tokens"
        if settings.sdoc_long_grid and long_doc.exists():
            long_rows, md_l, long_diffs = ppl_grid(settings, scorer, long_doc, "wikitext-2 test (read through the "
                                                   "PTB normalizer)", settings.sdoc_long_grid)
            rows += long_rows
            parts.append(md_l)
            diffs.update({("wikitext-2", *k): v for k, v in long_diffs.items()})
    par = f"parallel S={S} W={W}"
    rate, exact_ratio = t.rate(par, n), t.speedup("exact", "before (window loop)")
    ceiling = t.speedup("decoder alone", "before (window loop)")
    worst = max(abs(v) for v in diffs.values()) if diffs else abs(check[par] / check["exact"] - 1)
    default_diffs = [abs(v) for k, v in diffs.items() if k[-2:] == (S, W)] or [abs(check[par] / check["exact"] - 1)]
    targets = [
        Target("exact mode tokens/s vs before", fmt_ratio(exact_ratio), f">= {GOAL_EXACT:.0f}x",
               exact_ratio.median >= GOAL_EXACT),
        Target(f"parallel mode (S={S}, W={W}) tokens/s", f"{rate.median:,.0f} ({t.speedup(par, 'before (window loop)').median:.2f}x "
               f"before; the decoder alone: {ceiling.median:.2f}x)", f">= {GOAL_PARALLEL:,}", rate.median >= GOAL_PARALLEL),
        Target(f"parallel mode (S={S}, W={W}) perplexity vs exact", f"{max(default_diffs):.3%} (worst of the grid "
               f"{worst:.3%})", f"<= {GOAL_PPL:.1%}", max(default_diffs) <= GOAL_PPL),
    ]
    return PartResult(NUMBER, title, "\n\n".join(parts), rows, targets, time.perf_counter() - t_start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    part = run(Settings.for_mode("quick" if args.quick else "full"))
    print(part.markdown)
    for t in part.targets:
        print(f"target: {t.what}: {t.measured} (goal {t.goal}, met: {t.met})")


if __name__ == "__main__":
    main()
