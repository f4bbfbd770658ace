"""Padded-sentence batching (DSF paper, Ororbia II, Mikolov & Reitter 2017, sec. 4.2): "mini-batches of 64
(padded) sequences", the last hidden state carried from one mini-batch to the next "within a full sequence".

A split's token ids are cut into sentences at its ``<eos>`` ids. Sentence k (words ``w1 .. wn``) reads the
inputs ``[<eos>, w1 .. wn]`` (the ``<eos>`` that ended the sentence before it; the first sentence reads one
too) and predicts the targets ``[w1 .. wn, <eos>]`` (tokens after the split's last ``<eos>`` form a last
sentence without one). A batch is ``batch_size`` sentences padded at the end to its longest one (targets
``IGNORE_INDEX``, inputs ``<eos>``); the last batch of a pass is filled up with empty rows, so every batch has
``batch_size`` rows. A batch is read in windows of ``bptt`` steps: the state carries from window to window
within a batch and starts from zeros at a batch's first window, which each window says with a fourth element,
``reset`` (a bool per row). Training batches take the sentences in an order drawn once per pass from
``(seed, epoch)``; evaluation takes them in corpus order. Under DDP each rank reads its own contiguous share of
every batch's rows. Resumable like :class:`~dsf_lightning.data.streams.StreamWindows` (:mod:`.passes`); the
state also holds the pass's epoch, whose order a resumed pass reads again.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

import torch
from torch import Tensor

from .passes import LayoutError, ResumablePass, rows_per_rank

#: the target of a padded position (``F.cross_entropy``'s default ``ignore_index``)
IGNORE_INDEX = -100


class SentenceLayoutError(LayoutError):
    """A split cannot be laid out as padded sentence batches."""


def sentence_spans(tokens: Tensor, eos_id: int) -> tuple[Tensor, Tensor]:
    """``(starts, lengths)`` of the sentences of 1-D ``tokens``: each ends with (and includes) an ``eos_id``,
    except a last one the split leaves unterminated."""
    if tokens.dim() != 1:
        raise SentenceLayoutError(f"expected a 1-D tensor of token ids, got shape {tuple(tokens.shape)}")
    ends = (tokens == eos_id).nonzero().flatten() + 1  # one past each <eos>
    if ends.numel() == 0 or int(ends[-1]) != tokens.numel():
        ends = torch.cat((ends, torch.tensor([tokens.numel()])))
    starts = torch.cat((torch.zeros(1, dtype=ends.dtype), ends[:-1]))
    keep = ends > starts  # an empty split has no sentence
    return starts[keep], (ends - starts)[keep]


def epoch_order(num_sentences: int, seed: int, epoch: int) -> Tensor:
    """The training order of a pass: a permutation drawn from ``(seed, epoch)`` only, so that every rank and a
    resumed run draw the same one."""
    generator = torch.Generator().manual_seed((int(seed) * 1_000_003 + int(epoch)) % 2**63)
    return torch.randperm(num_sentences, generator=generator)


class SentenceBatches(ResumablePass):
    """Iterable of ``(inputs [b, T], targets [b, T], window_index, reset [b])`` over this rank's rows.

    Args:
        tokens: the split's token ids (1-D).
        eos_id: the id that ends a sentence (``corpus.vocab.eos_id``).
        batch_size: sentences per batch over all ranks (a multiple of ``world_size``).
        bptt: window length; a batch longer than it is read in several windows.
        shuffle: draw a new order every pass (:meth:`set_epoch`); off: corpus order.
        seed: the base of the order's seed.
    """

    layout_error = SentenceLayoutError

    def __init__(self, tokens: Tensor, eos_id: int | None, batch_size: int, bptt: int, rank: int = 0,
                 world_size: int = 1, *, shuffle: bool = False, seed: int = 0, split: str = "train") -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise SentenceLayoutError(f"the batch size must be a positive integer, got {batch_size!r}")
        self.per_rank = rows_per_rank(SentenceLayoutError, batch_size, bptt, world_size, "sentences a batch", "rows")
        if eos_id is None:
            raise SentenceLayoutError(
                "sentence batching needs the corpus's end-of-sentence symbol, and this corpus has none "
                "(a single stream, e.g. text8): use data.batching streams"
            )
        self.tokens = tokens.to(torch.long)
        self.eos_id = int(eos_id)
        self.starts, self.lengths = sentence_spans(self.tokens, self.eos_id)
        if batch_size > self.starts.numel():
            raise SentenceLayoutError(
                f"the {split!r} split has {self.starts.numel()} sentences, fewer than the batch size {batch_size}: "
                "use a smaller batch size (data.batch_size, or data.eval_batch_size for validation and test)"
            )
        # inputs: the token before each position (the <eos> before the split's first sentence)
        self._inputs = torch.cat((torch.tensor([self.eos_id]), self.tokens[:-1]))
        self.batch_size, self.bptt, self.shuffle, self.seed = batch_size, bptt, shuffle, seed
        self.first_row = rank * self.per_rank
        self._padded_lengths = torch.cat((self.lengths, torch.zeros(1, dtype=self.lengths.dtype)))  # [-1]: 0
        self._start = 0
        self.epoch = -1
        self.set_epoch(0)

    @property
    def num_sentences(self) -> int:
        return int(self.starts.numel())

    def set_epoch(self, epoch: int) -> None:
        """Lay out the pass of ``epoch`` (its order, when shuffled); the number of windows follows it."""
        epoch = int(epoch)
        if epoch == self.epoch:
            return
        self.epoch = epoch
        n, b = self.num_sentences, self.batch_size
        order = epoch_order(n, self.seed, epoch) if self.shuffle else torch.arange(n)
        rows = torch.full((math.ceil(n / b) * b,), -1, dtype=torch.long)  # -1: an empty row filling the last batch
        rows[:n] = order
        self._rows = rows.view(-1, b)  # [batches, B] sentence ids
        self._longest = self._padded_lengths[self._rows].max(1).values  # per batch
        windows = (self._longest + self.bptt - 1) // self.bptt  # per batch
        self._first_window = [0, *torch.cumsum(windows, 0).tolist()]  # batch k's windows start here

    def __len__(self) -> int:
        return self._first_window[-1]

    def window(self, index: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        batch = bisect.bisect_right(self._first_window, index) - 1
        offset = index - self._first_window[batch]
        sentences = self._rows[batch]
        longest = int(self._longest[batch])
        lo = offset * self.bptt
        steps = torch.arange(lo, min(lo + self.bptt, longest))  # [T]
        mine = sentences[self.first_row: self.first_row + self.per_rank]  # [b]
        real = mine >= 0
        starts = torch.where(real, self.starts[mine.clamp(min=0)], 0)
        lengths = torch.where(real, self.lengths[mine.clamp(min=0)], 0)
        inside = steps[None, :] < lengths[:, None]  # [b, T]
        at = (starts[:, None] + steps[None, :]).clamp(max=self.tokens.numel() - 1)
        inputs = torch.where(inside, self._inputs[at], self.eos_id)
        targets = torch.where(inside, self.tokens[at], IGNORE_INDEX)
        reset = torch.full((mine.numel(),), offset == 0)
        return inputs, targets, torch.tensor(index), reset

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A pass resumed inside (``0 < trained < windows``) reads the order of the epoch it was written in."""
        epoch = state.get("epoch")
        inside = 0 < int(state.get("trained", state.get("start", 0))) < int(state.get("windows", 0) or 0)
        if epoch is not None and inside and self.shuffle:
            self.set_epoch(int(epoch))
        if epoch is None or int(epoch) == self.epoch or not self.shuffle:
            super().load_state_dict(state)
        else:  # a finished pass of another epoch: the next pass starts at its window 0
            self._start, self._resumed_trained = 0, 0
