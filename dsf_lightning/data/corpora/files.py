"""Where corpus files live, how they are checked (sha256 / git blob id), read and downloaded.

The data root is, in order: the ``data_root`` argument, the ``DSF_DATA_ROOT`` environment variable,
or ``$XDG_CACHE_HOME/dsf_lightning/data`` (``~/.cache/dsf_lightning/data``). Tokenized corpora are
cached under ``DSF_CACHE_DIR`` or ``$XDG_CACHE_HOME/dsf_lightning/tokenized``.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import logging
import lzma
import os
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..._fs import write_atomic

logger = logging.getLogger(__name__)

DATA_ROOT_ENV = "DSF_DATA_ROOT"
CACHE_DIR_ENV = "DSF_CACHE_DIR"
_CHUNK = 1 << 20
FILE_MODE = 0o644  # files shared caches hold: readable by every user


class CorpusError(Exception):
    """A corpus cannot be loaded: missing, empty or corrupted files, unknown name or option."""


@dataclass(frozen=True)
class FileSpec:
    """One expected file, relative to the data root, with what is known to verify it.

    ``alternatives`` are other accepted forms of the same content (e.g. an uncompressed copy);
    the first one present is used.
    """

    path: str
    sha256: str | None = None
    git_blob: str | None = None
    url: str | None = None
    alternatives: tuple[FileSpec, ...] = ()

    def candidates(self) -> tuple[FileSpec, ...]:
        return (self, *self.alternatives)


def user_cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dsf_lightning"


def resolve_data_root(data_root: str | os.PathLike | None = None) -> tuple[Path, str]:
    """The data root and how it was chosen (for error messages)."""
    if data_root is not None:
        return Path(data_root).expanduser(), "argument data_root"
    if os.environ.get(DATA_ROOT_ENV):
        return Path(os.environ[DATA_ROOT_ENV]).expanduser(), f"environment variable {DATA_ROOT_ENV}"
    return user_cache_home() / "data", f"default (no data_root argument, {DATA_ROOT_ENV} unset)"


def default_cache_dir() -> Path:
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    return user_cache_home() / "tokenized"


def file_digests(path: str | os.PathLike) -> tuple[str, str]:
    """(sha256, git blob id) of a file, in one pass (of the bytes a :class:`FrozenFile` holds, if it is one)."""
    if isinstance(path, FrozenFile) and path.content is not None:
        return path.digests()
    path = Path(path)
    with open(path, "rb") as f:
        return _digests(iter(lambda: f.read(_CHUNK), b""), path.stat().st_size)


def _digests(chunks: Iterable[bytes], size: int) -> tuple[str, str]:
    """(sha256, git blob id) of ``size`` bytes given in ``chunks``, in one pass."""
    sha = hashlib.sha256()
    blob = hashlib.sha1(f"blob {size}\0".encode())
    for chunk in chunks:
        sha.update(chunk)
        blob.update(chunk)
    return sha.hexdigest(), blob.hexdigest()


class FrozenFile(type(Path())):
    """A corpus file's path holding the bytes read from it once: opening it (``open``, ``read_text``,
    ``read_bytes``, :func:`open_text`, :func:`read_lines`) serves those bytes, never the disk again.

    Why: a file hashed in one read and tokenized in another can be replaced in between, and the cache
    entry keyed by the old sha256 would hold the new file's tokens (issue 13, item 5). Hashing and
    tokenizing one in-memory copy makes the key describe exactly the bytes tokenized.
    ``opened`` tells whether anything read the frozen bytes (a spec that opened the file by another
    route, e.g. ``open(str(path))``, read the disk, and :func:`load_corpus` re-checks it).
    """

    content: bytes | None = None
    opened: bool = False

    @classmethod
    def read(cls, path: str | os.PathLike) -> FrozenFile:
        frozen = cls(path)
        with open(path, "rb") as f:
            frozen.content = f.read()
        return frozen

    def digests(self) -> tuple[str, str]:
        """(sha256, git blob id) of the frozen bytes."""
        return _digests((self.content,), len(self.content))

    def open(self, mode="r", buffering=-1, encoding=None, errors=None, newline=None):
        if self.content is None:
            return super().open(mode, buffering, encoding, errors, newline)
        if set(mode) - set("rbt"):
            raise io.UnsupportedOperation(f"{self} is a read-only snapshot of a corpus file (mode {mode!r})")
        self.opened = True
        raw = io.BytesIO(self.content)
        if "b" in mode:
            return raw
        return io.TextIOWrapper(raw, encoding=io.text_encoding(encoding), errors=errors, newline=newline)


def check_digests(path: str | os.PathLike, spec: FileSpec, sha: str, blob: str) -> str:
    """Check a file's (sha256, git blob id) against ``spec``; return the sha256."""
    if spec.sha256 is not None and sha != spec.sha256:
        raise CorpusError(
            f"checksum mismatch for {path}: sha256 {sha}, expected {spec.sha256}. "
            "The file is corrupted or a different version; replace it (or pass verify=False)."
        )
    if spec.sha256 is None and spec.git_blob is not None and blob != spec.git_blob:
        raise CorpusError(
            f"checksum mismatch for {path}: git blob id {blob}, expected {spec.git_blob} "
            "(`git hash-object FILE`). Replace the file (or pass verify=False)."
        )
    return sha


