"""The process's memory allocator, tuned for training: large per-step buffers are reused, not page-faulted
in anew every step (see :func:`keep_freed_memory`; measured by ``python -m benchmarks --only 3``)."""

from __future__ import annotations

import ctypes
import logging
import os
import sys

log = logging.getLogger(__name__)

#: set to 0 to keep glibc's default allocation policy (see :func:`keep_freed_memory`)
MALLOC_TUNING_ENV = "DSF_MALLOC_TUNING"
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameter numbers (malloc.h)
_malloc_tuned = False


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse instead of unmapping it (once per process; Linux/glibc).

    Why: by default glibc serves every allocation above 32 MiB with a fresh ``mmap`` and returns it
    with ``munmap`` when freed, so a training step that allocates the ``[B*T, V]`` logits, their
    gradient and the softmax buffers (45 MB each at B=32, T=35, V=10k) page-faults them in anew every
    step. Measured on the 2-core AMD EPYC dev machine (``python -m benchmarks --only 3``: PTB,
    Delta-RNN 256, B=32, T=35, one thread, fresh processes): the kernel's time was ~35% of the
    process's CPU time by default and ~3-8% with this tuning, for 1.75x the training tokens/s in CPU
    time and 1.6-2.0x in wall time (the user-space time did not change). ``mallopt(M_MMAP_MAX, 0)`` serves large
    blocks from the heap and ``M_TRIM_THRESHOLD`` (1 GiB) stops it from shrinking after each step, so
    the same pages are reused. The price: freed memory up to the peak of a step stays with the
    process (its RSS stays at the high-water mark) -- it is reused by the next step.

    Called when a fit starts, by the training policy of the modules
    (:class:`~dsf_lightning.training.policy.AtomicCheckpointIOPolicy`'s ``setup``; ``dsf fit`` and a plain
    ``lightning.Trainer`` alike), never by importing the library or building a module: it changes the whole
    process, so it can be turned off: ``DSF_MALLOC_TUNING=0``, or the module's
    ``training_policy = TrainingPolicy(keep_freed_memory=False)``. Returns whether the tuning is in effect.
    """
    global _malloc_tuned
    if _malloc_tuned:
        return True
    if os.environ.get(MALLOC_TUNING_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only (musl has no such mallopt parameters)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(_M_MMAP_MAX, 0) and mallopt(_M_TRIM_THRESHOLD, 1 << 30):
        _malloc_tuned = True
        log.debug("glibc malloc: mmap off, trim threshold 1 GiB (%s=0 to disable)", MALLOC_TUNING_ENV)
    return _malloc_tuned


def malloc_tuned() -> bool:
    """Whether :func:`keep_freed_memory` has tuned this process's allocator (it does not tune it)."""
    return _malloc_tuned
