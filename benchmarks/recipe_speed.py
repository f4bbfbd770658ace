"""Training tokens per CPU second of ``dsf fit`` on a recipe, for one or more checkouts of this project,
run alternately in fresh processes (one thread each) so that the same machine at the same time times them.

    OMP_NUM_THREADS=1 python -m benchmarks.recipe_speed recipes/ptb/delta_rnn_medium.yaml \\
        --checkout before=/path/to/old/worktree --checkout after=. --rounds 3
    OMP_NUM_THREADS=1 python -m benchmarks.recipe_speed recipes/ptb/delta_rnn_budget.yaml \\
        --checkout fp32=. --variant bf16="--trainer.precision bf16-mixed"

Each run trains ``--steps`` windows (validation, checkpoints, loggers and callbacks off) and times the steps
after ``--skip`` warm-up steps by process CPU time from one ``training_step`` call to the next, so a
step's forward, backward, optimizer update and Lightning's own work all count. Prints a table of the
median tokens / CPU s per checkout over the rounds, each round's ratio to the first checkout, and the machine
(:func:`dsf_lightning._machine.machine_markdown`: CPU, ISA, cores, torch, oneDNN, load at start and end).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

#: run inside the checkout: time every ``training_step`` call of the recipe's LanguageModelModule
_PROBE = r"""
import json, sys, time
from dsf_lightning.training import language_model as lm
stamps, tokens = [], []
original = lm.LanguageModelModule.training_step
def timed(self, batch, batch_idx):
    stamps.append(time.process_time()); tokens.append(batch[0].numel())
    return original(self, batch, batch_idx)
lm.LanguageModelModule.training_step = timed
from dsf_lightning.cli import main
recipe, steps, skip, root, extra = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], json.loads(sys.argv[5])
code = main(["fit", "--config", recipe, "--trainer.max_steps", str(steps + 1), "--trainer.limit_val_batches", "0",
             "--trainer.logger", "false", "--trainer.enable_checkpointing", "false", "--trainer.callbacks", "[]",
             "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
             "--trainer.default_root_dir", root, *extra])
print(json.dumps({"code": code, "tokens_per_s": sum(tokens[skip:steps]) / (stamps[steps] - stamps[skip])}))
"""


def measure(checkout: Path, recipe: Path, steps: int, skip: int, extra: list[str]) -> float:
    """Tokens per CPU second of one fresh ``dsf fit`` run of ``recipe`` with ``checkout``'s code."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as root:
        done = subprocess.run([sys.executable, "-c", _PROBE, str(recipe), str(steps), str(skip), root, json.dumps(extra)],
                              cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"dsf fit with {checkout} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return float(result["tokens_per_s"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recipe_speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe", type=Path)
    parser.add_argument("--checkout", action="append", required=True, metavar="NAME=PATH",
                        help="a checkout of dsf-lightning to time (repeat; the first is the reference)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=70, help="training windows per run (default 70)")
    parser.add_argument("--skip", type=int, default=10, help="warm-up windows not timed (default 10)")
    parser.add_argument("--overrides", default="", help="dsf fit arguments to add, one string")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                        help="also time the first checkout with these dsf fit arguments added (repeat)")
    args = parser.parse_args(argv)
    checkouts, extras = {}, {}
    for item in args.checkout:
        name, sep, path = item.partition("=")
        if not sep or not (Path(path) / "dsf_lightning").is_dir():
            parser.error(f"--checkout takes NAME=PATH with PATH a checkout of dsf-lightning, got {item!r}")
        checkouts[name], extras[name] = Path(path).resolve(), []
    for item in args.variant:
        name, sep, more = item.partition("=")
        if not sep or not name or name in checkouts:
            parser.error(f"--variant takes NAME=ARGS with a new NAME, got {item!r}")
        checkouts[name], extras[name] = checkouts[next(iter(checkouts))], shlex.split(more)
    if not 0 <= args.skip < args.steps:
        parser.error(f"--skip must be below --steps, got {args.skip} and {args.steps}")
    recipe = args.recipe.resolve()
    from dsf_lightning._machine import finish_record, machine_markdown, machine_record

    record = machine_record(own_processes=1)  # one timed run at a time
    rates: dict[str, list[float]] = {name: [] for name in checkouts}
    for r in range(args.rounds):
        order = list(checkouts)[r % len(checkouts):] + list(checkouts)[: r % len(checkouts)]
        for name in order:
            rates[name].append(measure(checkouts[name], recipe, args.steps, args.skip,
                                       shlex.split(args.overrides) + extras[name]))
            print(f"round {r + 1}: {name} {rates[name][-1]:,.0f} tokens/CPU s", flush=True)
    first = next(iter(checkouts))
    print(f"\n{recipe.name}, {args.steps - args.skip} timed windows per run, {args.rounds} rounds, one thread\n")
    print("| checkout | tokens / CPU s (median) | per-round ratio to " + first + " |\n| --- | ---: | --- |")
    for name in checkouts:
        ratios = [a / b for a, b in zip(rates[name], rates[first])]
        added = f", {shlex.join(extras[name])}" if extras[name] else ""
        print(f"| {name} ({checkouts[name]}{added}) | {statistics.median(rates[name]):,.0f} | "
              f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")
    print("\nThe machine:\n\n" + "\n".join(machine_markdown(finish_record(record))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
