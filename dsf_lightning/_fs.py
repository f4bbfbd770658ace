"""File-system durability helpers shared by the atomic writers (hub folders, training checkpoints)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


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


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary sibling, fsync and ``os.replace`` (never half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
