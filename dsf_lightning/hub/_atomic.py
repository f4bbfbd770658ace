"""Write a folder atomically: build it as a hidden temporary sibling, then move it into place.

A reader (or a process killed half-way through a save) sees either the previous complete folder or
the new complete folder, never a mixture: every file is written and fsynced in
``.<name>.tmp-<random>`` beside the target, and only then swapped in. On Linux the swap with an
existing folder is one ``renameat2(RENAME_EXCHANGE)`` call; elsewhere (or on file systems without it)
the old folder is first renamed to ``.<name>.old-<random>``, the new one renamed into place and the old
one deleted, so a kill between those two renames leaves no folder at the target but the complete
previous version beside it (:func:`interrupted_leftovers` finds it, and ``load_pretrained`` says so).
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from .._fs import fsync_dir, fsync_file

logger = logging.getLogger(__name__)

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100




def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two existing paths (Linux ``renameat2``); False when unsupported here."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, f"could not swap {a} and {b}: {os.strerror(err)}")


def interrupted_leftovers(folder: Path) -> list[Path]:
    """Hidden siblings an interrupted save of ``folder`` left behind (previous versions first)."""
    folder = Path(folder)
    parent = folder.parent if folder.parent.exists() else None
    if parent is None:
        return []
    old = sorted(parent.glob(f".{folder.name}.old-*"))
    tmp = sorted(parent.glob(f".{folder.name}.tmp-*"))
    return [p for p in old + tmp if p.is_dir()]


def write_folder_atomically(folder: Path, write: Callable[[Path], None], may_replace: Callable[[Path], bool]) -> Path:
    """Call ``write(tmp)`` to fill a fresh temporary sibling of ``folder``, then move it to ``folder``.

    An existing ``folder`` is replaced only if it is empty or ``may_replace(folder)`` says so
    (a ``FileExistsError`` otherwise: never delete a folder that is not ours). On any exception the
    temporary folder is removed and ``folder`` is left as it was.
    """
    folder = Path(folder).expanduser().absolute()
    if folder.exists():
        if not folder.is_dir():
            raise FileExistsError(f"{folder} exists and is not a folder; choose another output path")
        if any(folder.iterdir()) and not may_replace(folder):
            raise FileExistsError(
                f"{folder} exists and is not a dsf-lightning pretrained folder; refusing to replace it "
                "(choose another output path or remove it yourself)"
            )
    parent = folder.parent
    parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:12]
    tmp = parent / f".{folder.name}.tmp-{token}"
    tmp.mkdir()  # honours the umask, unlike tempfile.mkdtemp's 0o700
    try:
        write(tmp)
        for path in tmp.iterdir():
            if path.is_file():
                fsync_file(path)
        fsync_dir(tmp)
        if not folder.exists():
            os.rename(tmp, folder)
        elif _exchange(tmp, folder):
            shutil.rmtree(tmp)  # it now holds the previous version
        else:
            old = parent / f".{folder.name}.old-{token}"
            os.rename(folder, old)
            os.rename(tmp, folder)
            shutil.rmtree(old, ignore_errors=True)
        fsync_dir(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder
