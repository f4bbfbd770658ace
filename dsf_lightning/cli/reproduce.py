"""``dsf reproduce TABLE``: a paper's table, row by row, through ``dsf fit`` + test.

The runner (:mod:`dsf_lightning.reproduce.runner`) trains every row through
:func:`dsf_lightning.recipe_cli.lightning_cli`, the function ``dsf fit`` runs, in this process or in a child
(``python -m dsf_lightning.reproduce.row``); this command parses the options and reports."""

from __future__ import annotations

import argparse
import shlex

from .errors import EXIT_FAILURE, UsageError, guard


def add_reproduce_parser(commands, help: str | None = None) -> None:
    parser = commands.add_parser(
        "reproduce",
        help=help,
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
    parser.add_argument("--list-rows", action="store_true",
                        help="print the ids of the rows a run covers (all, or those of --rows), one a line, and exit")
    parser.add_argument("--row-index", default=None, metavar="N",
                        help="run only row N (0-based) of --list-rows: one row per job of a job array, e.g. "
                             "--row-index $SLURM_ARRAY_TASK_ID with #SBATCH --array=0-<rows - 1>")
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


@guard("reproduce")
def reproduce_command(args: argparse.Namespace) -> int:
    from ..reproduce.runner import run_table

    bad = [a for a in args.overrides if a.startswith("-") and not a.startswith(("--trainer.", "--model.", "--data.", "--seed_everything"))]
    if bad:
        raise UsageError(f"unrecognized arguments: {' '.join(bad)} "
                         "(only --trainer.*, --model.*, --data.* and --seed_everything go to the rows)")
    rows = [r.strip() for r in args.rows.split(",") if r.strip()] if args.rows else None
    if args.row_index is not None:
        rows = [_row_at(args.table, rows, args.row_index)]
        args.rows = rows[0]  # the command recorded in the outputs runs this one row
    if args.list_rows:
        from ..reproduce.tables import row_keys

        print("\n".join(row_keys(args.table, rows)))
        return 0
    if args.report_only:
        from ..reproduce.runner import report_table

        md, csv_path = report_table(args.table, out=args.out, scale=args.scale)  # no state yet: exit 2, one line
        print(f"wrote {md} and {csv_path}")
        return 0
    if args.jobs < 1 or (args.threads is not None and args.threads < 1):
        raise UsageError(f"--jobs and --threads must be 1 or more, got {args.jobs} and {args.threads}")
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
    return EXIT_FAILURE if summary["failed"] else 0  # failed rows are recorded; a re-run retries them


def _row_at(table: str, rows: list[str] | None, index: str) -> str:
    """Row ``index`` (0-based, as ``$SLURM_ARRAY_TASK_ID`` counts from ``--array=0-...``) of the run's rows."""
    from ..reproduce.tables import row_keys

    keys = row_keys(table, rows)
    last = len(keys) - 1
    if not index.strip():  # an unset variable, e.g. `--row-index "$SLURM_ARRAY_TASK_ID"` outside an array job
        raise UsageError(f"--row-index is empty (is $SLURM_ARRAY_TASK_ID set?): give 0 to {last} (0-based; see --list-rows)")
    try:
        number = int(index)
    except ValueError:
        number = None
    if number is None or not 0 <= number <= last:
        raise UsageError(f"--row-index {index} is not a row of this run: give 0 to {last} (0-based; {len(keys)} rows, "
                         f"see --list-rows; for a job array: #SBATCH --array=0-{last})")
    return keys[number]
