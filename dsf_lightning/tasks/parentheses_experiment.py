"""LSTM vs sr-LSTM-p on balanced parentheses: error rates by depth and length (sr-RNN paper sec. 4.2, Table 1).

For each data set size (the paper's ``large``: 22,286 training strings, and ``small``: 1,008; training
depths 1-5, validation depths 6-10) and each model, train a single-layer classifier with a learned
embedding, start and end tokens (sec. 3.3), a curriculum over string lengths (the paper: "curriculum
learning as in previous work") and the validation error as the stopping criterion (the weights of the
best validation accuracy are kept), then measure the error rate on the six 1,000-string test sets of
Table 1 (depth 1-10 up to length 100 ... depth 20 up to length 1,000), and, pooling those 6,000
strings, the error by nesting depth and by length.

    python -m dsf_lightning.tasks.parentheses_experiment --out results/sr_rnn

Writes ``<out>/parentheses.md`` (Table 1 layout, the paper's numbers beside ours, by-depth and
by-length breakdowns) and ``<out>/parentheses.json`` (every run's numbers). One CPU thread.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import Dataset

from ..training.callbacks import CpuTimeBudget
from . import languages as lang
from .datamodules import BalancedParenthesesDataModule
from .experiment_utils import (
    BestWeights,
    accuracy,
    args_to_json,
    machine_line,
    predict_strings_sorted,
    prepare_run,
    quiet_trainer,
    write_results,
)
from .modules import SequenceClassifier

TEST_SETS = tuple(name for name, _, _ in lang.BP_TEST_SETS)
#: Table 1 rows as the paper writes them
TEST_LABELS = {
    "d1-10_l100": "d ∈ [1,10], l ≤ 100",
    "d10-20_l100": "d ∈ [10,20], l ≤ 100",
    "d10-20_l200": "d ∈ [10,20], l ≤ 200",
    "d5_l200": "d = 5, l ≤ 200",
    "d10_l200": "d = 10, l ≤ 200",
    "d20_l1000": "d = 20, l ≤ 1000",
}
#: sr-RNN paper Table 1: error rates (k = 5 centroids, hidden 100), in TEST_SETS order
PAPER = {
    "large": {
        "lstm": (0.005, 0.334, 0.341, 0.002, 0.207, 0.543),
        "sr-lstm": (0.038, 0.255, 0.313, 0.044, 0.227, 0.540),
        "sr-lstm-p": (0.000, 0.001, 0.003, 0.000, 0.004, 0.020),
    },
    "small": {
        "lstm": (0.068, 0.472, 0.479, 0.042, 0.409, 0.519),
        "sr-lstm": (0.037, 0.347, 0.352, 0.028, 0.279, 0.508),
        "sr-lstm-p": (0.017, 0.189, 0.196, 0.015, 0.138, 0.380),
    },
}
MODEL_LABELS = {"lstm": "LSTM", "lstm-p": "LSTM-p", "sr-lstm": "sr-LSTM", "sr-lstm-p": "sr-LSTM-p"}
DEPTH_BUCKETS = ((1, 5), (6, 10), (11, 15), (16, 20))
LENGTH_BUCKETS = ((1, 50), (51, 100), (101, 200), (201, 500), (501, 1000))
#: per data set: epochs, patience (epochs without a better val_acc), curriculum epochs, CPU minutes per run
SCHEDULE = {
    "large": {"max_epochs": 40, "patience": 8, "curriculum_epochs": 4, "max_minutes": 5.0},
    "small": {"max_epochs": 400, "patience": 60, "curriculum_epochs": 40, "max_minutes": 1.2},
}


class _Subset(Dataset):
    """Some items of a :class:`~dsf_lightning.tasks.data.TokenSequenceDataset`, with their ``lengths``."""

    def __init__(self, dataset, indices: Sequence[int]) -> None:
        self.dataset, self.indices = dataset, list(indices)
        self.lengths = dataset.lengths[self.indices] if self.indices else dataset.lengths[:0]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int):
        return self.dataset[self.indices[i]]


class CurriculumParentheses(BalancedParenthesesDataModule):
    """Balanced parentheses with a length curriculum: in epoch ``e < curriculum_epochs`` only the training
    strings of at most ``start + (max - start) * (e + 1) / curriculum_epochs`` symbols are used, then all.

    Needs ``Trainer(reload_dataloaders_every_n_epochs=1)``. ``limit`` keeps only the first ``limit``
    training and validation strings (quick runs).
    """

    def __init__(self, curriculum_epochs: int = 0, curriculum_start: int = 10, limit: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.curriculum_epochs, self.curriculum_start, self.limit = curriculum_epochs, curriculum_start, limit

    def build(self, stage: str) -> None:
        if stage == "fit" and self.limit and "train" not in self.strings:
            super().build(stage)
            for split in ("train", "valid"):
                self.strings[split] = self.strings[split][: self.limit]
            self.train_set = type(self.train_set)(
                [self.vocab.encode(r[0]) for r in self.strings["train"]], [r[1] for r in self.strings["train"]]
            )
            self.val_set = type(self.val_set)(
                [self.vocab.encode(r[0]) for r in self.strings["valid"]], [r[1] for r in self.strings["valid"]]
            )
            return
        super().build(stage)

    def max_length_at(self, epoch: int) -> int | None:
        if epoch >= self.curriculum_epochs:
            return None
        span = self.train_max_length - self.curriculum_start
        return self.curriculum_start + math.ceil(span * (epoch + 1) / self.curriculum_epochs)

    def train_dataloader(self):
        self.setup("fit")
        epoch = self.trainer.current_epoch if self.trainer is not None else 0
        limit = self.max_length_at(epoch)
        if limit is None:
            return self._loader(self.train_set, train=True)
        extra = 2 if self.start_end_tokens else 0  # the encoded length counts <s> and </s>
        keep = [i for i, n in enumerate(self.train_set.lengths.tolist()) if n - extra <= limit]
        return self._loader(_Subset(self.train_set, keep), train=True)


def _errors_by(rows: list[tuple[str, int, int]], wrong: list[bool], key, buckets) -> dict[str, dict[str, float]]:
    out = {}
    for lo, hi in buckets:
        hits = [w for r, w in zip(rows, wrong) if lo <= key(r) <= hi]
        out[f"{lo}-{hi}"] = {"error": sum(hits) / len(hits) if hits else None, "count": len(hits)}
    return out


def run_one(data: CurriculumParentheses, dataset: str, model: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Train one model on one data set with one seed; return its record (errors per test set etc.)."""
    plan = {k: (getattr(args, k) if getattr(args, k) is not None else v) for k, v in SCHEDULE[dataset].items()}
    data.curriculum_epochs = plan["curriculum_epochs"]
    L.seed_everything(seed, verbose=False)
    module = SequenceClassifier(
        **data.model_options(),
        cell=model,
        hidden_size=args.hidden_size,
        embedding_size=args.embedding_size,
        cell_options={"k": args.k, "tau": args.tau} if model.startswith("sr-") else {},
        optimizer=args.optimizer,
        lr=args.lr,
        momentum=args.momentum,
    )
    best = BestWeights(plan["patience"], "val_acc", min_epochs=plan["curriculum_epochs"])
    # CPU time since fit began (validation included): the same work however busy the machine is
    budget = CpuTimeBudget(plan["max_minutes"] * 60, include_validation=True)
    trainer = quiet_trainer(plan["max_epochs"], plan["max_minutes"] * 60 * args.wall_factor, args.clip, [best, budget],
                            reload_dataloaders_every_n_epochs=1)
    t0 = time.perf_counter()
    trainer.fit(module, data)
    train_seconds = time.perf_counter() - t0
    best.restore(module)
    module.eval()

    t0 = time.perf_counter()
    record: dict[str, Any] = {
        "dataset": dataset, "model": model, "seed": seed,
        "parameters": sum(p.numel() for p in module.parameters()),
        "epochs": trainer.current_epoch, "best_epoch": best.best_epoch, "stopped_early": best.stopped_early,
        "best_val_acc": best.best, "val_acc_history": best.history, "train_seconds": train_seconds,
        "train_cpu_seconds": budget.used, "cpu_budget_exhausted": budget.exhausted,
    }
    train_s, train_y = data.split_strings("train")
    record["train_error"] = 1 - accuracy(module, train_s, train_y, data.vocab)
    record["valid_error"] = 1 - best.best
    errors, pooled, wrong = {}, [], []
    for name in TEST_SETS:
        rows = data.strings[name]
        pred = predict_strings_sorted(module, [r[0] for r in rows], data.vocab)
        miss = (pred != torch.tensor([r[1] for r in rows])).tolist()
        errors[name] = sum(miss) / len(miss)
        pooled += rows
        wrong += miss
    record["test_error"] = errors
    record["error_by_depth"] = _errors_by(pooled, wrong, lambda r: r[2], DEPTH_BUCKETS)
    record["error_by_length"] = _errors_by(pooled, wrong, lambda r: len(r[0]), LENGTH_BUCKETS)
    record["eval_seconds"] = time.perf_counter() - t0
    return record


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _cell(values: list[float | None]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{_mean(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def _columns(records: list[dict]) -> list[tuple[str, str]]:
    seen = []
    for r in records:
        if (r["dataset"], r["model"]) not in seen:
            seen.append((r["dataset"], r["model"]))
    return seen


def _runs(records: list[dict], dataset: str, model: str) -> list[dict]:
    return [r for r in records if r["dataset"] == dataset and r["model"] == model]


def table1(records: list[dict]) -> list[str]:
    """The Table 1 layout: one row per test set, per (data set, model) a column 'paper / ours'."""
    cols = _columns(records)
    head = "| test set | " + " | ".join(f"{d}: {MODEL_LABELS.get(m, m)} paper / ours" for d, m in cols) + " |"
    lines = [head, "| --- |" + " --- |" * len(cols)]
    for i, name in enumerate(TEST_SETS):
        cells = []
        for d, m in cols:
            paper = PAPER.get(d, {}).get(m)
            ours = _cell([r["test_error"][name] for r in _runs(records, d, m)])
            cells.append(f"{paper[i]:.3f} / **{ours}**" if paper else f"- / **{ours}**")
        lines.append(f"| {TEST_LABELS[name]} | " + " | ".join(cells) + " |")
    return lines


def _breakdown(records: list[dict], key: str, buckets, what: str) -> list[str]:
    cols = _columns(records)
    lines = [f"| {what} | strings | " + " | ".join(f"{d}: {MODEL_LABELS.get(m, m)}" for d, m in cols) + " |",
             "| --- | --- |" + " --- |" * len(cols)]
    for lo, hi in buckets:
        b = f"{lo}-{hi}"
        count = records[0][key][b]["count"]
        cells = [_cell([r[key][b]["error"] for r in _runs(records, d, m)]) for d, m in cols]
        lines.append(f"| {b} | {count} | " + " | ".join(cells) + " |")
    return lines


def verdict(records: list[dict]) -> list[str]:
    """Measured facts for the reading: mean error on the in-distribution and on the deeper / longer sets."""
    near, far = ("d1-10_l100", "d5_l200"), ("d10-20_l100", "d10-20_l200", "d10_l200", "d20_l1000")
    out = []
    for dataset in dict.fromkeys(r["dataset"] for r in records):
        parts = []
        for model in dict.fromkeys(r["model"] for r in records if r["dataset"] == dataset):
            runs = _runs(records, dataset, model)
            n = _mean([_mean([r["test_error"][s] for s in near]) for r in runs])
            f = _mean([_mean([r["test_error"][s] for s in far]) for r in runs])
            parts.append(f"{MODEL_LABELS.get(model, model)} {n:.3f} (depth <= 10) vs {f:.3f} (depth >= 10)")
        out.append(f"- {dataset}: mean test error over seeds and test sets: " + "; ".join(parts) + ".")
    return out


def _markdown(records: list[dict], args: argparse.Namespace, total_seconds: float, command: str,
              cpu_seconds: float = float("nan")) -> str:
    seeds = {d: sorted({r["seed"] for r in records if r["dataset"] == d}) for d in dict.fromkeys(r["dataset"] for r in records)}
    sched = "; ".join(
        f"{d}: at most {SCHEDULE[d]['max_epochs'] if args.max_epochs is None else args.max_epochs} epochs / "
        f"{SCHEDULE[d]['max_minutes'] if args.max_minutes is None else args.max_minutes:g} CPU min per run, curriculum "
        f"{SCHEDULE[d]['curriculum_epochs'] if args.curriculum_epochs is None else args.curriculum_epochs} epochs, patience "
        f"{SCHEDULE[d]['patience'] if args.patience is None else args.patience} epochs, seeds {seeds[d]}"
        for d in seeds
    )
    optim = f"{args.optimizer} lr {args.lr}" + (f" momentum {args.momentum}" if args.optimizer != "adam" else "")
    lines = [
        "# Balanced parentheses: LSTM vs sr-LSTM-p by depth and length (sr-RNN paper sec. 4.2, Table 1)",
        "",
        f"Command: `{command}`",
        "",
        f"Setting here: single layer, hidden {args.hidden_size}, learned embedding {args.embedding_size}, k = {args.k} "
        f"centroids, tau = {args.tau} (eqs 3 & 6), start / end tokens; {optim}, batch {args.batch_size}, gradient clip "
        f"{args.clip}; training strings of at most {args.train_max_length} symbols, a length curriculum from "
        f"{args.curriculum_start} symbols; the weights of the best validation accuracy (depths 6-10) are kept. {sched}.",
        "The paper: hidden 100, k = 5, RMSprop lr 0.01 momentum 0.9, curriculum learning, validation error as the stopping",
        "criterion; the same data set sizes (large 22,286 / 6,704, small 1,008 / 268) and six 1,000-string test sets.",
        machine_line(),
        f"Time: {total_seconds / 60:.1f} min wall clock, {cpu_seconds / 60:.1f} CPU min in total (training + evaluation of every"
        " run, data generation included); per-run budgets are CPU time (the machine was shared).",
        "",
        "## Table 1: test error rates (paper / **ours**)",
        "",
        "Ours: one run, or the mean [min, max] over the seeds. The data (train, valid, tests) are the same for every run",
        f"(data seed {args.data_seed}); seeds change the initialization and the batch order.",
        "",
        *table1(records),
        "",
        f"## Error by nesting depth and by length (ours; the six test sets pooled, {len(TEST_SETS) * args.test_size:,} strings)",
        "",
        "Training strings have depths 1-5 and at most "
        f"{args.train_max_length} symbols; validation depths 6-10 and at most {args.valid_max_length}.",
        "A negative string's depth is that of the balanced string it was corrupted from.",
        "",
        *_breakdown(records, "error_by_depth", DEPTH_BUCKETS, "depth"),
        "",
        *_breakdown(records, "error_by_length", LENGTH_BUCKETS, "length"),
        "",
        "## Runs",
        "",
        "| data | model | seed | params | epochs (best) | CPU min (wall) | stopped by | train error | valid error (depth 6-10) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        why = "CPU budget" if r["cpu_budget_exhausted"] else "patience" if r["stopped_early"] else "epochs / wall cap"
        lines.append(
            f"| {r['dataset']} | {MODEL_LABELS.get(r['model'], r['model'])} | {r['seed']} | {r['parameters']:,} | "
            f"{r['epochs']} ({r['best_epoch']}) | {r['train_cpu_seconds'] / 60:.2f} ({r['train_seconds'] / 60:.2f}) | {why} | "
            f"{r['train_error']:.4f} | {r['valid_error']:.4f} |"
        )
    lines += ["", "## Measured summary", "", *verdict(records), ""]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("results/sr_rnn"))
    p.add_argument("--datasets", nargs="+", default=["large", "small"], choices=sorted(lang.BP_SIZES))
    p.add_argument("--models", nargs="+", default=["lstm", "sr-lstm-p"], help="registered cell names")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (small data set)")
    p.add_argument("--large-seeds", type=int, default=1, help="how many of --seeds the large data set uses")
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--hidden-size", type=int, default=100)
    p.add_argument("--embedding-size", type=int, default=32)
    p.add_argument("--k", type=int, default=5, help="number of centroids")
    p.add_argument("--tau", type=float, default=1.0)
    p.add_argument("--optimizer", default="adam", choices=("adam", "rmsprop", "sgd"))
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clipping")
    p.add_argument("--train-max-length", type=int, default=50)
    p.add_argument("--valid-max-length", type=int, default=100)
    p.add_argument("--curriculum-start", type=int, default=10, help="max training length of the first epoch")
    p.add_argument("--max-epochs", type=int, default=None, help=f"per run (default per data set: {SCHEDULE})")
    p.add_argument("--max-minutes", type=float, default=None, help="training budget per run, in CPU minutes")
    p.add_argument("--wall-factor", type=float, default=3.0, help="wall-clock cap per run: this many times the CPU budget")
    p.add_argument("--patience", type=int, default=None, help="epochs without a better val_acc before stopping")
    p.add_argument("--curriculum-epochs", type=int, default=None)
    p.add_argument("--test-size", type=int, default=lang.BP_TEST_SIZE, help="strings per test set")
    p.add_argument("--limit", type=int, default=None, help="keep only this many train / valid strings (quick runs)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    prepare_run(args.out)
    command = "python -m dsf_lightning.tasks.parentheses_experiment " + " ".join(
        argv if argv is not None else __import__("sys").argv[1:]
    )
    records, start, cpu_start = [], time.perf_counter(), time.process_time()
    for dataset in args.datasets:
        data = CurriculumParentheses(
            size=dataset, train_max_length=args.train_max_length, valid_max_length=args.valid_max_length,
            test_size=args.test_size, batch_size=args.batch_size, eval_batch_size=256, seed=args.data_seed,
            curriculum_start=args.curriculum_start, limit=args.limit,
        )
        data.setup("fit")
        data.setup("test")
        seeds = args.seeds[: args.large_seeds] if dataset == "large" else args.seeds
        for seed in seeds:
            for model in args.models:
                record = run_one(data, dataset, model, seed, args)
                records.append(record)
                errs = " ".join(f"{k}={v:.3f}" for k, v in record["test_error"].items())
                print(f"{dataset} {model} seed {seed}: epochs={record['epochs']} best={record['best_epoch']} "
                      f"valid_error={record['valid_error']:.4f} cpu_minutes={record['train_cpu_seconds'] / 60:.2f} "
                      f"wall_minutes={record['train_seconds'] / 60:.2f} {errs}",
                      flush=True)
    total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    summary = {"args": args_to_json(args), "command": command, "paper": PAPER, "test_sets": list(TEST_SETS),
               "records": records, "total_seconds": total, "total_cpu_seconds": cpu}
    write_results(args.out, "parentheses", summary, _markdown(records, args, total, command, cpu))
    return records


if __name__ == "__main__":
    main()
