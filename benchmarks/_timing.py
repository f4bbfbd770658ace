"""The one timing helper of the benchmark suite: contenders run side by side, round-robin.

This machine is shared and noisy (other jobs come and go on the other core), so absolute times drift
by tens of percent between minutes. Every comparison in the suite therefore:

* runs all contenders of a case in *rounds*: one sample of each per round, the order rotated from
  round to round (A B C, B C A, C A B, ...) so no contender always runs first or last;
* forms ratios *per round* (two samples taken seconds apart see the same machine), and reports
  their median with the min-max spread over rounds;
* reports medians, never means (a stall inflates the mean, not the median);
* reads this process's CPU time by default (:data:`now`), which a job on the other core does not
  inflate the way it inflates wall time.

Nothing here prints; parts turn :class:`Timings` into rows (:class:`Row`) and markdown.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def use_threads(n: int = 1) -> None:
    """Pin the intra-op thread count of this process (OMP_NUM_THREADS must also be set before
    torch is imported; :mod:`benchmarks.run` does that for itself and for every subprocess)."""
    import torch

    os.environ.setdefault("OMP_NUM_THREADS", str(n))
    torch.set_num_threads(n)


#: The clock every sample is read from. This process's CPU time, not wall time: at one thread a
#: benchmark is CPU-bound, and on a shared machine wall time also counts the time the kernel gave the
#: core to another job (measured here: under load, wall time of a step varied 3x while its CPU time
#: stayed within a few percent). ``python -m benchmarks --wall`` switches to wall time.
now: Callable[[], float] = time.process_time


def use_wall_clock(wall: bool = True) -> None:
    """Read samples from ``time.perf_counter`` (wall) instead of the process CPU time."""
    global now
    now = time.perf_counter if wall else time.process_time


def clock_name() -> str:
    wall = "wall time (time.perf_counter)" + (", the GPU synchronized at both ends" if sync is not _no_sync else "")
    return wall if now is time.perf_counter else "process CPU time (time.process_time)"


def _no_sync() -> None:
    return None


#: Waits for queued device work before each clock reading (``torch.cuda.synchronize`` once
#: :func:`use_device` names a CUDA device): a GPU kernel runs after the Python call that launched it returns.
sync: Callable[[], None] = _no_sync


def use_device(device: str) -> None:
    """Time work on ``device``: on CUDA, wall time with the GPU synchronized at both ends of a sample
    (the process CPU time of a GPU job counts only the launches)."""
    global sync
    import torch

    if torch.device(device).type == "cuda":
        use_wall_clock(True)
        sync = torch.cuda.synchronize
    else:
        sync = _no_sync


def clock(fn: Callable[[], Any], inner: int = 1, self_timed: bool = False) -> float:
    """Seconds per call of ``fn`` averaged over ``inner`` back-to-back calls; ``self_timed``: ``fn``
    returns the seconds to count itself (e.g. steady-state steps only, without its set-up)."""
    if self_timed:
        return sum(float(fn()) for _ in range(inner)) / inner
    sync()
    t0 = now()
    for _ in range(inner):
        fn()
    sync()
    return (now() - t0) / inner


@dataclasses.dataclass
class Stat:
    """Median and spread of a list of numbers."""

    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    def scaled(self, factor: float) -> Stat:
        return Stat([s * factor for s in self.samples])

    def inverse(self, numerator: float = 1.0) -> Stat:
        """``numerator / sample`` for every sample (seconds -> rate)."""
        return Stat([numerator / s for s in self.samples])


@dataclasses.dataclass
class Timings:
    """Seconds per call of each contender, one sample per round (``rounds[name][i]`` is round i)."""

    rounds: dict[str, list[float]]

    def __getitem__(self, name: str) -> Stat:
        return Stat(self.rounds[name])

    def rate(self, name: str, work: float) -> Stat:
        """``work`` units per second (tokens/s, FLOP/s), one value per round."""
        return Stat(self.rounds[name]).inverse(work)

    def speedup(self, name: str, baseline: str) -> Stat:
        """How many times faster ``name`` is than ``baseline``, per round (t_baseline / t_name)."""
        return Stat([b / a for a, b in zip(self.rounds[name], self.rounds[baseline])])

    def per_round(self, fn: Callable[[int], float]) -> Stat:
        """Any per-round quantity: ``fn(i)`` for every round i."""
        return Stat([fn(i) for i in range(len(next(iter(self.rounds.values()))))])


def interleave(
    contenders: dict[str, Callable[[], Any]],
    *,
    rounds: int = 5,
    warmup: int = 1,
    min_sample: float = 0.0,
    self_timed: bool = False,
) -> Timings:
    """Time every contender ``rounds`` times, round-robin with a rotating order.

    ``warmup`` untimed calls each first (allocator, oneDNN primitive caches). A sample repeats a fast
    contender back to back until it lasts at least ``min_sample`` seconds (the call count is
    calibrated once, on the warm-up) and reports seconds per call.
    """
    names = list(contenders)
    inner = {}
    for name in names:
        t = None
        for _ in range(warmup):
            t = clock(contenders[name], 1, self_timed)
        if min_sample > 0:
            t = clock(contenders[name], 1, self_timed) if t is None else t
            inner[name] = max(1, int(min_sample / max(t, 1e-9)))
        else:
            inner[name] = 1
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            out[name].append(clock(contenders[name], inner[name], self_timed))
    return Timings(out)


# -- results ------------------------------------------------------------------------------------------

COLUMNS = (
    "part", "case", "contender", "metric", "unit", "median", "min", "max", "rounds",
    "ratio_vs", "ratio", "ratio_min", "ratio_max", "note",
)


@dataclasses.dataclass
class Row:
    """One measured figure (a CSV line): ``ratio`` is the per-round median of contender / ``ratio_vs``
    (for rates: > 1 means faster than the reference)."""

    part: int
    case: str
    contender: str
    metric: str
    unit: str
    value: Stat | None = None
    ratio_vs: str = ""
    ratio: Stat | None = None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        v, r = self.value, self.ratio
        return {
            "part": self.part, "case": self.case, "contender": self.contender, "metric": self.metric,
            "unit": self.unit,
            "median": _num(v.median) if v else "", "min": _num(v.min) if v else "",
            "max": _num(v.max) if v else "", "rounds": len(v.samples) if v else "",
            "ratio_vs": self.ratio_vs,
            "ratio": _num(r.median) if r else "", "ratio_min": _num(r.min) if r else "",
            "ratio_max": _num(r.max) if r else "", "note": self.note,
        }


def _num(x: float) -> float:
    return float(f"{x:.6g}")


@dataclasses.dataclass
class Target:
    """A goal the issue sets, and whether this run met it."""

    what: str
    measured: str
    goal: str
    met: bool | None  # None: could not be measured


@dataclasses.dataclass
class PartResult:
    number: int
    title: str
    markdown: str
    rows: list[Row]
    targets: list[Target] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    #: rows as written to results.csv, for a part read back from an earlier run (:func:`read_results`)
    raw_rows: list[dict[str, Any]] | None = None


def fmt_ratio(stat: Stat | None, digits: int = 2) -> str:
    """``1.23x (1.10-1.31)``: median and spread over rounds."""
    if stat is None:
        return "n/a"
    return f"{stat.median:.{digits}f}x ({stat.min:.{digits}f}-{stat.max:.{digits}f})"


def md_table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_results(out_dir: Path, parts: list[PartResult], *, command: str, machine: dict[str, str],
                  total_seconds: float, record: dict[str, Any] | None = None) -> dict[str, Path]:
    """``RESULTS.md`` (readable), ``results.csv`` (one :class:`Row` a line, :data:`COLUMNS`) and
    ``results.json`` (the machine, the targets and every row) in ``out_dir``. ``record``: the
    :func:`~dsf_lightning._machine.machine_record` taken at the run's start (default: one taken now), finished
    here with the load at the end."""
    from dsf_lightning._machine import finish_record, machine_markdown, machine_record

    record = finish_record(machine_record() if record is None else record)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [r for part in parts for r in (part.raw_rows if part.raw_rows is not None else [row.as_dict() for row in part.rows])]
    paths = {"md": out_dir / "RESULTS.md", "csv": out_dir / "results.csv", "json": out_dir / "results.json"}
    with open(paths["csv"], "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    targets = [dict(part=p.number, **dataclasses.asdict(t)) for p in parts for t in p.targets]
    paths["json"].write_text(json.dumps(
        {"command": command, "machine": machine, "machine_record": record, "total_seconds": round(total_seconds, 1),
         "targets": targets, "rows": rows}, indent=1) + "\n", encoding="utf-8")

    md = ["# Benchmark results", "",
          "Generated by the benchmark suite (`benchmarks/`); do not edit by hand: run it again.", "",
          "```", command, "```", "",
          md_table(["", ""], [(k, v) for k, v in machine.items()]), "",
          "The machine and its load during the run that last wrote this file:", "", *machine_markdown(record), "",
          f"Total time: {total_seconds / 60:.1f} min. Raw numbers: `results.csv` (one figure a line, "
          "median / min / max over rounds) and `results.json`.", "",
          "Every ratio is the median over rounds of a per-round ratio (contenders run round-robin, side "
          "by side); the range in parentheses is the min-max over rounds.", ""]
    if targets:
        md += ["## Targets", "",
               md_table(["part", "target", "goal", "measured", "met"],
                        [(t["part"], t["what"], t["goal"], t["measured"],
                          {True: "yes", False: "**no**", None: "n/a"}[t["met"]]) for t in targets]), ""]
    for p in parts:
        md += [f"## {p.number}. {p.title}", "", p.markdown.strip(), "", f"_(part {p.number}: {p.seconds:.0f} s)_", ""]
    paths["md"].write_text("\n".join(md), encoding="utf-8")
    return paths


def read_results(out_dir: Path) -> tuple[dict[str, Any], list[PartResult]] | None:
    """The run recorded in ``out_dir`` (``results.json`` and ``RESULTS.md``) as ``(results.json's
    object, its parts)``, so that ``--only`` can rerun some parts and keep the others; None if there is
    none or it cannot be read."""
    try:
        data = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
        md = (out_dir / "RESULTS.md").read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None
    parts = []
    for section in re.split(r"(?m)^## (?=\d+\. )", md)[1:]:
        head, _, body = section.partition("\n")
        number, _, title = head.partition(". ")
        n = int(number)
        timing = re.search(r"\s*_\(part \d+: (\d+) s\)_\s*$", body)  # written again by write_results
        if timing:
            body = body[: timing.start()]
        targets = [Target(t["what"], t["measured"], t["goal"], t["met"]) for t in data.get("targets", []) if t["part"] == n]
        parts.append(PartResult(n, title.strip(), body.strip(), [], targets, float(timing.group(1)) if timing else 0.0,
                                raw_rows=[r for r in data.get("rows", []) if int(r["part"]) == n]))
    return data, parts


# -- the machine ---------------------------------------------------------------------------------------

def machine_info() -> dict[str, str]:
    """What a reader needs to judge the numbers: CPU model, cores, library versions, threads, date."""
    import torch

    from dsf_lightning._machine import cpu_model

    cpu = cpu_model()
    try:
        import lightning

        lightning_version = lightning.__version__
    except ImportError:  # pragma: no cover
        lightning_version = "not installed"
    try:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        load = "n/a"
    return {
        "CPU": f"{cpu} ({os.cpu_count()} logical cores)",
        "torch": f"{torch.__version__} (oneDNN {'on' if torch.backends.mkldnn.is_available() else 'off'})",
        "lightning": lightning_version,
        "python": platform.python_version(),
        "threads": f"torch.get_num_threads()={torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}",
        "date": _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "load average at start": load,
        "clock": clock_name(),
        **({"GPU": f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()})"}
           if sync is not _no_sync else {}),
    }


# -- fresh processes (memory) ---------------------------------------------------------------------------

def run_fresh(code: str, *args: str, timeout: float = 900) -> dict[str, Any]:
    """Run ``python -c code args...`` in a fresh interpreter (one thread, the repo on the path) and
    return the JSON object it prints last. Used wherever a peak (RSS high-water) must not see what an
    earlier measurement in this process allocated."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"benchmark subprocess failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


#: Python source for a fresh process to read its own memory figures (bytes) from /proc/self/status.
PROC_STATUS_SNIPPET = '''
def proc_status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0

def reset_peak_rss():
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
'''
