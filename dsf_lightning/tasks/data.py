"""The plumbing of the sequence tasks: vocabularies, datasets of variable-length sequences, padding
with lengths and masks, length-bucketed batches, and a base LightningDataModule.

A batch is a dict::

    inputs   [B, T] int64 token ids (padded with the vocabulary's pad id), or [B, T, F] float features
    lengths  [B]    int64, the real length of every sequence (start and end tokens included)
    mask     [B, T] bool, True on real positions
    labels   [B]    int64 class per sequence, or [B, T] per step (padded with -100, cross-entropy's ignore index)

Start and end tokens (sr-RNN paper sec. 3.3) are part of the encoded sequence: ``<s> x_1 .. x_T </s>``
(``Vocabulary.encode``); for pixel sequences they are two flag channels. The model reads the start
token with its stochastic component (it moves the sr-RNN to the start centroid) and the end token,
always the last real position, without it (:class:`~dsf_lightning.tasks.modules.SequenceClassifier`).
"""

from __future__ import annotations

import functools
import json
import math
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from ..data.vocab import Vocabulary as SymbolVocabulary
from ..data.vocab import VocabularyError

IGNORE_INDEX = -100


class UnknownSymbolError(KeyError, VocabularyError):
    """A sequence holds symbols outside a :class:`Vocabulary`'s alphabet (the message names them).

    A ``KeyError`` (what a dictionary lookup raised before) and a ``ValueError`` (bad input: a
    :class:`~dsf_lightning.data.vocab.VocabularyError`)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _shown(items: Sequence, limit: int = 12) -> str:
    items = list(items)
    text = ", ".join(repr(x) for x in items[:limit])
    return text + (f", ... ({len(items)} in all)" if len(items) > limit else "")


class Vocabulary(SymbolVocabulary):
    """The symbol vocabulary of :mod:`dsf_lightning.data.vocab` for the sequence tasks: the special tokens
    first, ``<pad>`` 0, ``<s>`` 1, ``</s>`` 2 (its end symbol), ``<unk>`` 3 if any, and sequences wrapped in
    ``<s> .. </s>`` (sr-RNN paper sec. 3.3).

    Args:
        alphabet: the input symbols in id order (characters of a formal language, or words).
        start_end_tokens: whether :meth:`encode` wraps sequences in ``<s> .. </s>`` (sec. 3.3).
        unk: reserve ``<unk>`` for symbols outside the alphabet (else they raise :class:`UnknownSymbolError`).
    """

    PAD, START, END, UNK = "<pad>", "<s>", "</s>", "<unk>"
    pad_id, start_id, end_id = 0, 1, 2

    def __init__(self, alphabet: Sequence[str], start_end_tokens: bool = True, unk: bool = False) -> None:
        specials = [self.PAD, self.START, self.END] + ([self.UNK] if unk else [])
        clash = set(specials) & set(alphabet)
        if clash:
            raise VocabularyError(f"the alphabet may not contain the special tokens {sorted(clash)}")
        self.alphabet: tuple[str, ...] = tuple(alphabet)
        super().__init__(specials + list(self.alphabet), eos=self.END, unk=self.UNK if unk else None)
        self.start_end_tokens = start_end_tokens

    @property
    def index(self) -> dict[str, int]:
        """Symbol -> id (the base class's ``stoi``)."""
        return self.stoi

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return super().__eq__(other) and self.start_end_tokens == other.start_end_tokens

    def encode(self, sequence: Sequence[str], add_start_end: bool | None = None) -> list[int]:
        """Ids of ``sequence`` (a string of one-character symbols or a list of symbols)."""
        try:
            ids = super().encode(sequence)
        except (VocabularyError, TypeError):  # TypeError: an unhashable "symbol"
            if not self.closed:
                raise
            raise self._unknown_symbols(sequence) from None
        wrap = self.start_end_tokens if add_start_end is None else add_start_end
        return [self.start_id, *ids, self.end_id] if wrap else ids

    def _unknown_symbols(self, sequence: Sequence[str]) -> UnknownSymbolError:
        bad = list(dict.fromkeys(s for s in sequence if not isinstance(s, str) or s not in self.index))
        text = repr(sequence) if len(repr(sequence)) <= 80 else repr(sequence)[:77] + "..."
        return UnknownSymbolError(
            f"{text} has symbol(s) outside the vocabulary's alphabet: {_shown(bad, 5)}. The alphabet is "
            f"{_shown(self.alphabet)}; encode only strings over it (a string of one-character symbols, or a list "
            "of symbols), or build the Vocabulary with unk=True to map unknown symbols to <unk>"
        )

    def decode(self, ids: Sequence[int], strip: bool = True) -> list[str]:
        """The symbols of ``ids``; ``strip`` drops ``<pad>``, ``<s>`` and ``</s>``."""
        dropped = (self.PAD, self.START, self.END) if strip else ()
        return [s for s in super().decode(ids) if s not in dropped]

    # its own JSON document (what classifier folders hold in vocab.json): the alphabet and the two options
    def to_dict(self) -> dict:
        return {"alphabet": list(self.alphabet), "start_end_tokens": self.start_end_tokens, "unk": self.unk is not None}

    @classmethod
    def from_dict(cls, data: dict) -> Vocabulary:
        if not (isinstance(data, dict) and {"alphabet", "start_end_tokens", "unk"} <= data.keys()):
            raise VocabularyError("not a task vocabulary (needs 'alphabet', 'start_end_tokens' and 'unk')")
        return cls(data["alphabet"], data["start_end_tokens"], data["unk"])

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} symbols, start_end_tokens={self.start_end_tokens})"


