"""``dsf list cells | corpora | tasks | models | recipes | tables``: what the library knows, one row each.

``dsf list cells`` prints the registered cell names, one per line; ``--details`` adds each cell's parameter
count at a chosen size and what it is. ``dsf list models`` lives with the hub commands (:mod:`.hub`).
"""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path

from .. import cells
from .errors import UsageError, guard


def add_list_parser(commands, help: str | None = None) -> argparse.ArgumentParser:
    """``dsf list WHAT``: one subcommand per kind of thing listed."""
    from .hub import add_list_models_parser

    listing = commands.add_parser("list", help=help, description="List what the library knows.")
    what = listing.add_subparsers(dest="what", required=True, metavar="WHAT")
    cell_list = what.add_parser("cells", help="the registered recurrent cells")
    cell_list.add_argument("--details", action="store_true", help="add parameter counts and a summary")
    cell_list.add_argument("--input-size", type=int, default=128, help="input size for --details")
    cell_list.add_argument("--hidden-size", type=int, default=128, help="hidden size for --details")
    cell_list.set_defaults(handler=list_cells_command)
    what.add_parser("corpora", help="the corpora load_corpus knows").set_defaults(handler=list_corpora_command)
    task_list = what.add_parser("tasks", help="the sr-RNN paper's sequence tasks: DataModule, classes, sizes, recipes")
    task_list.add_argument("--recipes-dir", default=None, help="recipes folder (default: $DSF_RECIPES_DIR or the checkout's)")
    task_list.set_defaults(handler=list_tasks_command)
    add_list_models_parser(what)
    recipes = what.add_parser("recipes", help="the training recipes (recipes/**.yaml) and the result each aims at")
    recipes.add_argument("--recipes-dir", default=None, help="recipes folder (default: $DSF_RECIPES_DIR or the checkout's)")
    recipes.add_argument("--details", action="store_true", help="add each recipe's published number")
    recipes.set_defaults(handler=list_recipes_command)
    tables = what.add_parser("tables", help="the papers' tables `dsf reproduce` knows")
    tables.add_argument("--rows", action="store_true", help="list every row too")
    tables.set_defaults(handler=list_tables_command)
    return listing


def _summary(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    first = doc.split("\n\n")[0].replace("\n", " ").strip()
    return first.rstrip(":").rstrip(".")


@guard("list cells")
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


@guard("list corpora")
def list_corpora_command(args: argparse.Namespace) -> int:
    from ..data.corpora import list_corpora

    print("\n".join(list_corpora()))
    return 0


@guard("list tasks")
def list_tasks_command(args: argparse.Namespace) -> int:
    """One row per task DataModule (name, class, classes, default sizes, what it is), its recipes below it."""
    from ..tasks.catalog import list_tasks, task_recipes

    tasks = list_tasks()
    recipes = task_recipes(args.recipes_dir)
    header = ("task", "DataModule (dsf_lightning.tasks)", "classes", "default sizes (train / valid / test)", "what it is")
    rows = [(t.name, t.datamodule.__name__, t.classes, t.sizes, t.what) for t in tasks]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    print("  ".join(col.ljust(w) for col, w in zip(header[:4], widths)) + "  " + header[4])
    for task, row in zip(tasks, rows):
        print("  ".join(col.ljust(w) for col, w in zip(row[:4], widths)) + "  " + row[4])
        names = recipes.get(task.datamodule) or []
        print(" " * (widths[0] + 2) + "recipes: " + (", ".join(names) if names else "none (build the DataModule in a recipe)"))
    return 0


@guard("list recipes")
def list_recipes_command(args: argparse.Namespace) -> int:
    from ..reproduce.tables import default_recipes_dir, list_recipes, recipe_published, recipe_title

    root = Path(args.recipes_dir) if args.recipes_dir else default_recipes_dir()
    paths = list_recipes(root)
    if not paths:
        raise UsageError(f"no recipes under {root}: give --recipes-dir FOLDER (or set $DSF_RECIPES_DIR)")
    width = max(len(str(p)) for p in paths)
    for rel in paths:
        extra = recipe_published(root / rel) if args.details else recipe_title(root / rel)
        print(f"{str(rel).ljust(width)}  {extra}")
    return 0


@guard("list tables")
def list_tables_command(args: argparse.Namespace) -> int:
    from ..reproduce.tables import list_tables

    tables = list_tables()
    width = max(len(t.id) for t in tables)
    for table in tables:
        print(f"{table.id.ljust(width)}  {len(table.rows):>2} rows  {table.title}")
        if args.rows:
            for row in table.rows:
                what = row.recipe or (f"{row.evaluation} of {row.parent}" if row.evaluation else f"pending: {row.pending}")
                print(f"{'':{width}}    {row.key}: {row.published} {row.metric}  ({what})")
    return 0
