"""Checkpoint files that are never half-written, and never unpickled beyond plain data.

Lightning's ``TorchCheckpointIO`` serializes the whole checkpoint into memory, then (through fsspec's
transaction) writes it to a temporary file made by ``tempfile.mkstemp()`` in the *system* temporary
folder and ``shutil.move``\\ s it onto the target. That is an atomic rename only when the system
temporary folder and the checkpoint folder are on the same file system; otherwise ``shutil.move``
falls back to copying into the target path, truncating the previous ``last.ckpt`` first, so a kill
during the copy leaves a truncated ``last.ckpt``. Nothing is fsynced (a power cut can leave an empty
file behind the rename), and every killed save leaves a checkpoint-sized orphan in ``/tmp``.

:class:`AtomicCheckpointIO` writes the checkpoint straight into a hidden temporary file *in the
checkpoint's own folder* (``.last.ckpt.tmp-<host>-<pid>-<random>``), fsyncs it, ``os.replace``\\ s it
onto the target and fsyncs the folder. A reader, or a run resumed after a SIGKILL at any instant,
finds either the previous complete file or the new complete file. Temporary files that a killed
process of this machine left behind are removed by the next save of the same target. The ``dsf``
command line uses it by default.

Loading defaults to ``torch.load(weights_only=True)`` whatever ``torch``'s own default or the
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` environment variable say, for local paths and URLs alike: a
checkpoint holding arbitrary Python objects (a pickle payload) is refused with
:class:`CheckpointLoadError` instead of being executed. Pass ``weights_only=False`` explicitly (e.g.
``trainer.fit(..., weights_only=False)``) only for a file you trust.
"""

from __future__ import annotations

import errno
import os
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import _load as pl_load
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .._fs import remove_stale_temporaries, write_atomic  # noqa: F401  (remove_stale_temporaries: re-exported)

__all__ = [
    "AtomicCheckpointIO",
    "CheckpointLoadError",
    "CheckpointWriteError",
    "NonFiniteCheckpointError",
    "atomic_torch_save",
    "check_checkpoint_file",
    "nonfinite_tensors",
    "remove_stale_temporaries",
]

class CheckpointLoadError(ValueError):
    """A checkpoint cannot be loaded safely (it holds objects that weights-only loading refuses,
    or it is not a readable checkpoint). The message names the file and what to do."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, no permission ...). The message names the file and says
    that the previous file there, if any, is unchanged (the write is atomic)."""


#: Lightning's ``ckpt_path`` values that are not paths
_SPECIAL_CKPT_PATHS = ("last", "best", "hpc")


def check_checkpoint_file(value: str) -> None:
    """Raise :class:`CheckpointLoadError` (one line: what is wrong, what to do) when ``value``, a local
    ``--ckpt_path``, is not a checkpoint file: missing, a folder, not a regular file, unreadable, or not a
    Lightning checkpoint (no ``state_dict``). URLs and Lightning's ``last`` / ``best`` / ``hpc`` / ``registry``
    are left to their own checks; a file that holds pickled objects is left to the recipe guard, which names it."""
    text = str(value)
    if "://" in text or (text in _SPECIAL_CKPT_PATHS or text.startswith("registry")) and not os.path.lexists(text):
        return
    path = Path(text).expanduser()
    if not path.exists():
        near = sorted(path.parent.glob("*.ckpt"))[:5] if path.parent.is_dir() else []
        hint = f" ({path.parent} holds {', '.join(p.name for p in near)})" if near else ""
        raise CheckpointLoadError(f"--ckpt_path {text}: no such file{hint}; give the path of a .ckpt file a run wrote")
    exported = "; an exported model (model.safetensors and its folder) is started from with --model.init_from FOLDER"
    if path.is_dir():
        near = sorted(p.relative_to(path).as_posix() for p in path.glob("**/*.ckpt"))[:5]
        hint = f": it holds {', '.join(near)}" if near else ", and there is no .ckpt file in it"
        if not near and (path / "model.safetensors").is_file():
            hint += exported
        raise CheckpointLoadError(f"--ckpt_path {text} is a folder, not a checkpoint file{hint}; give the path of one .ckpt file")
    if not path.is_file():
        raise CheckpointLoadError(f"--ckpt_path {text} is not a regular file; give the path of a .ckpt file a run wrote")
    try:
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except (RuntimeError, ValueError):  # not a zip checkpoint: mmap is unsupported
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except RecursionError:
        return  # nesting too deep: recipe_guard.check_checkpoint refuses it with its own message
    except pickle.UnpicklingError as err:
        if re.search(r"Unsupported global|GLOBAL", str(err)):
            return  # pickled objects: recipe_guard.check_checkpoint refuses it with its own message
        raise CheckpointLoadError(f"--ckpt_path {text}: not a readable checkpoint (not a torch.save file); is it a "
                                  ".ckpt file a run wrote, and complete?") from None
    except Exception as err:  # noqa: BLE001 - whatever the file is, it is not a checkpoint torch can read
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        raise CheckpointLoadError(f"--ckpt_path {text}: not a readable checkpoint ({type(err).__name__}: {first}); "
                                  "is it a .ckpt file a run wrote, and complete?") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        hint = exported if path.suffix == ".safetensors" else ""
        raise CheckpointLoadError(f"--ckpt_path {text}: not a Lightning checkpoint (no state_dict in it); give a .ckpt file a "
                                  f"run wrote{hint}")


