"""Vocabulary, padding / masks, length buckets, the DataModules, the IDX reader; MNIST / Fashion-MNIST /
IMDB from the shared data when present (marked ``corpus``)."""

import gzip
import json
import lzma
import struct

import numpy as np
import pytest
import torch

from dsf_lightning.data.corpora.files import CorpusError
from dsf_lightning.tasks import (
    BalancedParenthesesDataModule,
    BucketBatchSampler,
    CopyingMemoryDataModule,
    IMDBSentimentDataModule,
    PalindromeDataModule,
    PixelMNISTDataModule,
    TokenSequenceDataset,
    TomitaDataModule,
    Vocabulary,
    collate,
    load_mnist,
    read_idx,
)
from dsf_lightning.tasks.data import IGNORE_INDEX
from dsf_lightning.tasks.languages import TOMITA_SPLITS, tomita_accepts

from .conftest import WORDS, need, write_numbered_imdb


def test_vocabulary_wraps_sequences_in_start_and_end_tokens():
    v = Vocabulary("01")
    assert v.symbols == ["<pad>", "<s>", "</s>", "0", "1"] and len(v) == 5
    assert v.encode("0110") == [1, 3, 4, 4, 3, 2]
    assert v.encode("01", add_start_end=False) == [3, 4]
    assert v.decode(v.encode("0110")) == list("0110")
    assert Vocabulary.from_json(v.to_json()).symbols == v.symbols
    words = Vocabulary(["good", "bad"], unk=True)
    assert words.encode(["good", "awful"]) == [1, 4, 3, 2]
    with pytest.raises(KeyError):
        v.encode("2")


def test_the_task_vocabulary_is_the_data_vocabulary_with_its_own_json():
    from dsf_lightning.data.vocab import Vocabulary as SymbolVocabulary
    from dsf_lightning.data.vocab import VocabularyError
    from dsf_lightning.tasks.data import UnknownSymbolError

    v = Vocabulary(["good", "bad"], unk=True)
    assert isinstance(v, SymbolVocabulary) and v.eos_id == v.end_id == 2 and v.unk_id == 3 and "good" in v
    assert issubclass(UnknownSymbolError, VocabularyError)
    # what classifier folders hold in vocab.json (their config.json fingerprints it): unchanged
    assert v.to_json() == '{"alphabet": ["good", "bad"], "start_end_tokens": true, "unk": true}'
    assert Vocabulary.from_json(v.to_json()) == v and Vocabulary.from_json(v.to_json()) != Vocabulary(["good", "bad"])
    with pytest.raises(VocabularyError, match="outside the vocabulary"):
        v.decode([7])


def test_pad_ids_batches_encoded_sequences():
    from dsf_lightning.tasks.data import pad_ids

    inputs, lengths = pad_ids([[1, 3, 2], [1, 4, 4, 3, 2]], pad_id=0)
    assert inputs.tolist() == [[1, 3, 2, 0, 0], [1, 4, 4, 3, 2]] and inputs.dtype == torch.long
    assert lengths.tolist() == [3, 5]
    assert pad_ids([], pad_id=0)[0].shape == (0, 0)


def test_collate_pads_and_masks():
    items = [{"inputs": torch.tensor([1, 3, 2]), "label": torch.tensor(1)},
             {"inputs": torch.tensor([1, 4, 4, 3, 2]), "label": torch.tensor(0)}]
    batch = collate(items, pad_id=0)
    assert batch["inputs"].tolist() == [[1, 3, 2, 0, 0], [1, 4, 4, 3, 2]]
    assert batch["lengths"].tolist() == [3, 5] and batch["labels"].tolist() == [1, 0]
    assert batch["mask"].tolist() == [[True] * 3 + [False] * 2, [True] * 5]
    tagged = collate([{"inputs": torch.tensor([5, 6]), "label": torch.tensor([1, 2])},
                      {"inputs": torch.tensor([7]), "label": torch.tensor([3])}])
    assert tagged["labels"].tolist() == [[1, 2], [3, IGNORE_INDEX]]
    feats = collate([{"inputs": torch.ones(2, 3), "label": torch.tensor(0)}, {"inputs": torch.ones(1, 3), "label": torch.tensor(1)}])
    assert feats["inputs"].shape == (2, 2, 3) and feats["inputs"][1, 1].sum() == 0


def test_bucket_sampler_covers_every_index_once_with_similar_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 100, size=1000).tolist()
    sampler = BucketBatchSampler(lengths, batch_size=32, shuffle=True, seed=0, pool_batches=10)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    spread = np.mean([max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches])
    assert spread < 15  # unbucketed batches of 32 would spread ~90
    again = list(BucketBatchSampler(lengths, 32, shuffle=True, seed=0, pool_batches=10))
    assert again == batches  # same seed, same epoch
    assert list(sampler) != batches  # next epoch reshuffles
    sampler.set_epoch(0)
    assert list(sampler) == batches
    ordered = list(BucketBatchSampler(lengths, 100, shuffle=False))
    flat = [lengths[i] for b in ordered for i in b]
    assert flat == sorted(flat)


