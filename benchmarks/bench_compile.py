"""Part 7: ``torch.compile`` (``LanguageModelModule(compile=True)``) against the uncompiled model, side by
side in one run: a training step (forward, loss, backward) and scoring (forward and summed NLL without
gradients) of a word-level LM (PTB-sized vocabulary) on the default fast paths, tokens/s and the
compile seconds (the first call's wall time less a steady-state call's).

Under compilation the fast paths give up their oneDNN products (inductor cannot lower oneDNN's op on a
weight it does not own) and dynamo traces the rest; the ratio says what that trade is worth here.

    OMP_NUM_THREADS=1 python -m benchmarks --only 7
    OMP_NUM_THREADS=1 python benchmarks/bench_compile.py --quick    # this part alone
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._settings import Settings  # noqa: E402
from benchmarks._timing import PartResult, Row, Stat, fmt_ratio, interleave, md_table  # noqa: E402


def _modules(cell: str, settings: Settings):
    """The same model (same initial weights) uncompiled and with ``compile=True``."""
    import torch

    from dsf_lightning.training import LanguageModelModule

    out = {}
    for name, flag in (("eager", False), ("compiled", True)):
        torch.manual_seed(0)
        out[name] = LanguageModelModule(
            vocab_size=settings.compile_vocab, cell=cell, hidden_sizes=settings.lm_hidden, compile=flag
        )
    return out


def run(settings: Settings) -> PartResult:
    import torch

    t_start = time.perf_counter()
    B, T, V = settings.lm_batch, settings.bptt, settings.compile_vocab
    g = torch.Generator().manual_seed(0)
    inputs = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    rows, body = [], []
    for cell in settings.compile_cells:
        torch._dynamo.reset()
        modules = _modules(cell, settings)
        state = modules["eager"].model.init_state(B)

        def train(m):
            def step():
                m.model.zero_grad(set_to_none=True)
                loss, _ = m._training_loss(inputs, targets, state)
                loss.backward()
            return step

        def score(m):
            def step():
                with torch.no_grad():
                    m._evaluation_step("test", (inputs, targets, torch.tensor(0)))
            return step

        case = f"{cell}, H={settings.lm_hidden}, V={V:,}, B={B}, T={T}"
        for what, make in (("training step", train), ("scoring", score)):
            contenders = {name: make(m) for name, m in modules.items()}
            first = {}
            for name, fn in contenders.items():  # the first call compiles (wall clock: inductor may fork)
                t0 = time.perf_counter()
                fn()
                first[name] = time.perf_counter() - t0
            t = interleave(contenders, rounds=settings.compile_rounds, warmup=1)
            compile_s = first["compiled"] - t["compiled"].median
            ratio = t.speedup("compiled", "eager")
            for name in contenders:
                rate = t.rate(name, B * T)
                rows.append(Row(7, f"{case}: {what}", name, "tokens/s", "tokens/s", rate, "eager" if name == "compiled" else "",
                                ratio if name == "compiled" else None))
            rows.append(Row(7, f"{case}: {what}", "compiled", "compile seconds (first call less a steady one)",
                            "s", Stat([compile_s])))
            body.append([cell, what, f"{t.rate('eager', B * T).median:,.0f}", f"{t.rate('compiled', B * T).median:,.0f}",
                         fmt_ratio(ratio), f"{compile_s:.1f}"])
    md = (f"torch.compile (LanguageModelModule compile=true, inductor) vs uncompiled, {settings.compile_rounds} rounds; "
          "steady state after the first call:\n\n"
          + md_table(["cell", "work", "eager tokens/s", "compiled tokens/s", "compiled vs eager", "compile s"], body))
    return PartResult(7, "torch.compile: training step and scoring vs uncompiled, and the compile time", md, rows, [],
                      time.perf_counter() - t_start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    print(run(Settings.for_mode("quick" if args.quick else "full")).markdown)


if __name__ == "__main__":
    main()
