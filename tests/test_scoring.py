"""Text scoring (``dsf_lightning.scoring``) and the ``dsf score`` command.

The models are small RecurrentLMs trained for a couple of hundred steps on a toy corpus (word,
character and subword versions), wrapped in the hub's ``Pretrained`` when it is importable, else
in a stand-in with the same attributes. Every number is checked against a direct computation:
``log_softmax`` over ``model([<eos>] + tokens)``.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from dsf_lightning import scoring
from dsf_lightning.cli import score as score_command
from dsf_lightning.data.tokenizers import CharTokenizer, SubwordTokenizer, WordTokenizer
from dsf_lightning.data.vocab import Vocabulary
from dsf_lightning.model import LMConfig, RecurrentLM
from dsf_lightning.scoring import DocumentScore, Scorer, ScoringError, SentenceScore

LN2 = math.log(2)
ROOT = Path(__file__).resolve().parents[1]
DATA_ROOT = Path(os.environ.get("DSF_DATA_ROOT") or "/work/shared/data")

# -------------------------------------------------------------------------------------- toy corpus
SUBJECTS = ["the cat", "the dog", "a bird", "my friend", "the old man", "a small child"]
VERBS = ["sat on", "looked at", "ran to", "saw", "walked past"]
OBJECTS = ["the mat", "a tree", "the house", "the river", "a red car"]
TAILS = ["", "", "today", "again", "in the morning"]


def toy_lines(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(w for w in (rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS), rng.choice(TAILS)) if w)
        for _ in range(n)
    ]


TRAIN = toy_lines(400)
SENTENCES = [
    "the cat sat on the mat",
    "a bird saw the river again",
    "my friend walked past a red car in the morning",
    "the dog",
    "a small child ran to the house today",
    "the old man looked at a tree",
]


def make_pretrained(model, vocab, tokenizer, **info):
    """The hub's Pretrained when it exists, else an object with the same attributes."""
    try:
        from dsf_lightning.model.pretrained import Pretrained

        return Pretrained(model=model, vocab=vocab, tokenizer=tokenizer, info=dict(info))
    except (ImportError, TypeError):
        return types.SimpleNamespace(model=model, vocab=vocab, tokenizer=tokenizer, info=dict(info))


