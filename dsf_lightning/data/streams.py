"""Truncated-BPTT batching: a split laid out as B contiguous streams, read one window at a time.

The token ids of a split are cut into ``B`` equal contiguous streams (the ``batchify`` of
salesforce/awd-lstm-lm, tokens that do not fill the last row are dropped); window ``i`` gives every
stream its next ``bptt`` inputs and their next-token targets. Under DDP each rank reads its own
contiguous block of ``B / world_size`` streams, so one process with B streams and two with B/2 each
see exactly the same data. The loader is resumable: it remembers the next window across a checkpoint.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .passes import LayoutError, ResumablePass, rows_per_rank


class StreamLayoutError(LayoutError):
    """A split cannot be laid out as the requested streams and windows."""


def batchify(tokens: Tensor, num_streams: int) -> Tensor:
    """1-D ``tokens`` -> ``[num_streams, n]`` contiguous streams (the remainder is dropped)."""
    if tokens.dim() != 1:
        raise StreamLayoutError(f"expected a 1-D tensor of token ids, got shape {tuple(tokens.shape)}")
    if num_streams < 1:
        raise StreamLayoutError(f"the number of streams (batch size) must be >= 1, got {num_streams}")
    n = tokens.numel() // num_streams
    if n < 2:
        raise StreamLayoutError(
            f"{tokens.numel()} tokens cannot fill {num_streams} streams of at least 2 tokens "
            f"(an input and its target): use a smaller batch size"
        )
    return tokens[: n * num_streams].view(num_streams, n)


class StreamWindows(ResumablePass):
    """Iterable of ``(inputs [b, T], targets [b, T], window_index)`` over this rank's streams.

    ``batch_size`` is the total number of streams over all ranks; ``rank`` / ``world_size`` pick
    this process's contiguous block. The last window of an epoch may be shorter than ``bptt``.
    """

    layout_error = StreamLayoutError

    def __init__(self, tokens: Tensor, batch_size: int, bptt: int, rank: int = 0, world_size: int = 1) -> None:
        per_rank = rows_per_rank(StreamLayoutError, batch_size, bptt, world_size, "total streams", "streams")
        streams = batchify(tokens, batch_size)  # [B, n]
        self.streams = streams[rank * per_rank : (rank + 1) * per_rank].contiguous()  # [B / W, n]
        self.first_stream = rank * per_rank  # global index of this rank's first stream
        self.bptt = bptt
        self._start = 0

    def __len__(self) -> int:
        return math.ceil((self.streams.shape[1] - 1) / self.bptt)

    @property
    def num_tokens(self) -> int:
        """Target tokens this rank predicts per pass."""
        return self.streams.shape[0] * (self.streams.shape[1] - 1)

    def window(self, index: int) -> tuple[Tensor, Tensor, Tensor]:
        lo = index * self.bptt
        hi = min(lo + self.bptt, self.streams.shape[1] - 1)
        return self.streams[:, lo:hi], self.streams[:, lo + 1 : hi + 1], torch.tensor(index)