class TokenSequenceDataset(Dataset):
    """Variable-length token sequences stored flat (one int tensor + offsets), with labels and metadata.

    Args:
        sequences: the encoded sequences (lists of ids).
        labels: one class per sequence, or one list of classes per sequence (per-step targets, same
            length as the sequence).
        meta: optional per-sequence columns (e.g. ``text``, ``depth``), kept for analysis.
    """

    def __init__(self, sequences: Sequence[Sequence[int]], labels: Sequence[Any], meta: dict[str, list] | None = None):
        if len(sequences) != len(labels):
            raise ValueError(f"{len(sequences)} sequences but {len(labels)} labels")
        lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)
        self.offsets = torch.zeros(len(sequences) + 1, dtype=torch.long)
        self.offsets[1:] = torch.cumsum(lengths, 0)
        flat = [i for s in sequences for i in s]
        dtype = torch.uint8 if flat and max(flat) < 256 and min(flat) >= 0 else torch.int32
        self.data = torch.tensor(flat, dtype=dtype)
        self.lengths = lengths
        self.per_step = bool(len(labels)) and not isinstance(labels[0], (int, bool)) and hasattr(labels[0], "__len__")
        if self.per_step:
            if any(len(y) != n for y, n in zip(labels, lengths.tolist())):
                raise ValueError("per-step labels must have the length of their sequence")
            self.labels = torch.tensor([int(v) for y in labels for v in y], dtype=torch.long)
        else:
            self.labels = torch.tensor([int(y) for y in labels], dtype=torch.long)
        self.meta = {k: list(v) for k, v in (meta or {}).items()}
        for k, v in self.meta.items():
            if len(v) != len(sequences):
                raise ValueError(f"meta column {k!r} has {len(v)} entries for {len(sequences)} sequences")

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        label = self.labels[lo:hi] if self.per_step else self.labels[i]
        return {"inputs": self.data[lo:hi].long(), "label": label}


