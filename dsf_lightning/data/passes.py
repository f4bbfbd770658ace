"""A resumable pass over numbered training windows: what the stream and the sentence loaders share.

A loader is an iterable of windows ``0 .. len - 1`` (:meth:`ResumablePass.window`). Lightning writes and
restores its position through the ``_Stateful`` protocol (``state_dict`` / ``load_state_dict``); its fetcher
reads one window ahead, so the loader cannot tell from its own iteration which window was trained last: the
training module reports it through :meth:`ResumablePass.mark_trained`.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from typing import Any


class LayoutError(ValueError):
    """A split cannot be laid out as the requested windows (or a checkpoint's position does not fit them)."""


def rows_per_rank(error: type[LayoutError], batch_size: int, bptt: int, world_size: int, what: str, unit: str) -> int:
    """``batch_size / world_size`` after checking ``bptt`` and that every rank gets as many rows (``what``: what
    the batch size counts, ``unit``: what a rank owns); a bad value raises ``error``."""
    if isinstance(bptt, bool) or not isinstance(bptt, int) or bptt < 1:
        raise error(f"the window length bptt must be a positive integer, got {bptt!r}")
    if batch_size % world_size:
        raise error(
            f"batch_size {batch_size} ({what}) must be divisible by the number of processes "
            f"{world_size} so that every rank owns the same number of {unit}"
        )
    return batch_size // world_size


class ResumablePass(abc.ABC):
    """Subclasses give ``__len__`` (windows per pass) and ``window(index)``; this class iterates a pass and
    remembers how much of it was trained. ``layout_error`` is the exception a bad position raises."""

    layout_error: type[LayoutError] = LayoutError

    @abc.abstractmethod
    def __len__(self) -> int:
        """Windows per pass."""

    @abc.abstractmethod
    def window(self, index: int) -> Any:
        """Window ``index`` of the pass."""

    def _begin_pass(self) -> int:
        """The first window of the pass now beginning (a resumed position applies to one pass only)."""
        start, self._start = getattr(self, "_start", 0), 0
        # windows of this pass already trained: none (set now, not at the first window), or as restored
        # (a pass restored as finished stays finished until the next pass begins)
        resumed = self.__dict__.pop("_resumed_trained", None)
        self._trained = start if resumed is None else resumed
        return start

    def __iter__(self) -> Iterator[Any]:
        start = self._begin_pass()
        return (self.window(index) for index in range(start, len(self)))

    def mark_trained(self, index: int) -> None:
        """Record that window ``index`` has been trained on (a checkpoint now resumes after it)."""
        self._trained = index + 1

    @property
    def trained(self) -> int:
        """Windows of the current pass trained so far: 0 .. ``len(self)`` (``len(self)``: the pass is done,
        which a position modulo the pass length could not tell from "not started")."""
        return getattr(self, "_trained", 0)

    def state_dict(self) -> dict[str, Any]:
        # "start" (the next window, 0 after a finished pass) is what checkpoints have always held; "trained"
        # and "windows" tell a finished pass from one not started (training/resume.py)
        return {"start": self.trained % max(len(self), 1), "trained": self.trained, "windows": len(self)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        windows = state.get("windows")
        if windows is not None and int(windows) != len(self):
            raise self.layout_error(
                f"the checkpoint was written with {windows} windows per pass but this split has {len(self)}: "
                "was it written with another batch size, window length or corpus?"
            )
        start = int(state.get("start", 0))
        if not 0 <= start < max(len(self), 1):
            raise self.layout_error(
                f"the checkpoint resumes at window {start} but this split has {len(self)} windows: "
                "was it written with another batch size, window length or corpus?"
            )
        self._start = start
        self._resumed_trained = int(state.get("trained", start))
