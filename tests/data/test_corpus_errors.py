"""Error paths: missing / empty / corrupted files, unknown names and options, out-of-vocabulary tokens."""

import shutil

import pytest

from dsf_lightning.data import CorpusError, Vocabulary, VocabularyError, list_corpora, load_corpus, verify_corpus

from ._helpers import need, write


def test_registered_corpora():
    expected = {
        "ptb", "ptb-char", "ptb-subword", "wikitext2", "text8", "imdb-subword", "wmt-small",
        "tinyshakespeare", "text-folder", "one-billion-word", "srnn-wikipedia", "gutenberg",
    }
    assert expected <= set(list_corpora()) and list_corpora() == sorted(list_corpora())


def test_missing_file_names_file_path_url_and_data_root(tmp_path):
    with pytest.raises(CorpusError) as info:
        load_corpus("ptb", data_root=tmp_path)
    message = str(info.value)
    for split in ("train", "valid", "test"):
        assert f"ptb/ptb.{split}.txt" in message and str(tmp_path / f"ptb/ptb.{split}.txt") in message
    assert "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf" in message  # its sha256
    assert "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz" in message
    assert f"data root: {tmp_path} (from argument data_root)" in message
    assert "data_root=" in message and "DSF_DATA_ROOT" in message


def test_missing_file_message_says_the_root_came_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DSF_DATA_ROOT", str(tmp_path / "elsewhere"))
    with pytest.raises(CorpusError, match="from environment variable DSF_DATA_ROOT") as info:
        load_corpus("tinyshakespeare")
    assert str(tmp_path / "elsewhere/tinyshakespeare/input.txt") in str(info.value)