class ArraySequenceDataset(Dataset):
    """Fixed-length sequences held as one ``[N, T]`` tensor, turned into model inputs on access.

    ``transform`` maps one row ``[T]`` to the model's input (``[T]`` ids or ``[T', F]`` features);
    pixel-by-pixel MNIST keeps uint8 rows here and makes float features per item.
    """

    def __init__(self, rows: Tensor, labels: Tensor, transform=None, meta: dict[str, list] | None = None) -> None:
        if rows.shape[0] != labels.shape[0]:
            raise ValueError(f"{rows.shape[0]} rows but {labels.shape[0]} labels")
        self.rows, self.labels, self.transform = rows, labels.long(), transform
        self.per_step = labels.dim() == 2
        probe = self._item_inputs(0) if len(rows) else rows[:0]
        self.lengths = torch.full((len(rows),), probe.shape[0] if len(rows) else 0, dtype=torch.long)
        self.meta = dict(meta or {})

    def _item_inputs(self, i: int) -> Tensor:
        row = self.rows[i]
        return self.transform(row) if self.transform is not None else row.long()

    def __len__(self) -> int:
        return self.rows.shape[0]

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return {"inputs": self._item_inputs(i), "label": self.labels[i]}


def collate(items: list[dict[str, Tensor]], pad_id: int = 0) -> dict[str, Tensor]:
    """Pad a list of items to the longest: ``inputs``, ``lengths``, ``mask``, ``labels`` (see module doc)."""
    lengths = torch.tensor([it["inputs"].shape[0] for it in items], dtype=torch.long)
    T = int(lengths.max()) if len(items) else 0
    first = items[0]["inputs"]
    if first.dim() == 1:
        inputs = torch.full((len(items), T), pad_id, dtype=torch.long)
    else:
        inputs = torch.zeros((len(items), T, *first.shape[1:]), dtype=first.dtype)
    for b, it in enumerate(items):
        inputs[b, : it["inputs"].shape[0]] = it["inputs"]
    mask = torch.arange(T)[None, :] < lengths[:, None]
    if items[0]["label"].dim() == 0:
        labels = torch.stack([it["label"] for it in items])
    else:
        labels = torch.full((len(items), T), IGNORE_INDEX, dtype=torch.long)
        for b, it in enumerate(items):
            labels[b, : it["label"].shape[0]] = it["label"]
    return {"inputs": inputs, "lengths": lengths, "mask": mask, "labels": labels}


