"""The configuration a ``dsf fit | validate | test | predict`` run saves beside its outputs, never over a file it
did not write.

LightningCLI's ``SaveConfigCallback`` writes ``config.yaml`` into ``trainer.log_dir`` (``trainer.default_root_dir``
when there is no logger), replacing whatever is there when told to overwrite: with ``logger: false`` a run started
in the folder that holds the user's own ``config.yaml`` rewrote it (comments gone, values changed), and
``default_root_dir=DIR`` replaced ``DIR/config.yaml``. :class:`SafeSaveConfigCallback` instead:

* writes the file through :func:`dsf_lightning._fs.write_atomic` (a temporary name renamed into place), its first
  line :data:`MARKER`, so a later run knows the file is a saved configuration;
* replaces ``config.yaml`` only when that first line says a run wrote it and it is none of this run's
  ``--config`` files (a resume in the same folder keeps its config up to date, as before);
* otherwise leaves the file byte-identical and saves this run's configuration as ``config.dsf.yaml`` beside it
  (``config.dsf-2.yaml`` ... when that name is taken by a file no run wrote), and logs where.

The YAML text is dumped when the callback is made, so the callback holds no parser and pickles (``ddp_spawn``).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from lightning.pytorch.cli import SaveConfigCallback

from .._fs import write_atomic

logger = logging.getLogger(__name__)

#: first line of every configuration a run saves: a later run may replace such a file, never another one
MARKER = "# dsf: the configuration of a run, saved by it (a later run in this folder may replace this file)"
#: how many alternative names a run tries before giving up on saving its configuration
_ATTEMPTS = 100


class ConfigSaveError(OSError):
    """The run's configuration could not be saved (every name taken by files no run wrote, or the write failed)."""


def _is_saved_config(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.readline(len(MARKER) + 2).rstrip(b"\r\n") == MARKER.encode()
    except OSError:
        return False


def _same_file(path: Path, others: Sequence[Path]) -> bool:
    for other in others:
        try:
            if os.path.samefile(path, other):
                return True
        except OSError:
            continue
    return False


def config_target(folder: Path, name: str, inputs: Sequence[Path] = ()) -> Path:
    """Where a run saves its configuration in ``folder``: ``name`` when it is absent or a configuration a run
    saved (and none of ``inputs``, the run's own ``--config`` files), else the first such ``<stem>.dsf[-N]<suffix>``."""
    stem, suffix = os.path.splitext(name)
    candidates = [name, f"{stem}.dsf{suffix}", *(f"{stem}.dsf-{n}{suffix}" for n in range(2, _ATTEMPTS))]
    for candidate in candidates:
        path = folder / candidate
        if not path.exists() and not path.is_symlink():
            return path
        if path.is_file() and not path.is_symlink() and _is_saved_config(path) and not _same_file(path, inputs):
            return path
    raise ConfigSaveError(
        f"{folder / name}: not replaced (no run wrote it), and {candidates[1]} ... {candidates[-1]} are taken too: "
        "choose another trainer.default_root_dir for this run"
    )


class SafeSaveConfigCallback(SaveConfigCallback):
    """``SaveConfigCallback`` that never replaces a file no run wrote (see the module docstring).

    Args (beyond LightningCLI's): ``inputs``: the run's ``--config`` files, never replaced even when a run saved
    them. ``overwrite`` is accepted and ignored: whether a file may be replaced is decided by its first line."""

    def __init__(self, parser, config, config_filename: str = "config.yaml", overwrite: bool = False,
                 multifile: bool = False, save_to_log_dir: bool = True, inputs: Sequence[str | os.PathLike] = ()) -> None:
        if multifile:
            raise ValueError("SafeSaveConfigCallback saves one file: multifile=True is not supported")
        super().__init__(parser, config, config_filename, overwrite=False, multifile=False, save_to_log_dir=save_to_log_dir)
        self.text = f"{MARKER}\n{parser.dump(config, skip_none=False)}"
        self.inputs = [Path(p) for p in inputs]
        self.saved_to: Path | None = None
        self.parser = self.config = None  # the text is all it needs: a parser holds the CLI, which does not pickle

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.already_saved:
            return
        if self.save_to_log_dir:
            log_dir = trainer.log_dir  # broadcast: every rank calls it
            if trainer.is_global_zero:
                if "://" in str(log_dir):
                    raise ConfigSaveError(f"{log_dir}: the run's configuration is saved in local folders only")
                folder = Path(log_dir)
                folder.mkdir(parents=True, exist_ok=True)
                target = config_target(folder, self.config_filename, self.inputs)
                if target.name != self.config_filename:
                    logger.warning("%s is not a configuration this run may replace (a file no run wrote, or this run's "
                                   "--config): left as it is; this run's configuration is saved as %s",
                                   folder / self.config_filename, target)
                try:
                    write_atomic(target, self.text)
                except OSError as err:
                    why = "the disk is full" if err.errno in (errno.ENOSPC, errno.EDQUOT) else err.strerror or str(err)
                    raise ConfigSaveError(f"{target}: the run's configuration could not be saved ({why}); free space or "
                                          "choose another trainer.default_root_dir") from None
                self.saved_to = target
        if trainer.is_global_zero:
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)


def config_inputs(argv: Sequence[str]) -> list[str]:
    """The ``--config`` / ``-c`` files named in ``argv`` (never replaced by the configuration the run saves)."""
    args, found = [str(a) for a in argv], []
    for i, arg in enumerate(args):
        if arg in ("--config", "-c") and i + 1 < len(args):
            found.append(args[i + 1])
        elif arg.startswith("--config="):
            found.append(arg.split("=", 1)[1])
    return found
