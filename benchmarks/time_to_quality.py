"""Time to quality: validation perplexity against training CPU time, ours against pytorch/examples' LSTM.

    OMP_NUM_THREADS=1 python -m benchmarks.time_to_quality --minutes 80 --ours recipes/ptb/delta_rnn_medium.yaml

Two processes start together, one thread each, and train on PTB until each has spent ``--minutes`` of
process CPU time training:

* **peer**: pytorch/examples' ``word_language_model`` re-implemented faithfully here (``nn.Embedding`` 256,
  one ``nn.LSTM`` layer of 256 units, untied ``nn.Linear`` decoder, dropout 0.2 on the embedding and the
  LSTM output, its weight initialization U[-0.1, 0.1]; plain SGD at lr 20 on the mean token loss, gradient
  norm clipped at 0.25, lr / 4 whenever an epoch's validation loss does not improve; batch 20, BPTT 35, the
  hidden state carried and detached between windows; 5.66M parameters);
* **ours**: a recipe through ``dsf fit``'s LightningCLI (the real Trainer, its callbacks and schedule, and what
  ``dsf fit`` does before fitting: the allocator tuning of ``dsf_lightning.training.allocator``). The peer
  runs as pytorch/examples' ``main.py`` does, with the allocator as it comes.

Both are measured the same way by code in this file: every ``--eval-every`` CPU minutes and at every
budget mark (10, 20, 40, 80, 160 minutes up to ``--minutes``) the model is evaluated on the validation
split as the peer evaluates (10 streams, windows of 35, state carried, mean loss per token); the best
model so far is kept and, at each budget mark, evaluated on the test split. A recipe with
``PolyakAveraging`` is measured on its averaged weights (the ones its own validation reads and its
checkpoints export), the peer on its weights. The CPU time of these
measurements is not counted (each process subtracts it from its clock); the validation a recipe itself
runs (the peer's per-epoch validation for its schedule, Lightning's per-epoch validation) is counted.

Writes ``<out>/time_to_quality.json`` (both curves and the budget table), ``time_to_quality.md`` and
``time_to_quality.png`` (validation perplexity against CPU minutes).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

BUDGETS = (10, 20, 40, 80, 160)
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_DATA_ROOT = os.environ.get("DSF_DATA_ROOT") or str(ROOT.parent / "shared" / "data")
PEER = dict(embedding=256, hidden=256, dropout=0.2, lr=20.0, clip=0.25, batch=20, bptt=35, eval_batch=10, seed=1111)


# ============================================================================================ measuring
def batchify(ids, streams: int):
    """``ids`` [N] -> [N // streams, streams]: ``streams`` contiguous pieces side by side (pytorch/examples)."""
    n = ids.numel() // streams
    return ids[: n * streams].view(streams, n).t().contiguous()


def evaluate(step: Callable, data, bptt: int) -> float:
    """Mean cross-entropy per token of ``step(x [T, B]) -> logits [T, B, V]`` over batchified ``data``, the
    state carried inside ``step`` across windows (the peer's ``evaluate``)."""
    import torch
    import torch.nn.functional as F

    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, data.size(0) - 1, bptt):
            seq = min(bptt, data.size(0) - 1 - i)
            x, y = data[i: i + seq], data[i + 1: i + 1 + seq]
            logits = step(x)
            total += F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1), reduction="sum").item()
            count += y.numel()
    return total / count


@dataclass
class Clock:
    """Process CPU seconds spent training: the process's CPU time less the benchmark's own measurements."""

    excluded: float = 0.0

    def now(self) -> float:
        return time.process_time() - self.excluded