def test_token_dataset_keeps_sequences_flat_with_metadata():
    ds = TokenSequenceDataset([[1, 2], [1, 3, 3, 2]], [0, 1], {"text": ["", "00"]})
    assert len(ds) == 2 and ds[1]["inputs"].tolist() == [1, 3, 3, 2] and int(ds[1]["label"]) == 1
    assert ds.lengths.tolist() == [2, 4] and ds.meta["text"] == ["", "00"]
    with pytest.raises(ValueError):
        TokenSequenceDataset([[1]], [0, 1])


def test_tomita_datamodule_batches_and_splits():
    data = TomitaDataModule(3, batch_size=50)
    data.setup("fit")
    data.setup("test")
    assert len(data.train_set) == TOMITA_SPLITS[3]["train"].size == 2141
    assert len(data.val_set) == 1344 and list(data.test_sets) == ["test"]
    strings, labels = data.split_strings("train")
    assert all(y == tomita_accepts(3, s) for s, y in zip(strings, labels))
    batch = next(iter(data.train_dataloader()))
    assert batch["inputs"].shape[0] == 50
    assert (batch["lengths"] == batch["mask"].sum(1)).all()
    assert (batch["inputs"][:, 0] == data.vocab.start_id).all()
    ends = batch["inputs"][torch.arange(50), batch["lengths"] - 1]
    assert (ends == data.vocab.end_id).all()
    assert data.model_options() == {"num_classes": 2, "end_token": True, "vocab_size": 5}


def test_balanced_parentheses_and_palindrome_datamodules():
    bp = BalancedParenthesesDataModule(size="small", test_size=10)
    bp.setup("fit")
    bp.setup("test")
    assert (len(bp.train_set), len(bp.val_set)) == (1008, 268)
    assert int(bp.train_set.labels.sum()) == 601 and bp.vocab_size == 3 + 28
    assert bp.test_set_names == ["d1-10_l100", "d10-20_l100", "d10-20_l200", "d5_l200", "d10_l200", "d20_l1000"]
    assert max(bp.test_sets["d20_l1000"].meta["length"]) <= 1000
    pal = PalindromeDataModule(train=(200, 100, (1, 25)), valid=(40, 20, (26, 50)), test_size=10)
    pal.setup("fit")
    pal.setup("test")
    assert len(pal.train_set) == 200 and int(pal.val_set.labels.sum()) == 20
    assert pal.test_set_names == ["l50-100", "l50-200", "l50-500"]


def test_copying_memory_datamodule():
    data = CopyingMemoryDataModule(lag=100, train_size=256, test_size=64, batch_size=128)
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    assert batch["inputs"].shape == batch["labels"].shape == (128, 120)
    assert batch["labels"].max() <= 8 and (batch["inputs"] >= 3).all()  # c0..c9 are ids 3..12
    assert data.val_dataloader() == []
    assert data.baseline_loss == pytest.approx(10 * np.log(8) / 120)


def _write_idx(path, array, code=0x08):
    header = struct.pack(">HBB", 0, code, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    dtype = {0x08: ">u1", 0x0C: ">i4", 0x0D: ">f4"}[code]
    data = header + array.astype(dtype).tobytes()
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def test_idx_reader_handles_gzip_raw_and_types(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    _write_idx(tmp_path / "a.gz", images)
    np.testing.assert_array_equal(read_idx(tmp_path / "a.gz"), images)
    ints = np.array([[1, -2], [300000, 4]], dtype=np.int32)
    _write_idx(tmp_path / "b", ints, code=0x0C)
    np.testing.assert_array_equal(read_idx(tmp_path / "b"), ints)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(CorpusError, match="not an IDX"):
        read_idx(tmp_path / "bad")
    _write_idx(tmp_path / "short", images)
    (tmp_path / "short").write_bytes((tmp_path / "short").read_bytes()[:-1])
    with pytest.raises(CorpusError, match="header says"):
        read_idx(tmp_path / "short")


def test_pixel_datamodule_on_a_fake_mnist_folder(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "mnist").mkdir()
    for split, n in (("train", 30), ("t10k", 10)):
        _write_idx(tmp_path / "mnist" / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)))
        _write_idx(tmp_path / "mnist" / f"{split}-labels-idx1-ubyte.gz", rng.integers(0, 10, n))
    data = PixelMNISTDataModule(data_root=tmp_path, valid_size=5, batch_size=4)
    data.setup("fit")
    data.setup("test")
    assert (len(data.train_set), len(data.val_set), len(data.test_sets["test"])) == (25, 5, 10)
    item = data.train_set[0]["inputs"]
    assert item.shape == (786, 3) and item[0].tolist() == [0, 1, 0] and item[-1].tolist() == [0, 0, 1]
    assert 0 <= item[1:-1, 0].min() and item[1:-1, 0].max() <= 1
    permuted = PixelMNISTDataModule(data_root=tmp_path, valid_size=5, permuted=True, start_end_tokens=False)
    permuted.setup("fit")
    a, b = data.train_set[3]["inputs"][1:-1, 0], permuted.train_set[3]["inputs"][:, 0]
    assert b.shape == (784,) and not torch.equal(a, b) and torch.equal(a[permuted.permutation], b)
    assert data.model_options() == {"num_classes": 10, "end_token": True, "input_mode": "values", "input_size": 3}


