"""Progress bars for long work (scoring a file, ``dsf export --evaluate``, dynamic evaluation): on a terminal only.

A bar is drawn with tqdm (a dependency of Lightning, declared in pyproject) on stderr when stderr is a terminal;
when it is a file or a pipe (a log, CI, ``2> log``) there is no bar at all, so logs hold no bar characters.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO


def on_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default: the current ``sys.stderr``) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or closed
        return False


def progress_bar(total: float | None, desc: str, *, unit: str = "it", unit_scale: bool = False, stream: TextIO | None = None) -> Any:
    """A tqdm bar of ``total`` units on ``stream`` (stderr) when it is a terminal, else None (callers skip
    ``update`` then). The bar is removed when it closes (``leave=False``): the command's result is what stays."""
    stream = sys.stderr if stream is None else stream
    if not on_terminal(stream):
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with Lightning
        return None
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, file=stream, leave=False)