@dataclass
class Tracker:
    """Measures a model every ``eval_every`` training CPU seconds and at each budget mark; keeps the best."""

    name: str
    out: Path
    budgets: tuple[float, ...]  # CPU minutes
    eval_every: float  # CPU seconds
    valid: Any
    test: Any
    bptt: int
    clock: Clock = field(default_factory=Clock)
    curve: list[dict] = field(default_factory=list)
    at_budget: list[dict] = field(default_factory=list)
    best: tuple[float, dict] | None = None
    tokens: int = 0
    _next_eval: float = 0.0

    def __post_init__(self) -> None:
        self._next_eval = self.eval_every
        self._marks = [b * 60.0 for b in self.budgets]

    @property
    def done(self) -> bool:
        return not self._marks

    def start(self) -> None:
        """Start the clock (at the first training step: imports and data set-up are not counted)."""
        self.clock.excluded = time.process_time()

    def due(self) -> bool:
        """Whether the next :meth:`after_step` measures (the clock has passed a mark)."""
        spent = self.clock.now()
        return bool(self._marks and spent >= self._marks[0]) or spent >= self._next_eval

    def after_step(self, tokens: int, module, make_step: Callable[[int], Callable]) -> None:
        """Call after every optimizer step: measure when the clock has passed a mark."""
        self.tokens += tokens
        if self.due():
            self._measure(module, make_step)

    def finish(self, module, make_step: Callable[[int], Callable]) -> None:
        """Call when training ends: if a rule of the contender's own stopped it before the last mark (a recipe's
        EarlyStopping), measure it once more and give every mark it did not reach its best so far, flagged
        ``stopped_at_cpu_seconds``: a user's run ends there too, and the CPU it did not spend was its choice."""
        if self.done:
            return
        if self.curve and self.curve[-1]["tokens"] == self.tokens:  # measured after its last step already
            training = module.training
            module.eval()
            self._pass_marks(self.curve[-1]["cpu_seconds"], module, make_step, stopped=True)
            module.train(training)
            self.save()
        else:
            self._measure(module, make_step, stopped=True)

    def _measure(self, module, make_step: Callable[[int], Callable], stopped: bool = False) -> None:
        spent = self.clock.now()
        started = time.process_time()
        training = module.training
        module.eval()
        val = evaluate(make_step(self.valid.size(1)), self.valid, self.bptt)
        record = {"cpu_seconds": spent, "tokens": self.tokens, "val_loss": val, "val_ppl": math.exp(val)}
        self.curve.append(record)
        if self.best is None or val < self.best[0]:
            self.best = (val, copy.deepcopy(module.state_dict()))
        self._pass_marks(spent, module, make_step, stopped)
        print(f"[{self.name}] {spent / 60:.1f} CPU min, {self.tokens:,} tokens: valid PPL {record['val_ppl']:.2f}",
              flush=True)
        module.train(training)
        self._next_eval = spent + self.eval_every
        self.clock.excluded += time.process_time() - started
        self.save()

    def _pass_marks(self, spent: float, module, make_step: Callable[[int], Callable], stopped: bool) -> None:
        """Test the best weights so far at every mark ``spent`` has passed (every mark left, when ``stopped``)."""
        while self._marks and (stopped or spent >= self._marks[0]):
            mark = self._marks.pop(0)
            current = copy.deepcopy(module.state_dict())
            module.load_state_dict(self.best[1])
            test = evaluate(make_step(self.test.size(1)), self.test, self.bptt)
            module.load_state_dict(current)
            early = {"stopped_at_cpu_seconds": spent} if spent < mark else {}
            self.at_budget.append({"minutes": mark / 60, "cpu_seconds": spent, "best_val_ppl": math.exp(self.best[0]),
                                   "test_ppl": math.exp(test), "tokens": self.tokens, **early})
            print(f"[{self.name}] {mark / 60:g} CPU min: best valid PPL {math.exp(self.best[0]):.2f}, "
                  f"its test PPL {math.exp(test):.2f}" + (f" (stopped at {spent / 60:.1f})" if early else ""), flush=True)

    def save(self) -> None:
        from dsf_lightning._fs import write_atomic

        write_atomic(self.out / f"{self.name}.json",
                     json.dumps({"name": self.name, "curve": self.curve, "at_budget": self.at_budget}, indent=1))


