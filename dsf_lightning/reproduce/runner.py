"""Run a table (``dsf reproduce TABLE``): each row's recipe through the real CLI, fit then test.

For every row: check that the corpus files are there (else the row is *skipped* and the files are named),
build the LightningCLI arguments (the recipe, the row's overrides, the scale's overrides, then the user's
``--trainer.*`` / ``--model.*`` / ``--data.*`` overrides, which win), instantiate through
:func:`dsf_lightning.recipe_cli.lightning_cli` (what ``dsf fit`` runs), ``fit``, then ``test`` the best checkpoint
and read the row's metric. Each row runs in its own folder
``<out>/runs/<table>/<row>/`` (the recipe's relative ``runs/`` paths land there). Dynamic-evaluation rows
evaluate their parent row's best checkpoint.

Scales (``--scale``):

* ``tiny``: a CPU smoke run of the whole pipeline: every layer 16 units (embeddings 16, one-hot input
  kept, a parameter budget dropped, the options a cell declares in ``size_options``: SCRN context 4,
  sr-RNN k 4), batch 4 streams of 16 tokens, eval
  batch 2, 1 epoch of 6 training / 2 validation / 2 test batches, dynamic evaluation on 400 tokens.
  The numbers mean nothing; the table, the files and the costs are real.
* ``small``: a few CPU hours per table: every size capped at 256 (embedding 256, SCRN context 1/6 of
  the hidden size, k <= 100, budgets kept), at most 5 epochs and 30 minutes of training per row, the
  full validation and test splits.
* ``paper``: the recipes as written (paper scale: epochs, sizes, schedules).

Task recipes (the sr-RNN paper's sequence tasks: ``model:`` / ``data:`` by ``class_path``) run through the
same CLI (subclass mode) and are scaled through their ``init_args``: ``tiny`` makes every cell 16 units
(embedding 16, k 4), batches of 8 (evaluation 16), 1 epoch of 6 training / 2 validation / 2 test batches and
tiny data (:func:`task_data_overrides`: e.g. 64 / 32 / 64 Tomita strings, 32-string parentheses and palindrome test
sets, copying lag <= 10); ``small`` caps sizes at 256 and k at 100, at most 5 epochs (100 for the Tomita
grammars, whose data is tiny) and 30 minutes of training per row, and shrinks the two big generated data sets
(palindromes 23k / 5k strings, copying 10k / 1k / 1k sequences); the test sets keep their names, so every
row reads its own ``test_<metric>/<split>``. Rows of one table that train the same model (one per test set:
parentheses, palindromes, IMDB at two lengths) share one fit and test. IMDB and MNIST rows whose files are
missing under the data root are *skipped*, like language-model corpora.

Results are kept in ``<out>/<table>.state.json`` (written atomically after every row); ``<out>/<table>.md``
and ``.csv`` are rewritten from it. A finished row (same recipe, overrides and scale) is skipped on the
next run; a failed or interrupted row is retried, resuming from its ``last.ckpt`` when there is one.
Under several processes (``--trainer.devices 4 --trainer.strategy ddp``, torchrun, SLURM) global rank 0
alone reads the state, decides every row (resume or fresh, which checkpoint) and writes; the other ranks
follow its decision (:mod:`.ranks`). A row starting fresh in a folder of other settings moves it aside
(:func:`prepare_row_folder`); with Lightning's own launcher (``--trainer.devices N``) every row runs in a child process
(``python -m dsf_lightning.reproduce.row``, :mod:`.row`) that Lightning can re-launch per
device.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import os
import re
import shlex
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from .._fs import write_atomic
from ..cells import UnknownCellError, get_cell
from .ranks import global_rank, world_size
from .report import STATUS_FAILED, STATUS_QUEUED, STATUS_RUNNING, row_folder
from .state import TableState
from .state import report_table as state_report_table
from .tables import METRICS, Row, Table, default_recipes_dir, get_table, metric_key, row_keys
from .train import follow_rank_zero, measure_in_run, measure_later, train_rows

logger = logging.getLogger(__name__)

SCALES = ("tiny", "small", "paper")
#: the one scale table, for language-model and task recipes alike; only the batch shapes differ (``lm``, ``task``)
TINY = dict(hidden=16, embedding=16, context=4, k=4, train_batches=6, val_batches=2, test_batches=2, dynamic_tokens=400,
            lm=dict(batch=4, bptt=16, eval_batch=2), task=dict(batch=8, eval_batch=16))
SMALL = dict(max_hidden=256, max_embedding=256, max_k=100, max_epochs=5, max_time="00:00:30:00")
#: what ``tiny`` sets in every recipe's trainer section
TINY_TRAINER = {
    "trainer.max_epochs": 1, "trainer.max_time": None, "trainer.limit_train_batches": TINY["train_batches"],
    "trainer.limit_val_batches": TINY["val_batches"], "trainer.limit_test_batches": TINY["test_batches"],
    "trainer.num_sanity_val_steps": 0, "trainer.log_every_n_steps": 1,
}
DYNAMIC_LR = 0.005
#: task DataModules whose data is so small that ``small`` keeps many epochs (capped at this many)
TASK_SMALL_EPOCHS = {"TomitaDataModule": 100}
DISTRIBUTED_FLAGS = ("--trainer.devices", "--trainer.num_nodes", "--trainer.strategy")


# =============================================================================================== helpers
def load_recipe(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a recipe (a YAML mapping)")
    for section in ("trainer", "model", "data"):
        data.setdefault(section, {})
        if data[section] is None:
            data[section] = {}
    return data


def _set_dotted(config: dict, dotted: str, value: Any) -> None:
    node = config
    parts = dotted.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {} if node.get(part) is None else node[part]
            if not isinstance(node[part], dict):
                raise ValueError(f"override {dotted}: {part} is not a mapping")
        node = node[part]
    node[parts[-1]] = value


def _cap(value: int, cap: int) -> int:
    return min(int(value), cap)


def _scale_cell_options(cell: Any, options: dict, hidden: int, *, tiny: bool, reduced: bool) -> None:
    """Shrink, in place, the options the cell declares in ``size_options`` for a model of ``hidden`` units:
    a part of the hidden size stays that part of it (at least ``TINY["context"]``, never more than given);
    a size of its own (the sr-RNN's ``k``) becomes ``TINY["k"]`` or is capped at ``SMALL["max_k"]``."""
    try:
        declared = get_cell(cell).size_options if isinstance(cell, str) else {}
    except UnknownCellError:  # the CLI reports it when the row runs
        declared = {}
    for name, part in declared.items():
        if name not in options:
            continue
        if part is None:
            options[name] = TINY["k"] if tiny else _cap(options[name], SMALL["max_k"])
        elif tiny or reduced:
            options[name] = min(int(options[name]), max(TINY["context"], int(part * hidden)))


def scale_overrides(recipe: dict, scale: str) -> dict[str, Any]:
    """``{"model.hidden_sizes": [...], ...}``: how ``scale`` changes a recipe (empty for ``paper``)."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if is_task_recipe(recipe):
        return task_scale_overrides(recipe, scale)
    if scale == "paper":
        return {}
    model, data = recipe["model"], recipe["data"]
    sizes = model.get("hidden_sizes", [256])
    sizes = sizes if isinstance(sizes, list) else [sizes]
    emb = model.get("embedding_size")
    options = dict(model.get("cell_options") or {})
    out: dict[str, Any] = {}
    if scale == "tiny":
        out["model.hidden_sizes"] = [TINY["hidden"]] * len(sizes)
        if emb not in (None, 0):
            out["model.embedding_size"] = TINY["embedding"]
        if model.get("parameter_budget") is not None:
            out["model.parameter_budget"] = None
        _scale_cell_options(model.get("cell"), options, TINY["hidden"], tiny=True, reduced=True)
        if model.get("sampled_loss"):
            out["model.sampled_loss_samples"] = 8
        out.update({
            "data.batch_size": TINY["lm"]["batch"], "data.bptt": min(int(data.get("bptt", 35)), TINY["lm"]["bptt"]),
            "data.eval_batch_size": TINY["lm"]["eval_batch"], **TINY_TRAINER,
        })
    else:  # small
        capped = [_cap(h, SMALL["max_hidden"]) for h in sizes]
        if capped != sizes:
            out["model.hidden_sizes"] = capped
        if emb not in (None, 0) and emb > SMALL["max_embedding"]:
            out["model.embedding_size"] = SMALL["max_embedding"]
        _scale_cell_options(model.get("cell"), options, min(capped), tiny=False, reduced=capped != sizes)
        out["trainer.max_epochs"] = min(int(recipe["trainer"].get("max_epochs") or SMALL["max_epochs"]), SMALL["max_epochs"])
        out["trainer.max_time"] = SMALL["max_time"]
    if options != dict(model.get("cell_options") or {}):
        out["model.cell_options"] = options
    out["trainer.enable_progress_bar"] = False
    return out


def is_task_recipe(recipe: dict) -> bool:
    """Whether a loaded recipe names its model or data by ``class_path`` (an sr-RNN task recipe)."""
    from ..training.recipe_guard import names_a_class

    return any(names_a_class(recipe.get(group)) for group in ("model", "data"))


def _init_args(recipe: dict, group: str) -> dict:
    node = recipe.get(group)
    return dict(node.get("init_args") or {}) if isinstance(node, dict) else {}


def _class_name(recipe: dict, group: str) -> str:
    node = recipe.get(group)
    path = node.get("class_path", "") if isinstance(node, dict) else str(node or "")
    return path.rsplit(".", 1)[-1]


def task_data_overrides(data_class: str, args: dict, scale: str) -> dict[str, Any]:
    """``{init_arg: value}``: the data of task DataModule ``data_class`` (recipe ``init_args`` ``args``)
    at ``scale``. Test sets keep their names (the rows read ``test_<metric>/<name>``); only their size
    shrinks. Empty for ``paper`` and for DataModules this runner does not know."""
    from ..tasks import languages as lang

    out: dict[str, Any] = {}
    if scale == "tiny":
        out.update(batch_size=TINY["task"]["batch"], eval_batch_size=TINY["task"]["eval_batch"])
        if data_class == "TomitaDataModule":
            lengths = {"train": lang.TOMITA_TRAIN_LENGTHS, "valid": lang.TOMITA_VALID_LENGTHS, "test": lang.TOMITA_TEST_LENGTHS}
            out["splits"] = {name: [n, None, list(lengths[name])] for name, n in (("train", 64), ("valid", 32), ("test", 64))}
        elif data_class == "BalancedParenthesesDataModule":
            out["test_size"] = 32
        elif data_class == "PalindromeDataModule":
            train = args.get("train") or lang.PALINDROME_SPLITS["train"]
            valid = args.get("valid") or lang.PALINDROME_SPLITS["valid"]
            out.update(train=[256, 128, list(train[2])], valid=[64, 32, list(valid[2])], test_size=32)
        elif data_class == "CopyingMemoryDataModule":
            out.update(lag=min(int(args.get("lag", 100)), 10), train_size=256, test_size=64,
                       valid_size=64 if args.get("valid_size", 0) else 0)
        elif data_class == "IMDBSentimentDataModule":
            out.update(max_vocab=min(int(args.get("max_vocab", 20_000)), 2000),
                       train_max_length=min(int(args.get("train_max_length") or 50), 50),
                       valid_max_length=min(int(args.get("valid_max_length") or 50), 50))
        elif data_class == "PixelMNISTDataModule":
            out["valid_size"] = 100 if args.get("valid_size", 5000) else 0
    elif scale == "small":
        if data_class == "PalindromeDataModule":
            train = args.get("train") or lang.PALINDROME_SPLITS["train"]
            valid = args.get("valid") or lang.PALINDROME_SPLITS["valid"]
            out.update(train=[min(int(train[0]), 23_000), min(int(train[1]), 11_500), list(train[2])],
                       valid=[min(int(valid[0]), 5_000), min(int(valid[1]), 2_500), list(valid[2])])
        elif data_class == "CopyingMemoryDataModule":
            out.update(train_size=min(int(args.get("train_size", 100_000)), 10_000),
                       valid_size=min(int(args.get("valid_size", 0)), 1_000),
                       test_size=min(int(args.get("test_size", 10_000)), 1_000))
    return out


def task_scale_overrides(recipe: dict, scale: str) -> dict[str, Any]:
    """:func:`scale_overrides` of a task recipe: ``model.init_args.*``, ``data.init_args.*``, ``trainer.*``."""
    if scale == "paper":
        return {}
    model, data = _init_args(recipe, "model"), _init_args(recipe, "data")
    data_class = _class_name(recipe, "data")
    options = dict(model.get("cell_options") or {})
    out: dict[str, Any] = {}
    if scale == "tiny":
        out["model.init_args.hidden_size"] = TINY["hidden"]
        if model.get("embedding_size") is not None:
            out["model.init_args.embedding_size"] = TINY["embedding"]
        _scale_cell_options(model.get("cell"), options, TINY["hidden"], tiny=True, reduced=True)
        out.update(TINY_TRAINER)
    else:  # small
        hidden = int(model.get("hidden_size", 32))
        if hidden > SMALL["max_hidden"]:
            out["model.init_args.hidden_size"] = SMALL["max_hidden"]
        emb = model.get("embedding_size")
        if emb is not None and int(emb) > SMALL["max_embedding"]:
            out["model.init_args.embedding_size"] = SMALL["max_embedding"]
        _scale_cell_options(model.get("cell"), options, min(hidden, SMALL["max_hidden"]), tiny=False,
                            reduced=hidden > SMALL["max_hidden"])
        cap = TASK_SMALL_EPOCHS.get(data_class, SMALL["max_epochs"])
        out["trainer.max_epochs"] = min(int(recipe["trainer"].get("max_epochs") or cap), cap)
        out["trainer.max_time"] = SMALL["max_time"]
    if options != dict(model.get("cell_options") or {}):
        out["model.init_args.cell_options"] = options
    for key, value in task_data_overrides(data_class, data, scale).items():
        out[f"data.init_args.{key}"] = value
    out["trainer.enable_progress_bar"] = False
    return out


def _override_unit(dotted: str, task: bool) -> str:
    """The key an override is passed to the CLI as: ``section.key``, or ``section.init_args.key`` for the
    model / data of a task recipe; a deeper override is merged into the recipe's mapping at that key."""
    parts = dotted.split(".")
    depth = 3 if task and parts[0] in ("model", "data") and len(parts) >= 3 and parts[1] == "init_args" else 2
    return ".".join(parts[:depth])


def _get_dotted(config: dict, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def merged_overrides(recipe: dict, row: Row, scale: str) -> dict[str, Any]:
    """Scale overrides, then the row's, as top-level ``section.key`` values (a dotted key deeper than that,
    e.g. ``model.cell_options.alpha``, is merged into the recipe's mapping)."""
    task = is_task_recipe(recipe)
    config = {section: copy.deepcopy(recipe[section]) for section in ("trainer", "model", "data")}
    touched: list[str] = []
    for dotted, value in [*scale_overrides(recipe, scale).items(), *row.overrides.items()]:
        unit = _override_unit(dotted, task)
        if dotted != unit and not isinstance(_get_dotted(config, unit), dict):
            _set_dotted(config, unit, {})
        _set_dotted(config, dotted, value)
        if unit not in touched:
            touched.append(unit)
    return {name: _get_dotted(config, name) for name in touched}


def _reads_as_itself(text: str) -> bool:
    """Whether ``text`` is a plain word (``sentences``) that YAML (the CLI's parser) reads back as itself; other
    strings keep their JSON quotes, as they always had (a row's run key is a digest of its arguments)."""
    return bool(re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", text)) and yaml.safe_load(text) == text


def cli_arguments(recipe_path: Path, overrides: dict[str, Any], data_root: str | None, extra: Sequence[str],
                  data_root_key: str | None = "data.data_root", raw_strings: bool = False) -> list[str]:
    """``--config RECIPE --key=JSON ...``; ``data_root`` goes to ``data_root_key`` (None: the data takes no root).
    ``raw_strings``: pass string values as they are (a ``str``-typed ``init_args`` value would keep JSON's quotes).
    Without it a plain word goes as it is too (a ``Literal`` option such as ``data.batching`` refuses JSON's
    quotes: :func:`_reads_as_itself`)."""
    args = ["--config", str(recipe_path)]
    for key, value in overrides.items():
        text = value if isinstance(value, str) and (raw_strings or _reads_as_itself(value)) else json.dumps(value)
        args.append(f"--{key}={text}")
    if data_root is not None and data_root_key is not None:
        args.append(f"--{data_root_key}={data_root}")
    return args + list(extra)


def _task_data_class(recipe: dict) -> type | None:
    """The task DataModule class a recipe names, when it is one of this library's (else None)."""
    node = recipe.get("data")
    path = node.get("class_path", "") if isinstance(node, dict) else str(node or "")
    if "." in path and not path.startswith("dsf_lightning."):
        return None
    from .. import tasks

    cls = getattr(tasks, path.rsplit(".", 1)[-1], None)
    return cls if isinstance(cls, type) else None


def task_data_root_key(recipe: dict) -> str | None:
    """``data.init_args.data_root`` when the recipe's task DataModule reads files (IMDB, MNIST), else None."""
    import inspect

    cls = _task_data_class(recipe)
    if cls is None or "data_root" not in inspect.signature(cls.__init__).parameters:
        return None
    return "data.init_args.data_root"


def _digest(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def fingerprint(table: Table, row: Row, scale: str, recipe: Any, extra: Sequence[str], data_root: str | None) -> str:
    """What a row's result depends on. ``recipe`` is the parsed recipe, so that its comments and layout do not
    count (an edited header must not restart a finished or running row); states written before this hashed
    the recipe's text, which :func:`_fingerprints` still accepts."""
    return _digest({"table": table.id, "row": row.key, "recipe": recipe, "overrides": row.overrides,
                    "evaluation": row.evaluation, "parent": row.parent, "scale": scale, "extra": list(extra),
                    "data_root": data_root})


def run_fingerprint(recipe: Any, args: Sequence[str], scale: str) -> str:
    """The key of one fit + test: rows that train the very same model (one row per test set) share it."""
    return _digest({"recipe": recipe, "args": list(args), "scale": scale})


def _fingerprints(table: Table, row: Row, scale: str, recipe: Any, recipe_text: str, extra: Sequence[str],
                  data_root: str | None) -> tuple[str, set[str]]:
    """The row's fingerprint and every one a state may hold for the same row: this one and the one of the
    recipe's text (states written before comments stopped counting)."""
    fp = fingerprint(table, row, scale, recipe, extra, data_root)
    return fp, {fp, fingerprint(table, row, scale, recipe_text, extra, data_root)}


# =============================================================================================== one row
#: the module ``python -m`` runs for one row in a child process (:mod:`.row`)
CHILD_ENTRY = "dsf_lightning.reproduce.row"


def _report_row_parse_error(message: str) -> None:
    """A row's recipe that does not parse: one line on the row's stderr (its log), as ``dsf fit`` prints it."""
    print(f"dsf fit: error: {message} (the options: dsf fit --help)", file=sys.stderr)


def run_row(spec: dict, build_cli: Callable | None = None) -> dict:
    """Fit then test one row in this process (``spec``: args, workdir, metric, resume, threads); returns its results.

    ``spec["resume"]``: a checkpoint's path relative to the workdir (rank 0's choice, see :func:`plan_rows`),
    True (the ``last.ckpt`` beside the run's checkpoints, if there is one) or False (a fresh start).

    ``build_cli(args, run=False)`` builds the row's LightningCLI without running it (default:
    :func:`dsf_lightning.recipe_cli.lightning_cli`, what ``dsf fit`` runs).

    Writes ``spec["result_file"]`` (rank 0) when given, which is how a child process reports back. Costs are
    counted by :class:`~.progress.RowProgress` over every sitting of the row (``progress.json``).
    """
    import torch

    from .progress import RowProgress, totals

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    start = time.perf_counter()
    workdir = Path(spec["workdir"])
    if not workdir.is_dir():  # rank 0 made it already (a rank of a DDP row writes nothing)
        workdir.mkdir(parents=True, exist_ok=True)
    previous = os.getcwd()
    os.chdir(workdir)
    try:
        with warnings.catch_warnings():  # "args given and sys.argv too": intended here
            warnings.filterwarnings("ignore", message=".*args parameter is intended to run from within Python.*")
            if build_cli is None:
                from ..recipe_cli import lightning_cli

                build_cli = partial(lightning_cli, report_parse_error=_report_row_parse_error)
            cli = build_cli(spec["args"], run=False)
        trainer, model, data = cli.trainer, cli.model, cli.datamodule
        progress = RowProgress(workdir)
        trainer.callbacks.append(progress)
        resume = None
        ckpt_cb = trainer.checkpoint_callback
        if isinstance(spec.get("resume"), str):  # the checkpoint rank 0 chose (run_table): every rank loads it
            resume = str(workdir / spec["resume"])
            if not Path(resume).is_file():
                raise FileNotFoundError(f"{resume}, the checkpoint this row resumes from, is not there: the --out "
                                        "folder must be on a filesystem every rank's machine shares")
        elif spec.get("resume") and ckpt_cb is not None and ckpt_cb.dirpath:
            last = Path(ckpt_cb.dirpath) / "last.ckpt"
            resume = str(last) if last.is_file() else None
        trainer.fit(model, data, ckpt_path=resume)
        best = ckpt_cb.best_model_path if ckpt_cb is not None else ""
        best_score = ckpt_cb.best_model_score if ckpt_cb is not None else None
        results = trainer.test(model, data, ckpt_path=best or None, verbose=False)
        metrics: dict[str, float] = {}
        for per_loader in results or []:  # several test sets: one dict per loader, keys `test_*/<set>`
            metrics.update({k: float(v) for k, v in per_loader.items()})
        if best_score is not None and ckpt_cb.monitor:
            metrics[f"best_{ckpt_cb.monitor}"] = float(best_score)
        parameters = getattr(model, "num_parameters", None)
        if parameters is None:
            parameters = sum(p.numel() for p in model.parameters())
        spent = totals(progress.progress)
        result = {
            "metrics": metrics,
            "measured": metrics.get(spec.get("metric_key") or METRICS[spec["metric"]]),
            "parameters": int(parameters),
            "tokens": int(spent["tokens"]),
            "train_seconds": spent["wall_seconds"],
            # the earlier sittings' training wall: the table's wall time is these plus this whole process
            "earlier_wall_seconds": spent["wall_seconds"] - progress.sitting["wall_seconds"],
            "cpu_seconds": spent["cpu_seconds"],
            "sittings": len(progress.progress["sittings"]),
            "epochs": progress.progress["epochs"],
            "tokens_per_second": spent["tokens"] / spent["wall_seconds"] if spent["wall_seconds"] > 0 else None,
            "checkpoint": str(Path(best).resolve()) if best else None,
            "resumed_from": resume,
            "corpus": getattr(data, "corpus_name", type(data).__name__),
            "threads": torch.get_num_threads(),
            "wall_seconds": time.perf_counter() - start,
        }
        if spec.get("result_file") and trainer.global_rank == 0:
            write_atomic(Path(spec["result_file"]), json.dumps(result, indent=1))
        return result
    finally:
        os.chdir(previous)


ROW_FINGERPRINT = "fingerprint.txt"


def _recipe_last_checkpoint(recipe: dict, workdir: Path) -> Path | None:
    """``last.ckpt`` in the folder of the recipe's ``ModelCheckpoint`` (relative to the row folder), if named."""
    for callback in recipe.get("trainer", {}).get("callbacks") or []:
        if isinstance(callback, dict) and str(callback.get("class_path", "")).endswith("ModelCheckpoint"):
            dirpath = (callback.get("init_args") or {}).get("dirpath")
            if dirpath:
                return workdir / dirpath / "last.ckpt"
    return None


def prepare_row_folder(workdir: Path, fp: str, same_row: set[str], recipe: dict, *, resume: bool,
                       log: Callable[[str], None]) -> str | None:
    """Rank 0, before a row trains: the checkpoint it resumes from (a path relative to ``workdir``), or None
    for a fresh start.

    A row resumes only a folder of its own fingerprint (``fingerprint.txt``, written here; a folder from before
    that file is trusted as the state says). Starting fresh in a folder that holds anything, it moves the folder
    aside to ``<row>.superseded-<UTC time>`` (kept, never deleted), so that no ``last.ckpt`` of other settings
    is left where this run, or one resumed later, would look for it."""
    marker = workdir / ROW_FINGERPRINT
    owner = marker.read_text(encoding="utf-8").strip() if marker.is_file() else None
    checkpoint = None
    if resume and owner in (None, *same_row):
        last = _recipe_last_checkpoint(recipe, workdir)
        found = [last] if last is not None and last.is_file() else sorted(workdir.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
        checkpoint = str(found[-1].relative_to(workdir)) if found else None
    elif workdir.is_dir() and any(workdir.iterdir()):
        aside = workdir.with_name(f"{workdir.name}.superseded-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        os.replace(workdir, aside)
        log(f"its folder held a run of other settings: moved to {aside.name} (start fresh)")
    write_atomic(marker, fp)
    return checkpoint


def _accelerator(recipe: dict, extra: Sequence[str]) -> str:
    """The ``trainer.accelerator`` the rows' fits use: the last ``--trainer.accelerator`` of ``extra``, else the
    recipe's, else Lightning's default ``auto``."""
    value = (recipe.get("trainer") or {}).get("accelerator", "auto")
    for i, arg in enumerate(extra):
        name, eq, given = arg.partition("=")
        if name == "--trainer.accelerator":
            value = given if eq else (extra[i + 1] if i + 1 < len(extra) else value)
    return str(value).lower()


def evaluation_device(recipe: dict, extra: Sequence[str]) -> str:
    """Where this process evaluates a row itself (dynamic evaluation): CUDA when the fits run on a GPU
    (``--trainer.accelerator gpu`` / ``cuda``, or ``auto`` with one present), else the CPU."""
    import torch

    accelerator = _accelerator(recipe, extra)
    if accelerator in ("gpu", "cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"--trainer.accelerator {accelerator}: torch sees no CUDA device here, so the dynamic "
                             "evaluations cannot run on one; drop the option (or give cpu) to run them on the CPU")
        return "cuda"
    return "cuda" if accelerator == "auto" and torch.cuda.is_available() else "cpu"


def run_dynamic(row: Row, parent_state: dict, recipe: dict, data_root: str | None, scale: str,
                extra: Sequence[str] = ()) -> dict:
    """Dynamic evaluation #1 / #2 of the parent row's best checkpoint, on the device of the rows' fits
    (:func:`evaluation_device`)."""
    import torch

    from ..data.corpora import load_corpus
    from ..evaluation import dynamic_evaluation
    from ..training import LanguageModelModule
    from ..training.recipe_guard import guarded

    ckpt = parent_state.get("checkpoint")
    if not ckpt or not Path(ckpt).is_file():
        raise FileNotFoundError(f"row {row.parent}'s checkpoint {ckpt} is not there: re-run that row")
    start = time.perf_counter()
    # weights-only, and its hyper-parameters parsed under the recipe allowlist (Lightning's instantiator
    # would otherwise build any class_path they hold): a checkpoint in the results folder runs no code
    module = guarded(LanguageModelModule.load_from_checkpoint, ckpt, map_location="cpu", weights_only=True)
    model = module.model.float().eval().to(evaluation_device(recipe, extra))
    data = recipe["data"]
    root = data_root if data_root is not None else data.get("data_root")
    corpus = load_corpus(data["corpus"], data_root=root, **dict(data.get("corpus_options") or {}))
    names = ["test"] if row.evaluation == "dynamic1" else ["valid", "test"]
    limit = TINY["dynamic_tokens"] if scale == "tiny" else None
    splits = [(name, corpus.splits[name][:limit] if limit else corpus.splits[name]) for name in names]
    eos = corpus.vocab.eos_id
    with torch.enable_grad():
        results = dynamic_evaluation(model, splits, lr=DYNAMIC_LR, context_token=eos)
    test = results["test"]
    seconds = time.perf_counter() - start
    tokens = sum(r.tokens for r in results.values())
    nll = test.nll / test.tokens
    value = {"ppl": math.exp(nll), "bpc": nll / math.log(2), "nll": nll}[row.metric]
    return {"measured": value, "parameters": int(sum(p.numel() for p in model.parameters())), "tokens": tokens,
            "tokens_per_second": tokens / seconds if seconds > 0 else None, "checkpoint": ckpt,
            "metrics": {"test_loss": nll, "test_tokens": test.tokens}, "wall_seconds": seconds}


# =============================================================================================== a table
@dataclass(frozen=True)
class RowSetup:
    """What every row of one run shares: the scale, the recipes folder, the data root, the user's
    ``--trainer.*`` / ``--model.*`` / ``--data.*`` overrides (``extra``) and torch threads per row."""

    scale: str
    recipes: Path
    root: str | None
    extra: tuple[str, ...]
    threads: int | None


@dataclass
class Plan:
    """Rank 0's decision for the rows a run owns: ``fits`` (row, entry, spec, run fingerprint) to train, in the
    order ``--rows`` names them, and ``later`` (row, entry, recipe, run fingerprint or None): rows measured in
    another row's run and dynamic evaluations of a parent's checkpoint."""

    fits: list[tuple[Row, dict, dict, str]] = field(default_factory=list)
    later: list[tuple[Row, dict, dict, str | None]] = field(default_factory=list)
    queued_runs: set[str] = field(default_factory=set)


def _check_counts(scale: str, jobs: int, threads: int | None) -> None:
    """Refuse a scale, ``jobs`` or ``threads`` the runner cannot use, naming what it takes."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be a whole number >= 1 (rows trained at once), got {jobs!r}")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise ValueError(f"threads must be a whole number >= 1 (torch threads per row), got {threads!r}")


def _isolation(jobs: int, extra: Sequence[str], isolate: bool | None, rank: int, world: int) -> bool:
    """Whether every row runs in a child process; refuses the process layouts that cannot work."""
    distributed = any(a.split("=")[0] in DISTRIBUTED_FLAGS for a in extra)
    if jobs > 1 and distributed:
        raise ValueError("--jobs > 1 trains rows side by side in this machine's processes; it cannot be combined "
                         "with --trainer.devices / num_nodes / strategy (one row at a time uses them all)")
    if world > 1 and not distributed:
        raise ValueError(f"this is rank {rank} of {world} processes (torchrun / srun), but no --trainer.devices, "
                         "--trainer.num_nodes or --trainer.strategy: every rank would train its own copy of the row; "
                         "add e.g. --trainer.devices 2 --trainer.strategy ddp (devices per node, --trainer.num_nodes)")
    if world > 1 and isolate is False:  # the other ranks run rank 0's row.json in a child process
        raise ValueError("--in-process cannot be combined with several ranks (torchrun / srun): every rank runs its "
                         "rows in a child process; drop --in-process")
    return distributed if isolate is None else isolate


def plan_rows(table: Table, record: TableState, setup: RowSetup) -> Plan:
    """Rank 0 decides every row the run owns (``record.wanted``): done before, pending and missing-data rows are
    recorded at once; the others are planned to train (resuming or fresh) or to be measured after."""
    plan = Plan()
    for row in table.rows:
        if row.key not in record.wanted:
            continue
        if row.pending:
            record.pending(row)
        else:
            _plan_row(table, row, record, setup, plan)
    plan.fits.sort(key=lambda fit: record.wanted.index(fit[0].key))
    return plan


def _plan_row(table: Table, row: Row, record: TableState, setup: RowSetup, plan: Plan) -> None:
    """Decide one row: skipped (done before, data missing), later (dynamic evaluation), else :func:`_plan_fit`."""
    source = table.row(row.parent) if row.evaluation else row
    recipe_path = setup.recipes / source.recipe
    recipe_text = recipe_path.read_text(encoding="utf-8")
    recipe = load_recipe(recipe_path)
    fp, same_row = _fingerprints(table, row, setup.scale, recipe, recipe_text, setup.extra, setup.root)
    previous = record.previous(row, fp, same_row)
    if record.done_before(row, previous, same_row):
        record.skip_done(row)
        return
    entry: dict[str, Any] = {"scale": setup.scale, "fingerprint": fp, "recipe": source.recipe, "started": time.time()}
    why = _missing_data(recipe, row, setup.root)
    if why:
        record.skip(row, entry, why)
    elif row.evaluation:
        plan.later.append((row, entry, recipe, None))
    else:
        resume = previous.get("fingerprint") in same_row and previous.get("status") in (STATUS_FAILED, STATUS_RUNNING,
                                                                                       STATUS_QUEUED)
        _plan_fit(row, entry, (recipe_path, recipe_text, recipe), same_row, resume, record, setup, plan)


def _plan_fit(row: Row, entry: dict, recipe_files: tuple[Path, str, dict], same_row: set[str], resume: bool,
              record: TableState, setup: RowSetup, plan: Plan) -> None:
    """A row that trains: its CLI arguments and run; measured later when another row trains the very same model
    (one row per test set), else its folder is prepared (the checkpoint it resumes, rank 0's choice) and it fits."""
    recipe_path, recipe_text, recipe = recipe_files
    task = is_task_recipe(recipe)
    root_key = task_data_root_key(recipe) if task else "data.data_root"
    args = cli_arguments(recipe_path, merged_overrides(recipe, row, setup.scale), setup.root, setup.extra, root_key,
                         raw_strings=task)
    run_fp = _run_key(record.runs, recipe, recipe_text, args[2:], setup.scale)
    entry["run"] = run_fp
    shared = record.runs.get(run_fp)
    if run_fp in plan.queued_runs or (shared is not None and shared.get("row") != row.key):
        plan.later.append((row, entry, recipe, run_fp))
        return
    plan.queued_runs.add(run_fp)
    workdir = row_folder(record.out, record.table.id, row.key)
    checkpoint = prepare_row_folder(workdir, entry["fingerprint"], same_row, recipe, resume=resume,
                                    log=lambda msg: record.say(row.key, msg))
    spec = {"args": args, "workdir": str(workdir), "metric": row.metric,
            "metric_key": metric_key(row), "resume": checkpoint or False, "threads": setup.threads,
            "command": fit_command(args, setup.recipes, setup.root)}
    entry.update(args=args, command=spec["command"], commit=record.state["commit"], reproduce_command=record.command)
    plan.fits.append((row, entry, spec, run_fp))


def _run_key(runs: dict, recipe: dict, recipe_text: str, args: Sequence[str], scale: str) -> str:
    """The run fingerprint of a fit; an older state's key for the same run (of the recipe's text) is renamed to it."""
    run_fp, text_run_fp = run_fingerprint(recipe, args, scale), run_fingerprint(recipe_text, args, scale)
    if text_run_fp in runs and run_fp not in runs:
        runs[run_fp] = runs.pop(text_run_fp)
    return run_fp


def run_table(
    table_id: str,
    *,
    scale: str = "paper",
    data_root: str | os.PathLike | None = None,
    out: str | os.PathLike = "reproduce",
    rows: Sequence[str] | None = None,
    overrides: Sequence[str] = (),
    recipes_dir: str | os.PathLike | None = None,
    isolate: bool | None = None,
    jobs: int = 1,
    threads: int | None = None,
    command: str | None = None,
    log: Callable[[str], None] = print,
    build_cli: Callable | None = None,
    child_entry: str | None = None,
) -> dict:
    """Run (or resume) table ``table_id``; returns ``{"ran": [...], "skipped_done": [...], "skipped": [...],
    "failed": [...], "pending": [...], "markdown": path, "csv": path}`` (row keys).

    ``jobs`` > 1 trains that many rows at once, each in a child process with ``threads`` threads (default 1)
    and its log in ``<row folder>/row.log``; ``command`` is the command line recorded in the outputs.
    ``build_cli`` (rows trained in this process, see :func:`run_row`; default
    :func:`dsf_lightning.recipe_cli.lightning_cli`) and ``child_entry`` (the ``python -m`` module of a row's child
    process; default :mod:`.row`) are there for tests that train rows another way.

    Three steps: :func:`plan_rows` (rank 0 decides each row), :func:`.train.train_rows` and
    :func:`.train.measure_later` (run; a row read from another row's run is measured as soon as that run ends,
    :func:`.train.measure_in_run`), every outcome recorded by :class:`.state.TableState` (report).
    """
    table = get_table(table_id)
    _check_counts(scale, jobs, threads)
    out = Path(out).expanduser().resolve()
    recipes = Path(recipes_dir).expanduser().resolve() if recipes_dir is not None else default_recipes_dir().resolve()
    root = str(Path(data_root).expanduser().resolve()) if data_root is not None else None
    setup = RowSetup(scale, recipes, root, tuple(overrides), 1 if jobs > 1 and threads is None else threads)
    rank, world = global_rank(), world_size()
    isolate = _isolation(jobs, setup.extra, isolate, rank, world)
    wanted = row_keys(table.id, rows)
    if rank != 0:  # rank 0 decides and writes; this rank trains the rows it was told to, as it was told
        return follow_rank_zero(table, out, rank, world, scale, log)
    record = TableState(table, out, scale, wanted, log=log, command=command, commit=git_commit())
    plan = plan_rows(table, record, setup)
    train_rows(plan.fits, record, jobs=jobs, isolate=isolate, rank=rank, world=world,
               fit_here=lambda spec: run_row(spec, build_cli), child_entry=child_entry or CHILD_ENTRY,
               on_trained=lambda run_fp: measure_in_run(plan.later, run_fp, record))
    measure_later(plan.later, record,
                  lambda row, parent, recipe: run_dynamic(row, parent, recipe, root, scale, setup.extra))
    return record.close()


def report_table(table_id: str, *, out: str | os.PathLike = "reproduce", scale: str = "paper") -> tuple[Path, Path]:
    """Rewrite ``<out>/<table>.md`` / ``.csv`` / curves from the state file and the rows' progress; trains nothing."""
    return state_report_table(get_table(table_id), Path(out).expanduser().resolve(), scale)


def _missing_data(recipe: dict, row: Row, root: str | None) -> str | None:
    """Why a row cannot run here: the files its DataModule says it misses (``missing_data()``), else None."""
    from ..data.corpora import CorpusError, describe_missing

    task = is_task_recipe(recipe)
    try:
        datamodule, what = _row_datamodule(recipe, row, root, task)
        missing = datamodule.missing_data() if datamodule is not None else []
    except CorpusError as err:  # an unknown corpus, or files present that cannot be loaded
        return f"corpus missing: {str(err).splitlines()[0]}"
    if not missing:
        return None
    return f"{'data' if task else 'corpus'} missing: {describe_missing(what, missing, datamodule.data_root)}"


def _row_datamodule(recipe: dict, row: Row, root: str | None, task: bool) -> tuple[Any, str]:
    """The row's DataModule built from its recipe and overrides (reading no data), and the name of its data;
    ``(None, "")`` when it is not this library's or its arguments are wrong (the row's fit says why)."""
    prefix = "data.init_args." if task else "data.corpus_options."
    options = dict((_init_args(recipe, "data") if task else recipe["data"].get("corpus_options")) or {})
    options.update({k[len(prefix):]: v for k, v in row.overrides.items() if k.startswith(prefix) and k.count(".") == 2})
    try:
        if task:
            cls = _task_data_class(recipe)
            if cls is None:
                return None, ""
            if root is not None and task_data_root_key(recipe) is not None:
                options["data_root"] = root
            from ..tasks.catalog import list_tasks

            datamodule = cls(**options)  # named by its data set (mnist, fashion_mnist), else by its task (imdb)
            name = getattr(datamodule, "dataset", None) or next((t.name for t in list_tasks() if t.datamodule is cls), None)
            return datamodule, name or cls.__name__
        from ..training.datamodule import LanguageModelDataModule

        corpus = recipe["data"].get("corpus", "ptb")
        if not isinstance(corpus, str):
            return None, ""
        data_root = root if root is not None else recipe["data"].get("data_root")
        return LanguageModelDataModule(corpus, data_root=data_root, corpus_options=options), corpus
    except (TypeError, ValueError):
        return None, ""


def fit_command(args: Sequence[str], recipes: Path, data_root: str | None) -> str:
    """The ``dsf fit`` command line that trains a row by itself (then ``dsf test`` of its best checkpoint), with
    the recipes folder written ``recipes/`` and the data root ``$DSF_DATA_ROOT``."""
    text = shlex.join(["dsf", "fit", *args]).replace(f"{recipes}{os.sep}", "recipes/")
    return text.replace(data_root, "$DSF_DATA_ROOT") if data_root else text


def git_commit() -> str | None:
    """The checkout's commit (``-dirty`` when the package or recipes have uncommitted changes); None outside git."""
    here = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "diff", "--quiet", "HEAD", "--", "dsf_lightning", "recipes"],
                               capture_output=True, timeout=10).returncode != 0
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head
