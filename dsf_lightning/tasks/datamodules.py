"""The DataModules of the sr-RNN paper's tasks (Wang & Niepert 2019, sec. 4 and appendices C, E).

=================================  =============  ===============================================
DataModule                         task           splits (default sizes: the paper's Tables 2, 3)
=================================  =============  ===============================================
``TomitaDataModule``               accept/reject  train / valid / test (test: this library's)
``BalancedParenthesesDataModule``  accept/reject  large or small train (depth 1-5), valid (6-10),
                                                  six 1k test sets by depth and length (Table 1)
``PalindromeDataModule``           accept/reject  train (length <= 25), valid (26-50), 3 test sets
``CopyingMemoryDataModule``        per step       100k train, 10k test, time lag T, n = 10
``IMDBSentimentDataModule``        sentiment      25k train (every 10th held out), 25k test; words
``PixelMNISTDataModule``           digit / item   pixel-by-pixel (permuted) MNIST, Fashion-MNIST
=================================  =============  ===============================================

Every generated data set is a pure function of its seed. Classification sequences carry the start
and end tokens of sec. 3.3 unless ``start_end_tokens=False``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._keep import KEEP, cut
from ..data.corpora import get_corpus_spec
from ..data.corpora.files import CorpusError, read_lines, resolve_data_root, verify_file
from ..data.corpora.imdb import normalize_review
from . import languages as lang
from .data import ArraySequenceDataset, SequenceDataModule, TokenSequenceDataset, Vocabulary
from .idx import load_mnist, missing_mnist_files, mnist_available


def _shifted_ids(row: torch.Tensor, offset: int) -> torch.Tensor:
    """Symbol indices ``0..`` of a generated row -> vocabulary ids (the copying task's symbols start at ``offset``)."""
    return row.long() + offset


def _token_dataset(vocab: Vocabulary, rows: Sequence[tuple], meta_names: Sequence[str] = ()) -> TokenSequenceDataset:
    """``rows`` of ``(string, label, *meta)`` -> encoded dataset with ``text``, ``length`` and the meta."""
    meta: dict[str, list] = {"text": [r[0] for r in rows], "length": [len(r[0]) for r in rows]}
    for j, name in enumerate(meta_names, 2):
        meta[name] = [r[j] for r in rows]
    return TokenSequenceDataset([vocab.encode(r[0]) for r in rows], [r[1] for r in rows], meta)


class _LanguageDataModule(SequenceDataModule):
    """Accept/reject tasks over a formal language: keeps the labelled strings of every split."""

    alphabet: tuple[str, ...] = ()
    label_names = ("reject", "accept")  # class 1 = the string is in the language

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.vocab = Vocabulary(self.alphabet, start_end_tokens=self.start_end_tokens)
        self.strings: dict[str, list[tuple]] = {}

    def split_strings(self, split: str) -> tuple[list[str], list[int]]:
        """The raw strings and labels of a split (``train``, ``valid`` or a test set name)."""
        self.setup("test" if split in self.test_sets or split not in ("train", "valid") else "fit")
        rows = self.strings[split]
        return [r[0] for r in rows], [int(r[1]) for r in rows]


class TomitaDataModule(_LanguageDataModule):
    """Tomita grammar ``grammar`` (1-7) as accept/reject classification over {0, 1}.

    Sizes and lengths default to the paper's (Table 2: e.g. grammar 3 has 2,141 training strings,
    1,028 positive; Table 3: training lengths 0-13, 16, 19, 22, validation 1, 4, ..., 28), plus a
    2,000-string ``test`` split of lengths 1-50 (the paper has none). All splits are disjoint; see
    :func:`~dsf_lightning.tasks.languages.tomita_splits`. ``splits`` overrides the sizes with
    ``{name: (size, positives or None, lengths)}``.
    """

    alphabet = lang.BINARY

    def __init__(
        self, grammar: int, splits: dict[str, tuple[int, int | None, Sequence[int]]] | None = None,
        batch_size: int = 64, **kwargs: Any,
    ) -> None:
        if grammar not in lang.TOMITA_SPLITS:
            raise ValueError(f"Tomita grammars are numbered 1-7, got {grammar!r}")
        super().__init__(batch_size=batch_size, **kwargs)
        self.grammar = grammar
        self.splits = (
            {name: lang.SplitSpec(size, pos, tuple(lengths)) for name, (size, pos, lengths) in splits.items()}
            if splits is not None
            else lang.TOMITA_SPLITS[grammar]
        )
        self.reference_dfa = lang.tomita_dfa(grammar)

    def build(self, stage: str) -> None:
        if not self.strings:
            self.strings = lang.tomita_splits(self.grammar, self.seed, self.splits)
        self.train_set = _token_dataset(self.vocab, self.strings["train"]) if "train" in self.strings else None
        self.val_set = _token_dataset(self.vocab, self.strings["valid"]) if "valid" in self.strings else None
        self.test_sets = {
            name: _token_dataset(self.vocab, rows) for name, rows in self.strings.items() if name not in ("train", "valid")
        }


class BalancedParenthesesDataModule(_LanguageDataModule):
    """Balanced parentheses over ``a..z ( )`` (sec. 4.2, Table 1, Figure 17).

    ``size="large"``: 22,286 training strings (13,025 positive) and 6,704 validation strings (3,582);
    ``"small"``: 1,008 (601) and 268 (142). Training depths 1-5 (max length ``train_max_length``),
    validation depths 6-10 (``valid_max_length``), and the six 1,000-string test sets of Table 1
    (half positive): ``d1-10_l100``, ``d10-20_l100``, ``d10-20_l200``, ``d5_l200``, ``d10_l200``,
    ``d20_l1000``. Every string carries its nesting depth in ``meta["depth"]``. The paper trains with a
    curriculum over lengths; a curriculum is a training-loop matter (e.g. sort by ``length``).
    """

    alphabet = lang.BP_ALPHABET

    def __init__(
        self, size: str = "large", train_max_length: int = 50, valid_max_length: int = 100,
        test_sets: Sequence[tuple[str, tuple[int, int], int]] = lang.BP_TEST_SETS, test_size: int = lang.BP_TEST_SIZE,
        batch_size: int = 64, **kwargs: Any,
    ) -> None:
        if size not in lang.BP_SIZES:
            raise ValueError(f"size must be 'large' or 'small', got {size!r}")
        super().__init__(batch_size=batch_size, **kwargs)
        self.size = size
        self.train_max_length, self.valid_max_length = train_max_length, valid_max_length
        self.test_specs = [(name, tuple(depths), int(max_len)) for name, depths, max_len in test_sets]
        self.test_size = test_size

    def build(self, stage: str) -> None:
        sizes = lang.BP_SIZES[self.size]
        if stage == "fit" and "train" not in self.strings:
            n, pos = sizes["train"]
            self.strings["train"] = lang.balanced_parentheses(n, pos, lang.BP_TRAIN_DEPTHS, self.train_max_length, self.seed)
            n, pos = sizes["valid"]
            self.strings["valid"] = lang.balanced_parentheses(
                n, pos, lang.BP_VALID_DEPTHS, self.valid_max_length, self.seed + 1
            )
            self.train_set = _token_dataset(self.vocab, self.strings["train"], ["depth"])
            self.val_set = _token_dataset(self.vocab, self.strings["valid"], ["depth"])
        if stage in ("test", "predict") and not self.test_sets:
            for i, (name, depths, max_len) in enumerate(self.test_specs):
                rows = lang.balanced_parentheses(self.test_size, self.test_size // 2, depths, max_len, self.seed + 100 + i)
                self.strings[name] = rows
                self.test_sets[name] = _token_dataset(self.vocab, rows, ["depth"])


class PalindromeDataModule(_LanguageDataModule):
    """Palindromes ``w w^-1`` over ``a..z`` (sec. 4.2, Figure 8).

    Defaults: 229,984 training strings (115,040 positive) of length <= 25, 50,000 validation strings
    (25,000) of length 26-50, and three 1,000-string test sets of lengths 50-100, 50-200, 50-500.
    All strings have even length (see :func:`~dsf_lightning.tasks.languages.palindromes`).
    """

    alphabet = lang.PALINDROME_ALPHABET

    def __init__(
        self, train: tuple[int, int, tuple[int, int]] = lang.PALINDROME_SPLITS["train"],
        valid: tuple[int, int, tuple[int, int]] = lang.PALINDROME_SPLITS["valid"],
        test_sets: Sequence[tuple[str, tuple[int, int]]] = lang.PALINDROME_TEST_SETS,
        test_size: int = lang.PALINDROME_TEST_SIZE, batch_size: int = 64, **kwargs: Any,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        self.train_spec, self.valid_spec = tuple(train), tuple(valid)
        self.test_specs = [(name, tuple(lengths)) for name, lengths in test_sets]
        self.test_size = test_size

    def build(self, stage: str) -> None:
        if stage == "fit" and "train" not in self.strings:
            for i, (split, (n, pos, lengths)) in enumerate((("train", self.train_spec), ("valid", self.valid_spec))):
                self.strings[split] = lang.palindromes(n, pos, tuple(lengths), self.seed + i)
            self.train_set = _token_dataset(self.vocab, self.strings["train"])
            self.val_set = _token_dataset(self.vocab, self.strings["valid"])
        if stage in ("test", "predict") and not self.test_sets:
            for i, (name, lengths) in enumerate(self.test_specs):
                rows = lang.palindromes(self.test_size, self.test_size // 2, lengths, self.seed + 100 + i)
                self.strings[name] = rows
                self.test_sets[name] = _token_dataset(self.vocab, rows)


class CopyingMemoryDataModule(SequenceDataModule):
    """The copying-memory problem (appendix C): per-step targets over the 10 symbols ``c0 .. c9``.

    ``lag`` is the time lag T (the paper: 100 and 500), ``n = 10`` symbols to copy; sequences have
    length ``T + 2n``, no start / end tokens. 100,000 training and 10,000 test sequences as in the
    paper (``valid_size`` > 0 adds a validation set). :attr:`baseline_loss` is the memory-less
    strategy's cross-entropy ``10 log 8 / (T + 20)``.
    """

    task = "tagging"
    num_classes = lang.COPY_SYMBOLS
    text_tokenizer = None  # symbols c0..c9, not text

    def __init__(
        self, lag: int = 100, n: int = 10, train_size: int = 100_000, valid_size: int = 0, test_size: int = 10_000,
        batch_size: int = 128, **kwargs: Any,
    ) -> None:
        lang.check_copying_sizes(lag, n)  # a clear error now, not at setup
        kwargs["start_end_tokens"] = False
        super().__init__(batch_size=batch_size, **kwargs)
        self.lag, self.n = lag, n
        self.sizes = {"train": train_size, "valid": valid_size, "test": test_size}
        self.vocab = Vocabulary([f"c{i}" for i in range(lang.COPY_SYMBOLS)], start_end_tokens=False)
        self.baseline_loss = lang.copying_baseline_loss(lag, n)

    def _dataset(self, split: str, seed: int) -> ArraySequenceDataset:
        inputs, targets = lang.copying_memory(self.sizes[split], self.lag, self.n, seed)
        offset = self.vocab.index["c0"]
        return ArraySequenceDataset(  # a partial, not a lambda: the dataset pickles (ddp_spawn, spawned workers)
            torch.from_numpy(inputs), torch.from_numpy(targets.astype(np.int64)), transform=partial(_shifted_ids, offset=offset)
        )

    def build(self, stage: str) -> None:
        if stage == "fit" and self.train_set is None:
            self.train_set = self._dataset("train", self.seed)
            self.val_set = self._dataset("valid", self.seed + 1) if self.sizes["valid"] else None
        if stage in ("test", "predict") and not self.test_sets:
            self.test_sets = {"test": self._dataset("test", self.seed + 2)}

    def model_options(self) -> dict[str, Any]:
        return {"num_classes": self.num_classes, "vocab_size": self.vocab_size}


class IMDBSentimentDataModule(SequenceDataModule):
    """IMDB reviews (Maas et al. 2011) as word sequences for sentiment classification (sec. 4.3).

    Reads ``<data root>/imdb/{train,test}.jsonl.xz`` (data root: ``data_root``, else ``$DSF_DATA_ROOT``).
    Reviews are normalized as by the ``imdb-subword`` corpus (:func:`~dsf_lightning.data.corpora.imdb.
    normalize_review`: lower case, ``<br />`` removed, numbers and emoticons as tokens, punctuation
    split off) and split into words; the vocabulary is the ``max_vocab`` most frequent training words
    (at least ``min_count`` times), others are ``<unk>``.

    Settings of the paper: full length (``train_max_length=None``; Table 12) and the extrapolation
    setting trained on the first 10 words (``train_max_length=10``; Figure 9), tested on reviews cut
    at ``test_max_lengths`` (e.g. ``(100, 200)``: one test set per length, ``None`` = full). The
    paper trains on all 25,000 training reviews; here every ``valid_every``-th one (10th, 20th, ...:
    2,500, balanced) is held out for validation unless ``valid_every=0``. ``keep_words``: which words of a
    review longer than a cut are kept, ``"first"`` (default) or ``"last"`` (as Keras' ``pad_sequences``
    truncates by default; the paper does not say which it kept). ``pad_to_cut``: a review shorter than its
    split's cut is padded at the end with ``<pad>`` up to the cut (after the end token), and the model reads
    the padding as input, as the sr-RNN authors' ``prepare_data`` does (their released parentheses code sets
    every length to ``maxlen``); off by default (a review ends where it ends). ``pad_side``: where that
    padding goes, ``"end"`` (default) or ``"front"`` (before ``<s>``: Keras' ``pad_sequences`` default,
    ``padding='pre'``; with ``keep_words="last"`` also its ``truncating='pre'``). ``test_over_length``: what
    a test set does with a review longer than its length, ``"cut"`` it (default) or ``"drop"`` it (the test
    set is then the reviews of at most that many words, read whole; Table 3 of the paper gives the test
    lengths as ``l in [100, 200]``).
    """

    corpus_spec = "imdb-subword"  # the corpus whose files (imdb/{train,test}.jsonl.xz, with their sha256) are read
    # what a classifier folder records (dsf_lightning.hub.classifier): reviews read as _read reads them
    text_normalizer = "imdb"  # normalize_review
    text_tokenizer = "word"  # then split on whitespace
    label_names = ("negative", "positive")  # label 0: rating 1-4, label 1: rating 7-10 (Maas et al. 2011)

    def __init__(
        self, data_root: str | os.PathLike | None = None, max_vocab: int = 20_000, min_count: int = 1,
        train_max_length: int | None = None, valid_max_length: int | None = None,
        test_max_lengths: Sequence[int | None] = (None,), valid_every: int = 10, verify: bool = True,
        keep_words: str = "first", pad_to_cut: bool = False, pad_side: str = "end", test_over_length: str = "cut",
        batch_size: int = 32, **kwargs: Any,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        if valid_every == 1 or valid_every < 0:
            raise ValueError(f"valid_every must be 0 (no validation) or >= 2, got {valid_every}")
        if keep_words not in KEEP:
            raise ValueError(f"keep_words must be one of {KEEP} (which words of a review longer than a cut are "
                             f"kept), got {keep_words!r}")
        if pad_side not in ("end", "front"):
            raise ValueError(f"pad_side must be 'end' or 'front' (where pad_to_cut puts the padding), got {pad_side!r}")
        if pad_side == "front" and not pad_to_cut:
            raise ValueError("pad_side='front' places the padding of pad_to_cut: set pad_to_cut=True too")
        if test_over_length not in ("cut", "drop"):
            raise ValueError(f"test_over_length must be 'cut' or 'drop' (what a test set does with a review longer "
                             f"than its length), got {test_over_length!r}")
        self.keep_words, self.pad_to_cut, self.pad_side = keep_words, pad_to_cut, pad_side
        self.test_over_length = test_over_length
        self.data_root = data_root
        self.max_vocab, self.min_count = max_vocab, min_count
        self.train_max_length, self.valid_max_length = train_max_length, valid_max_length
        self.test_max_lengths = tuple(test_max_lengths)
        self.valid_every, self.verify = valid_every, verify
        self._train_words: list[list[str]] | None = None
        self._train_labels: list[int] | None = None

    def missing_data(self) -> list[Path]:
        return get_corpus_spec(self.corpus_spec).missing_files(self.data_root, splits=("train", "test"))

    def _read(self, split: str) -> tuple[list[list[str]], list[int]]:
        spec = get_corpus_spec(self.corpus_spec)
        file = spec.files(spec.options({}))[split][0]
        root, how = resolve_data_root(self.data_root)
        path = root / file.path
        if not path.is_file():
            raise CorpusError(f"imdb: {path} not found (data root from {how}); expected the JSON Lines reviews")
        if self.verify:
            verify_file(path, file)
        words, labels = [], []
        for line in read_lines(path):
            review = json.loads(line)
            words.append(normalize_review(review["text"]).split())
            labels.append(int(review["label"]))
        return words, labels

    def _ensure_vocab(self) -> None:
        if self.vocab is not None:
            return
        words, labels = self._read("train")
        self._train_words, self._train_labels = words, labels
        counts = Counter(w for i, review in enumerate(words) if not self._held_out(i) for w in review)
        kept = [w for w, c in counts.most_common(self.max_vocab) if c >= self.min_count]
        self.vocab = Vocabulary(kept, start_end_tokens=self.start_end_tokens, unk=True)

    def _held_out(self, i: int) -> bool:
        return bool(self.valid_every) and (i + 1) % self.valid_every == 0

    def _dataset(self, words: list[list[str]], labels: list[int], max_length: int | None) -> TokenSequenceDataset:
        if max_length:
            words = [cut(w, max_length, self.keep_words) for w in words]
        encoded = [self.vocab.encode(w) for w in words]
        if max_length and self.pad_to_cut:
            full = max_length + (2 if self.vocab.start_end_tokens else 0)  # <s>, max_length words, </s>
            pads = [[self.vocab.pad_id] * (full - len(e)) for e in encoded]
            encoded = [p + e if self.pad_side == "front" else e + p for e, p in zip(encoded, pads)]
        return TokenSequenceDataset(encoded, labels, {"length": [len(w) for w in words]})

    def prepare_vocab(self) -> Vocabulary:
        """Read the training reviews and build the vocabulary (needed before building the model)."""
        self._ensure_vocab()
        return self.vocab

    def build(self, stage: str) -> None:
        self._ensure_vocab()
        if stage == "fit" and self.train_set is None:
            words, labels = self._train_words, self._train_labels
            train = [i for i in range(len(words)) if not self._held_out(i)]
            valid = [i for i in range(len(words)) if self._held_out(i)]
            self.train_set = self._dataset([words[i] for i in train], [labels[i] for i in train], self.train_max_length)
            if valid:
                self.val_set = self._dataset([words[i] for i in valid], [labels[i] for i in valid], self.valid_max_length)
        if stage in ("test", "predict") and not self.test_sets:
            words, labels = self._read("test")
            for max_length in self.test_max_lengths:
                name = "full" if max_length is None else f"l{max_length}"
                if max_length and self.test_over_length == "drop":  # the reviews that fit, whole
                    kept = [i for i, w in enumerate(words) if len(w) <= max_length]
                    if not kept:
                        raise ValueError(f"test_over_length='drop' leaves no test review of at most {max_length} words "
                                         f"(the shortest has {min(map(len, words))}); use a longer test length or 'cut'")
                    self.test_sets[name] = self._dataset([words[i] for i in kept], [labels[i] for i in kept], max_length)
                else:
                    self.test_sets[name] = self._dataset(words, labels, max_length)

    def model_options(self) -> dict[str, Any]:
        self._ensure_vocab()
        return super().model_options()


class PixelMNISTDataModule(SequenceDataModule):
    """Pixel-by-pixel MNIST, permuted MNIST and Fashion-MNIST (sec. 4.3, appendix G.3).

    Each 28x28 image is a sequence of 784 pixel intensities (scaled to [0, 1]), fed one per step in
    row-major order, or in one fixed random order (``permuted=True``, a permutation drawn once from
    ``permutation_seed``). With ``start_end_tokens`` every step has 3 features ``(pixel, is_start,
    is_end)`` and the sequence gains a start and an end step (786 steps); else 1 feature.

    Files: ``<data root>/{mnist,fashion_mnist}/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz``
    (:func:`~dsf_lightning.tasks.idx.load_mnist`). Validation: the last ``valid_size`` training images
    of a seeded shuffle (the paper: Fashion-MNIST 55k / 5k, MNIST trained on all 60k; ``valid_size=0``
    gives no validation set).

    Fashion-MNIST: only its 10k **test** file is in the shared data here (the full set comes with
    Debian's ``dataset-fashion-mnist``, found automatically). Without the training file, ``fit`` raises
    unless ``split_test_file=True``, which splits the test file (seeded) into 8,000 train / 1,000 valid /
    1,000 test images; numbers from that split are not comparable with the paper's. Evaluation of a
    model trained elsewhere (``trainer.test``) needs only the test file.
    """

    PIXELS = 784
    text_tokenizer = None  # pixel intensities, not text

    def __init__(
        self, dataset: str = "mnist", permuted: bool = False, permutation_seed: int = 0, valid_size: int = 5000,
        data_root: str | os.PathLike | None = None, split_test_file: bool = False, batch_size: int = 100,
        **kwargs: Any,
    ) -> None:
        if dataset not in ("mnist", "fashion_mnist"):
            raise ValueError(f"dataset must be 'mnist' or 'fashion_mnist', got {dataset!r}")
        super().__init__(batch_size=batch_size, **kwargs)
        self.dataset, self.permuted, self.data_root = dataset, permuted, data_root
        self.valid_size, self.split_test_file = valid_size, split_test_file
        self.num_classes = 10
        self.input_mode = "values"
        self.input_size = 3 if self.start_end_tokens else 1
        self.permutation = (
            torch.randperm(self.PIXELS, generator=torch.Generator().manual_seed(permutation_seed)) if permuted else None
        )

    def missing_data(self) -> list[Path]:
        """The train and test files (the test file only with ``split_test_file``) found nowhere."""
        return missing_mnist_files(self.dataset, ("test",) if self.split_test_file else ("train", "test"), self.data_root)

    def transform(self, row: torch.Tensor) -> torch.Tensor:
        """uint8 ``[784]`` -> float ``[784, 1]`` or ``[786, 3]`` with the start / end flag channels."""
        pixels = row.reshape(-1)
        if self.permutation is not None:
            pixels = pixels[self.permutation]
        x = pixels.float().div_(255.0)
        if not self.start_end_tokens:
            return x[:, None]
        out = torch.zeros(self.PIXELS + 2, 3)
        out[1:-1, 0] = x
        out[0, 1] = 1.0
        out[-1, 2] = 1.0
        return out

    def _dataset(self, images: np.ndarray, labels: np.ndarray) -> ArraySequenceDataset:
        rows = torch.from_numpy(np.ascontiguousarray(images.reshape(len(images), -1)))
        return ArraySequenceDataset(rows, torch.from_numpy(labels.astype(np.int64)), transform=self.transform)

    def _split_test_file(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        images, labels = load_mnist(self.dataset, "test", self.data_root)
        order = np.random.default_rng(self.seed).permutation(len(images))
        parts = {"train": order[:8000], "valid": order[8000:9000], "test": order[9000:]}
        return {k: (images[v], labels[v]) for k, v in parts.items()}

    def build(self, stage: str) -> None:
        has_train = mnist_available(self.dataset, "train", self.data_root)
        if self.split_test_file or not has_train:
            if stage == "fit" and not self.split_test_file:
                raise CorpusError(
                    f"{self.dataset}: no training file (only the test file is here). Install the full set "
                    "(apt-get install dataset-fashion-mnist), evaluate only (trainer.test), or pass "
                    "split_test_file=True to split the 10k test images 8k/1k/1k"
                )
            if self.split_test_file:
                parts = self._split_test_file()
                self.train_set = self._dataset(*parts["train"])
                self.val_set = self._dataset(*parts["valid"])
                self.test_sets = {"test": self._dataset(*parts["test"])}
                return
        if stage == "fit" and self.train_set is None:
            images, labels = load_mnist(self.dataset, "train", self.data_root)
            order = np.random.default_rng(self.seed).permutation(len(images))
            n_valid = self.valid_size
            train, valid = order[: len(order) - n_valid], order[len(order) - n_valid :]
            self.train_set = self._dataset(images[np.sort(train)], labels[np.sort(train)])
            self.val_set = self._dataset(images[np.sort(valid)], labels[np.sort(valid)]) if n_valid else None
        if stage in ("test", "predict") and not self.test_sets:
            self.test_sets = {"test": self._dataset(*load_mnist(self.dataset, "test", self.data_root))}
