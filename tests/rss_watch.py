"""Peak-RSS measurement for the subprocess scripts of the memory tests (``/proc/self/status``, Linux): the peak
is reset at the start, and a watchdog thread stops the process past a ceiling, so a regression that reads a file
whole cannot eat the machine's memory; it then prints ``{"rc": "killed", "rss_growth_mib": ...}`` as the
script's last line (on the real stdout, whatever the script redirected)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time


def status(key: str) -> int:
    """``VmRSS``, ``VmHWM``, ... of this process, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def start_watch(ceiling_mib: float) -> int:
    """Reset the peak RSS (VmHWM) to the current RSS, start the watchdog and return that RSS (the base)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = status("VmRSS")

    def watchdog() -> None:
        while True:
            if status("VmRSS") - base > ceiling_mib * 2**20:
                print(json.dumps({"rc": "killed", "rss_growth_mib": growth_mib(base)}), file=sys.__stdout__, flush=True)
                os._exit(0)
            time.sleep(0.02)

    threading.Thread(target=watchdog, daemon=True).start()
    return base


def growth_mib(base: int) -> float:
    """The peak RSS since :func:`start_watch` above its base, in MiB."""
    return (status("VmHWM") - base) / 2**20
