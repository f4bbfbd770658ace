"""The real corpora under DSF_DATA_ROOT: exact token counts and vocabularies (see each SOURCE.md)."""

import json
import lzma

import pytest
import torch

from dsf_lightning.data import CorpusError, load_corpus, verify_corpus
from dsf_lightning.data.corpora.imdb import normalize_review

from ._helpers import need

pytestmark = pytest.mark.corpus


def _eos_count(corpus, split):
    return int((corpus.splits[split] == corpus.vocab.eos_id).sum())


def test_ptb_word_counts_and_vocabulary(data_root, shared_cache):
    need(data_root, "ptb/ptb.train.txt")
    corpus = load_corpus("ptb", data_root, cache_dir=shared_cache)
    assert corpus.tokenizer_name == "word"
    assert {k: v.numel() for k, v in corpus.splits.items()} == {"train": 929_589, "valid": 73_760, "test": 82_430}
    assert all(t.dtype == torch.int64 and t.dim() == 1 for t in corpus.splits.values())
    assert len(corpus.vocab) == 10_000
    assert (corpus.vocab.eos, corpus.vocab.unk) == ("<eos>", "<unk>")
    assert {s: _eos_count(corpus, s) for s in corpus.splits} == {"train": 42_068, "valid": 3_370, "test": 3_761}
    first = corpus.vocab.decode(corpus.splits["train"][:6])
    assert first == ["aer", "banknote", "berlitz", "calloway", "centrust", "cluett"]
    # every train type is used in train (vocabulary = train types + <eos>)
    assert torch.unique(corpus.splits["train"]).numel() == 10_000


def test_ptb_cache_hit_returns_identical_tensors(data_root, tmp_path):
    need(data_root, "ptb/ptb.train.txt")
    cold = load_corpus("ptb", data_root, cache_dir=tmp_path)
    warm = load_corpus("ptb", data_root, cache_dir=tmp_path)
    assert (cold.info["cached"], warm.info["cached"]) == (False, True)
    assert warm.vocab == cold.vocab
    assert all(torch.equal(warm.splits[s], cold.splits[s]) for s in cold.splits)
    assert warm.info["seconds"] < cold.info["seconds"]


def test_ptb_char_counts_and_50_symbols(data_root, shared_cache):
    need(data_root, "ptb_char/ptb.char.train.txt.xz")
    corpus = load_corpus("ptb-char", data_root, cache_dir=shared_cache)
    assert {k: v.numel() for k, v in corpus.splits.items()} == {"train": 5_017_482, "valid": 393_042, "test": 442_423}
    assert _eos_count(corpus, "train") == 42_068
    assert len(corpus.vocab) == 50 and corpus.vocab.closed
    expected = set("_abcdefghijklmnopqrstuvwxyz0123456789N<>#$&'*-./\\") | {"<eos>"}
    assert set(corpus.vocab.symbols) == expected


def test_ptb_char_reads_an_uncompressed_train_file_too(data_root, tmp_path):
    need(data_root, "ptb_char/ptb.char.train.txt.xz")
    root = tmp_path / "root"
    (root / "ptb_char").mkdir(parents=True)
    with lzma.open(data_root / "ptb_char/ptb.char.train.txt.xz") as src:
        (root / "ptb_char/ptb.char.train.txt").write_bytes(src.read())
    plain = load_corpus("ptb-char", root, splits=("train",), cache=False)  # sha256 of the plain file verified
    packed = load_corpus("ptb-char", data_root, splits=("train",), cache=False)
    assert torch.equal(plain.splits["train"], packed.splits["train"]) and plain.vocab == packed.vocab


def test_ptb_subword_vocabulary_approaches_the_papers_2405(data_root, shared_cache):
    need(data_root, "ptb/ptb.train.txt")
    corpus = load_corpus("ptb-subword", data_root, cache_dir=shared_cache)
    tok = corpus.tokenizer
    assert tok.min_count == 15
    # 2,357 subwords (incl. the atomic <unk>) + 46 single characters (26 letters, 10 digits, N,
    # 9 punctuation) + <eos> = 2,404; the paper reports 2,378 + 26 + 1 = 2,405.
    assert (len(tok.subwords), len(tok.chars), len(corpus.vocab)) == (2_357, 46, 2_404)
    assert set("abcdefghijklmnopqrstuvwxyz") <= set(tok.chars)
    assert {k: v.numel() for k, v in corpus.splits.items()} == {"train": 1_670_048, "valid": 131_170, "test": 145_939}
    assert _eos_count(corpus, "train") == 42_068


def test_ptb_subwords_concatenate_back_to_the_words(data_root, shared_cache):
    need(data_root, "ptb/ptb.valid.txt")
    corpus = load_corpus("ptb-subword", data_root, cache_dir=shared_cache)
    decoded = " ".join(corpus.vocab.decode(corpus.splits["valid"])).split("<eos>")[:-1]
    lines = (data_root / "ptb/ptb.valid.txt").read_text().split("\n")[:-1]
    assert len(decoded) == len(lines) == 3_370
    assert all(d.replace(" ", "") == "".join(line.split()) for d, line in zip(decoded, lines))


