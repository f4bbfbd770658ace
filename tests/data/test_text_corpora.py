"""text-folder with each tokenizer, and text8's 90M/5M/5M character split on a small stand-in file."""

import zipfile

import pytest
import torch

from dsf_lightning.data import CorpusError, SubwordTokenizer, load_corpus

from ._helpers import write


@pytest.fixture
def folder(tmp_path):
    write(tmp_path / "lm/train.txt", "the cat sat\nthe dog sat\n\nthe cat ran\n")
    write(tmp_path / "lm/valid.txt", "the cat\n")
    write(tmp_path / "lm/test.txt", "a dog ran\n")
    return tmp_path


def test_word_level_folder(folder):
    corpus = load_corpus("text-folder", folder, path="lm", tokenizer="word", unk="<unk>")
    assert corpus.vocab.symbols == ["<eos>", "<unk>", "the", "cat", "sat", "dog", "ran"]  # ties: first seen
    assert {k: v.numel() for k, v in corpus.splits.items()} == {"train": 13, "valid": 3, "test": 4}
    assert corpus.vocab.decode(corpus.splits["test"]) == ["<unk>", "dog", "ran", "<eos>"]


def test_min_count_needs_unk_and_drops_rare_words(folder):
    with pytest.raises(CorpusError, match="need unk"):
        load_corpus("text-folder", folder, path="lm", min_count=2)
    corpus = load_corpus("text-folder", folder, path="lm", min_count=2, unk="<unk>")
    assert corpus.vocab.symbols == ["<eos>", "<unk>", "the", "cat", "sat"]


def test_char_level_folder_and_absolute_path(folder):
    corpus = load_corpus("text-folder", None, path=str(folder / "lm"), tokenizer="char")
    assert corpus.tokenizer_name == "char"
    assert corpus.vocab.decode(corpus.splits["valid"]) == list("the_cat") + ["<eos>"]


def test_subword_folder_fits_on_train_and_can_be_reused(folder):
    corpus = load_corpus("text-folder", folder, path="lm", tokenizer="subword", tokenizer_options={"min_count": 2})
    assert isinstance(corpus.tokenizer, SubwordTokenizer) and corpus.tokenizer.subwords == ["the", "cat", "sat"]
    assert corpus.vocab.symbols == ["<eos>", "the", "cat", "sat", *sorted(set("thecatsatdogran"))]
    # reuse the fitted tokenizer and vocabulary on another folder: same ids for the same text
    write(folder / "other/test.txt", "the cat\n")
    again = load_corpus("text-folder", folder, path="other", tokenizer=corpus.tokenizer, vocab=corpus.vocab)
    assert list(again.splits) == ["test"]
    assert torch.equal(again.splits["test"], corpus.splits["valid"])


def test_subword_needs_the_train_split(folder):
    with pytest.raises(CorpusError, match="learns from the train split"):
        load_corpus("text-folder", folder, path="lm", tokenizer="subword", splits=("valid",))


def test_folder_loads_the_splits_present(tmp_path):
    write(tmp_path / "train.txt", "x y\n")
    corpus = load_corpus("text-folder", tmp_path)
    assert list(corpus.splits) == ["train"]
    with pytest.raises(CorpusError, match=r"\[valid\] valid\.txt"):
        load_corpus("text-folder", tmp_path, splits=("train", "valid"))


def _text8(root, text, zipped=False):
    (root / "text8").mkdir(parents=True)
    if zipped:
        with zipfile.ZipFile(root / "text8/text8.zip", "w") as zf:
            zf.writestr("text8", text)
    else:
        (root / "text8/text8").write_text(text)


@pytest.mark.parametrize("zipped", [False, True])
def test_text8_character_split(tmp_path, zipped):
    text = "the quick brown fox jumps over the lazy dog " * 2
    _text8(tmp_path, text, zipped)
    corpus = load_corpus("text8", tmp_path, split_chars=(60, 15, 13))
    assert corpus.vocab.eos is None and corpus.vocab.closed
    assert len(corpus.vocab) == 27  # a-z and "_" for space, like the real text8
    assert {k: v.numel() for k, v in corpus.splits.items()} == {"train": 60, "valid": 15, "test": 13}
    decoded = "".join("".join(corpus.vocab.decode(corpus.splits[s])) for s in ("train", "valid", "test"))
    assert decoded == text.replace(" ", "_")


def test_text8_word_level_uses_unk_for_rare_train_words(tmp_path):
    _text8(tmp_path, "the cat sat on the mat the dog sat on the log a bird flew by")
    with pytest.raises(CorpusError, match="level must be"):
        load_corpus("text8", tmp_path, level="bytes")
    corpus = load_corpus("text8", tmp_path, level="word", min_count=2, split_chars=(40, 10, 10))
    assert corpus.vocab.unk == "<unk>" and corpus.vocab.eos is None
    assert corpus.vocab.symbols == ["<unk>", "the", "sat", "on"]  # seen twice or more in train
    assert corpus.vocab.decode(corpus.splits["train"])[:4] == ["the", "<unk>", "sat", "on"]
    assert corpus.vocab.decode(corpus.splits["test"]) == ["<unk>"] * 3  # "rd flew by"