def test_default_data_root_is_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("DSF_DATA_ROOT", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with pytest.raises(CorpusError) as info:
        load_corpus("ptb")
    assert str(tmp_path / "xdg/dsf_lightning/data/ptb/ptb.train.txt") in str(info.value)


@pytest.mark.parametrize(
    "name, options, expect",
    [
        ("text8", {}, ["text8/text8", "text8/text8.zip", "http://mattmahoney.net/dc/text8.zip"]),
        ("one-billion-word", {}, ["news.en-00001-of-00100", "heldout", "statmt.org/lm-benchmark"]),
        ("srnn-wikipedia", {}, ["srnn_wikipedia/train.txt", "https://goo.gl/s8cyYa"]),
        ("gutenberg", {}, ["Holmes_Training_Data", "msr-sentence-completion-challenge"]),
        ("wikitext2", {}, ["wikitext2/wiki.train.tokens", "wikitext-2-v1.zip", "2d84b35af79e411d73ea7cae83c73964c6ac83b4"]),
        ("wmt-small", {"language": "ru"}, ["wmt_botha2014_small/ru/train.txt", "ac0db77dcd3dda95d4709cbfd2c7fde0c5a55d3a"]),
        ("imdb-subword", {}, ["imdb/train.jsonl.xz", "aclImdb_v1.tar.gz", "JSON Lines"]),
        ("ptb-char", {}, ["ptb_char/ptb.char.train.txt.xz", "ptb_char/ptb.char.train.txt"]),
    ],
)
def test_unavailable_corpora_raise_informative_errors(tmp_path, name, options, expect):
    with pytest.raises(CorpusError) as info:
        load_corpus(name, tmp_path, **options)
    for text in expect:
        assert text in str(info.value)


def test_present_but_unsupported_corpora_say_why(tmp_path):
    write(tmp_path / "gutenberg/Holmes_Training_Data/NOVEL.TXT", "It was a dark night.\n")
    with pytest.raises(CorpusError, match="no standard train/valid/test split.*text-folder"):
        load_corpus("gutenberg", tmp_path)


def test_unknown_corpus_split_and_options(tmp_path):
    with pytest.raises(CorpusError, match="unknown corpus 'ptb2'.*ptb-char"):
        load_corpus("ptb2", tmp_path)
    with pytest.raises(CorpusError, match="unknown option.*'lang'.*accepted: language"):
        load_corpus("wmt-small", tmp_path, lang="fr")
    with pytest.raises(CorpusError, match="language must be one of"):
        load_corpus("wmt-small", tmp_path, language="xx")
    with pytest.raises(CorpusError, match="no split.*'dev'"):
        load_corpus("ptb", tmp_path, splits=("dev",))


def test_empty_file_is_named(tmp_path):
    for split in ("train", "valid", "test"):
        write(tmp_path / f"data/{split}.txt", "" if split == "valid" else "a b\n")
    with pytest.raises(CorpusError, match=r"file .*data/valid\.txt is empty \(split 'valid'\)"):
        load_corpus("text-folder", tmp_path, path="data")


def test_whitespace_only_file_is_an_empty_split(tmp_path):
    write(tmp_path / "train.txt", "  ")
    with pytest.raises(CorpusError, match=r"split 'train' is empty .*train\.txt"):
        load_corpus("text-folder", tmp_path)


@pytest.mark.corpus
def test_empty_file_of_a_known_corpus(data_root, tmp_path):
    need(data_root, "ptb/ptb.valid.txt")
    shutil.copytree(data_root / "ptb", tmp_path / "ptb")
    (tmp_path / "ptb/ptb.test.txt").write_bytes(b"")
    with pytest.raises(CorpusError, match=r"ptb/ptb\.test\.txt is empty"):
        load_corpus("ptb", tmp_path, cache=False)


@pytest.mark.corpus
def test_checksum_mismatch_is_reported_and_can_be_skipped(data_root, tmp_path):
    need(data_root, "ptb/ptb.valid.txt")
    (tmp_path / "ptb").mkdir()
    text = (data_root / "ptb/ptb.valid.txt").read_text()
    (tmp_path / "ptb/ptb.valid.txt").write_text(text.replace("consumers", "customers", 1))
    with pytest.raises(CorpusError, match=r"checksum mismatch for .*ptb\.valid\.txt: sha256 [0-9a-f]{64}, expected c9fe69"):
        load_corpus("ptb", tmp_path, splits=("valid",), cache=False)
    with pytest.raises(CorpusError, match="checksum mismatch"):
        verify_corpus("ptb", tmp_path, splits=("valid",))
    corpus = load_corpus("ptb", tmp_path, splits=("valid",), cache=False, verify=False)
    assert corpus.splits["valid"].numel() == 73_760


def test_out_of_vocabulary_token_with_a_fixed_closed_vocabulary(tmp_path):
    write(tmp_path / "a/train.txt", "abc\ncab\n")
    base = load_corpus("text-folder", tmp_path, path="a", tokenizer="char", unk=None)
    assert base.vocab.closed and set(base.vocab.symbols) == {"<eos>", "a", "b", "c"}
    write(tmp_path / "b/train.txt", "ab\n")
    write(tmp_path / "b/test.txt", "abc\nbca\ncaxb\n")
    with pytest.raises(VocabularyError) as info:
        load_corpus("text-folder", tmp_path, path="b", tokenizer="char", vocab=base.vocab)
    message = str(info.value)
    assert "'x'" in message and str(tmp_path / "b/test.txt") in message and "line 3" in message


def test_fixed_vocabulary_from_a_json_file_and_with_unk(tmp_path):
    write(tmp_path / "a/train.txt", "the cat\nthe dog\n")
    vocab = Vocabulary(["<eos>", "<unk>", "the", "cat"], unk="<unk>")
    vocab.save(tmp_path / "vocab.json")
    corpus = load_corpus("text-folder", tmp_path, path="a", vocab=tmp_path / "vocab.json")
    assert corpus.vocab == vocab
    assert corpus.vocab.decode(corpus.splits["train"]) == ["the", "cat", "<eos>", "the", "<unk>", "<eos>"]
