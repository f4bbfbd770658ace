"""Reading a UTF-8 text file of any size in bounded memory: the one streaming reader of every command that
reads a user's file (``dsf score --file``, ``dsf classify --file``, ``dsf predict`` with ``data.predict_file``).

:func:`iter_file_parts` hands a file over as ``(text, where, last)`` parts of at most ``limit`` bytes (64 KiB):
a line longer than that is cut as the tokenizer allows (:attr:`Tokenizer.cut_at <dsf_lightning.data.tokenizers.
Tokenizer.cut_at>`: after a space, or between characters), so ``/dev/zero`` or a 1 GB line without newlines
costs the same memory as a short file. What is not text is refused with a :class:`TextFileError` naming the
file and the byte offset: a NUL byte (binary data; ``/dev/zero`` at byte 0) and invalid UTF-8.

A word longer than ``limit`` bytes (``cut="space"``) cannot be held whole in bounded memory: it is handed over
as one :class:`LongWord` part (its first bytes; the rest of the word is skipped, and a warning logged), which
readers take as ONE unknown word (``<unk>``): no word after it is lost, and the token count is the same as if
the word had been read whole by a word-level model (where any word that long is out of the vocabulary).
:func:`normalized_parts` runs a text normalizer over such parts (sentence by sentence, across the cuts).
"""

from __future__ import annotations

import bz2
import gzip
import logging
import lzma
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .._progress import progress_bar

__all__ = ["LineTooLongError", "LongWord", "MAX_LINE_BYTES", "READ_LIMIT", "TextFileError", "iter_file_parts", "normalized_parts"]

logger = logging.getLogger(__name__)

#: bytes read at a time, and the longest part handed over (a longer line is cut, see the module docstring)
READ_LIMIT = 1 << 16
#: a tokenizer that cannot cut a line (``cut_at`` None) gets whole lines up to this size, longer ones are refused
MAX_LINE_BYTES = 1 << 26
_PROGRESS_MIN_BYTES = 1 << 18  # files smaller than this (a second or two of scoring) get no progress bar
_SPACE = re.compile(rb"[ \t\n]")
_COMPRESSED = {".xz": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}

Part = tuple[str, str, bool]  # (text, where, whether it ends its line)


class TextFileError(ValueError):
    """A file that cannot be read as text (missing, a directory, binary data, invalid UTF-8, a line too long)."""


class LineTooLongError(TextFileError):
    """A line longer than the most a reader that cannot cut lines holds (``path``, ``lineno``, ``limit``)."""

    def __init__(self, message: str, path: Path, lineno: int, limit: int) -> None:
        super().__init__(message)
        self.path, self.lineno, self.limit = path, lineno, limit


class LongWord(str):
    """A word longer than the read limit, as its first bytes: readers take it as one unknown word."""


def _utf8_cut(raw: bytes | bytearray, end: int) -> int:
    """A UTF-8 character boundary at or before ``end``: before the last non-ASCII character that
    ``raw[:end]`` touches (which may be cut), so never inside a multi-byte character."""
    cut = end
    while cut > 0 and raw[cut - 1] & 0xC0 == 0x80:  # back off continuation bytes
        cut -= 1
    if cut > 0 and raw[cut - 1] >= 0xC0:  # ... and the lead byte they belong to
        cut -= 1
    return cut


def _part_end(buf: bytes | bytearray, cut: str | None, limit: int) -> int:
    """Where to cut the first ``limit`` bytes of a line still being read: after the last space or tab
    (``"space"``), at the last character boundary (``"char"``); 0 when there is no such place."""
    if cut == "space":
        return max(buf.rfind(b" ", 0, limit), buf.rfind(b"\t", 0, limit)) + 1
    if cut == "char":
        end = _utf8_cut(buf, limit)
        return end - 1 if end > 1 and buf[end - 1] == 0x0D else end  # keep "\r\n" together
    return 0