def verify_file(path: str | os.PathLike, spec: FileSpec) -> str:
    """Check ``path`` against ``spec``'s sha256 (or git blob id); return the file's sha256."""
    return check_digests(path, spec, *file_digests(path))


def verify_files(root: str | os.PathLike, specs: Sequence[FileSpec]) -> dict[str, str]:
    """Verify every spec's file under ``root`` (first present candidate); return path -> sha256.

    Raises :class:`CorpusError` when a file is missing or its checksum does not match.
    """
    root = Path(root)
    out = {}
    for spec in specs:
        found = next((c for c in spec.candidates() if (root / c.path).is_file()), None)
        if found is None:
            raise CorpusError(f"missing file {spec.path} (expected at {root / spec.path})")
        out[found.path] = verify_file(root / found.path, found)
    return out


def open_text(path: str | os.PathLike) -> io.TextIOBase:
    """Open a UTF-8 text file, transparently decompressing ``.xz``, ``.gz`` and ``.bz2``."""
    opener = {".xz": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}.get(os.path.splitext(str(path))[1])
    if isinstance(path, FrozenFile) and path.content is not None:  # the bytes already hashed
        raw = path.open("rb")
        if opener is None:
            return io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
        return opener(raw, "rt", encoding="utf-8", newline="\n")
    return (opener or open)(str(path), "rt", encoding="utf-8", newline="\n")


def read_lines(path: str | os.PathLike) -> Iterator[str]:
    """Lines without their newline. A last fragment after the final newline that is only
    whitespace is not a line (the PTB character files end with ``"\\n "``)."""
    with open_text(path) as f:
        for line in f:
            if line.endswith("\n"):
                yield line[:-1].rstrip("\r")
            elif line.strip():
                yield line


def download(url: str, dest: str | os.PathLike, sha256: str | None = None, *, timeout: float = 60.0) -> Path:
    """Fetch ``url`` to ``dest`` atomically (:func:`dsf_lightning._fs.write_atomic`): stream to a temporary
    sibling, check ``sha256``, rename.

    On any failure (network, checksum) nothing is left at ``dest`` or beside it.
    """
    dest = Path(dest)

    def fetch(out) -> None:
        digest = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            while chunk := resp.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
        if sha256 is not None and digest.hexdigest() != sha256:
            raise CorpusError(f"downloaded {url}: sha256 {digest.hexdigest()}, expected {sha256}; not saved")

    try:
        write_atomic(dest, fetch, mode=FILE_MODE)
    except (urllib.error.URLError, OSError) as err:
        raise CorpusError(f"could not download {url} to {dest}: {err}") from err
    logger.info("downloaded %s -> %s", url, dest)
    return dest