@pytest.mark.corpus
def test_mnist_files_give_60k_and_10k_labelled_images(data_root):
    need(data_root, "mnist/train-images-idx3-ubyte.gz", "mnist/t10k-labels-idx1-ubyte.gz")
    images, labels = load_mnist("mnist", "train", data_root)
    assert images.shape == (60000, 28, 28) and images.dtype == np.uint8 and labels.shape == (60000,)
    assert np.bincount(labels).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert abs(images.mean() / 255 - 0.130660) < 1e-5
    test_images, test_labels = load_mnist("mnist", "test", data_root)
    assert test_images.shape == (10000, 28, 28)
    assert np.bincount(test_labels).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


@pytest.mark.corpus
def test_fashion_mnist_test_file_alone(data_root):
    need(data_root, "fashion_mnist/t10k-images-idx3-ubyte.gz")
    images, labels = load_mnist("fashion_mnist", "test", data_root)
    assert images.shape == (10000, 28, 28) and np.bincount(labels).tolist() == [1000] * 10
    data = PixelMNISTDataModule("fashion_mnist", data_root=data_root)
    data.setup("test")
    assert len(data.test_sets["test"]) == 10000
    if not (data_root / "fashion_mnist/train-images-idx3-ubyte.gz").exists():
        with pytest.raises(CorpusError, match="split_test_file"):
            PixelMNISTDataModule("fashion_mnist", data_root=data_root).setup("fit")
    split = PixelMNISTDataModule("fashion_mnist", data_root=data_root, split_test_file=True)
    split.setup("fit")
    assert (len(split.train_set), len(split.val_set), len(split.test_sets["test"])) == (8000, 1000, 1000)


@pytest.mark.corpus
@pytest.mark.slow
def test_imdb_words_truncation_and_splits(data_root):
    need(data_root, "imdb/train.jsonl.xz", "imdb/test.jsonl.xz")
    data = IMDBSentimentDataModule(data_root=data_root, max_vocab=5000, train_max_length=10, test_max_lengths=(100, None))
    data.setup("fit")
    data.setup("test")
    assert len(data.train_set) == 22500 and len(data.val_set) == 2500
    assert int(data.train_set.labels.sum()) == 11250
    assert data.train_set.lengths.max() == 12  # 10 words + <s> + </s>
    assert data.test_set_names == ["l100", "full"] and len(data.test_sets["full"]) == 25000
    assert data.test_sets["l100"].lengths.max() == 102 and data.test_sets["full"].lengths.max() > 1000
    assert len(data.vocab) == 5000 + 4


@pytest.mark.parametrize("keep, expected", [("first", WORDS[:5]), ("last", WORDS[-5:])])
def test_imdb_keep_words_chooses_which_end_of_a_review_a_cut_keeps(tmp_path, keep, expected):
    data = IMDBSentimentDataModule(data_root=write_numbered_imdb(tmp_path), verify=False, valid_every=0,
                                   train_max_length=5, test_max_lengths=(5, None), keep_words=keep)
    data.setup("fit")
    data.setup("test")

    def words(dataset, i):  # the review's words, without <s> .. </s>
        return [data.vocab.symbols[t] for t in dataset[i]["inputs"].tolist()][1:-1]

    assert words(data.train_set, 0) == expected and words(data.train_set, 1) == expected
    assert words(data.test_sets["l5"], 0) == expected
    assert len(words(data.test_sets["full"], 0)) == 30  # no cut: the whole review either way


def test_imdb_keep_words_refuses_other_values(tmp_path):
    with pytest.raises(ValueError, match=r"keep_words must be one of \('first', 'last'\)"):
        IMDBSentimentDataModule(data_root=tmp_path, keep_words="end")


