"""Text normalization where text enters a model: ``Scorer`` (``score``, ``score_document``), ``dsf score
--normalize``, the pretrained folder's ``normalize`` field, the data option for user text (fine-tuning,
prediction), and the OOV rate with its warning.

The bundled ``delta-rnn-ptb`` (in the package: no corpus needed) is the model; the corpus-tier tests at
the end measure OOV rates on PTB's own test set, on Shakespeare (public domain, ../shared/data/tinyshakespeare)
and on newswire-style prose written for this test (tests/assets/newswire.txt).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dsf_lightning
from dsf_lightning import scoring
from dsf_lightning.cli import score as score_command
from dsf_lightning.data.normalize import get_normalizer
from dsf_lightning.hub import PretrainedFormatError
from dsf_lightning.model.pretrained import Pretrained, load_pretrained, save_pretrained
from dsf_lightning.scoring import OOV_WARN_RATE, Scorer, ScoringError

ROOT = Path(__file__).resolve().parents[1]
DATA_ROOT = Path(os.environ.get("DSF_DATA_ROOT") or ROOT.parent / "shared" / "data")
BUNDLED = Path(dsf_lightning.__file__).parent / "pretrained" / "delta-rnn-ptb"
NEWSWIRE = ROOT / "tests" / "assets" / "newswire.txt"
RAW = "Hello, World! It's 3.5% higher."
RAW_TOKENS = ["<unk>", "world", "<eos>", "it", "'s", "N", "N", "higher", "<eos>"]  # "hello" is not in PTB


@pytest.fixture(scope="module")
def pretrained():
    return load_pretrained(BUNDLED)


def test_the_bundled_model_knows_its_normalizer(pretrained):
    assert pretrained.normalize == "ptb"
    assert Scorer(pretrained).normalizer.name == "ptb"
    assert Scorer(pretrained, normalize="none").normalizer is None
    assert Scorer(pretrained, normalize="ptb-char").normalizer.name == "ptb-char"


def test_raw_text_is_normalized_before_scoring(pretrained):
    s = Scorer(pretrained).score(RAW)
    assert s.tokens == RAW_TOKENS and s.text == RAW
    assert s.num_oov == 1 and s.oov_words == ["hello"]
    ref = Scorer(pretrained, normalize="none").score("hello world\nit 's N N higher")
    assert ref.tokens == s.tokens
    torch.testing.assert_close(s.logprobs, ref.logprobs, rtol=0, atol=0)


def test_oov_rate_is_reported_and_a_high_one_warns(pretrained, caplog):
    with caplog.at_level(logging.WARNING, logger="dsf_lightning.scoring"):
        s = Scorer(pretrained, normalize="none").score(RAW)
    assert s.tokens == ["<unk>"] * 5 + ["<eos>"] and s.num_oov == 5
    assert s.oov_rate == pytest.approx(5 / 6) and s.to_dict()["oov_rate"] == pytest.approx(5 / 6)
    assert "83.3%" in caplog.text and "--normalize ptb" in caplog.text  # the model's normalizer was turned off
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dsf_lightning.scoring"):
        s = Scorer(pretrained).score("the company said its profit rose in the third quarter")
    assert s.oov_rate == 0 and caplog.text == ""
    assert OOV_WARN_RATE == 0.05


def test_a_literal_unk_is_not_an_oov_word(pretrained):
    s = Scorer(pretrained).score("the <unk> rose")
    assert s.tokens == ["the", "<unk>", "rose", "<eos>"] and s.num_oov == 0 and s.oov_rate == 0


def test_text_that_normalizes_to_nothing_is_an_error(pretrained):
    with pytest.raises(ScoringError, match="nothing left to score after normalization.*--normalize none"):
        Scorer(pretrained).score("... !!!")


def test_streams_and_documents_are_normalized_the_same_way(pretrained, tmp_path, monkeypatch):
    texts = ["Shares fell 5%. Bonds rose.", "Mr. Smith's firm didn't buy $1,000 of them."]
    normalized = ["shares fell N N\nbonds rose", "mr. smith 's firm did n't buy $ N of them"]
    scorer, plain = Scorer(pretrained), Scorer(pretrained, normalize="none")
    stream, ref = scorer.score(texts, carry_state=True), plain.score(normalized, carry_state=True)
    for a, b in zip(stream, ref):
        assert a.tokens == b.tokens
        torch.testing.assert_close(a.logprobs, b.logprobs)
    path = tmp_path / "doc.txt"
    path.write_text("\n\n".join(texts) + "\n")  # blank lines between paragraphs are no sentences
    doc = scorer.score_document(path, per_token=True)
    assert doc.tokens == [t for r in ref for t in r.tokens] and doc.num_lines == 3
    assert doc.logprob == pytest.approx(sum(r.logprob for r in ref), abs=1e-4)
    # one long line read in small parts (cut between words) gives the same tokens and numbers
    monkeypatch.setattr(scoring.lines, "READ_LIMIT", 16)
    long = tmp_path / "long.txt"
    long.write_text(" ".join(texts * 3) + "\n")
    parts = scorer.score_document(long, per_token=True)
    whole = plain.score_document(get_normalizer("ptb").normalize(" ".join(texts * 3)).split("\n"), per_token=True)
    assert parts.tokens == whole.tokens
    assert parts.logprob == pytest.approx(whole.logprob, abs=1e-4)


def test_documents_report_their_oov_rate(pretrained, tmp_path, caplog):
    path = tmp_path / "raw.txt"
    path.write_text("Hello, World! Greetings, Earthlings.\n")
    with caplog.at_level(logging.WARNING, logger="dsf_lightning.scoring"):
        doc = Scorer(pretrained).score_document(path)
    assert doc.num_oov == 3 and doc.oov_rate == pytest.approx(3 / 6)
    assert doc.to_dict()["oov_rate"] == pytest.approx(0.5)
    assert "50.0%" in caplog.text and "--normalize ptb" not in caplog.text  # it was applied


def test_a_ptb_char_model_reads_raw_text_spelled_out(monkeypatch, tmp_path):
    """The character model's normalizer: the ptb form spelled out, '_' between words, also across the
    parts of a long line read in pieces (the boundary the cut fell on is kept)."""
    from dsf_lightning.data.tokenizers import CharTokenizer
    from dsf_lightning.data.vocab import Vocabulary
    from dsf_lightning.model import LMConfig, RecurrentLM

    symbols = ["<eos>", "_", *"abcdefghijklmnopqrstuvwxyz0123456789", "N", "<", ">", *"#$&'*-./\\"]
    vocab = Vocabulary(symbols, eos="<eos>")
    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=len(vocab), cell="delta-rnn", hidden_sizes=[8], embedding_size=8))
    char = Pretrained(model, vocab, CharTokenizer(mode="ptb"), {"corpus": "ptb-char"}, normalize="ptb-char")
    scorer = Scorer(char)
    s = scorer.score("Hello, World! It's 5%.")
    assert s.tokens == [*"hello_world", "<eos>", *"it_'s_N_N", "<eos>"]
    with pytest.raises(ScoringError, match="closed vocabulary"):
        Scorer(char, normalize="none").score("Hello")
    text = "Shares rose 5% in heavy trading and bonds fell " * 4
    monkeypatch.setattr(scoring.lines, "READ_LIMIT", 16)
    path = tmp_path / "long.txt"
    path.write_text(text + "\n")
    doc = scorer.score_document(path, per_token=True)
    assert doc.tokens == scorer.score(text).tokens


def test_an_unknown_normalizer_is_a_clear_error(pretrained, tmp_path):
    with pytest.raises(ScoringError, match=r"unknown normalizer 'bogus'.*none, imdb, ptb, ptb-char"):
        Scorer(pretrained, normalize="bogus")
    odd = Pretrained(pretrained.model, pretrained.vocab, pretrained.tokenizer, {}, normalize="wikitext-9")
    with pytest.raises(ScoringError, match=r"'wikitext-9'.*--normalize none"):
        Scorer(odd)


def test_the_folder_records_its_normalizer(pretrained, tmp_path):
    with_it = Pretrained(pretrained.model, pretrained.vocab, pretrained.tokenizer, {}, normalize="ptb")
    folder = save_pretrained(with_it, tmp_path / "with")
    assert json.loads((folder / "config.json").read_text())["normalize"] == "ptb"
    assert load_pretrained(folder).normalize == "ptb"
    without = save_pretrained(Pretrained(pretrained.model, pretrained.vocab, pretrained.tokenizer, {}), tmp_path / "without")
    assert "normalize" not in json.loads((without / "config.json").read_text())
    assert load_pretrained(without).normalize is None and Scorer(load_pretrained(without)).normalizer is None
    config = json.loads((folder / "config.json").read_text())
    config["normalize"] = 5
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(PretrainedFormatError, match="normalize"):
        load_pretrained(folder)


def test_export_records_the_normalizer_of_the_training_data(pretrained, tmp_path):
    from dsf_lightning.export.language_model import pretrained_from_checkpoint

    state = {f"model.{k}": v for k, v in pretrained.model.state_dict().items()}
    hparams = pretrained.config.to_dict()
    for corpus, options, expected in (("ptb", {}, "ptb"), ("text-folder", {"normalize": "ptb"}, "ptb"), ("text-folder", {}, None)):
        ckpt = tmp_path / f"{corpus}-{len(options)}.ckpt"
        torch.save({"state_dict": state, "hyper_parameters": hparams,
                    "datamodule_hyper_parameters": {"corpus": corpus, **options}}, ckpt)
        fake = type("C", (), {"name": corpus, "vocab": pretrained.vocab, "tokenizer": pretrained.tokenizer,
                              "tokenizer_name": "word"})()
        assert pretrained_from_checkpoint(ckpt, fake).normalize == expected


# ------------------------------------------------------------------------------------------ the command
def test_cli_normalize_flag(capsys):
    assert score_command.main(["--json", "--per-token", "--normalize", "ptb", RAW]) == 0
    (s,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]  # JSON lines: one per sentence
    assert [t["token"] for t in s["tokens"]] == RAW_TOKENS and s["normalize"] == "ptb"
    assert s["oov_rate"] == pytest.approx(1 / 9)
    assert score_command.main(["--json", "--normalize", "none", RAW]) == 0
    captured = capsys.readouterr()
    (s,) = [json.loads(line) for line in captured.out.splitlines()]
    assert s["num_oov"] == 5 and s["normalize"] is None
    assert score_command.main([RAW]) == 0  # the model's own normalizer by default
    out = capsys.readouterr().out
    assert "oov%" in out and "11.1" in out
    assert score_command.main(["--normalize", "bogus", RAW]) == 2
    err = capsys.readouterr().err
    assert "unknown normalizer 'bogus'" in err and "ptb" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_dsf_score_normalize_end_to_end():
    """The installed command, as a user runs it."""
    proc = subprocess.run(
        [sys.executable, "-m", "dsf_lightning.cli", "score", "--normalize", "ptb", "--per-token", RAW],
        capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    rows = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("    ") and "logprob" not in line]
    assert rows[: len(RAW_TOKENS)] == RAW_TOKENS
    assert "9 tokens, 1 oov (11.1%)" in proc.stdout


# ------------------------------------------------------------------------------------------ user text as data
def write_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "mytext"
    folder.mkdir()
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text("The Company's shares rose 5%. Investors didn't sell.\n\nMr. Smith said so.\n")
    return folder


def test_text_folder_corpus_normalized(tmp_path):
    from dsf_lightning.data import load_corpus

    write_folder(tmp_path)
    corpus = load_corpus("text-folder", data_root=tmp_path, path="mytext", normalize="ptb", cache_dir=tmp_path / "cache")
    expected = "the company 's shares rose N N <eos> investors did n't sell <eos> mr. smith said so <eos>".split()
    assert [corpus.vocab.symbols[i] for i in corpus.splits["train"].tolist()] == expected
    raw = load_corpus("text-folder", data_root=tmp_path, path="mytext", cache_dir=tmp_path / "cache")
    assert "Company's" in raw.vocab.symbols and raw.info["key"] != corpus.info["key"]
    with pytest.raises(Exception, match="unknown normalizer 'bogus'"):
        load_corpus("text-folder", data_root=tmp_path, path="mytext", normalize="bogus", cache=False)


def test_finetuning_data_takes_the_pretrained_normalizer(tmp_path):
    from dsf_lightning.training.datamodule import LanguageModelDataModule

    write_folder(tmp_path)
    common = dict(corpus="text-folder", data_root=str(tmp_path), corpus_options={"path": "mytext"})
    dm = LanguageModelDataModule(**common, vocab_from=str(BUNDLED))
    symbols = dm.corpus.vocab.symbols
    assert [symbols[i] for i in dm.corpus.splits["train"][:7].tolist()] == ["the", "company", "'s", "shares", "rose", "N", "N"]
    off = LanguageModelDataModule(**common, vocab_from=str(BUNDLED), normalize="none")
    assert symbols.index("<unk>") in off.corpus.splits["train"][:3].tolist()  # "The", "Company's" are not PTB words
    asked = LanguageModelDataModule(**common, normalize="ptb")
    assert "company" in asked.corpus.vocab.symbols and "Company's" not in asked.corpus.vocab.symbols


def test_a_predict_file_is_normalized_like_the_model_data(tmp_path):
    from dsf_lightning.training.datamodule import LanguageModelDataModule

    write_folder(tmp_path)
    raw = tmp_path / "mine.txt"
    raw.write_text("Shares rose 5%. Mr. Smith didn't sell.\n\n")
    common = dict(corpus="text-folder", data_root=str(tmp_path), corpus_options={"path": "mytext"},
                  vocab_from=str(BUNDLED), eval_batch_size=1, predict_file=str(raw))
    symbols = load_pretrained(BUNDLED).vocab.symbols
    windows = LanguageModelDataModule(**common).predict_dataloader()
    ids = windows.streams[0].tolist()
    assert [symbols[i] for i in ids] == "shares rose N N <eos> mr. smith did n't sell <eos>".split()
    off = LanguageModelDataModule(**common, normalize="none").predict_dataloader()
    assert off.streams.numel() == 9  # Shares rose 5%. Mr. Smith didn't sell. <eos> + the blank line's <eos>


# ------------------------------------------------------------------------------------------ held-out check
def oov_rate(scorer: Scorer, lines) -> tuple[float, int]:
    doc = scorer.score_document(lines)
    return doc.num_oov / doc.num_tokens, doc.num_tokens


@pytest.mark.corpus
@pytest.mark.slow
def test_oov_rates_on_shakespeare_and_newswire_against_ptb_test(pretrained):
    ptb_test = DATA_ROOT / "ptb" / "ptb.test.txt"
    shakespeare = DATA_ROOT / "tinyshakespeare" / "input.txt"
    if not (ptb_test.exists() and shakespeare.exists()):
        pytest.skip("PTB or tinyshakespeare not present under DSF_DATA_ROOT")
    # PTB's own test set: <unk> tokens are literal in the file (the share of the text PTB itself maps to <unk>)
    words = [w for line in ptb_test.read_text().splitlines() for w in line.split() + ["<eos>"]]
    ptb_unk = words.count("<unk>") / len(words)
    assert 0.055 < ptb_unk < 0.06  # 5.8% of the 82,430 tokens (<eos> included)
    scorer, plain = Scorer(pretrained), Scorer(pretrained, normalize="none")
    lines = shakespeare.read_text().splitlines()[:4000]
    raw_rate, _ = oov_rate(plain, lines)
    norm_rate, n = oov_rate(scorer, lines)
    assert n > 20_000
    # as it comes: capitalized verse with punctuation attached (measured 41% on these lines)
    assert raw_rate > 0.35
    # normalized: 16% (17% on the whole file): thou, thy, thee, hath, 'tis and the characters' names are not
    # 1989 Wall Street Journal words; the rest of the gap to PTB's 5.8% is archaic vocabulary, not form
    assert norm_rate < 0.2 and norm_rate < raw_rate / 2
    news_raw, _ = oov_rate(plain, NEWSWIRE.read_text().splitlines())
    news, _ = oov_rate(scorer, NEWSWIRE.read_text().splitlines())
    assert news_raw > 0.25 and news < ptb_unk  # 31% raw, 0.2% normalized (one word: "outpacing")
