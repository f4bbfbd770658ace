"""File-system durability helpers: the one atomic file writer (:func:`write_atomic`) that checkpoints, corpus
caches, reports and prediction files use, and the fsyncs the atomic hub folder writer shares."""

from __future__ import annotations

import os
import re
import socket
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def fsync_file(path: Path) -> None:
    """Flush a written file's data to disk."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (a rename into it) to disk; a no-op where folders cannot be synced."""
    if sys.platform.startswith("win"):  # pragma: no cover - folders cannot be opened for fsync there
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on folders; the files themselves are synced
        pass
    finally:
        os.close(fd)


_TMP_MARK = ".tmp-"


def _host_tag() -> str:
    """This machine's name as it appears in temporary file names (several hosts may share a folder)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"


def _tmp_prefix(path: Path) -> str:
    return f".{path.name}{_TMP_MARK}"


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (any user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: alive, but someone else's
        return True
    return True


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Delete the temporary files that killed :func:`write_atomic` calls for ``path`` left beside it.

    Only files written by a process of *this* machine that no longer runs are removed (the host and
    process id are in the name, ``.<name>.tmp-<host>-<pid>-<random>``), so a concurrent write of another
    process or node is never touched. Returns the paths removed.
    """
    path = Path(path)
    host = _host_tag()
    removed: list[Path] = []
    try:
        candidates = list(path.parent.glob(_tmp_prefix(path) + "*"))
    except OSError:
        return removed
    pattern = re.compile(re.escape(_tmp_prefix(path)) + r"(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]+$")
    for candidate in candidates:
        match = pattern.match(candidate.name)
        if match is None or match["host"] != host or pid_alive(int(match["pid"])):
            continue
        try:
            candidate.unlink()
            removed.append(candidate)
        except OSError:
            pass
    return removed


Content = bytes | str | Callable[[BinaryIO], None]


def write_atomic(path: str | os.PathLike, content: Content, *, mode: int | None = None) -> Path:
    """Write a file so that readers (and a run resumed after a kill at any instant) see the old file or the
    new one, never half of one: a hidden temporary sibling ``.<name>.tmp-<host>-<pid>-<random>``, fsync,
    ``os.replace``, fsync of the folder. On any error the temporary file is removed and ``path`` is left as
    it was; temporaries that killed writers of this machine left beside ``path`` are removed first.

    Args:
        content: ``bytes``; ``str`` (written as UTF-8, newlines untouched); or ``write(f)``, called with the
            temporary file open for binary writing (streams, ``torch.save``; it may raise to abandon the write).
        mode: permission bits of the new file; by default those of the file it replaces, if any, else the
            umask's default.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = path.parent / f"{_tmp_prefix(path)}{_host_tag()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    try:
        with open(tmp, "xb") as f:
            if callable(content):
                content(f)
            else:
                f.write(content.encode("utf-8") if isinstance(content, str) else content)
            f.flush()
            os.fsync(f.fileno())
        try:
            if mode is None and path.exists():
                mode = path.stat().st_mode & 0o777
            if mode is not None:
                os.chmod(tmp, mode)
        except OSError:
            pass
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


@contextmanager
def file_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (a lock file, created if missing) for the ``with`` block, so processes
    that read, change and rewrite a shared file take turns. ``filelock`` (a dependency of huggingface_hub and
    torch) does it on every platform (the hand-written ``fcntl`` lock was a no-op on Windows) and, one lock
    object per path, lets a block already holding it take it again instead of deadlocking."""
    from filelock import FileLock

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path, is_singleton=True):
        yield