def test_wikitext2_train_is_missing_and_valid_test_load(data_root, shared_cache):
    need(data_root, "wikitext2/wiki.valid.tokens")
    if (data_root / "wikitext2/wiki.train.tokens").exists():
        pytest.skip("a train file is present here")
    with pytest.raises(CorpusError) as info:
        load_corpus("wikitext2", data_root, cache_dir=shared_cache)
    message = str(info.value)
    assert "wiki.train.tokens" in message and str(data_root / "wikitext2") in message
    assert "splits=('valid', 'test')" in message
    corpus = load_corpus("wikitext2", data_root, splits=("valid", "test"), cache_dir=shared_cache)
    assert {k: v.numel() for k, v in corpus.splits.items()} == {"valid": 217_646, "test": 245_569}
    assert _eos_count(corpus, "valid") == 3_760
    assert int((corpus.splits["valid"] == corpus.vocab.unk_id).sum()) == 11_718
    assert len(corpus.vocab) == 18_328  # valid+test types + <eos>, not the official 33,278


@pytest.mark.parametrize("language", ["cs", "de", "es", "fr", "ru"])
def test_wmt_small_valid_test_counts_match_the_files(data_root, shared_cache, language):
    need(data_root, f"wmt_botha2014_small/{language}/valid.txt")
    corpus = load_corpus("wmt-small", data_root, language=language, splits=("valid", "test"), cache_dir=shared_cache)
    for split in ("valid", "test"):
        lines = (data_root / f"wmt_botha2014_small/{language}/{split}.txt").read_text(encoding="utf-8").split("\n")
        lines = lines[:-1] if lines[-1] == "" else lines
        assert corpus.splits[split].numel() == sum(len(line.split()) + 1 for line in lines)
        assert _eos_count(corpus, split) == len(lines)
    source_md = {"cs": 68_864, "de": 76_766, "es": 82_700, "fr": 84_989, "ru": 74_885}  # valid, SOURCE.md
    assert corpus.splits["valid"].numel() == source_md[language]


def test_tinyshakespeare_is_65_characters_split_at_line_ends(data_root, shared_cache):
    need(data_root, "tinyshakespeare/input.txt")
    corpus = load_corpus("tinyshakespeare", data_root, cache_dir=shared_cache)
    sizes = {k: v.numel() for k, v in corpus.splits.items()}
    assert sum(sizes.values()) == 1_115_394 and len(corpus.vocab) == 65
    assert 0.9 <= sizes["train"] / 1_115_394 < 0.9001
    for split in corpus.splits:  # every split ends at a line end
        assert corpus.splits[split][-1] == corpus.vocab.eos_id
    assert "".join(corpus.vocab.decode(corpus.splits["train"][:14])) == "First_Citizen:"


def test_verify_corpus_checks_the_sha256_of_every_file(data_root):
    need(data_root, "ptb/ptb.train.txt")
    digests = verify_corpus("ptb", data_root)
    assert digests[str(data_root / "ptb/ptb.train.txt")] == "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf"
    assert len(digests) == 3


@pytest.mark.slow
def test_imdb_subword_corpus(data_root, shared_cache):
    need(data_root, "imdb/train.jsonl.xz", "imdb/test.jsonl.xz")
    corpus = load_corpus("imdb-subword", data_root, cache_dir=shared_cache)
    assert len(corpus.vocab) == 1_926  # as the paper's IMDB dictionary
    assert {s: _eos_count(corpus, s) for s in corpus.splits} == {"train": 22_500, "valid": 2_500, "test": 25_000}
    assert {k: v.numel() for k, v in corpus.splits.items()} == {"train": 10_476_680, "valid": 1_133_175, "test": 11_341_337}
    assert {"<num>", "<emo>", "<sym>"} <= set(corpus.vocab.symbols)
    # the first train review with <br /> tags comes back as its normalized words, tags stripped
    with lzma.open(data_root / "imdb/train.jsonl.xz", "rt", encoding="utf-8") as f:
        line_no, raw = next((i, json.loads(line)["text"]) for i, line in enumerate(f, 1) if "<br />" in line)
    assert line_no % 10, "pick a review of the train part (valid holds lines 10, 20, ...)"
    index = line_no - 1 - line_no // 10  # its position among the train reviews
    ids = corpus.splits["train"]
    ends = (ids == corpus.vocab.eos_id).nonzero().flatten().tolist()
    start = ends[index - 1] + 1 if index else 0
    review = "".join(corpus.vocab.decode(ids[start : ends[index]]))
    assert review == normalize_review(raw).replace(" ", "")
    assert "<br />" in raw and "<sym> br" not in normalize_review(raw)
