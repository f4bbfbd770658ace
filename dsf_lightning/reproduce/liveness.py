"""Is the ``dsf reproduce`` process that marked a row ``running`` still alive?

A row's state says ``running`` from the moment its run starts; a run killed without a chance to clean up
(``kill -9``, a machine shut down, a session that ended) leaves it so. The runner records who it is
(:func:`this_process`: host, boot, pid and the pid's start time) in the row's state entry, and the report
asks :func:`still_running`: on the same host and boot the answer is exact (a recycled pid is told apart by
its start time); from another host, or for a row recorded before this existed, it is unknown.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from .._fs import pid_alive

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _boot_id() -> str | None:
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), None off Linux."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": field 3 is fields[0]
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def this_process() -> dict:
    """What :func:`still_running` needs to recognize this process later."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "boot": _boot_id(), "pid": pid, "start": _start_ticks(pid)}


def still_running(runner: dict | None) -> bool | None:
    """True / False when ``runner`` (from :func:`this_process`) is / is not alive; None when this cannot be
    told from here (no record, another host)."""
    if not isinstance(runner, dict) or not isinstance(runner.get("pid"), int):
        return None
    if runner.get("host") != socket.gethostname():
        return None
    boot = _boot_id()
    if runner.get("boot") and boot and runner["boot"] != boot:
        return False  # the machine restarted since
    if not pid_alive(runner["pid"]):
        return False
    start = _start_ticks(runner["pid"])
    if runner.get("start") is not None and start is not None and start != runner["start"]:
        return False  # the pid now belongs to another process
    return True
