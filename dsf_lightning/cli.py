"""The ``dsf`` command line.

``dsf fit | validate | test | predict`` is a LightningCLI over
:class:`~dsf_lightning.training.LanguageModelModule` and
:class:`~dsf_lightning.data.datamodule.LanguageModelDataModule` (``--config recipes/...yaml``, with
``data.vocab_size`` linked into the model). ``dsf list cells`` prints the registered cell names, one
per line; ``--details`` adds each cell's parameter count at a chosen size and what it is.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from typing import Sequence

from . import cells


def _summary(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    first = doc.split("\n\n")[0].replace("\n", " ").strip()
    return first.rstrip(":").rstrip(".")


def list_cells_command(args: argparse.Namespace) -> int:
    names = cells.list_cells()
    if not args.details:
        print("\n".join(names))
        return 0
    rows = []
    for name in names:
        cls = cells.get_cell(name)
        try:
            cell = cls(args.input_size, args.hidden_size)
        except cells.CellOptionError as err:  # e.g. ran-simple needs input_size == hidden_size
            rows.append((name, "-", "-", f"{_summary(cls)} [not at this size: {err}]"))
            continue
        n_params = sum(p.numel() for p in cell.parameters())
        rows.append((name, f"{n_params:,}", str(cell.output_size), _summary(cls)))
    header = ("cell", f"params (I={args.input_size}, H={args.hidden_size})", "output", "what it is")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    for row in [header, *rows]:
        print("  ".join(col.ljust(w) for col, w in zip(row[:3], widths)) + "  " + row[3])
    return 0


def list_corpora_command(args: argparse.Namespace) -> int:
    from .data.corpora import list_corpora

    print("\n".join(list_corpora()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsf",
        description="dsf-lightning: train, score and list Differential State Framework language models. "
        f"Training subcommands (LightningCLI): {', '.join(LIGHTNING_COMMANDS)}; see `dsf fit --help`.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listing = commands.add_parser("list", help="list what the library knows (cells, corpora, models)")
    what = listing.add_subparsers(dest="what", required=True, metavar="WHAT")
    cell_list = what.add_parser("cells", help="the registered recurrent cells")
    cell_list.add_argument("--details", action="store_true", help="add parameter counts and a summary")
    cell_list.add_argument("--input-size", type=int, default=128, help="input size for --details")
    cell_list.add_argument("--hidden-size", type=int, default=128, help="hidden size for --details")
    cell_list.set_defaults(handler=list_cells_command)
    what.add_parser("corpora", help="the corpora load_corpus knows").set_defaults(handler=list_corpora_command)
    from .hub.commands import add_export_parser, add_list_models_parser, add_push_parser
    from .score_command import add_score_parser

    add_list_models_parser(what)
    add_score_parser(commands)
    add_export_parser(commands)
    add_push_parser(commands)
    return parser


LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")


def lightning_cli(argv: Sequence[str], run: bool = True):
    """Run a LightningCLI subcommand (``fit``, ``validate``, ``test``, ``predict``); with
    ``run=False`` ``argv`` holds no subcommand and the CLI only parses and instantiates (recipe tests)."""
    from lightning.pytorch.cli import LightningCLI

    from .data.datamodule import LanguageModelDataModule
    from .training import LanguageModelModule

    class DSFCLI(LightningCLI):
        def add_arguments_to_parser(self, parser) -> None:
            # the vocabulary is known only once the corpus is read: a YAML value here is ignored
            parser.link_arguments("data.vocab_size", "model.vocab_size", apply_on="instantiate")

    return DSFCLI(
        LanguageModelModule,
        LanguageModelDataModule,
        args=list(argv),
        run=run,
        seed_everything_default=0,
        trainer_defaults={"use_distributed_sampler": False},
        save_config_kwargs={"overwrite": True},
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in LIGHTNING_COMMANDS:
        lightning_cli(argv)
        return 0
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