def train_lm(tokenizer, vocab, lines, *, steps=200, hidden=32, embedding=16, seed=0, cell="delta-rnn"):
    """A small RecurrentLM trained on the ``<eos>``-separated stream of ``lines`` (random windows)."""
    torch.manual_seed(seed)
    ids = [vocab.eos_id]
    for line in lines:
        ids += vocab.encode(tokenizer.tokenize_line(line))
    stream = torch.tensor(ids)
    model = RecurrentLM(LMConfig(vocab_size=len(vocab), cell=cell, hidden_sizes=[hidden], embedding_size=embedding))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    bptt, batch = 16, 16
    for _ in range(steps):
        starts = torch.randint(0, len(stream) - bptt - 1, (batch, 1))
        pos = starts + torch.arange(bptt)
        logits, _ = model(stream[pos])
        loss = F.cross_entropy(logits.reshape(-1, len(vocab)), stream[pos + 1].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def word_lm():
    tok = WordTokenizer()
    vocab = Vocabulary.build(
        (tok.tokenize_line(line) for line in TRAIN), specials=("<eos>", "<unk>"), eos="<eos>", unk="<unk>"
    )
    return make_pretrained(train_lm(tok, vocab, TRAIN), vocab, tok, corpus="toy")


@pytest.fixture(scope="module")
def char_lm():
    tok = CharTokenizer(mode="plain")
    vocab = Vocabulary.build((tok.tokenize_line(line) for line in TRAIN), specials=("<eos>",), eos="<eos>")
    return make_pretrained(train_lm(tok, vocab, TRAIN, steps=150), vocab, tok, corpus="toy-char")


@pytest.fixture(scope="module")
def subword_lm():
    tok = SubwordTokenizer(min_count=3).fit(TRAIN)
    vocab = Vocabulary.build(
        (tok.tokenize_line(line) for line in TRAIN), specials=("<eos>", "<unk>"), eos="<eos>", unk="<unk>"
    )
    return make_pretrained(train_lm(tok, vocab, TRAIN, steps=100), vocab, tok, corpus="toy-subword")


def direct_logprobs(pre, lines: list[str]) -> tuple[list[str], list[float]]:
    """The reference: one forward pass over [<eos>] + tokens of ``lines``, log_softmax, gather."""
    ids = []
    for line in lines:
        ids += pre.vocab.encode(pre.tokenizer.tokenize_line(line))
    with torch.no_grad():
        logits, _ = pre.model(torch.tensor([[pre.vocab.eos_id] + ids[:-1]]))
        lp = torch.log_softmax(logits[0], dim=-1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)
    return pre.vocab.decode(ids), lp.tolist()


def close(a, b, tol=1e-5):
    assert len(a) == len(b)
    worst = max((abs(x - y) for x, y in zip(a, b)), default=0.0)
    assert worst <= tol, f"max abs difference {worst:.3g} > {tol}"
    return worst


# -------------------------------------------------------------------------------------- sentences
def test_per_token_logprobs_match_direct_computation(word_lm):
    scorer = Scorer(word_lm)
    assert not scorer.model.training
    assert not any(p.requires_grad for p in scorer.model.parameters())
    for text in SENTENCES[:4]:
        s = scorer.score(text)
        tokens, ref = direct_logprobs(word_lm, [text])
        assert isinstance(s, SentenceScore) and s.text == text
        assert s.tokens == tokens == text.split() + ["<eos>"]
        close(s.logprobs, ref)
        assert s.num_tokens == len(tokens)
        assert s.logprob == pytest.approx(sum(ref), abs=1e-5)
        assert s.ppl == pytest.approx(math.exp(-sum(ref) / len(ref)), rel=1e-6)
        assert s.surprisal == pytest.approx([-x / LN2 for x in ref], abs=1e-5)
        assert s.num_oov == 0 and s.bpc is None
    # the model was trained: in-domain sentences are far more probable than a uniform guess
    assert scorer.score(SENTENCES[0]).ppl < len(word_lm.vocab) / 3


def test_batch_equals_one_at_a_time_in_input_order(word_lm):
    texts = SENTENCES + toy_lines(20, seed=5) + ["the cat sat on the mat\nthe dog saw a tree"]
    singles = [Scorer(word_lm, batch_size=1).score(t) for t in texts]
    for batch_size, window in ((3, 4), (8, 256), (64, 5)):
        batched = Scorer(word_lm, batch_size=batch_size, window=window).score(texts)
        assert [b.text for b in batched] == texts
        for b, s in zip(batched, singles):
            assert b.tokens == s.tokens
            close(b.logprobs, s.logprobs)


def test_text_with_newlines_is_one_sequence(word_lm):
    scorer = Scorer(word_lm)
    s = scorer.score("the cat sat on the mat\nthe dog saw a tree\n")
    tokens, ref = direct_logprobs(word_lm, ["the cat sat on the mat", "the dog saw a tree"])
    assert s.tokens == tokens and tokens.count("<eos>") == 2
    close(s.logprobs, ref)


def test_carry_state_scores_the_list_as_one_stream(word_lm):
    scorer = Scorer(word_lm, window=5)
    texts = SENTENCES[:4]
    carried = scorer.score(texts, carry_state=True)
    tokens, ref = direct_logprobs(word_lm, texts)
    assert [t for s in carried for t in s.tokens] == tokens
    close([x for s in carried for x in s.logprobs], ref)
    fresh = scorer.score(texts)  # carry_state=False: every sentence starts after <eos> from zeros
    for text, f in zip(texts, fresh):
        close(f.logprobs, direct_logprobs(word_lm, [text])[1])
    assert carried[0].logprobs == pytest.approx(fresh[0].logprobs, abs=1e-6)  # the first is the same
    assert abs(carried[1].logprob - fresh[1].logprob) > 1e-4  # the second saw the first


# -------------------------------------------------------------------------------------- documents
@pytest.fixture(scope="module")
def document(tmp_path_factory):
    lines = toy_lines(60, seed=11)
    path = tmp_path_factory.mktemp("doc") / "doc.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines


def test_score_document_in_windows_equals_one_pass(word_lm, document):
    path, lines = document
    tokens, ref = direct_logprobs(word_lm, lines)
    scorer = Scorer(word_lm)
    for window in (7, 64, len(ref) + 10):
        doc = scorer.score_document(path, per_token=True, window=window)
        assert isinstance(doc, DocumentScore)
        assert doc.tokens == tokens and doc.num_tokens == len(ref) and doc.num_lines == len(lines)
        close(doc.logprobs, ref)
        assert doc.logprob == pytest.approx(math.fsum(ref), abs=1e-4)
        assert doc.ppl == pytest.approx(math.exp(-math.fsum(ref) / len(ref)), rel=1e-6)
    summary = scorer.score_document(path, window=7)  # running sums only
    assert summary.tokens is None and summary.logprobs is None
    assert summary.logprob == pytest.approx(math.fsum(ref), abs=1e-4) and summary.num_tokens == len(ref)
    # == sentence scores with carried state, == the same document given as lines
    carried = scorer.score(lines, carry_state=True)
    assert summary.logprob == pytest.approx(sum(s.logprob for s in carried), abs=1e-4)
    assert scorer.score_document(lines, window=64).logprob == pytest.approx(summary.logprob, abs=1e-4)
    pairs = list(scorer.iter_token_scores(path, window=7))
    assert [t for t, _ in pairs] == tokens
    close([lp for _, lp in pairs], ref)
    seen = []
    scorer.score_document(path, window=9, on_token=lambda t, lp: seen.append((t, lp)))
    assert [t for t, _ in seen] == tokens
    close([lp for _, lp in seen], ref)


def test_document_file_conventions(word_lm, tmp_path):
    scorer = Scorer(word_lm)
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(b"\xef\xbb\xbfthe cat sat on the mat\r\nthe dog saw a tree\r\n ")  # BOM, CRLF, blank tail
    doc = scorer.score_document(crlf, per_token=True)
    tokens, ref = direct_logprobs(word_lm, ["the cat sat on the mat", "the dog saw a tree"])
    assert doc.tokens == tokens and doc.num_lines == 2
    close(doc.logprobs, ref)
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ScoringError, match="empty text"):
        scorer.score_document(empty)
    with pytest.raises(ScoringError, match="no such file"):
        scorer.score_document(tmp_path / "missing.txt")