def pad_ids(encoded: Sequence[Sequence[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """Encoded sequences as one batch: ``inputs [B, T]`` (int64, padded with ``pad_id``) and ``lengths [B]``."""
    lengths = torch.tensor([len(e) for e in encoded], dtype=torch.long)
    inputs = torch.full((len(encoded), int(lengths.max()) if len(encoded) else 0), pad_id, dtype=torch.long)
    for row, e in enumerate(encoded):
        inputs[row, : len(e)] = torch.as_tensor(e, dtype=torch.long)
    return inputs, lengths


def token_budget_batches(lengths: Sequence[int], batch_size: int, max_tokens: int) -> list[list[int]]:
    """Indices of sequences with ``lengths`` in batches of similar length (shortest first), each of at most
    ``batch_size`` sequences and ``max_tokens`` padded steps (sequences x the longest), so the memory of a batch
    is bounded however long the sequences are (one longer than ``max_tokens`` is a batch of its own)."""
    if batch_size < 1 or max_tokens < 1:
        raise ValueError(f"batch_size and max_tokens must be >= 1, got {batch_size}, {max_tokens}")
    batches: list[list[int]] = []
    current: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):
        if current and (len(current) >= batch_size or (len(current) + 1) * max(1, lengths[i]) > max_tokens):
            batches.append(current)
            current = []
        current.append(i)  # the longest of its batch so far: the order is by length
    if current:
        batches.append(current)
    return batches


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of similar lengths: sort by length within random pools of ``pool_batches`` batches.

    With ``shuffle``, the pools, and then the order of the batches, are reshuffled every epoch from
    ``seed + epoch`` (Lightning calls :meth:`set_epoch`; without it each pass advances the epoch).
    Without ``shuffle`` the batches are the sequences sorted by length (evaluation: least padding).

    Under DDP (``num_replicas`` processes, this one ``rank``): in evaluation every process takes every
    ``num_replicas``-th sequence of the length order, from its ``rank``-th on, so every sequence is scored
    exactly once (counts differ by at most one; the modules sum their metrics over processes); in training
    every process takes every ``num_replicas``-th batch of the same shuffled list, ``len(batches) //
    num_replicas`` of them, as DDP's gradient all-reduce needs the same number of steps everywhere (the few
    left over differ from epoch to epoch, as the shuffle does).
    """

    def __init__(
        self, lengths: Sequence[int] | Tensor, batch_size: int, shuffle: bool = True, seed: int = 0,
        pool_batches: int = 50, drop_last: bool = False, num_replicas: int = 1, rank: int = 0,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if isinstance(lengths, Sampler):
            # what Lightning passes when it tries to put a DistributedSampler into a batch sampler
            raise TypeError("BucketBatchSampler takes the sequence lengths, not a sampler: it splits the batches "
                            "between DDP processes itself (Trainer(use_distributed_sampler=False))")
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"need num_replicas >= 1 and 0 <= rank < num_replicas, got {num_replicas}, {rank}")
        self.num_replicas, self.rank = num_replicas, rank
        self.lengths = [int(n) for n in lengths]
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.pool = max(1, pool_batches) * batch_size
        self.drop_last = drop_last
        self.epoch = 0
        self._epoch_set = False

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self._epoch_set = epoch, True

    def batches(self, epoch: int | None = None) -> list[list[int]]:
        n = len(self.lengths)
        if not self.shuffle:
            order = sorted(range(n), key=lambda i: (self.lengths[i], i))[self.rank :: self.num_replicas]
            batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        else:
            rng = random.Random(self.seed * 1_000_003 + (self.epoch if epoch is None else epoch))
            order = list(range(n))
            rng.shuffle(order)
            batches = []
            for lo in range(0, n, self.pool):
                pool = sorted(order[lo : lo + self.pool], key=lambda i: self.lengths[i])
                batches += [pool[i : i + self.batch_size] for i in range(0, len(pool), self.batch_size)]
            rng.shuffle(batches)
        if self.drop_last:
            batches = [b for b in batches if len(b) == self.batch_size]
        if self.num_replicas > 1 and self.shuffle:
            batches = batches[self.rank :: self.num_replicas][: len(batches) // self.num_replicas]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches()
        if not self._epoch_set:
            self.epoch += 1
        self._epoch_set = False
        return iter(batches)

    def __len__(self) -> int:
        n = len(self.lengths)
        if self.num_replicas > 1:
            return len(self.batches())
        if self.drop_last:
            if not self.shuffle:
                return n // self.batch_size
            return len(self.batches())
        if not self.shuffle:
            return math.ceil(n / self.batch_size)
        return sum(math.ceil(min(self.pool, n - lo) / self.batch_size) for lo in range(0, n, self.pool))


class SequenceDataModule(L.LightningDataModule):
    """Base of the task DataModules: datasets per split, bucketed loaders, several test sets.

    Subclasses implement :meth:`build` (fill ``self.train_set``, ``self.val_set`` and the ordered dict
    ``self.test_sets``) and set ``task`` (``"classification"`` or ``"tagging"``), ``num_classes``,
    ``input_mode`` (``"tokens"`` with a ``vocab``, or ``"values"`` with an ``input_size``).

    Args:
        batch_size: training batch size; ``eval_batch_size`` for validation / test (default: the same).
        bucket: group training sequences of similar length (else plain shuffling).
        seed: data generation and shuffling seed.
        num_workers: DataLoader worker processes.
    """

    task = "classification"
    input_mode = "tokens"
    num_classes = 2
    #: how raw text becomes this data's symbols, recorded in a classifier's hub folder
    #: (:mod:`dsf_lightning.hub.classifier`): a text normalizer (:mod:`dsf_lightning.data.normalize`, None: none)
    #: and a tokenizer (:mod:`dsf_lightning.data.tokenizers`, without an end symbol; None: the inputs are not text)
    text_normalizer: str | None = None
    text_tokenizer: str | None = "char"  # one symbol per character (the formal languages)
    #: the classes' names in id order (None: "0", "1", ...)
    label_names: tuple[str, ...] | None = None

    def __init__(
        self, batch_size: int = 64, eval_batch_size: int | None = None, bucket: bool = True, seed: int = 0,
        num_workers: int = 0, start_end_tokens: bool = True,
    ) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.bucket = bucket
        self.seed = seed
        self.num_workers = num_workers
        self.start_end_tokens = start_end_tokens
        self.vocab: Vocabulary | None = None
        self.input_size: int | None = None
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_sets: dict[str, Dataset] = {}
        self._built: set[str] = set()

    # -- to be provided by the tasks -------------------------------------------------------------
    def build(self, stage: str) -> None:  # pragma: no cover - every task overrides it
        """Create ``train_set`` / ``val_set`` / ``test_sets`` for ``stage``."""
        raise TypeError(f"{type(self).__name__} must define build(stage): how its datasets are made")

    def missing_data(self) -> list[Path]:
        """Where the files this DataModule reads (to fit and test) are expected, for those that are not there;
        ``[]`` when every one is, or when it generates its data (the formal languages)."""
        return []

    # -- Lightning hooks ---------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        stage = stage or "fit"
        key = "fit" if stage in ("fit", "validate") else stage
        if key not in self._built:
            self.build(key)
            self._built.add(key)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab) if self.vocab is not None else 0

    @property
    def test_set_names(self) -> list[str]:
        return list(self.test_sets)

    @property
    def pad_id(self) -> int:
        return self.vocab.pad_id if self.vocab is not None else 0

    def _processes(self) -> tuple[int, int]:
        """(number of DDP processes, this one's rank) of the attached Trainer; (1, 0) without one."""
        trainer = getattr(self, "trainer", None)
        if trainer is None or trainer.world_size <= 1:
            return 1, 0
        connector = getattr(trainer, "_accelerator_connector", None)
        if getattr(connector, "use_distributed_sampler", False):
            raise ValueError(
                f"{type(self).__name__} splits its batches between the {trainer.world_size} DDP processes itself "
                "(every validation / test sequence scored once): pass Trainer(use_distributed_sampler=False) "
                "(`dsf fit` does), else Lightning's DistributedSampler would repeat sequences to even out the ranks"
            )
        return trainer.world_size, trainer.global_rank

    def _loader(self, dataset: Dataset, train: bool) -> DataLoader:
        size = self.batch_size if train else self.eval_batch_size
        collate_fn = functools.partial(collate, pad_id=self.pad_id)  # picklable: ddp_spawn, spawned workers
        replicas, rank = self._processes()
        if train and not self.bucket:
            if replicas > 1:  # each process its share of one shuffle, as many batches each
                sampler = torch.utils.data.DistributedSampler(dataset, replicas, rank, shuffle=True, seed=self.seed,
                                                              drop_last=True)
                return DataLoader(dataset, batch_size=size, sampler=sampler, collate_fn=collate_fn,
                                  num_workers=self.num_workers)
            g = torch.Generator().manual_seed(self.seed)
            return DataLoader(dataset, batch_size=size, shuffle=True, generator=g, collate_fn=collate_fn,
                              num_workers=self.num_workers)
        sampler = BucketBatchSampler(dataset.lengths, size, shuffle=train, seed=self.seed, num_replicas=replicas, rank=rank)
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate_fn, num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        self.setup("fit")
        return self._loader(self.train_set, train=True)

    def val_dataloader(self) -> DataLoader | list:
        self.setup("fit")
        return self._loader(self.val_set, train=False) if self.val_set is not None else []

    def test_dataloader(self) -> DataLoader | list[DataLoader]:
        self.setup("test")
        loaders = [self._loader(d, train=False) for d in self.test_sets.values()]
        return loaders[0] if len(loaders) == 1 else loaders

    def model_options(self) -> dict[str, Any]:
        """The options a :class:`~dsf_lightning.tasks.modules.SequenceClassifier` needs for this data."""
        opts: dict[str, Any] = {"num_classes": self.num_classes, "end_token": self.start_end_tokens}
        if self.input_mode == "tokens":
            opts["vocab_size"] = self.vocab_size
        else:
            opts.update(input_mode="values", input_size=self.input_size)
        return opts
