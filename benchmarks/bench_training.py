"""Part 3: language-model training tokens/s through our Lightning loop against a minimal hand-written
PyTorch loop training the same model on the same windows: the framework's overhead.

Both train a fresh ``RecurrentLM`` (Delta-RNN, embedding = H, untied, no dropout; same seed) on the
first windows of real PTB (``[B, T]`` windows of ``B`` contiguous streams), with truncated BPTT
carrying the detached state, Adam (lr 1e-3) and gradient-norm clipping at 0.25:

* **Lightning**: ``LanguageModelModule`` + ``LanguageModelDataModule`` under ``lightning.Trainer``
  (CPU, logger, checkpointing, progress bar and model summary off, no validation);
* **hand loop**: ``for x, y in windows: loss = CE(model(x, state)); backward; clip; Adam step;
  state = detach(state)``.

Each run takes ``warmup + steps`` windows; the clock covers the last ``steps`` (from the end of the
warm-up steps to the end of the last optimizer step), so Trainer construction is not counted (it is
reported separately). Runs alternate between the two loops.

    OMP_NUM_THREADS=1 python -m benchmarks --only 3
"""

from __future__ import annotations

import time
import types

import torch
import torch.nn.functional as F

from . import _timing
from ._settings import Settings
from ._timing import PartResult, Row, Stat, Target, fmt_ratio, interleave, md_table

TARGET = 0.10  # Lightning's step time at most 10% above the hand loop's (issue 7)
CLIP, LR, SEED = 0.25, 1e-3, 0


def ptb_slice(settings: Settings, windows: int):
    """The PTB vocabulary and the first ``B * (windows * T + 1)`` training tokens (a corpus object)."""
    from dsf_lightning.data.corpora import load_corpus

    corpus = load_corpus("ptb", data_root=settings.data_root, splits=("train",))
    B, T = settings.lm_batch, settings.bptt
    train = corpus.splits["train"][: B * (windows * T + 1)].clone()
    return types.SimpleNamespace(name="ptb-slice", vocab=corpus.vocab, splits={"train": train, "valid": train[: B * (T + 1)]})


def model_options(settings: Settings, vocab_size: int) -> dict:
    H = settings.lm_hidden
    return dict(vocab_size=vocab_size, cell="delta-rnn", hidden_sizes=[H], embedding_size=H)


def _stamp() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


#: (CPU seconds, wall seconds) of the timed steps of the last run
last_steady: dict[str, float] = {}


def _steady(start: tuple[float, float], end: tuple[float, float]) -> float:
    """Seconds between two stamps on the suite's clock (both clocks kept in :data:`last_steady`)."""
    last_steady.update(cpu=end[0] - start[0], wall=end[1] - start[1])
    return last_steady["wall" if _timing.now is time.perf_counter else "cpu"]


def lightning_run(settings: Settings, corpus, totals: list):
    """One ``trainer.fit``; returns the seconds of the timed steps (and appends the whole fit's)."""
    import logging

    import lightning as L

    from dsf_lightning.training import LanguageModelModule
    from dsf_lightning.training.datamodule import LanguageModelDataModule

    warm, steps = settings.lm_warmup_steps, settings.lm_steps

    class Clock(L.Callback):
        def __init__(self):
            self.marks = {}

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if batch_idx in (warm - 1, warm + steps - 1):
                self.marks[batch_idx] = _stamp()

    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):  # "GPU available: False", tips
        logging.getLogger(name).setLevel(logging.WARNING)
    t0 = _timing.now()
    torch.manual_seed(SEED)
    data = LanguageModelDataModule(corpus, batch_size=settings.lm_batch, bptt=settings.bptt, eval_batch_size=1)
    module = LanguageModelModule(**model_options(settings, len(corpus.vocab)), optimizer="adam", lr=LR)
    clock = Clock()
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, max_steps=warm + steps, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, limit_val_batches=0, use_distributed_sampler=False,
        gradient_clip_val=CLIP, callbacks=[clock],
    )
    trainer.fit(module, datamodule=data)
    totals.append(_timing.now() - t0)
    return _steady(clock.marks[warm - 1], clock.marks[warm + steps - 1])


