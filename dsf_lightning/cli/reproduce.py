"""``dsf reproduce TABLE`` and ``dsf list recipes | tables`` (registered by :func:`dsf_lightning.cli.build_parser`)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from .tables import default_recipes_dir


def add_list_recipes_parsers(what) -> None:
    recipes = what.add_parser("recipes", help="the training recipes (recipes/**.yaml) and the result each aims at")
    recipes.add_argument("--recipes-dir", default=None, help="recipes folder (default: $DSF_RECIPES_DIR or the checkout's)")
    recipes.add_argument("--details", action="store_true", help="add each recipe's published number")
    recipes.set_defaults(handler=list_recipes_command)
    tables = what.add_parser("tables", help="the papers' tables `dsf reproduce` knows")
    tables.add_argument("--rows", action="store_true", help="list every row too")
    tables.set_defaults(handler=list_tables_command)


def list_recipes_command(args: argparse.Namespace) -> int:
    from .tables import list_recipes, recipe_published, recipe_title

    root = Path(args.recipes_dir) if args.recipes_dir else default_recipes_dir()
    paths = list_recipes(root)
    if not paths:
        print(f"no recipes under {root}")
        return 1
    width = max(len(str(p)) for p in paths)
    for rel in paths:
        extra = recipe_published(root / rel) if args.details else recipe_title(root / rel)
        print(f"{str(rel).ljust(width)}  {extra}")
    return 0


def list_tables_command(args: argparse.Namespace) -> int:
    from .tables import list_tables

    tables = list_tables()
    width = max(len(t.id) for t in tables)
    for table in tables:
        print(f"{table.id.ljust(width)}  {len(table.rows):>2} rows  {table.title}")
        if args.rows:
            for row in table.rows:
                what = row.recipe or (f"{row.evaluation} of {row.parent}" if row.evaluation else f"pending: {row.pending}")
                print(f"{'':{width}}    {row.key}: {row.published} {row.metric}  ({what})")
    return 0


def add_reproduce_parser(commands) -> None:
    parser = commands.add_parser(
        "reproduce",
        help="run a paper's table: every row's recipe, fit then test, against the published numbers",
        description=(
            "Run the rows of TABLE (`dsf list tables`) through `dsf fit` + test and write OUT/TABLE.md and "
            ".csv (published, measured, difference, cost). Re-running skips finished rows and retries failed "
            "ones. Options after TABLE that start with --trainer., --model. or --data. go to every row's "
            "LightningCLI (e.g. --trainer.devices 4 --trainer.strategy ddp)."
        ),
        allow_abbrev=False,
    )
    parser.add_argument("table", help="table id, e.g. dsf-table1-word (see `dsf list tables`)")
    parser.add_argument("--scale", choices=("tiny", "small", "paper"), default="paper",
                        help="tiny: CPU smoke run; small: sizes capped at 256, <= 5 epochs; paper: as published")
    parser.add_argument("--data-root", default=None, help="folder holding the corpora (else $DSF_DATA_ROOT)")
    parser.add_argument("--out", default="reproduce", help="output folder (default: ./reproduce)")
    parser.add_argument("--rows", default=None, help="comma-separated row keys to run (default: all)")
    parser.add_argument("--recipes-dir", default=None, help="recipes folder (default: $DSF_RECIPES_DIR or the checkout's)")
    isolation = parser.add_mutually_exclusive_group()
    isolation.add_argument("--isolate", dest="isolate", action="store_true", default=None,
                           help="run every row in a child process (automatic with --trainer.devices/num_nodes/strategy)")
    isolation.add_argument("--in-process", dest="isolate", action="store_false", help="run every row in this process")
    parser.add_argument("--jobs", type=int, default=1,
                        help="train this many rows at once, each in its own process (default 1; e.g. 2 on a 2-core CPU)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads per row's process (default: 1 with --jobs > 1, else torch's default)")
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: rewrite OUT/TABLE.md, .csv and the curves from the state and the rows' "
                             "progress (a live view of a run in another terminal)")
    parser.set_defaults(handler=reproduce_command, passes_overrides=True, overrides=[])


def reproduce_command(args: argparse.Namespace) -> int:
    from .runner import run_table

    bad = [a for a in args.overrides if a.startswith("-") and not a.startswith(("--trainer.", "--model.", "--data.", "--seed_everything"))]
    if bad:
        raise SystemExit(f"dsf reproduce: unrecognized arguments: {' '.join(bad)} "
                         "(only --trainer.*, --model.*, --data.* and --seed_everything go to the rows)")
    rows = [r.strip() for r in args.rows.split(",") if r.strip()] if args.rows else None
    if args.report_only:
        from .runner import report_table

        try:
            md, csv_path = report_table(args.table, out=args.out, scale=args.scale)
        except FileNotFoundError as err:
            raise SystemExit(f"dsf reproduce: {err}") from None
        print(f"wrote {md} and {csv_path}")
        return 0
    if args.jobs < 1 or (args.threads is not None and args.threads < 1):
        raise SystemExit(f"dsf reproduce: --jobs and --threads must be 1 or more, got {args.jobs} and {args.threads}")
    command = shlex.join(["dsf", "reproduce", args.table, "--scale", args.scale, *(["--rows", args.rows] if args.rows else []),
                          *(["--jobs", str(args.jobs)] if args.jobs != 1 else []),
                          *(["--threads", str(args.threads)] if args.threads else [])])
    command += ' --data-root "$DSF_DATA_ROOT"' if args.data_root else ""  # the machine's path is not the point
    command += " " + shlex.join(["--out", args.out, *args.overrides])
    summary = run_table(args.table, scale=args.scale, data_root=args.data_root, out=args.out, rows=rows,
                        overrides=args.overrides, recipes_dir=args.recipes_dir, isolate=args.isolate,
                        jobs=args.jobs, threads=args.threads, command=command)
    counts = ", ".join(f"{len(summary[k])} {k.replace('_', ' ')}" for k in ("ran", "skipped_done", "skipped", "failed", "pending"))
    print(f"{args.table}: {counts}\nwrote {summary['markdown']} and {summary['csv']}")
    return 1 if summary["failed"] else 0
