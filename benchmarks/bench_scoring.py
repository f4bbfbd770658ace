"""Benchmark ``dsf_lightning.scoring``: batched vs one-sentence-at-a-time throughput, and the peak
memory of streaming a document of 10k vs 1M tokens.

    OMP_NUM_THREADS=1 python benchmarks/bench_scoring.py                      # both parts
    OMP_NUM_THREADS=1 python benchmarks/bench_scoring.py --sentences 3370     # all of PTB valid
    OMP_NUM_THREADS=1 python benchmarks/bench_scoring.py --corpus ptb-char --sentences 300
    OMP_NUM_THREADS=1 python benchmarks/bench_scoring.py --model ./my-model   # a pretrained folder / name
    OMP_NUM_THREADS=1 python benchmarks/bench_scoring.py --skip-memory

Throughput: PTB valid sentences (each scored from a fresh state after ``<eos>``) with the pretrained
model given by ``--model``, else a randomly initialized Delta-RNN of ``--hidden`` units over the PTB
vocabulary (10k words) — the numbers do not depend on the weights. The batched results are checked
against the one-at-a-time ones (max abs difference of the per-token log-probabilities).

Memory: each size runs in a fresh subprocess: a synthetic document (lines of 19 words from a
40-word vocabulary + ``<eos>``) is written, a small model streams it with ``score_document`` (running
sums), and the growth of the peak RSS (VmHWM, reset before the call) and the tracemalloc peak of the
call are reported; ``per_token=True`` at the same sizes is shown for contrast (it holds every token).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dsf_lightning.scoring import Scorer  # noqa: E402


VALID_FILES = {"ptb": "ptb/ptb.valid.txt", "ptb-char": "ptb_char/ptb.char.valid.txt"}


def load_ptb(data_root: str, name: str):
    from dsf_lightning.data.corpora import load_corpus

    corpus = load_corpus(name, data_root=data_root, splits=("train",))
    lines = (Path(data_root) / VALID_FILES[name]).read_text(encoding="utf-8").splitlines()
    return corpus, lines


def build_scorer(args, corpus) -> tuple[Scorer, str]:
    if args.model:
        from dsf_lightning.scoring import from_pretrained

        return from_pretrained(args.model), f"pretrained {args.model}"
    import types

    from dsf_lightning.model import LMConfig, RecurrentLM

    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=len(corpus.vocab), cell=args.cell, hidden_sizes=[args.hidden]))
    pre = types.SimpleNamespace(model=model, vocab=corpus.vocab, tokenizer=corpus.tokenizer, info={})
    return Scorer(pre), f"random {args.cell} {args.hidden} units, V={len(corpus.vocab):,}"


def throughput(args) -> None:
    corpus, lines = load_ptb(args.data_root, args.corpus)
    lines = [ln for ln in lines if ln.strip()][: args.sentences]
    scorer, what = build_scorer(args, corpus)
    n_tokens = sum(len(corpus.tokenizer.tokenize_line(ln)) for ln in lines)
    print(f"model: {what}; {len(lines):,} {args.corpus} valid sentences, {n_tokens:,} tokens; "
          f"torch threads {torch.get_num_threads()}")
    scorer.batch_size = 8
    scorer.score(lines[:16])  # warm-up

    rows = []
    t0 = time.perf_counter()
    single = [scorer.score(ln) for ln in lines]
    t_single = time.perf_counter() - t0
    rows.append(("1 (one at a time)", t_single, 0.0))
    for bs in args.batch_sizes:
        scorer.batch_size = bs
        t0 = time.perf_counter()
        batched = scorer.score(lines)
        dt = time.perf_counter() - t0
        diff = max(abs(a - b) for s, r in zip(single, batched) for a, b in zip(s.logprobs, r.logprobs))
        rows.append((str(bs), dt, diff))
    print(f"\n{'batch size':>18} {'seconds':>9} {'tokens/s':>10} {'speedup':>8} {'max |dlogprob|':>15}")
    for name, dt, diff in rows:
        print(f"{name:>18} {dt:>9.2f} {n_tokens / dt:>10,.0f} {t_single / dt:>7.1f}x {diff:>15.2e}")


MEMORY_SCRIPT = textwrap.dedent(
    r"""
    import json, random, sys, time, tracemalloc, types
    import torch
    from dsf_lightning.data.tokenizers import WordTokenizer
    from dsf_lightning.data.vocab import Vocabulary
    from dsf_lightning.model import LMConfig, RecurrentLM
    from dsf_lightning.scoring import Scorer

    n_tokens, path, per_token = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
    cell, hidden = sys.argv[4], int(sys.argv[5])
    words = [f"w{i}" for i in range(40)]
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n_tokens // 20):
            f.write(" ".join(rng.choices(words, k=19)) + "\n")
    vocab = Vocabulary(["<eos>", "<unk>", *words], eos="<eos>", unk="<unk>")
    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=len(vocab), cell=cell, hidden_sizes=[hidden], embedding_size=16))
    scorer = Scorer(types.SimpleNamespace(model=model, vocab=vocab, tokenizer=WordTokenizer(), info={}))
    scorer.score_document(["w1 w2 w3"] * 200)

    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024

    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    base = status("VmRSS")
    tracemalloc.start()
    t0 = time.perf_counter()
    doc = scorer.score_document(path, per_token=per_token)
    seconds = time.perf_counter() - t0
    _, py_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(json.dumps({"tokens": doc.num_tokens, "rss_growth": status("VmHWM") - base, "py_peak": py_peak,
                      "seconds": seconds}))
    """
)


def memory(args) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONPATH": str(ROOT)}
    print(f"\nstreaming memory (score_document, window 256, {args.memory_cell} {args.memory_hidden} units, "
          "40-word vocabulary; timings include tracemalloc's overhead)")
    print(f"{'tokens':>10} {'per_token':>9} {'peak RSS growth':>16} {'tracemalloc peak':>17} {'seconds':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for per_token in (False, True):
            for n in (10_000, 1_000_000):
                done = subprocess.run(
                    [sys.executable, "-c", MEMORY_SCRIPT, str(n), f"{tmp}/doc{n}.txt", str(int(per_token)),
                     args.memory_cell, str(args.memory_hidden)],
                    capture_output=True, text=True, env=env,
                )
                if done.returncode:
                    print(done.stderr)
                    raise SystemExit(1)
                r = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"{r['tokens']:>10,} {str(per_token):>9} {r['rss_growth'] / 2**20:>13.2f} MiB "
                      f"{r['py_peak'] / 2**10:>13.1f} KiB {r['seconds']:>8.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-root", default=os.environ.get("DSF_DATA_ROOT", "/work/shared/data"))
    p.add_argument("--corpus", choices=sorted(VALID_FILES), default="ptb",
                   help="whose valid sentences (and vocabulary)")
    p.add_argument("--model", default=None, help="pretrained name or folder (default: random model)")
    p.add_argument("--cell", default="delta-rnn")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--sentences", type=int, default=1000, help="PTB valid sentences to score")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32, 64, 128])
    p.add_argument("--memory-cell", default="delta-rnn")
    p.add_argument("--memory-hidden", type=int, default=32)
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-memory", action="store_true")
    args = p.parse_args()
    if not args.skip_throughput:
        throughput(args)
    if not args.skip_memory:
        memory(args)


if __name__ == "__main__":
    main()
