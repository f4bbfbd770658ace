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
        load_corpus("text-folder", folder, path="lm", min_count=2, unk=None)
    corpus = load_corpus("text-folder", folder, path="lm", min_count=2, unk="<unk>")
    assert corpus.vocab.symbols == ["<eos>", "<unk>", "the", "cat", "sat"]


def test_char_level_folder_and_absolute_path(folder):
    corpus = load_corpus("text-folder", None, path=str(folder / "lm"), tokenizer="char")
    assert corpus.tokenizer_name == "char"
    assert corpus.vocab.decode(corpus.splits["valid"]) == list("the_cat") + ["<eos>"]


def test_subword_folder_fits_on_train_and_can_be_reused(folder):
    corpus = load_corpus("text-folder", folder, path="lm", tokenizer="subword", tokenizer_options={"min_count": 2})
    assert isinstance(corpus.tokenizer, SubwordTokenizer) and corpus.tokenizer.subwords == ["the", "cat", "sat"]
    assert corpus.vocab.symbols == ["<eos>", "<unk>", "the", "cat", "sat", *sorted(set("thecatsatdogran"))]
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


# -- issue 35: own text that just works ------------------------------------------------------------------
def test_folder_vocabulary_is_open_by_default(folder):
    """valid/test words that train lacks become <unk> (the issue's 'naught' ended in a closed-vocabulary error)."""
    write(folder / "lm/valid.txt", "the naught cat\n")
    corpus = load_corpus("text-folder", folder, path="lm", cache=False)
    assert corpus.vocab.unk == "<unk>"
    assert corpus.vocab.decode(corpus.splits["valid"]) == ["the", "<unk>", "cat", "<eos>"]
    for tokenizer in ("char", "subword"):  # an unseen character too
        write(folder / "lm/test.txt", "the Zq cat 7\n")
        other = load_corpus("text-folder", folder, path="lm", tokenizer=tokenizer, cache=False)
        assert other.vocab.unk == "<unk>" and other.vocab.unk_id in other.splits["test"].tolist()


def test_folder_max_size_and_closed_vocabulary_names_the_option(folder):
    corpus = load_corpus("text-folder", folder, path="lm", max_size=4, cache=False)
    assert corpus.vocab.symbols == ["<eos>", "<unk>", "the", "cat"]
    write(folder / "lm/valid.txt", "the naught cat\n")
    with pytest.raises(CorpusError) as err:
        load_corpus("text-folder", folder, path="lm", unk=None, cache=False)
    assert "'naught'" in str(err.value) and "unk: '<unk>'" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(CorpusError, match="max_size must be a positive integer"):
        load_corpus("text-folder", folder, path="lm", max_size=0)


def test_one_file_is_split_80_10_10_by_lines(tmp_path):
    lines = [f"line number {i} of the file" for i in range(20)]
    write(tmp_path / "mine.txt", "\n".join(lines) + "\n")
    corpus = load_corpus("text-folder", tmp_path, path="mine.txt", cache=False)
    decoded = {s: " ".join(corpus.vocab.decode(t)).split(" <eos>")[:-1] for s, t in corpus.splits.items()}
    assert [len(decoded[s]) for s in ("train", "valid", "test")] == [16, 2, 2]
    assert decoded["test"] == [" " + ln if i else ln for i, ln in enumerate(["line number <unk> of the file"] * 2)]
    assert decoded["train"][0] == "line number 0 of the file"
    other = load_corpus("text-folder", None, path=str(tmp_path / "mine.txt"), fractions=[0.5, 0.25, 0.25], cache=False)
    assert other.splits["train"].numel() == 10 * 7
    with pytest.raises(CorpusError, match="fractions must be 3 positive numbers"):
        load_corpus("text-folder", tmp_path, path="mine.txt", fractions=[0.5, 0.5])


def test_a_folder_whose_name_ends_like_a_file_is_still_a_folder(tmp_path, monkeypatch):
    write(tmp_path / "txt/train.txt", "a b\nc d\n")
    write(tmp_path / "txt/test.txt", "a b\n")
    monkeypatch.chdir(tmp_path)  # a relative path not under the data root is read from the current folder
    corpus = load_corpus("text-folder", tmp_path / "elsewhere", path="txt", cache=False)
    assert {k: v.numel() for k, v in corpus.splits.items()} == {"train": 6, "test": 3}
