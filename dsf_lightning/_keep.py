"""Which end of a text longer than a cut a classifier reads: its first symbols or its last.

The sr-RNN paper's IMDB experiment (Figure 9) trains on 10 words of each review without saying which;
Keras' ``pad_sequences`` keeps the last. The datamodule's ``keep_words`` and a classifier folder's ``keep``
take these values, and :func:`cut` is the one place that applies them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

KEEP = ("first", "last")

S = TypeVar("S", bound=Sequence)


def cut(symbols: S, max_length: int, keep: str) -> S:
    """``symbols`` cut to their first or last ``max_length`` (> 0) items, as ``keep`` says."""
    return symbols[-max_length:] if keep == "last" else symbols[:max_length]