# -------------------------------------------------------------------------------------- errors, OOV
def test_oov_words_are_counted_and_mapped_to_unk(word_lm):
    scorer = Scorer(word_lm)
    s = scorer.score("the zebra sat on the quux")
    assert s.num_oov == 2 and s.oov_words == ["zebra", "quux"]
    assert s.tokens == ["the", "<unk>", "sat", "on", "the", "<unk>", "<eos>"]
    close(s.logprobs, direct_logprobs(word_lm, ["the <unk> sat on the <unk>"])[1])
    batch = scorer.score(["the cat", "a zebra"])
    assert [b.num_oov for b in batch] == [0, 1]
    doc = scorer.score_document(["the zebra sat", "a quux saw a zebra"], window=3)
    assert doc.num_oov == 3


def test_closed_char_vocabulary_rejects_unknown_symbol(char_lm):
    scorer = Scorer(char_lm)
    with pytest.raises(ScoringError) as err:
        scorer.score(["the cat", "the caté"])
    msg = str(err.value)
    assert "'é'" in msg and "U+00E9" in msg and "closed vocabulary" in msg and "text 1" in msg
    assert "'a'" in msg and "'<eos>'" in msg  # it says what the vocabulary contains
    with pytest.raises(ScoringError, match="closed vocabulary"):
        scorer.score_document(["the cat", "Zebra!"])


def test_empty_text_is_an_error(word_lm):
    scorer = Scorer(word_lm)
    with pytest.raises(ScoringError, match="empty text"):
        scorer.score("")
    with pytest.raises(ScoringError, match=r"empty text \(text 1\)"):
        scorer.score(["the cat", ""])
    blank = scorer.score("   ")  # non-empty input that tokenizes to the end symbol alone
    assert blank.tokens == ["<eos>"] and blank.num_tokens == 1
    assert scorer.score([]) == []
    with pytest.raises(ScoringError):
        scorer.score([b"bytes"])
    assert issubclass(ScoringError, ValueError)


