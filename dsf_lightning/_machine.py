"""The CPU a measurement ran on, for the provenance lines of reports and benchmark tables."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else what :mod:`platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def check_device(device, error: type[Exception] = ValueError):
    """``device`` as a ``torch.device`` that can hold a model's weights on this machine, checked before anything is
    allocated; else ``error`` with one line saying why and what to pass (``meta`` holds no data; ``cuda`` needs a
    CUDA build and a GPU; ``cuda:N`` that many GPUs; ``mps`` / ``xpu`` ... their backend)."""
    import torch  # only when a device is asked for

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise error(f"device {device!r:.80} is not a torch device ({reason}); give cpu, cuda, cuda:1 or mps") from None
    if dev.type == "cpu":
        return dev
    if dev.type == "meta":
        raise error("device 'meta' holds shapes, not data: a model cannot run there; give cpu, cuda or mps")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise error(f"device {device!r:.80}: {why}; use --device cpu")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise error(f"device {device!r:.80}: this machine has {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}")
        return dev
    backend = getattr(torch.backends, dev.type, None) if dev.type == "mps" else getattr(torch, dev.type, None)
    available = getattr(backend, "is_available", None)
    if available is None or not available():
        raise error(f"device {device!r:.80}: no {dev.type} device is available here; use --device cpu")
    return dev
