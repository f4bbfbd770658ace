"""The machine a measurement ran on, for the provenance lines of reports and benchmark tables.

:func:`machine_record` is what every benchmark report records (CPU model, the ISA flags that decide which
kernels are fast, cores, torch and oneDNN, load at start); :func:`finish_record` adds the load at the end and
the verdict of :data:`LOADED_RULE`; :func:`machine_markdown` formats it as a report's lines.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
from pathlib import Path
from typing import Any

#: the ISA flags that decide which CPU kernels are fast, ``/proc/cpuinfo`` name -> the name a report prints
ISA_FLAGS = {"avx2": "AVX2", "avx512f": "AVX-512F", "avx512_bf16": "AVX-512 BF16", "amx_tile": "AMX tile",
             "amx_bf16": "AMX BF16"}
#: a report made while other work ran beside it says so; the rule, as every report prints it
LOADED_PER_CORE = 0.5
LOADED_RULE = (f"loaded when the 1-minute load average exceeds {LOADED_PER_CORE} per usable core once the "
               "benchmark's own busy processes are taken off: at the start all of it is others' work (the benchmark "
               "has not run yet), at the end its own processes are subtracted")


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else what :mod:`platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def isa_flags() -> dict[str, bool | None]:
    """Each of :data:`ISA_FLAGS` (by its ``/proc/cpuinfo`` name): whether this CPU has it; None where the
    flags cannot be read (not Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return dict.fromkeys(ISA_FLAGS)
    line = next((ln for ln in text.splitlines() if ln.startswith(("flags", "Features"))), None)
    if line is None:
        return dict.fromkeys(ISA_FLAGS)
    have = set(line.split(":", 1)[1].split())
    return {flag: flag in have for flag in ISA_FLAGS}


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), else all of them."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages; None where the OS has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def onednn_version() -> str:
    """oneDNN's (MKL-DNN's) version in this torch, ``"not available"`` without it."""
    import torch

    if not torch.backends.mkldnn.is_available():
        return "not available"
    found = re.search(r"(?:MKL-DNN|oneDNN)\s+v?([\d.]+)", torch.__config__.show())
    return f"v{found.group(1)}" if found else "available (version not reported)"


#: environment variables that keep torch (ATen), oneDNN and MKL below the CPU's own instruction set, e.g.
#: ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2`` to run an AVX-512 machine as
#: an AVX2-only one: a report made under them says so
ISA_LIMIT_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def isa_limits() -> dict[str, str]:
    """The :data:`ISA_LIMIT_VARIABLES` set in this process's environment."""
    return {name: os.environ[name] for name in ISA_LIMIT_VARIABLES if os.environ.get(name)}


def machine_record(own_processes: int = 1) -> dict[str, Any]:
    """What a reader needs to judge a benchmark's numbers, taken at its start: CPU, ISA flags, cores, torch,
    oneDNN, the load average now. ``own_processes``: how many busy processes the benchmark itself runs at
    once (their load is not counted against the machine at the end); :func:`finish_record` completes it."""
    import torch

    return {
        "cpu": cpu_model(),
        "isa": isa_flags(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "isa_limits": isa_limits(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "torch": torch.__version__,
        "onednn": onednn_version(),
        "threads": torch.get_num_threads(),
        "started": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "own_processes": own_processes,
        "load_start": load_average(),
        "load_end": None,
        "loaded": None,
        "load_rule": LOADED_RULE,
    }


def is_loaded(record: dict[str, Any]) -> bool | None:
    """:data:`LOADED_RULE` on ``record``'s loads; None where neither load is known."""
    limit = LOADED_PER_CORE * record["usable_cores"]
    start, end = record.get("load_start"), record.get("load_end")
    others = [start[0] if start else None, end[0] - record["own_processes"] if end else None]
    known = [x for x in others if x is not None]
    return any(x > limit for x in known) if known else None


def finish_record(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with the load average now (the end) and the loaded verdict; returns it."""
    record["load_end"] = load_average()
    record["loaded"] = is_loaded(record)
    return record


def _isa_text(isa: dict[str, bool | None]) -> str:
    if all(v is None for v in isa.values()):
        return "not readable on this OS"
    return ", ".join(f"{name} {'yes' if isa.get(flag) else 'no'}" for flag, name in ISA_FLAGS.items())


def _load_text(load: list[float] | None) -> str:
    return "not recorded" if load is None else " / ".join(f"{x:.2f}" for x in load)


def machine_markdown(record: dict[str, Any]) -> list[str]:
    """``record`` as a report's Markdown lines (a list; a loaded machine said in bold)."""
    verdict = {True: "**made on a loaded machine**: its numbers are slower and noisier than a quiet machine's",
               False: "quiet machine", None: "load not known"}[record.get("loaded")]
    return [
        f"- CPU: {record['cpu']}",
        f"- ISA: {_isa_text(record['isa'])} (torch's CPU kernels: {record['torch_cpu_capability']})",
        *(["- **ISA limited by the environment** (this machine ran as one with a smaller instruction set): "
           + ", ".join(f"{k}={v}" for k, v in record["isa_limits"].items())] if record.get("isa_limits") else []),
        f"- cores: {record['logical_cores']} logical, {record['usable_cores']} usable by this process; "
        f"torch threads {record['threads']}",
        f"- torch {record['torch']}, oneDNN {record['onednn']}",
        f"- load average (1 / 5 / 15 min) at start ({record['started']}): {_load_text(record['load_start'])}; "
        f"at end: {_load_text(record.get('load_end'))}; the benchmark's own busy processes: {record['own_processes']}",
        f"- load: {verdict}. Rule: {record['load_rule']}.",
    ]


def main(argv: list[str] | None = None) -> int:
    """``python -m dsf_lightning._machine start FILE`` records the machine (a shell script's benchmark, at its
    start); ``... end FILE`` adds the load at the end and prints the record's Markdown lines."""
    import argparse
    import json

    from ._fs import write_atomic

    parser = argparse.ArgumentParser(prog="python -m dsf_lightning._machine", description=main.__doc__)
    parser.add_argument("when", choices=("start", "end"))
    parser.add_argument("file", type=Path)
    parser.add_argument("--own-processes", type=int, default=1, help="the benchmark's busy processes at once")
    args = parser.parse_args(argv)
    if args.when == "start":
        write_atomic(args.file, json.dumps(machine_record(args.own_processes), indent=1))
        return 0
    try:
        record = json.loads(args.file.read_text())
    except (OSError, ValueError) as err:
        parser.error(f"{args.file}: no machine record from 'start' ({err})")
    write_atomic(args.file, json.dumps(finish_record(record), indent=1))
    print("\n".join(machine_markdown(record)))
    return 0


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


if __name__ == "__main__":
    raise SystemExit(main())