def test_non_utf8_file_names_the_byte_offset(word_lm, tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"the cat sat\nthe \xe9t\xe9 dog\n")
    with pytest.raises(ScoringError) as err:
        Scorer(word_lm).score_document(path)
    msg = str(err.value)
    assert str(path) in msg and "byte offset 16" in msg and "line 2" in msg


def test_bad_options():
    pre = types.SimpleNamespace(model=None, vocab=None, tokenizer=None)
    with pytest.raises(ScoringError, match="batch_size"):
        Scorer(pre, batch_size=0)
    with pytest.raises(ScoringError, match="missing"):
        Scorer(pre)


# -------------------------------------------------------------------------------------- other models
def test_char_model_reports_bpc(char_lm):
    scorer = Scorer(char_lm, batch_size=4, window=6)
    texts = ["the cat sat on the mat", "a bird saw the river"]
    results = scorer.score(texts)
    for text, s in zip(texts, results):
        tokens, ref = direct_logprobs(char_lm, [text])
        assert s.tokens == tokens == [*text.replace(" ", "_"), "<eos>"]
        close(s.logprobs, ref)
        assert s.bpc == pytest.approx(-sum(ref) / len(ref) / LN2, rel=1e-6)
        assert s.bpc == pytest.approx(sum(s.surprisal) / s.num_tokens, rel=1e-9)
    doc = scorer.score_document(texts, window=5)
    assert doc.bpc == pytest.approx(-doc.logprob / doc.num_tokens / LN2)
    assert doc.bpc < math.log2(len(char_lm.vocab))  # trained: better than uniform


def test_subword_model(subword_lm):
    scorer = Scorer(subword_lm, batch_size=2)
    texts = ["the cat sat on the mat", "a small child walked past the river"]
    for text, s in zip(texts, scorer.score(texts)):
        tokens, ref = direct_logprobs(subword_lm, [text])
        vocab, tok = subword_lm.vocab, subword_lm.tokenizer
        assert s.tokens == tokens == vocab.decode(vocab.encode(tok.tokenize_line(text)))
        close(s.logprobs, ref)
        assert s.bpc is None
    assert len(scorer.score(texts[1]).tokens) > len(texts[1].split()) + 1  # words were split into subwords


def test_stream_without_end_symbol(tmp_path):
    """text8-like: no end symbol, so the first token of a sequence is context only."""
    tok = WordTokenizer(eos=None)
    vocab = Vocabulary.build((tok.tokenize_line(line) for line in TRAIN), specials=(), eos=None)
    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=len(vocab), hidden_sizes=[16], embedding_size=8))
    scorer = Scorer(make_pretrained(model, vocab, tok), window=4)
    text = "the cat sat on the mat"
    ids = vocab.encode(text.split())
    with torch.no_grad():
        logits, _ = model(torch.tensor([ids[:-1]]))
        ref = torch.log_softmax(logits[0], -1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1).tolist()
    s = scorer.score(text)
    assert s.tokens == text.split()[1:]
    close(s.logprobs, ref)
    path = tmp_path / "one_line.txt"
    path.write_text(text, encoding="utf-8")
    close(scorer.score_document(path, per_token=True).logprobs, ref)
    with pytest.raises(ScoringError, match="context only"):
        scorer.score(["the cat", "dog"])


def test_long_line_without_end_symbol_is_read_in_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(scoring.lines, "READ_LIMIT", 64)
    tok = CharTokenizer(eos=None, mode="plain")
    spaced = "the cat sat on the mat " * 20 + "éé"
    unspaced = "théçatsat€onthemat" * 20  # no space: cut on UTF-8 character boundaries (2- and 3-byte)
    vocab = Vocabulary.build([tok.tokenize_line(spaced + unspaced)], specials=(), eos=None)
    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=len(vocab), hidden_sizes=[16], embedding_size=8))
    scorer = Scorer(make_pretrained(model, vocab, tok), window=50)
    for i, text in enumerate((spaced, unspaced)):
        path = tmp_path / f"stream{i}.txt"
        path.write_text(text, encoding="utf-8")
        one = scorer.score(text)
        doc = scorer.score_document(path, per_token=True)
        assert doc.tokens == one.tokens and doc.num_lines == 1
        close(doc.logprobs, one.logprobs)


