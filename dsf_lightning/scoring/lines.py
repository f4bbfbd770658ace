"""The text to score as ``(text, where, last)`` parts in bounded memory: a file (read by
:func:`dsf_lightning.data.textfile.iter_file_parts`), a string or any iterable of lines."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..data.textfile import Part, TextFileError, iter_file_parts
from .results import ScoringError

# Documents are read in chunks of this many bytes, and a line longer than this is handed to the
# tokenizer in parts (text8 is one 100 MB line): cuts fall right after a space (or, for character
# models, on any UTF-8 boundary), which changes no token; memory stays bounded whatever the file holds.
# (dsf_lightning.data.textfile, the one streaming reader, reads with these two)
READ_LIMIT = 1 << 16
# A tokenizer that cannot cut a line (Tokenizer.cut_at is None) gets whole lines up to this size.
MAX_LINE_BYTES = 1 << 26

def _split_text(text: str) -> list[str]:
    """A text's lines: one trailing newline is not an extra line, ``\\r\\n`` counts as ``\\n``."""
    if text.endswith("\n"):
        text = text[:-1]
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def _iter_file_lines(path: Path, *, cut: str | None, progress: bool) -> Iterator[Part]:
    """A UTF-8 file as ``(text, where, last)`` parts in bounded memory: the one streaming reader,
    :func:`dsf_lightning.data.textfile.iter_file_parts` (with this module's :data:`READ_LIMIT` and
    :data:`MAX_LINE_BYTES`), its errors as :class:`ScoringError`. A word longer than :data:`READ_LIMIT`
    bytes is scored as one unknown word (``<unk>``), the words after it as usual."""
    try:
        yield from iter_file_parts(path, cut=cut, progress=progress, limit=READ_LIMIT, max_line=MAX_LINE_BYTES,
                                   desc="scoring")
    except TextFileError as err:
        raise ScoringError(str(err)) from None


def _str_parts(line: str, cut: str | None) -> Iterator[tuple[str, bool]]:
    """A line already in memory as ``(part, last)``: parts of about :data:`READ_LIMIT` characters cut as
    :func:`_part_end` cuts bytes (a longer word stays whole: it is in memory anyway), so that the
    tokens in flight stay bounded and each window costs the same."""
    i = 0
    while cut is not None and len(line) - i > READ_LIMIT:
        j = i + READ_LIMIT
        k = j if cut == "char" else max(line.rfind(" ", i, j), line.rfind("\t", i, j)) + 1
        if k <= i:  # a word longer than the limit: up to its end
            m = re.compile(r"[ \t]").search(line, j)
            k = m.end() if m else len(line)
        yield line[i:k], k >= len(line)
        if k >= len(line):
            return
        i = k
    yield line[i:], True


def _iter_given_lines(lines: Iterable[str], cut: str | None = None) -> Iterator[Part]:
    for i, item in enumerate(lines):
        if not isinstance(item, str):
            raise ScoringError(f"document line {i} is a {type(item).__name__}, not a str")
        for j, line in enumerate(_split_text(item)):
            where = f"line {i + 1}" if j == 0 else f"line {i + 1} (part {j + 1})"
            for part, last in _str_parts(line, cut):
                yield part, where, last



class _Counter:
    """Counts the lines passing through :meth:`wrap` (the pieces of one long file line count once)."""

    def __init__(self) -> None:
        self.n = 0

    def wrap(self, items):
        last = None
        for item in items:
            if item[1] != last:
                self.n += 1
                last = item[1]
            yield item


