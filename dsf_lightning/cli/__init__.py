"""The ``dsf`` command line: ONE command table (:data:`COMMANDS`) and ONE error policy (:mod:`.errors`).

Every command lives in one module of this package, named in the table with its one-line help:

* ``fit | validate | test | predict``: a LightningCLI (:mod:`.lightning`; ``dsf fit --help``);
* ``list cells | corpora | tasks | models | recipes | tables`` (:mod:`.lists`);
* ``reproduce`` (:mod:`.reproduce`, its child-process row entry :mod:`.row`);
* ``score``, ``classify``, ``generate`` (:mod:`.score`, :mod:`.classify`, :mod:`.generate`);
* ``export``, ``push`` (:mod:`.hub`); ``analyze TOOL`` (:mod:`.analyze`).

Exit codes, the same for every command (:mod:`.errors`): 0 ok, 1 the work failed (a diverged run, failed
``dsf reproduce`` rows), 2 a usage error or the user's input / environment (one line on stderr:
``dsf COMMAND: error: ...``), 130 interrupted. ``python -m dsf_lightning.cli ...`` is ``dsf ...``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import import_module
from typing import NamedTuple

from .._quiet import quiet_third_party
from .lightning import LIGHTNING_COMMANDS, is_task_recipe, lightning_cli  # noqa: F401 - the public names


class Command(NamedTuple):
    """One ``dsf`` command: the module of this package that holds it, the function that adds its parser
    (``adder(subparsers, help=...)``; None for the LightningCLI commands, parsed by LightningCLI) and its help."""

    module: str
    adder: str | None
    help: str


#: every ``dsf`` command, in the order ``dsf --help`` lists them
COMMANDS: dict[str, Command] = {
    "fit": Command("lightning", None, "train a model from a recipe (LightningCLI; see `dsf fit --help`)"),
    "validate": Command("lightning", None, "validate a model (LightningCLI)"),
    "test": Command("lightning", None, "test a model, e.g. a checkpoint with --ckpt_path (LightningCLI)"),
    "predict": Command("lightning", None, "per-token log-probabilities as JSON lines (LightningCLI)"),
    "list": Command("lists", "add_list_parser", "list what the library knows (cells, corpora, tasks, models, recipes, tables)"),
    "reproduce": Command("reproduce", "add_reproduce_parser",
                         "run a paper's table: every row's recipe, fit then test, against the published numbers"),
    "score": Command("score", "add_score_parser", "score text with a pretrained model (log-probabilities, perplexity, bpc)"),
    "classify": Command("classify", "add_classify_parser",
                        "classify texts with a pretrained text classifier (label and probabilities)"),
    "generate": Command("generate", "add_generate_parser", "generate text with a pretrained model (streamed token by token)"),
    "export": Command("hub", "add_export_parser", "turn a training checkpoint into a pretrained model folder"),
    "push": Command("hub", "add_push_parser", "upload a pretrained model folder to the Hugging Face Hub"),
    "analyze": Command("analyze", "add_analyze_parser", "analysis plots: state deltas, RAN influence, IRLM timescales, "
                       "sr-RNN centroids, trajectories, sentence completion"),
}
assert set(LIGHTNING_COMMANDS) == {name for name, c in COMMANDS.items() if c.adder is None}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argparse parser of every command of :data:`COMMANDS` (the LightningCLI ones only listed).

    ``only``: the command whose module is imported for its full parser; the others are listed by name and help
    alone, so ``dsf --help`` (``only`` unknown) imports none of them, torch included."""
    parser = argparse.ArgumentParser(
        prog="dsf",
        description="dsf-lightning: train, score and list Differential State Framework language models. "
        "Exit codes: 0 ok, 1 the work failed, 2 a usage error or bad input (one line on stderr), 130 interrupted.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        if command.adder is None or (only is not None and name != only):
            # listed for `dsf --help`; main() hands a LightningCLI command line to LightningCLI
            commands.add_parser(name, help=command.help, add_help=False)
            continue
        adder = getattr(import_module(f".{command.module}", __name__), command.adder)
        adder(commands, help=command.help)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``dsf ARGS``: the exit code of the command (see :mod:`.errors`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    quiet_third_party()
    if argv and argv[0] in LIGHTNING_COMMANDS:
        from .lightning import run

        return run(argv)
    first = next((arg for arg in argv if not arg.startswith("-")), "")
    parser = build_parser(only=first if first in COMMANDS else "")
    args, extra = parser.parse_known_args(argv)
    if extra:  # only `dsf reproduce` passes unknown options on (to the LightningCLI of every row)
        if not getattr(args, "passes_overrides", False):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*getattr(args, "overrides", []), *extra]
    return args.handler(args)