@pytest.mark.parametrize("pad", [False, True])
def test_imdb_pad_to_cut_makes_a_short_review_as_long_as_its_cut_and_the_model_reads_the_padding(tmp_path, pad):
    data = IMDBSentimentDataModule(data_root=write_numbered_imdb(tmp_path, n_words=8), verify=False, valid_every=0,
                                   train_max_length=5, test_max_lengths=(12, None), pad_to_cut=pad, batch_size=2)
    data.setup("fit")
    data.setup("test")
    symbols = [data.vocab.symbols[t] for t in data.test_sets["l12"][0]["inputs"].tolist()]
    words = ["<s>", *symbols[1:9], "</s>"]
    assert symbols == words + ["<pad>"] * 4 if pad else symbols == words  # 12 words' worth: <s> + 12 + </s>
    assert len(data.train_set[0]["inputs"]) == 7  # longer than its cut: cut, nothing to pad
    assert len(data.test_sets["full"][0]["inputs"]) == 10  # no cut: never padded
    batch = next(iter(data.test_dataloader()[0]))  # the l12 test set
    assert batch["lengths"].tolist() == [14 if pad else 10] * 2  # what the classifier reads up to


def test_imdb_pad_side_front_pads_before_the_review_and_keeps_its_last_words(tmp_path):
    """Keras' pad_sequences default (padding='pre', truncating='pre'): the last words of a long review, a short
    review padded in front (before <s>) up to its cut, and the model reads the padding first."""
    data = IMDBSentimentDataModule(data_root=write_numbered_imdb(tmp_path, n_words=8), verify=False, valid_every=0,
                                   train_max_length=5, test_max_lengths=(12,), keep_words="last", pad_to_cut=True,
                                   pad_side="front", batch_size=2)
    data.setup("fit")
    data.setup("test")

    def symbols(dataset):
        return [data.vocab.symbols[t] for t in dataset[0]["inputs"].tolist()]

    assert symbols(data.train_set) == ["<s>", *WORDS[3:8], "</s>"]  # cut to its last 5 words: nothing to pad
    assert symbols(data.test_sets["l12"]) == ["<pad>"] * 4 + ["<s>", *WORDS[:8], "</s>"]
    batch = next(iter(data.test_dataloader()))  # one test set: one loader
    assert batch["lengths"].tolist() == [14, 14]  # the classifier reads the 4 pads, then the review
    with pytest.raises(ValueError, match="pad_side must be 'end' or 'front'"):
        IMDBSentimentDataModule(data_root=tmp_path, pad_side="pre")
    with pytest.raises(ValueError, match="set pad_to_cut=True too"):  # front padding alone would do nothing
        IMDBSentimentDataModule(data_root=tmp_path, pad_side="front")


def test_imdb_test_over_length_drop_keeps_the_reviews_that_fit_whole(tmp_path):
    """test_over_length='drop': a test set of length L is the reviews of at most L words, uncut (the paper's
    Table 3: test lengths in [100, 200]); 'cut' (the default) cuts every review to L."""
    root = tmp_path / "data"
    (root / "imdb").mkdir(parents=True)
    reviews = [(3, 0), (5, 1), (8, 0), (12, 1)]  # (words, label)
    for split in ("train", "test"):
        with lzma.open(root / "imdb" / f"{split}.jsonl.xz", "wt", encoding="utf-8") as f:
            for n, label in reviews:
                f.write(json.dumps({"id": n, "rating": 9 if label else 2, "label": label, "text": " ".join(WORDS[:n])}) + "\n")
    kept = {}
    for how in ("cut", "drop"):
        data = IMDBSentimentDataModule(data_root=root, verify=False, valid_every=0, train_max_length=5,
                                       test_max_lengths=(5, 8, None), test_over_length=how)
        data.setup("test")
        kept[how] = {name: (sorted(s.lengths.tolist()), s.labels.tolist()) for name, s in data.test_sets.items()}
    assert kept["cut"]["l5"] == ([5, 7, 7, 7], [0, 1, 0, 1])  # <s> + at most 5 words + </s>
    assert kept["drop"]["l5"] == ([5, 7], [0, 1])  # the 3- and 5-word reviews, whole
    assert kept["drop"]["l8"] == ([5, 7, 10], [0, 1, 0])
    assert kept["drop"]["full"] == kept["cut"]["full"]  # no length: every review either way
    with pytest.raises(ValueError, match="test_over_length must be 'cut' or 'drop'"):
        IMDBSentimentDataModule(data_root=root, test_over_length="filter")
    empty = IMDBSentimentDataModule(data_root=root, verify=False, test_max_lengths=(2,), test_over_length="drop")
    with pytest.raises(ValueError, match="leaves no test review of at most 2 words"):  # not an empty test set
        empty.setup("test")