# -------------------------------------------------------------------------------------- hub round trip
def test_save_and_from_pretrained_round_trip(word_lm, tmp_path):
    pytest.importorskip("dsf_lightning.model.pretrained")
    pytest.importorskip("dsf_lightning.hub.registry")
    scorer = Scorer(word_lm)
    scorer.save_pretrained(tmp_path / "toy-model")
    again = scoring.from_pretrained(str(tmp_path / "toy-model"), batch_size=4)
    assert again.batch_size == 4
    for a, b in zip(scorer.score(SENTENCES), again.score(SENTENCES)):
        assert a.tokens == b.tokens
        close(a.logprobs, b.logprobs)


def test_cli_with_a_real_pretrained_folder(word_lm, tmp_path, capsys):
    pytest.importorskip("dsf_lightning.model.pretrained")
    folder = Scorer(word_lm).save_pretrained(tmp_path / "toy-model") or tmp_path / "toy-model"
    assert score_command.main(["--model", str(folder), "--json", "the cat sat on the mat"]) == 0
    (s,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert s["logprob"] == pytest.approx(Scorer(word_lm).score("the cat sat on the mat").logprob, abs=1e-4)
    for model in (str(tmp_path / "no-such-folder"), "no-such-model-name"):
        assert score_command.main(["--model", model, "the cat"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("dsf score: error: ") and "Traceback" not in err and len(err.strip().splitlines()) == 1


# -------------------------------------------------------------------------------------- the command
@pytest.fixture
def cli(word_lm, monkeypatch):
    """``dsf score`` with the toy model standing in for the hub's."""
    calls = []

    def fake_from_pretrained(name, revision=None, **options):
        calls.append(name)
        return Scorer(word_lm, **options)

    monkeypatch.setattr(scoring, "from_pretrained", fake_from_pretrained)
    return calls


def test_cli_table_and_json(cli, capsys):
    assert score_command.main(["the cat sat on the mat", "the dog"]) == 0
    out = capsys.readouterr().out
    assert "ppl" in out and "the cat sat on the mat" in out and cli == ["delta-rnn-ptb"]
    assert score_command.main(["--json", "--per-token", "--model", "toy", "the zebra"]) == 0
    (s,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]  # JSON lines: one per sentence
    assert s["model"] == "toy"
    assert [t["token"] for t in s["tokens"]] == ["the", "<unk>", "<eos>"] and s["num_oov"] == 1
    assert s["tokens"][0]["surprisal"] == pytest.approx(-s["tokens"][0]["logprob"] / LN2)
    assert cli[-1] == "toy"
    assert score_command.main(["--per-token", "the cat"]) == 0
    assert "surprisal" in capsys.readouterr().out


def test_cli_file(cli, capsys, document):
    path, lines = document
    assert score_command.main(["--file", str(path), "--window", "7"]) == 0
    out = capsys.readouterr().out
    assert f"{len(lines)} lines" in out and "ppl" in out
    assert score_command.main(["--file", str(path), "--json", "--per-token"]) == 0
    *tokens, doc = [json.loads(line) for line in capsys.readouterr().out.splitlines()]  # a line per token, summary last
    assert len(tokens) == doc["num_tokens"] and doc["num_lines"] == len(lines) and doc["source"] == str(path)
    assert sum(t["logprob"] for t in tokens) == pytest.approx(doc["logprob"], abs=1e-4)
    assert score_command.main(["--file", str(path), "--json"]) == 0
    (doc,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "tokens" not in doc


def test_cli_errors_are_one_line_exit_2(cli, capsys, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff\n")
    for argv, expected in (
        ([""], "empty text"),
        (["--file", str(bad)], "byte offset 3"),
        (["--file", str(tmp_path / "nope.txt")], "no such file"),
        ([], "nothing to score"),
    ):
        assert score_command.main(argv) == 2
        err = capsys.readouterr().err
        assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_model_load_error_is_one_line(monkeypatch, capsys):
    def missing(name, revision=None, **options):
        raise FileNotFoundError(f"no pretrained model {name!r}\nknown: delta-rnn-ptb")

    monkeypatch.setattr(scoring, "from_pretrained", missing)
    assert score_command.main(["--model", "nope", "hello"]) == 2
    err = capsys.readouterr().err
    assert "no pretrained model 'nope'" in err and len(err.strip().splitlines()) == 1


# -------------------------------------------------------------------------------------- real PTB
@pytest.mark.corpus
def test_ptb_vocabulary_sentences(tmp_path_factory):
    if not (DATA_ROOT / "ptb" / "ptb.valid.txt").exists():
        pytest.skip(f"PTB absent under {DATA_ROOT}")
    from dsf_lightning.data.corpora import load_corpus

    corpus = load_corpus("ptb", data_root=DATA_ROOT, cache_dir=tmp_path_factory.mktemp("ptb-cache"))
    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=len(corpus.vocab), hidden_sizes=[32]))
    pre = make_pretrained(model, corpus.vocab, corpus.tokenizer)
    lines = (DATA_ROOT / "ptb" / "ptb.valid.txt").read_text(encoding="utf-8").splitlines()[:40]
    scorer = Scorer(pre, batch_size=16)
    for line, s in zip(lines, scorer.score(lines)):
        tokens, ref = direct_logprobs(pre, [line])
        assert s.tokens == tokens
        close(s.logprobs, ref)
    s = scorer.score("the company said xyzzyq shares rose")
    assert s.num_oov == 1 and s.oov_words == ["xyzzyq"] and s.tokens[3] == "<unk>"


# -------------------------------------------------------------------------------------- memory
MEMORY_SCRIPT = textwrap.dedent(
    r"""
    import json, os, random, sys, tracemalloc, types
    import torch
    from dsf_lightning.data.tokenizers import WordTokenizer
    from dsf_lightning.data.vocab import Vocabulary
    from dsf_lightning.model import LMConfig, RecurrentLM
    from dsf_lightning.scoring import Scorer

    n_tokens, path = int(sys.argv[1]), sys.argv[2]
    words = [f"w{i}" for i in range(40)]
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as f:  # lines of 19 words + <eos> = 20 tokens
        for _ in range(n_tokens // 20):
            f.write(" ".join(rng.choices(words, k=19)) + "\n")
    tok = WordTokenizer()
    vocab = Vocabulary(["<eos>", "<unk>", *words], eos="<eos>", unk="<unk>")
    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=len(vocab), cell="elman", hidden_sizes=[16], embedding_size=8))
    scorer = Scorer(types.SimpleNamespace(model=model, vocab=vocab, tokenizer=tok, info={}), window=256)
    scorer.score_document(["w1 w2 w3"] * 200)  # warm up allocators and kernels

    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024

    try:  # reset the peak RSS (VmHWM) to the current RSS
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    base = status("VmRSS")
    tracemalloc.start()
    doc = scorer.score_document(path)
    _, py_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(json.dumps({"tokens": doc.num_tokens, "ppl": doc.ppl, "rss_growth": status("VmHWM") - base,
                      "tracemalloc_peak": py_peak}))
    """
)


def measure_peak(n_tokens: int, tmp_path: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(n_tokens), str(tmp_path / f"doc{n_tokens}.txt")],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_document_memory_does_not_grow_with_length(tmp_path):
    small = measure_peak(10_000, tmp_path)
    large = measure_peak(1_000_000, tmp_path)
    print(f"\npeak during score_document: 10k tokens: RSS +{small['rss_growth'] / 2**20:.2f} MiB, "
          f"tracemalloc {small['tracemalloc_peak'] / 2**10:.1f} KiB; 1M tokens: RSS +"
          f"{large['rss_growth'] / 2**20:.2f} MiB, tracemalloc {large['tracemalloc_peak'] / 2**10:.1f} KiB")
    assert small["tokens"] == 10_000 and large["tokens"] == 1_000_000
    margin = 4 * 2**20  # a few MB (allocator noise), against ~100 MB per million held floats + symbols
    assert large["rss_growth"] <= small["rss_growth"] + margin
    # Python objects: CPython keeps freed small tuples, floats, frames... on free lists (2,000 tuples of each
    # size, ~96 KiB for 1-tuples alone) that tracemalloc still counts; a long run fills them once. A document
    # held in memory would be megabytes (~100 MB per million floats and symbols).
    free_lists = 256 * 2**10
    assert large["tracemalloc_peak"] <= small["tracemalloc_peak"] * 1.10 + free_lists
