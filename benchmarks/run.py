"""Run the benchmark suite and write ``RESULTS.md``, ``results.csv`` and ``results.json``.

    OMP_NUM_THREADS=1 python -m benchmarks              # the full suite (~15 min at one thread)
    OMP_NUM_THREADS=1 python -m benchmarks --quick      # a smoke run (under a minute)
    OMP_NUM_THREADS=1 python -m benchmarks --only 1,3   # some parts (by number or name); their sections
                                                        # of an existing RESULTS.md are replaced, the rest kept
    OMP_NUM_THREADS=1 python benchmarks/run.py ...      # the same

Parts:
  1. every registered cell vs torch.nn.LSTM / nn.GRU, forward + backward tokens/s
  2. recurrent matmul GFLOP/s of each recurrence against the measured matmul peak (torch.mm vs oneDNN)
  3. language-model training through the Lightning loop vs a hand-written PyTorch loop (real PTB)
  4. the scorer: batched vs one sentence at a time; peak memory streaming 10k vs 1M tokens
  5. parallel scans (dsf_lightning.ops.scan) vs their loops at T = 35, 256, 1024
  6. text generation (Scorer.generate): new tokens/s at batch 1 and 8
  7. torch.compile (LanguageModelModule compile=true) vs uncompiled: training step and scoring, compile seconds
  8. score-document: one long document, exact vs parallel mode (streams) vs the window loop before issue 18
  --device cuda: the parts that take a device (part 1) on a GPU, wall time with the GPU synchronized,
     into benchmarks/cuda/ (nn.LSTM there is cuDNN's)
  time-to-quality (not in the default run; hours): ours vs pytorch/examples' LSTM, validation / test perplexity
     against training CPU minutes: `--only time-to-quality --minutes 80` (see benchmarks/time_to_quality.py)

Contenders run round-robin and every ratio is a per-round ratio (the machine is shared and noisy):
see :mod:`benchmarks._timing`.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import importlib  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

if __package__ in (None, ""):  # `python benchmarks/run.py`: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "benchmarks"

from benchmarks._settings import Settings  # noqa: E402
from benchmarks._timing import (  # noqa: E402
    machine_info,
    read_results,
    use_device,
    use_threads,
    use_wall_clock,
    write_results,
)

PARTS = {
    1: "benchmarks.bench_cells",
    2: "benchmarks.bench_recurrence",
    3: "benchmarks.bench_training",
    4: "benchmarks.bench_scoring",
    5: "benchmarks.bench_scan",
    6: "benchmarks.bench_generation",
    7: "benchmarks.bench_compile",
    8: "benchmarks.bench_score_document",
}
#: the parts that run on ``--device`` (the others measure CPU paths: oneDNN, the CPU allocator, the scorer)
DEVICE_PARTS = (1,)
#: names ``--only`` takes besides the numbers
NAMES = {"score-document": 8}
#: benchmarks with a command line and report of their own (hours of training, not a part of the suite):
#: ``python -m benchmarks --only time-to-quality --minutes 80`` runs ``python -m benchmarks.time_to_quality``
STANDALONE = {"time-to-quality": "benchmarks.time_to_quality"}
HERE = Path(__file__).resolve().parent


def _parts(text: str) -> list[int]:
    items = [p for p in text.replace(" ", "").split(",") if p]
    parts = sorted({NAMES[p] if p in NAMES else int(p) if p.isdigit() else -1 for p in items})
    if not parts or any(p not in PARTS for p in parts):
        raise argparse.ArgumentTypeError(
            f"--only takes part numbers or names like 1 or 2,4 or score-document (parts: {', '.join(map(str, PARTS))}; "
            f"names: {', '.join(NAMES)}; on its own: {', '.join(STANDALONE)}); got {text!r}")
    return parts


def _standalone(argv: list[str]) -> str | None:
    """The module of a standalone benchmark named by ``--only NAME`` (or ``--only=NAME``), else None."""
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--only=") else argv[i + 1] if arg == "--only" and i + 1 < len(argv) else None
        if value in STANDALONE:
            return STANDALONE[value]
    return None


def _cells(text: str) -> tuple[str, ...]:
    """``--compile``: registered cell names, comma-separated; ``none`` for none."""
    from dsf_lightning.cells import list_cells

    names = tuple(c for c in text.replace(" ", "").split(",") if c and c != "none")
    unknown = [c for c in names if c not in list_cells()]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown cell(s) {', '.join(unknown)}; cells: {', '.join(list_cells())}")
    return names


def _check_device(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--device``: a device torch knows and this machine has; on a GPU, only the parts that take one
    (the default there), and results beside, not over, the CPU ones."""
    import torch

    try:
        device = torch.device(args.device)
    except RuntimeError:
        parser.error(f"--device takes cpu or cuda[:N], got {args.device!r}")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device takes cpu or cuda[:N], got {args.device!r}")
    if device.type == "cpu":
        return
    if not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device here (torch {torch.__version__}); "
                     "run on a GPU machine or leave --device out")
    others = [p for p in args.only or () if p not in DEVICE_PARTS]
    if others:
        parser.error(f"--device {args.device}: parts {', '.join(map(str, others))} measure CPU paths; "
                     f"the parts that take a device are {', '.join(map(str, DEVICE_PARTS))}")
    args.only = args.only or list(DEVICE_PARTS)
    if args.out == HERE:
        args.out = HERE / "cuda"
    args.out.mkdir(parents=True, exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    standalone = _standalone(given)
    if standalone:  # its own options (e.g. --minutes) follow
        i = next(i for i, a in enumerate(given) if a.startswith("--only"))
        rest = given[:i] + given[i + (1 if "=" in given[i] else 2):]
        return importlib.import_module(standalone).main(rest)
    doc = __doc__.split("\n\n")
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=doc[0],
                                     epilog="\n\n".join(doc[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a short smoke run (under a minute)")
    size.add_argument("--tiny", action="store_true", help="the test suite's run: smallest sizes, meaningless numbers")
    parser.add_argument("--only", type=_parts, default=None, metavar="N[,N...]",
                        help=f"run only these parts, by number or name ({', '.join(NAMES)})")
    parser.add_argument("--out", type=Path, default=HERE, help="where RESULTS.md / results.csv / results.json go "
                        "(default: benchmarks/)")
    parser.add_argument("--wall", action="store_true", help="time with the wall clock instead of process CPU time")
    parser.add_argument("--data-root", default=None, help="corpora root (default: $DSF_DATA_ROOT, else ../shared/data beside the repository)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]: runs the parts that take a "
                        f"device ({', '.join(map(str, DEVICE_PARTS))}) there, results into benchmarks/cuda/ "
                        "unless --out says otherwise")
    parser.add_argument("--compile", type=_cells, default=None, metavar="CELL[,CELL...]",
                        help="part 1 also times these cells through torch.compile (default: delta-rnn on CUDA, "
                        "none on the CPU; 'none' for none)")
    parser.add_argument("--compile-mode", default="default", choices=("default", "reduce-overhead", "max-autotune"),
                        help="torch.compile's mode for --compile (reduce-overhead: CUDA graphs on a GPU)")
    args = parser.parse_args(argv)
    _check_device(parser, args)

    threads = int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    use_threads(threads)
    use_wall_clock(args.wall)
    use_device(args.device)
    # the allocator policy dsf training runs under (`dsf fit` applies it), for every part
    # of this process alike; part 3 measures what it is worth in fresh processes
    from dsf_lightning.training.allocator import MALLOC_TUNING_ENV, keep_freed_memory

    tuned = keep_freed_memory()
    mode = "quick" if args.quick else "tiny" if args.tiny else "full"
    overrides = {"data_root": args.data_root} if args.data_root else {}
    if args.device != "cpu":  # the sizes; the recurrence's launches are what a GPU step pays for
        if mode == "full":
            overrides["cell_hidden"] = (512, 1024)
        overrides["cell_compiled"] = ("delta-rnn",)
        overrides["cell_fast_path_off"] = True  # issue 37: the fast GPU path on and off side by side
    if args.compile is not None:
        overrides["cell_compiled"] = args.compile
    overrides["compile_mode"] = args.compile_mode
    settings = Settings.for_mode(mode, device=args.device, **overrides)
    command = f"OMP_NUM_THREADS={threads} python -m benchmarks {shlex.join(sys.argv[1:] if argv is None else argv)}".strip()
    from dsf_lightning._machine import machine_record

    record = machine_record(own_processes=1)  # the parts run one at a time (a fresh process waited for)
    machine = machine_info()
    machine["load average at start"] = ", ".join(f"{x:.2f}" for x in record["load_start"] or []) or "n/a"  # one reading
    machine["allocator"] = ("glibc, large blocks kept for reuse (as dsf training sets it)" if tuned else
                            f"glibc default ({MALLOC_TUNING_ENV}=0 or not glibc)")
    print(f"{command}\n" + "\n".join(f"  {k}: {v}" for k, v in machine.items()), flush=True)

    results, t0 = [], time.perf_counter()
    # --only: the other parts of an earlier run in --out are kept, and the rerun ones say when they ran
    previous = read_results(args.out) if args.only else None
    kept = [p for p in previous[1] if p.number not in args.only] if previous else []
    for number in args.only or list(PARTS):
        module = importlib.import_module(PARTS[number])
        print(f"\n== part {number} ({PARTS[number]})", flush=True)
        t = time.perf_counter()
        part = module.run(settings)
        part.seconds = time.perf_counter() - t
        results.append(part)
        print(f"{part.title}\n\n{part.markdown}", flush=True)
        if previous:
            part.markdown = (f"_Rerun on its own: `{command}`, {machine['date']}, on {record['cpu']}, load average at "
                             f"start {machine['load average at start']} (the machine record above is this rerun's)._"
                             f"\n\n{part.markdown}")
        for target in part.targets:
            verdict = {True: "MET", False: "NOT MET", None: "n/a"}[target.met]
            print(f"  target [{verdict}] {target.what}: {target.measured} (goal {target.goal})", flush=True)
        print(f"  ({part.seconds:.0f} s)", flush=True)
        # written after every part: an interrupted run keeps what it measured
        if previous:
            data = previous[0]
            paths = write_results(args.out, sorted(kept + results, key=lambda p: p.number), command=data["command"],
                                  machine=data["machine"], total_seconds=data.get("total_seconds", 0.0), record=record)
        else:
            paths = write_results(args.out, results, command=command, machine=machine,
                                  total_seconds=time.perf_counter() - t0, record=record)
    print(f"\nwrote {', '.join(str(p) for p in paths.values())} in {(time.perf_counter() - t0) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
