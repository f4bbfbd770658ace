"""Issue 13 item 7: ``score_document`` streams documents without newlines in bounded memory and linear
time, and refuses binary input (``/dev/zero``) with a clear error instead of growing without bound.

Memory and time are measured in a subprocess (peak RSS from ``/proc/self/status``, a watchdog that
stops the process past a ceiling, so a regression cannot eat the machine's memory). Correctness of the
parts: a line handed over in pieces gives the same tokens and numbers as the whole line.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from dsf_lightning import scoring
from dsf_lightning.data.tokenizers import CharTokenizer, SubwordTokenizer, WordTokenizer
from dsf_lightning.data.vocab import Vocabulary
from dsf_lightning.model import LMConfig, RecurrentLM
from dsf_lightning.scoring import Scorer, ScoringError

from .test_scoring import TRAIN, close, make_pretrained

ROOT = Path(__file__).resolve().parents[1]
#: peak RSS growth allowed while scoring a newline-free document of any length (after a warm-up); a
#: document held whole costs ~60 bytes per word token (str objects + list), 240 MiB for 4 MB of text
RSS_CEILING_MIB = 16  # measured: +1.7 MiB for 1 MB and 4 MB, +1.8 MiB for 100 MB (26.7M tokens, 113 s CPU)


def _model(vocab: Vocabulary, seed: int = 0) -> RecurrentLM:
    torch.manual_seed(seed)
    return RecurrentLM(LMConfig(vocab_size=len(vocab), cell="elman", hidden_sizes=[16], embedding_size=8)).eval()


@pytest.fixture(scope="module")
def word_scorer():
    tok = WordTokenizer()
    vocab = Vocabulary.build(
        (tok.tokenize_line(line) for line in TRAIN), specials=("<eos>", "<unk>"), eos="<eos>", unk="<unk>"
    )
    return Scorer(make_pretrained(_model(vocab), vocab, tok), window=7)


# ------------------------------------------------------------------------------ parts == whole line
@pytest.mark.parametrize("kind", ["word", "char", "char-ptb", "subword", "subword-boundary", "word-no-eos"])
def test_a_long_line_read_in_parts_scores_as_the_whole_line(kind, tmp_path, monkeypatch):
    monkeypatch.setattr(scoring.lines, "READ_LIMIT", 40)  # parts of at most 40 bytes
    tok = {
        "word": WordTokenizer(),
        "char": CharTokenizer(mode="plain"),
        "char-ptb": CharTokenizer(mode="ptb"),
        "subword": SubwordTokenizer(min_count=3).fit(TRAIN),
        "subword-boundary": SubwordTokenizer(min_count=3, boundary="<w>").fit(TRAIN),
        "word-no-eos": WordTokenizer(eos=None),
    }[kind]
    long_line = "  ".join(TRAIN[:30]) + " naïve café€ "  # ~900 bytes, multi-byte characters, double spaces
    if kind == "char-ptb":
        long_line = " _ ".join(" ".join(w) for w in long_line.split())
    lines = [long_line, TRAIN[40], "   ", long_line[:333]]
    specials = tuple(s for s in (tok.eos, "<unk>") if s)
    vocab = Vocabulary.build((tok.tokenize_line(x) for x in lines), specials=specials, eos=tok.eos, unk="<unk>")
    scorer = Scorer(make_pretrained(_model(vocab), vocab, tok), window=5)
    whole = scorer.score(lines, carry_state=True)
    path = tmp_path / "doc.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    for source in (path, lines):  # a file, and lines given in memory
        doc = scorer.score_document(source, per_token=True)
        assert doc.tokens == [t for s in whole for t in s.tokens]
        close(doc.logprobs, [x for s in whole for x in s.logprobs])
        assert doc.num_lines == 4


def test_a_word_longer_than_the_buffer_is_one_unknown_word(word_scorer, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(scoring.lines, "READ_LIMIT", 64)
    path = tmp_path / "doc.txt"
    path.write_text("the cat " + "x" * 1000 + " sat on the mat\nthe dog\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="dsf_lightning.scoring"):
        doc = word_scorer.score_document(path, per_token=True)
    ref = word_scorer.score(["the cat zzzzzz sat on the mat", "the dog"], carry_state=True)
    assert doc.tokens == [t for s in ref for t in s.tokens] and doc.tokens[2] == "<unk>" and doc.num_oov == 1
    close(doc.logprobs, [x for s in ref for x in s.logprobs])
    assert "longer than" in caplog.text and "byte offset 8" in caplog.text


# ------------------------------------------------------------------------------ binary input
def test_nul_bytes_are_not_text(word_scorer, tmp_path):
    path = tmp_path / "binary.txt"
    path.write_bytes(b"the cat sat\nthe dog\x00\x00 ran\n")
    with pytest.raises(ScoringError, match=r"NUL byte at byte offset 19 \(line 2\).*not text"):
        word_scorer.score_document(path)


@pytest.mark.slow
def test_dev_zero_is_a_clear_error_not_a_memory_error(word_scorer, capsys, monkeypatch):
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    out = run_measured("dev-zero", 0, timeout=60)
    assert out["error"].startswith("dsf score: error: /dev/zero: NUL byte at byte offset 0"), out
    assert out["rc"] == 2 and out["rss_growth_mib"] < RSS_CEILING_MIB


# ------------------------------------------------------------------------------ memory and time
SCRIPT = textwrap.dedent(
    r"""
    import contextlib, io, json, os, random, sys, time, types
    import torch
    from dsf_lightning import scoring
    from dsf_lightning.cli import score as score_command
    from dsf_lightning.data.tokenizers import WordTokenizer
    from dsf_lightning.data.vocab import Vocabulary
    from dsf_lightning.model import LMConfig, RecurrentLM
    from dsf_lightning.scoring import Scorer
    from tests.rss_watch import growth_mib, start_watch

    mode, megabytes, path, ceiling = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    words = [f"w{i}" for i in range(40)]
    if mode == "newline-free":  # words separated by spaces, not one newline
        rng = random.Random(0)
        block = " ".join(rng.choices(words, k=50_000)) + " "
        with open(path, "w", encoding="utf-8") as f:
            written = 0
            while written < megabytes * 1e6:
                f.write(block)
                written += len(block)
    tok = WordTokenizer()
    vocab = Vocabulary(["<eos>", "<unk>", *words], eos="<eos>", unk="<unk>")
    torch.manual_seed(0)
    # IRLM: its linear recurrence runs as a scan, ~10x faster than a per-step loop, so 100 MB takes minutes
    model = RecurrentLM(LMConfig(vocab_size=len(vocab), cell="irlm", hidden_sizes=[16], embedding_size=8))
    scorer = Scorer(types.SimpleNamespace(model=model, vocab=vocab, tokenizer=tok, info={}), window=256)
    scorer.score_document(["w1 w2 w3 " * 400] * 20)  # warm up allocators and kernels

    base = start_watch(ceiling)
    start = time.process_time()
    out = {}
    if mode == "dev-zero":
        scoring.from_pretrained = lambda *a, **k: scorer
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            out["rc"] = score_command.main(["--file", "/dev/zero"])
        out["error"] = err.getvalue().strip()
    else:
        doc = scorer.score_document(path)
        out.update(tokens=doc.num_tokens, lines=doc.num_lines)
    out.update(cpu_s=time.process_time() - start, rss_growth_mib=growth_mib(base))
    print(json.dumps(out), flush=True)
    """
)


def run_measured(mode: str, megabytes: float, tmp_path: Path | None = None, timeout: int = 600) -> dict:
    path = tmp_path / f"doc-{megabytes}.txt" if tmp_path is not None else Path("/nonexistent")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(megabytes), str(path), str(RSS_CEILING_MIB)],
        capture_output=True, text=True, env=env, timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if path.exists():
        path.unlink()
    return out


@pytest.mark.slow
def test_a_newline_free_document_streams_in_bounded_memory_and_linear_time(tmp_path):
    """CI sizes: 1 MB and 4 MB of newline-free text (a single line of ~250k / ~1M words). Peak RSS
    growth stays under the same ceiling for both (it held for 100 MB too, measured once: see the
    issue-13 notes), and the 4 MB document costs about 4x the 1 MB one in CPU time (a quadratic
    buffer: 16x). One retry of the timing on a noisy machine, best of two."""
    runs = {mb: [run_measured("newline-free", mb, tmp_path)] for mb in (1, 4)}
    for mb, (out,) in runs.items():
        assert out.get("rc") != "killed", f"{mb} MB: peak RSS grew past {RSS_CEILING_MIB} MiB: {out}"
        assert out["lines"] == 1 and out["tokens"] > 240_000 * mb
        assert out["rss_growth_mib"] < RSS_CEILING_MIB, out

    def ratio():
        return min(r["cpu_s"] for r in runs[4]) / min(r["cpu_s"] for r in runs[1])

    if ratio() >= 6.0:
        for mb in (1, 4):
            runs[mb].append(run_measured("newline-free", mb, tmp_path))
    print(f"\n1 MB: {runs[1][0]['cpu_s']:.2f} s CPU, +{runs[1][0]['rss_growth_mib']:.1f} MiB; "
          f"4 MB: {runs[4][0]['cpu_s']:.2f} s CPU, +{runs[4][0]['rss_growth_mib']:.1f} MiB; ratio {ratio():.2f}")
    assert ratio() < 6.0, f"CPU time 1 MB vs 4 MB: {runs}: not linear in the document's length"


# ------------------------------------------------------------------------------ long words (issue 38 item 5)
def test_the_words_after_a_word_longer_than_the_buffer_are_all_scored(word_scorer, tmp_path, monkeypatch):
    """The long word and the words after it share the read buffer (no newline near): every one of them is
    scored, the long word as one <unk> (before: the buffer's rest after the word was dropped)."""
    monkeypatch.setattr(scoring.lines, "READ_LIMIT", 64)
    path = tmp_path / "doc.txt"
    tail = " b c d" + " the cat" * 30
    path.write_text("a " + "x" * 100 + tail + "\nthe dog\n", encoding="utf-8")
    doc = word_scorer.score_document(path, per_token=True)
    ref = word_scorer.score(["a zzzzzz" + tail, "the dog"], carry_state=True)
    assert doc.num_tokens == 1 + 1 + 3 + 60 + 1 + 3 == sum(r.num_tokens for r in ref)
    assert doc.tokens == [t for s in ref for t in s.tokens] and doc.tokens[1] == "<unk>"
    assert doc.num_oov == sum(r.num_oov for r in ref) == 4  # the long word, b, c, d
    close(doc.logprobs, [x for s in ref for x in s.logprobs])


def test_dsf_score_file_keeps_a_70k_word_as_one_unknown_token_and_every_word_after_it(tmp_path, capsys):
    """The real CLI and the bundled PTB model (its normalizer on): a 70,000-byte word followed by 30,000 words
    on the same line counts exactly as the line with a short unknown word in its place."""
    from dsf_lightning.cli import main

    words = "the market rose sharply " + "the dog ran " * 10_000
    path = tmp_path / "doc.txt"
    path.write_text("the " + "x" * 70_000 + " " + words + "\n", encoding="utf-8")
    assert main(["score", "--file", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ref = scoring.from_pretrained("delta-rnn-ptb").score("the qqqqqqqq " + words)
    assert out["num_tokens"] == 1 + 1 + 4 + 30_000 + 1 == ref.num_tokens
    assert out["num_oov"] == ref.num_oov >= 1
    assert abs(out["logprob"] - ref.logprob) < 1e-3 * abs(ref.logprob)