def _write_error(path: Any, err: OSError) -> CheckpointWriteError:
    """The one-line error for a checkpoint write that failed (the atomic write left the old file as it was)."""
    full = err.errno in (errno.ENOSPC, errno.EDQUOT)
    if full:
        what = f"the disk is full ({os.strerror(err.errno)})"
    elif err.errno == errno.EFBIG:
        what = f"the file is larger than the file system or this process's file size limit allows ({os.strerror(err.errno)})"
    else:
        what = err.strerror or str(err)
    todo = "free space there or" if full else "fix that or"
    error = CheckpointWriteError(
        f"{path}: checkpoint not written: {what}; the file there, if any, is the previous complete checkpoint. "
        f"{todo.capitalize()} choose another folder (trainer.default_root_dir, ModelCheckpoint dirpath), then resume "
        "with --ckpt_path"
    )
    error.errno = err.errno  # one argument keeps str(error) free of the "[Errno N]" prefix
    return error


class NonFiniteCheckpointError(FloatingPointError):
    """A checkpoint about to be written holds NaN or infinite weights, carried state or optimizer state;
    :class:`AtomicCheckpointIO` refuses it (the file on disk stays the last finite one)."""


def nonfinite_tensors(obj: Any, where: str = "", limit: int = 5) -> list[str]:
    """The paths (``state_dict['model.x']``, ``optimizer_states[0]...``) of floating-point tensors in ``obj``
    (nested dicts / lists) that hold NaN or infinity; at most ``limit``."""
    found: list[str] = []
    stack = [(where, obj)]
    while stack and len(found) < limit:
        path, value = stack.pop()
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() and value.numel() and not bool(torch.isfinite(value).all()):
                found.append(path)
        elif isinstance(value, dict):
            stack.extend((f"{path}[{k!r}]" if path else str(k), v) for k, v in reversed(list(value.items())))
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value))))
    return found


# what a checkpoint resumes from: weights, the carried TBPTT state, the optimizer's moments
_CHECKED_KEYS = ("state_dict", "dsf_carried_train_state", "optimizer_states")


def atomic_torch_save(obj: Any, path: str | os.PathLike, *, write: Callable[[Any, Any], None] | None = None) -> Path:
    """``torch.save(obj)`` to ``path`` through :func:`dsf_lightning._fs.write_atomic` (hidden temporary file in
    the same folder, fsync, ``os.replace``, fsync of the folder; the permissions of the file replaced are
    kept). On any error the temporary file is removed and ``path`` is left as it was. ``write(obj, file)``
    replaces ``torch.save`` (for tests that inject faults)."""
    return write_atomic(path, lambda f: (write or torch.save)(obj, f))