def hand_run(settings: Settings, corpus, totals: list):
    """The same training, written out: returns the seconds of the timed steps."""
    from dsf_lightning.data.streams import StreamWindows
    from dsf_lightning.model import LMConfig, RecurrentLM, detach_state

    warm, steps = settings.lm_warmup_steps, settings.lm_steps
    t0 = _timing.now()
    torch.manual_seed(SEED)
    model = RecurrentLM(LMConfig(**model_options(settings, len(corpus.vocab))))
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    windows = StreamWindows(corpus.splits["train"], settings.lm_batch, settings.bptt)
    state, marks = None, {}
    for i, (inputs, targets, _) in enumerate(windows):
        if i == warm + steps:
            break
        if state is None:
            state = model.init_state(inputs.shape[0])
        logits, state = model(inputs, state)  # [B, T, V]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        state = detach_state(state)
        if i in (warm - 1, warm + steps - 1):
            marks[i] = _stamp()
    totals.append(_timing.now() - t0)
    return _steady(marks[warm - 1], marks[warm + steps - 1])


ALLOCATOR_SCRIPT = r"""
import json, os, sys
import torch
torch.set_num_threads(1)
from benchmarks._settings import Settings
from benchmarks import bench_training as bt
from dsf_lightning.training.allocator import keep_freed_memory
keep_freed_memory()  # what `dsf fit` does (DSF_MALLOC_TUNING=0: nothing)
settings = Settings.for_mode(sys.argv[1], data_root=sys.argv[2])
corpus = bt.ptb_slice(settings, settings.lm_warmup_steps + settings.lm_steps)
t0 = os.times()
bt.lightning_run(settings, corpus, [])
t1 = os.times()
print(json.dumps({**bt.last_steady, "user": t1.user - t0.user, "sys": t1.system - t0.system}))
"""


def allocator_effect(settings: Settings, rounds: int) -> tuple[list[Row], str]:
    """The Lightning loop in fresh processes with ``DSF_MALLOC_TUNING`` 1 (the default) and 0,
    alternating: what :func:`~dsf_lightning.training.allocator.keep_freed_memory` is worth."""
    import os

    from dsf_lightning.training.allocator import MALLOC_TUNING_ENV

    runs: dict[str, list[dict]] = {"tuned (default)": [], "glibc default (DSF_MALLOC_TUNING=0)": []}
    old = os.environ.get(MALLOC_TUNING_ENV)
    try:
        for r in range(rounds):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            for name in order:
                os.environ[MALLOC_TUNING_ENV] = "1" if name.startswith("tuned") else "0"
                runs[name].append(_timing.run_fresh(ALLOCATOR_SCRIPT, settings.mode, settings.data_root))
    finally:
        if old is None:
            os.environ.pop(MALLOC_TUNING_ENV, None)
        else:
            os.environ[MALLOC_TUNING_ENV] = old
    B, T, steps = settings.lm_batch, settings.bptt, settings.lm_steps
    tokens = B * T * steps
    base = "glibc default (DSF_MALLOC_TUNING=0)"
    rows, body = [], []
    for name, rs in runs.items():
        cpu, wall = Stat([r["cpu"] for r in rs]), Stat([r["wall"] for r in rs])
        ratio_cpu = Stat([b["cpu"] / a["cpu"] for a, b in zip(rs, runs[base])])
        ratio_wall = Stat([b["wall"] / a["wall"] for a, b in zip(rs, runs[base])])
        sys_share = Stat([r["sys"] / (r["user"] + r["sys"]) for r in rs])
        case = "Lightning loop, fresh process per run"
        rows.append(Row(3, case, name, "train tokens/s (CPU time)", "tokens/s", cpu.inverse(tokens), base, ratio_cpu))
        rows.append(Row(3, case, name, "train tokens/s (wall time)", "tokens/s", wall.inverse(tokens), base, ratio_wall))
        rows.append(Row(3, case, name, "kernel (sys) share of the process CPU time", "fraction", sys_share))
        body.append([name, f"{tokens / cpu.median:,.0f}", fmt_ratio(ratio_cpu), f"{tokens / wall.median:,.0f}",
                     fmt_ratio(ratio_wall), f"{sys_share.median:.0%}"])
    md = ("The allocator: the same Lightning run in fresh processes, with the module's glibc tuning "
          "(`keep_freed_memory`: large blocks reused instead of mmap'ed and page-faulted in every step) "
          f"and without it (`DSF_MALLOC_TUNING=0`), alternating, {rounds} runs each:\n\n"
          + md_table(["allocator", "tokens/s (CPU)", "vs glibc default", "tokens/s (wall)", "vs glibc default (wall)",
                      "sys share of CPU time"], body))
    return rows, md