def _decode(raw: bytes | bytearray, path: Path, offset: int, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        bad = raw[err.start : err.start + 1]
        raise TextFileError(
            f"{path}: not valid UTF-8 at byte offset {offset + err.start} (line {lineno}, byte "
            f"0x{bytes(bad).hex()}: {err.reason}); convert the file to UTF-8 first"
        ) from None


def _progress_bar(path: Path, desc: str):
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if size < _PROGRESS_MIN_BYTES:
        return None
    return progress_bar(size, f"{desc} {path.name}", unit="B", unit_scale=True)  # None unless stderr is a terminal


def _open(path: Path, decompress: bool):
    opener = _COMPRESSED.get(path.suffix) if decompress else None
    try:
        return (opener or open)(path, "rb")
    except FileNotFoundError:
        raise TextFileError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise TextFileError(f"{path} is a directory, not a text file") from None
    except OSError as err:
        raise TextFileError(f"cannot read {path}: {err.strerror or err}") from None


def _too_long(path: Path, lineno: int, max_line: int) -> LineTooLongError:
    return LineTooLongError(
        f"{path} line {lineno} is longer than {max_line:,} bytes and this model's tokenizer cannot read a line in "
        "parts; split the document into lines", path, lineno, max_line,
    )


def iter_file_parts(path: str | os.PathLike | BinaryIO, *, cut: str | None, progress: bool = False, limit: int = READ_LIMIT,
                    max_line: int = MAX_LINE_BYTES, decompress: bool = False, desc: str = "reading") -> Iterator[Part]:
    """A UTF-8 file as ``(text, where, last)`` parts, lazily, in memory bounded by ``limit`` whatever the file
    holds (issue 13 item 7: a document without newlines is not held whole).

    A line longer than ``limit`` bytes is handed over in parts cut as the tokenizer allows (``cut``,
    :attr:`Tokenizer.cut_at`); ``last`` marks a line's final part. A word longer than ``limit`` bytes
    (``cut="space"``) is one :class:`LongWord` part (its first ``limit`` bytes), with a warning; the words after
    it are read as usual. A tokenizer that cannot cut (``cut=None``) gets whole lines up to ``max_line`` bytes.
    NUL bytes are binary data, not text: :class:`TextFileError` (so ``/dev/zero`` is refused at its first byte);
    invalid UTF-8 too, with the byte offset. A last fragment after the final newline that is only whitespace
    is not a line (as :func:`dsf_lightning.data.corpora.files.read_lines`). ``decompress``: ``.xz`` / ``.gz`` /
    ``.bz2`` files are read decompressed (offsets are then in the decompressed bytes). ``path`` may be an open
binary file (standard input: ``sys.stdin.buffer``); it is closed at the end. ``progress``: a tqdm
    bar on stderr for files over 256 KiB when stderr is a terminal (none in a log or a pipe), labelled ``desc``.
    """
    if hasattr(path, "read"):  # an open binary file
        f, name = path, getattr(path, "name", None)
        path, bar = Path(name if isinstance(name, str) else "<stdin>"), None
    else:
        path = Path(path)
        f = _open(path, decompress)
        bar = _progress_bar(path, desc) if progress else None
    buf = bytearray()  # the unread rest of the current line (no newline in it)
    pos = 0  # byte offset of buf[0] in the file
    lineno = 1
    started = False  # parts of the current line were handed over already
    skipping = False  # dropping the rest of an overlong word
    first = True
    with f:
        while True:
            try:
                chunk = f.read(limit)
            except (OSError, EOFError, lzma.LZMAError) as err:  # a broken compressed file, an I/O error
                raise TextFileError(f"cannot read {path}: {getattr(err, 'strerror', None) or err}") from None
            if bar is not None and chunk:
                bar.update(len(chunk))
            if first:
                first = False
                if chunk.startswith(b"\xef\xbb\xbf"):  # UTF-8 byte order mark
                    chunk = chunk[3:]
                    pos = 3
            nul = chunk.find(b"\0")
            if nul >= 0:
                at_line = lineno + chunk.count(b"\n", 0, nul)
                raise TextFileError(
                    f"{path}: NUL byte at byte offset {pos + len(buf) + nul} (line {at_line}): "
                    "this is binary data, not text; give a UTF-8 text file"
                )
            if not chunk:  # end of file
                if started or buf.strip():
                    yield _decode(buf, path, pos, lineno), f"{path} line {lineno}", True
                break
            if skipping:  # buf is empty: drop the overlong word's bytes up to the next space or newline
                end = _SPACE.search(chunk)
                skip = end.start() if end else len(chunk)
                pos += skip
                chunk = chunk[skip:]
                skipping = end is None
            buf += chunk
            start = 0
            while (nl := buf.find(b"\n", start)) >= 0:
                end = nl - 1 if nl > start and buf[nl - 1] == 0x0D else nl
                if cut is None and end - start > max_line:  # a line held whole: the cap is exact
                    raise _too_long(path, lineno, max_line)
                yield _decode(buf[start:end], path, pos + start, lineno), f"{path} line {lineno}", True
                start = nl + 1
                lineno += 1
                started = False
            del buf[:start]
            pos += start
            while len(buf) >= limit:
                end = _part_end(buf, cut, limit)
                if end > 0:
                    yield _decode(buf[:end], path, pos, lineno), f"{path} line {lineno}", False
                elif cut == "space":  # one word fills the buffer: one LongWord part, then the words after it
                    head = _utf8_cut(buf, limit)
                    after = _SPACE.search(buf, limit)
                    logger.warning(
                        "%s line %d: a word longer than %s bytes at byte offset %d is read as one unknown word",
                        path, lineno, f"{limit:,}", pos,
                    )
                    yield LongWord(_decode(buf[:head], path, pos, lineno)), f"{path} line {lineno}", False
                    end, skipping = (after.start(), False) if after else (len(buf), True)
                elif len(buf) > max_line:
                    raise _too_long(path, lineno, max_line)
                else:
                    break
                started = True
                del buf[:end]
                pos += end
    if bar is not None:
        bar.close()


def normalized_parts(parts: Iterable[Part], normalizer: Any) -> Iterator[Part]:
    """Parts of raw lines -> parts of normalized sentences (each sentence ends as a line does, with ``last``);
    a sentence left open at the end of a part continues in the next part of its line. A :class:`LongWord`
    passes as it is (it is one unknown word whatever a normalizer would make of its first bytes)."""
    if normalizer is None:
        yield from parts
        return
    sentence_open = False  # parts of a sentence were handed over with last=False
    for text, where, last in parts:
        if isinstance(text, LongWord):
            yield text, where, last
            sentence_open = not last
            continue
        pieces = normalizer.sentences(text)
        for k, (sentence, closed) in enumerate(pieces):
            end = closed or (last and k == len(pieces) - 1)
            if sentence and sentence_open:
                sentence = normalizer.continue_sentence(sentence)
            if sentence or (end and sentence_open):
                yield sentence, where, end
                sentence_open = not end
