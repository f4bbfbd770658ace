"""A module's training mode for a block of code."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def evaluating(module: Any) -> Iterator[Any]:
    """``module`` in eval mode (no dropout) for the block; its training flag is restored after, also on errors."""
    was_training = module.training
    module.eval()
    try:
        yield module
    finally:
        module.train(was_training)