# ============================================================================================== the peer
def run_peer(tracker: Tracker, corpus, max_steps: int | None = None) -> dict:
    """pytorch/examples word_language_model (main.py + model.py, LSTM) as it trains, step for step."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class RNNModel(nn.Module):
        def __init__(self, ntoken: int, ninp: int, nhid: int, dropout: float) -> None:
            super().__init__()
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, 1)
            self.decoder = nn.Linear(nhid, ntoken)
            nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

        def forward(self, x, hidden):
            emb = self.drop(self.encoder(x))
            output, hidden = self.rnn(emb, hidden)
            return self.decoder(self.drop(output)), hidden

    torch.manual_seed(PEER["seed"])
    V = len(corpus.vocab)
    model = RNNModel(V, PEER["embedding"], PEER["hidden"], PEER["dropout"])
    train = batchify(corpus.splits["train"], PEER["batch"])
    val_data = batchify(corpus.splits["valid"], PEER["eval_batch"])
    lr, best_val, steps = PEER["lr"], None, 0
    parameters = sum(p.numel() for p in model.parameters())

    def make_step(streams: int):
        hidden = [None]

        def step(x):
            logits, hidden[0] = model(x, hidden[0])
            return logits
        return step

    tracker.start()
    while not tracker.done:
        model.train()
        hidden = None
        for i in range(0, train.size(0) - 1, PEER["bptt"]):
            seq = min(PEER["bptt"], train.size(0) - 1 - i)
            x, y = train[i: i + seq], train[i + 1: i + 1 + seq]
            hidden = None if hidden is None else tuple(h.detach() for h in hidden)
            model.zero_grad()
            logits, hidden = model(x, hidden)
            loss = F.cross_entropy(logits.view(-1, V), y.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), PEER["clip"])
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-lr)
            steps += 1
            tracker.after_step(y.numel(), model, make_step)
            if tracker.done or (max_steps is not None and steps >= max_steps):
                break
        if tracker.done or (max_steps is not None and steps >= max_steps):
            break
        model.eval()  # the peer's own end-of-epoch validation drives its schedule: counted
        val = evaluate(make_step(PEER["eval_batch"]), val_data, PEER["bptt"])
        if best_val is None or val < best_val:
            best_val = val
        else:
            lr /= 4.0
    return {"parameters": parameters, "steps": steps}


# ================================================================================================= ours
def measure_callback(tracker: Tracker, module):
    """The Lightning callback that measures ``module`` (a LanguageModelModule) for ``tracker`` after every step:
    with the averaged weights when the trainer has a PolyakAveraging callback (the weights the recipe's own
    validation reads and its checkpoints export), else with the training weights."""
    import lightning as L

    from dsf_lightning.training.callbacks import PolyakAveraging

    def make_step(streams: int):
        state = [None]

        def step(x):  # the peer's [T, B] layout -> ours [B, T]
            logits, state[0] = module.model(x.t().contiguous(), state[0])
            return logits.transpose(0, 1)
        return step

    class Measure(L.Callback):
        averaging: list = []  # the trainer's PolyakAveraging, found once at the start

        def on_train_start(self, trainer, pl_module) -> None:
            self.averaging = [cb for cb in trainer.callbacks if isinstance(cb, PolyakAveraging)]
            tracker.start()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            tokens = int(batch[0].numel())
            if self.averaging and tracker.due():
                with self.averaging[0].averaged(pl_module):
                    tracker.after_step(tokens, pl_module.model, make_step)
            else:
                tracker.after_step(tokens, pl_module.model, make_step)
            if tracker.done:
                trainer.should_stop = True

        def on_train_end(self, trainer, pl_module) -> None:  # stopped by the recipe's own rule before the last mark
            if self.averaging:
                with self.averaging[0].averaged(pl_module):
                    tracker.finish(pl_module.model, make_step)
            else:
                tracker.finish(pl_module.model, make_step)

    return Measure()


def run_ours(tracker: Tracker, recipe: str, data_root: str, overrides: list[str], workdir: Path) -> dict:
    """A recipe through the real LightningCLI and Trainer, measured by a callback after every step."""
    from dsf_lightning.cli import lightning_cli
    from dsf_lightning.training.allocator import malloc_tuned

    recipe_path = Path(recipe).resolve()  # before the chdir: a relative recipe names a file under the caller's folder
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    args = ["--config", str(recipe_path), f"--data.data_root={data_root}",
            "--trainer.enable_progress_bar=false", "--trainer.max_epochs=1000", *overrides]
    cli = lightning_cli(args, run=False)
    trainer, module, data = cli.trainer, cli.model, cli.datamodule
    trainer.callbacks.append(measure_callback(tracker, module))
    # what `dsf fit` does (the allocator tuning: ours ran at ~64% without it) is the module's training policy,
    # applied by trainer.fit at its setup (dsf_lightning.training.policy); it is never undone, so read after
    trainer.fit(module, data)
    tuned = malloc_tuned()
    shown = recipe_path.relative_to(ROOT) if recipe_path.is_relative_to(ROOT) else recipe_path
    return {"parameters": int(sum(p.numel() for p in module.parameters())), "steps": trainer.global_step,
            "recipe": str(shown), "overrides": overrides, "allocator_tuned": tuned}


# ================================================================================================ driver
def contender_main(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(1)
    from dsf_lightning.data.corpora import load_corpus

    corpus = load_corpus("ptb", data_root=args.data_root)
    valid = batchify(corpus.splits["valid"], PEER["eval_batch"])
    test = batchify(corpus.splits["test"], PEER["eval_batch"])
    if args.max_valid_tokens:
        valid, test = valid[: args.max_valid_tokens // PEER["eval_batch"]], test[: args.max_valid_tokens // PEER["eval_batch"]]
    budgets = tuple(b for b in args.budgets if b <= args.minutes) or (args.minutes,)
    tracker = Tracker(args.contender, Path(args.out), budgets, args.eval_every * 60, valid, test, PEER["bptt"])
    if args.contender == "peer":
        info = run_peer(tracker, corpus, max_steps=args.max_steps)
    else:
        info = run_ours(tracker, args.ours, args.data_root, shlex.split(args.ours_overrides or ""),
                        Path(args.out) / "ours-run")
    tracker.save()
    (Path(args.out) / f"{args.contender}.info.json").write_text(json.dumps(info, indent=1))
    return 0


def _below(values: dict, key: str) -> str:
    """``yes (-1.93)`` / ``no (+1.30)``: whether ours is below the peer on ``key``, and by how much."""
    if not values["peer"] or not values["ours"]:
        return ""
    diff = values["ours"][key] - values["peer"][key]
    return f"{'yes' if diff < 0 else 'no'} ({diff:+.2f})"


def report(out: Path, budgets: tuple[float, ...], command: str, record: dict | None = None) -> Path:
    """Both contenders' curves and budget tables -> ``time_to_quality.{json,md,png}``; ``record``: the
    :func:`~dsf_lightning._machine.machine_record` taken before the contenders started (default: one taken
    now), finished here with the load at the end."""
    from dsf_lightning._fs import write_atomic
    from dsf_lightning._machine import finish_record, machine_markdown, machine_record

    record = finish_record(machine_record(own_processes=2) if record is None else record)
    runs = {name: json.loads((out / f"{name}.json").read_text()) for name in ("peer", "ours")}
    info = {name: json.loads((out / f"{name}.info.json").read_text()) for name in ("peer", "ours")}
    lines = ["# Time to quality on PTB: validation / test perplexity against training CPU minutes", "",
             f"`{command}`", "",
             f"peer: pytorch/examples word_language_model LSTM, {info['peer']['parameters']:,} parameters; "
             f"ours: `{info['ours']['recipe']}` {' '.join(info['ours'].get('overrides') or [])}, "
             f"{info['ours']['parameters']:,} parameters. One thread each, started together.", "",
             f"Parameters ours / peer: {info['ours']['parameters'] / info['peer']['parameters']:.3f} "
             "(the issue asks for equal counts, +-1%).", "",
             "The machine (both contenders side by side, one thread each):", "", *machine_markdown(record), "",
             "| CPU minutes | peer best valid | peer test | ours best valid | ours test | ours below on valid | ours below on test |",
             "| ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for minutes in budgets:
        cells = []
        values = {}
        for name in ("peer", "ours"):
            rec = next((r for r in runs[name]["at_budget"] if r["minutes"] == minutes), None)
            values[name] = rec
            cells += [f"{rec['best_val_ppl']:.2f}", f"{rec['test_ppl']:.2f}"] if rec else ["", ""]
        verdicts = [_below(values, key) for key in ("best_val_ppl", "test_ppl")]
        lines.append(f"| {minutes:g} | " + " | ".join(cells + verdicts) + " |")
    trained = {name: [f"{r['tokens'] / 1e6:.2f}M" for r in runs[name]["at_budget"]] for name in ("peer", "ours")}
    lines += ["", f"Tokens trained by {', '.join(f'{m:g}' for m in budgets)} CPU minutes: peer {', '.join(trained['peer'])}; "
              f"ours {', '.join(trained['ours'])}."]
    for name in ("peer", "ours"):
        stopped = [r for r in runs[name]["at_budget"] if "stopped_at_cpu_seconds" in r]
        if stopped:
            marks = ", ".join(f"{r['minutes']:g}" for r in stopped)
            lines += ["", f"{name} stopped by its own rule (the recipe's EarlyStopping) at "
                          f"{stopped[0]['stopped_at_cpu_seconds'] / 60:.1f} CPU minutes: its rows at {marks} carry its "
                          "best by then."]
    speed = {name: tokens_per_cpu_second(runs[name]) for name in ("peer", "ours")}
    if speed["peer"]:
        lines += ["", f"How fast the machine ran: the peer, the same unmodified work in every report, trained "
                      f"{speed['peer']:,.0f} tokens per training CPU second (ours {speed['ours'] or 0:,.0f}). One machine can run it slower "
                      "on one day than on another: compare this number before comparing reports made on different days."]
    plot = _plot(runs, out / "time_to_quality.png")
    if plot:
        lines += ["", f"![validation perplexity against CPU minutes]({plot.name})"]
    md = write_atomic(out / "time_to_quality.md", "\n".join(lines) + "\n")
    write_atomic(out / "time_to_quality.json", json.dumps({"command": command, "machine": record, "runs": runs, "info": info,
                                                           "tokens_per_cpu_second": speed}, indent=1))
    return md


def tokens_per_cpu_second(run: dict) -> float | None:
    """A contender's training speed over its whole run: tokens / training CPU seconds at its last budget mark
    (the peer's is the gauge of how fast the machine ran that day); ``None`` before the first mark."""
    if not run["at_budget"]:
        return None
    last = run["at_budget"][-1]
    return last["tokens"] / last["cpu_seconds"] if last["cpu_seconds"] > 0 else None


def _plot(runs: dict, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100, layout="constrained")
    for name, run in runs.items():
        ax.plot([r["cpu_seconds"] / 60 for r in run["curve"]], [r["val_ppl"] for r in run["curve"]], "o-", ms=3,
                label=name)
    ax.set_xlabel("training CPU minutes (one thread)")
    ax.set_ylabel("validation perplexity")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    from dsf_lightning._fs import write_atomic

    try:
        return write_atomic(path, lambda f: fig.savefig(f, format="png"))
    finally:
        plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    doc = __doc__.split("\n\n")
    p = argparse.ArgumentParser(prog="python -m benchmarks.time_to_quality", description=doc[0],
                                epilog="\n\n".join(doc[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=80.0, help="training CPU minutes per contender (default 80)")
    p.add_argument("--budgets", type=float, nargs="+", default=list(BUDGETS), help="CPU minutes to report at")
    p.add_argument("--eval-every", type=float, default=5.0, help="CPU minutes between curve points (default 5)")
    p.add_argument("--ours", default=str(ROOT / "recipes" / "ptb" / "delta_rnn_medium.yaml"), help="our recipe")
    p.add_argument("--ours-overrides", default="", help="dsf fit overrides for our recipe, one string")
    p.add_argument("--data-root", default=DEFAULT_DATA_ROOT)
    p.add_argument("--out", type=Path, default=HERE / "time_to_quality")
    p.add_argument("--contender", choices=("peer", "ours"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--max-steps", type=int, default=None, help=argparse.SUPPRESS)  # tests: stop the peer early
    p.add_argument("--max-valid-tokens", type=int, default=None,
                   help="cut validation and test to this many tokens (the test suite's tiny run)")
    args = p.parse_args(argv)
    if args.minutes <= 0 or args.eval_every <= 0:
        p.error("--minutes and --eval-every must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.contender:
        return contender_main(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    argv = sys.argv[1:] if argv is None else argv
    command = "OMP_NUM_THREADS=1 python -m benchmarks.time_to_quality " + shlex.join(argv)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    from dsf_lightning._machine import machine_record

    record = machine_record(own_processes=2)  # before the two contenders start: the load is others' work
    children = [subprocess.Popen([sys.executable, "-m", "benchmarks.time_to_quality", *argv, "--contender", name],
                                 cwd=ROOT, env=env) for name in ("peer", "ours")]
    try:
        codes = [c.wait() for c in children]
    except BaseException:
        for c in children:
            c.terminate()
        raise
    if any(codes):
        print(f"a contender failed (exit codes {codes})", file=sys.stderr)
        return 1
    budgets = tuple(b for b in args.budgets if b <= args.minutes) or (args.minutes,)
    md = report(out, budgets, command, record)
    print(md.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