def run(settings: Settings) -> PartResult:
    t_start = time.perf_counter()
    B, T, H, steps = settings.lm_batch, settings.bptt, settings.lm_hidden, settings.lm_steps
    try:
        corpus = ptb_slice(settings, settings.lm_warmup_steps + steps)
    except Exception as err:  # noqa: BLE001 - no corpus here: say so instead of failing the suite
        note = f"skipped: PTB not found under {settings.data_root} ({type(err).__name__}: {err})"
        return PartResult(3, "Lightning training loop vs a hand-written loop", note,
                          [Row(3, "ptb", "Lightning", "train tokens/s", "tokens/s", note=note)],
                          [Target("Lightning loop overhead vs hand loop", "not measured", f"<= {TARGET:.0%}", None)],
                          time.perf_counter() - t_start)
    totals = {"Lightning": [], "hand loop": []}
    timings = interleave(
        {"Lightning": lambda: lightning_run(settings, corpus, totals["Lightning"]),
         "hand loop": lambda: hand_run(settings, corpus, totals["hand loop"])},
        rounds=settings.lm_rounds, warmup=settings.lm_warmup_runs, self_timed=True,
    )
    tokens = steps * B * T
    case = f"PTB delta-rnn H={H} V={len(corpus.vocab)} B={B} T={T}, {steps} timed steps"
    rows, body = [], []
    for name in ("Lightning", "hand loop"):
        rate = timings.rate(name, tokens)
        ratio = timings.speedup(name, "hand loop")
        total = Stat(totals[name][settings.lm_warmup_runs:])
        rows.append(Row(3, case, name, "train tokens/s (steady state)", "tokens/s", rate, "hand loop", ratio))
        rows.append(Row(3, case, name, "whole run seconds (incl. set-up)", "s", total))
        body.append([name, f"{rate.median:,.0f} ({rate.min:,.0f}-{rate.max:,.0f})", fmt_ratio(ratio, 3),
                     f"{rate.median and 1e3 * tokens / rate.median / steps:.1f}", f"{total.median:.2f}"])
    overhead = timings.per_round(lambda i: timings.rounds["Lightning"][i] / timings.rounds["hand loop"][i] - 1)
    md = (
        f"{case}; Adam lr {LR}, gradient-norm clip {CLIP}; {settings.lm_rounds} alternating runs of each "
        f"({settings.lm_warmup_steps} warm-up steps + {steps} timed steps per run).\n\n"
        + md_table(["loop", "tokens/s (steady)", "speed vs hand loop", "ms / step", "whole run s (incl. set-up)"], body)
        + f"\n\nLightning's overhead per step: {overhead.median:+.1%} (range {overhead.min:+.1%} to {overhead.max:+.1%}) "
        f"of the hand loop's step time; target <= {TARGET:.0%}."
    )
    if settings.allocator_rounds:
        alloc_rows, alloc_md = allocator_effect(settings, settings.allocator_rounds)
        rows += alloc_rows
        md += "\n\n" + alloc_md
    target = Target("Lightning loop step-time overhead vs a hand-written loop",
                    f"{overhead.median:+.1%} ({overhead.min:+.1%} to {overhead.max:+.1%})",
                    f"<= {TARGET:.0%}", overhead.median <= TARGET)
    return PartResult(3, "Lightning training loop vs a hand-written loop (real PTB)", md, rows, [target],
                      time.perf_counter() - t_start)
