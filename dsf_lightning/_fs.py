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