def _full(path: Path) -> bool:
    """Whether the file system holding ``path`` has (next to) no space left."""
    try:
        stats = os.statvfs(path.parent)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < 1 << 20


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` with atomic, fsynced saves and weights-only loading by default.

    Use it as a Trainer plugin: ``L.Trainer(plugins=[AtomicCheckpointIO()])`` (the ``dsf`` command line
    adds it unless another ``CheckpointIO`` plugin is given). Remote paths (``s3://`` ...) are handed
    to Lightning's own fsspec writer, which is atomic on object stores.

    A checkpoint whose weights, carried state or optimizer state hold NaN or infinity is refused with
    :class:`NonFiniteCheckpointError` (the run ends with that error, the last finite file stays): a resume
    from it could only go on producing NaN.

    Args:
        weights_only: what loading uses when the caller does not say (``True``: refuse pickled objects).
        allow_nonfinite: write non-finite checkpoints anyway (e.g. to keep a diverged run for a post-mortem).
    """

    def __init__(self, weights_only: bool = True, allow_nonfinite: bool = False) -> None:
        super().__init__()
        self.default_weights_only = bool(weights_only)
        self.allow_nonfinite = bool(allow_nonfinite)

    def save_checkpoint(self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(
                f"`Trainer.save_checkpoint(..., storage_options=...)` is not supported by {type(self).__name__}"
            )
        if not self.allow_nonfinite:
            bad = [p for key in _CHECKED_KEYS if key in checkpoint for p in nonfinite_tensors(checkpoint[key], key)]
            if bad:
                raise NonFiniteCheckpointError(
                    f"{path}: not written: NaN or infinite values in {', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''} "
                    f"at step {checkpoint.get('global_step', '?')} (the file there, if any, is the last finite "
                    "checkpoint). The run diverged: lower the learning rate, set "
                    "gradient_clip_val, or keep NonFiniteGuard on (`dsf fit` does by default). "
                    "AtomicCheckpointIO(allow_nonfinite=True) writes such checkpoints anyway"
                )
        if "://" in str(path) and not str(path).startswith("file://"):
            return super().save_checkpoint(checkpoint, path)
        local = Path(str(path)[len("file://"):] if str(path).startswith("file://") else path)
        try:
            self._write_atomically(checkpoint, local)
        except CheckpointWriteError:
            raise
        except OSError as err:
            raise _write_error(local, err) from None
        except RuntimeError as err:  # torch's zip writer reports a failed write(2) as a RuntimeError
            if "write" not in str(err).lower():
                raise
            raise _write_error(local, OSError(errno.ENOSPC if _full(local) else errno.EIO, str(err).splitlines()[0])) from None

    def _write_atomically(self, checkpoint: dict[str, Any], path: Path) -> None:
        """The atomic write (a seam for fault-injection tests)."""
        atomic_torch_save(checkpoint, path)

    def load_checkpoint(
        self,
        path: _PATH,
        map_location: Callable | None = lambda storage, loc: storage,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        if weights_only is None:
            weights_only = self.default_weights_only
        fs = get_filesystem(path)
        if not fs.exists(path):
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        try:
            return pl_load(path, map_location=map_location, weights_only=weights_only)
        except pickle.UnpicklingError as err:
            found = re.search(r"(?:Unsupported global|GLOBAL)[^\n]*", str(err))
            if found is None:  # "invalid load key": not a torch.save file at all
                raise CheckpointLoadError(f"{path}: not a readable checkpoint ({str(err).strip()[:200]}); is it a .ckpt "
                                          "file a run wrote, and complete?") from None
            what = found.group(0).strip()
            raise CheckpointLoadError(
                f"{path}: holds Python objects that weights-only loading refuses ({what}); nothing was "
                "unpickled. Resume only from checkpoints you trust: if you do trust this one, pass "
                "weights_only=False to Trainer.fit / validate / test, or allow the type with "
                "torch.serialization.add_safe_globals([...])"
            ) from None
        except (RecursionError, MemoryError):
            raise
        except Exception as err:  # noqa: BLE001 - a text file gives a KeyError, a cut one an EOFError ...: not a checkpoint
            first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
            raise CheckpointLoadError(f"{path}: not a readable checkpoint ({first}); is the file complete?") from None
