"""``--trainer.precision auto``: fp32 or bf16-mixed, whichever trains faster on this machine (issue 39).

Whether bf16 pays depends on the CPU: with AMX tile instructions bf16 matrix products are several times
fp32's; with AVX-512 BF16 alone bf16-mixed measured 1.35x *slower* than fp32 (autocast's casts cost more than
the products save), and without either it is slower still. So ``auto`` is resolved by measurement before the
Trainer is built (Lightning's ``Trainer(precision=...)`` takes no ``"auto"``):

* a language model on the CPU: a few training windows of the actual model at the actual batch shape
  (``data.batch_size`` streams x ``data.bptt`` steps, random token ids) through a throwaway Lightning Trainer
  on a copy of the module, once in ``32-true`` and once in ``bf16-mixed``, timed in process CPU seconds (what
  the CPU-time budgets count); bf16-mixed is taken when it is at least :data:`MARGIN` faster (within the
  noise, full precision is kept). A run that starts on a sampled loss (``sampled_loss_epochs``) and then trains
  the full softmax is timed in both objectives and the rates weighed by the epochs each takes of
  ``max_epochs``: the two can disagree (on a Xeon with AMX fp32 and bf16-mixed tied on the sampled softmax,
  while bf16-mixed ran the full one 1.5x-1.9x faster), and the full softmax is most of such a run;
* where that cannot be timed (a GPU, a sequence-task module, several processes, a timing that failed): from the hardware. A
  CUDA GPU that supports bf16 -> bf16-mixed; a CPU with AMX BF16 -> bf16-mixed; else 32-true.

One log line says which, the two measured rates and why. :func:`choose_precision` takes the timing as an
argument, so a test can give it a stand-in.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import tempfile
import time
import types
import typing
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

AUTO = "auto"
FP32, BF16 = "32-true", "bf16-mixed"
#: bf16-mixed must be this much faster (rate ratio - 1) to be chosen over fp32
MARGIN = 0.05
#: a timing: precision -> training tokens per CPU second
Timing = Callable[[str], float]


@dataclass(frozen=True)
class PrecisionChoice:
    """What ``auto`` resolved to, the rates measured (tokens per CPU second; None when not measured) and why."""

    precision: str
    rates: dict[str, float] | None
    reason: str

    def line(self) -> str:
        """The one log line: ``precision auto -> 32-true: fp32 2,273 tokens/CPU s, bf16-mixed 1,690 (...)``."""
        measured = (f"{FP32} {self.rates[FP32]:,.0f} tokens/CPU s, {BF16} {self.rates[BF16]:,.0f}; "
                    if self.rates else "")
        return f"precision auto -> {self.precision}: {measured}{self.reason}"


def choose_precision(timing: Timing) -> PrecisionChoice:
    """The faster of fp32 and bf16-mixed by ``timing`` (bf16-mixed only when :data:`MARGIN` faster)."""
    rates = {FP32: float(timing(FP32)), BF16: float(timing(BF16))}
    ratio = rates[BF16] / rates[FP32]
    if ratio > 1 + MARGIN:
        return PrecisionChoice(BF16, rates, f"bf16-mixed measured {ratio:.2f}x fp32's rate on this machine")
    why = (f"fp32 measured {1 / ratio:.2f}x bf16-mixed's rate on this machine" if ratio < 1 else
           f"bf16-mixed measured only {ratio:.2f}x fp32's rate (under the {MARGIN:.0%} margin): full precision kept")
    return PrecisionChoice(FP32, rates, why)


def choose_from_hardware(device_type: str, why_not_timed: str) -> PrecisionChoice:
    """``auto`` without a timing: bf16-mixed on a CUDA GPU that supports bf16 or a CPU with AMX BF16, else fp32."""
    import torch

    from .._machine import isa_flags

    if device_type == "cuda":
        if not torch.cuda.is_available():
            return PrecisionChoice(FP32, None, f"{why_not_timed}; no CUDA GPU is visible")
        if torch.cuda.is_bf16_supported():
            return PrecisionChoice(BF16, None, f"{why_not_timed}; {torch.cuda.get_device_name()} supports bf16")
        return PrecisionChoice(FP32, None, f"{why_not_timed}; this GPU does not support bf16")
    if device_type == "cpu":
        if isa_flags().get("amx_bf16"):
            return PrecisionChoice(BF16, None, f"{why_not_timed}; this CPU has AMX BF16 (fast bf16 matrix products)")
        return PrecisionChoice(FP32, None, f"{why_not_timed}; this CPU has no AMX BF16, where bf16-mixed measured "
                               "slower than fp32 (AVX-512 BF16 alone: 1.35x slower)")
    return PrecisionChoice(FP32, None, f"{why_not_timed}; no bf16 rule for a {device_type} device")


def run_rate(epochs: dict[str, float], rates: dict[str, float]) -> float:
    """Tokens per CPU second over a run that trains ``epochs[name]`` epochs at ``rates[name]`` each: the epochs
    over the summed time (a weighted harmonic mean; epochs of equal tokens)."""
    return sum(epochs.values()) / sum(n / rates[name] for name, n in epochs.items())


def language_model_timing(module, batch_size: int, bptt: int, *, windows: int = 3, warmup: int = 1,
                          max_epochs: int | None = None) -> Timing:
    """Tokens per CPU second of ``module`` (a LanguageModelModule) training ``windows`` windows of ``batch_size``
    x ``bptt`` random tokens after ``warmup`` untimed ones, through a throwaway Lightning Trainer on a copy of
    the module at the given precision. The module itself and torch's random state are left as they were.

    With a sampled start (the module's ``objective_epochs``) each objective is timed on its own copy (the full softmax's
    with the sampled loss taken off) and the rate is the whole run's: epochs over the summed CPU time, each
    objective's epochs at its own rate. ``timing.basis`` says so for the log line.

    The random tokens come as a datamodule whose corpus's training split they are, so what the module's
    ``setup`` reads from the corpus (a sampled loss's unigram noise) is there."""
    import lightning as L
    import torch
    from torch.utils.data import DataLoader

    total = warmup + windows
    ids = torch.randint(int(module.hparams.vocab_size), (batch_size, total * bptt + 1),
                        generator=torch.Generator().manual_seed(0))
    batches = [(ids[:, i * bptt:(i + 1) * bptt], ids[:, i * bptt + 1:(i + 1) * bptt + 1], i) for i in range(total)]

    class RandomTokens(L.LightningDataModule):
        corpus = types.SimpleNamespace(splits={"train": ids.reshape(-1)})

        def train_dataloader(self):
            return DataLoader(batches, batch_size=None)

    phases = module.objective_epochs(max_epochs)

    def timing(precision: str) -> float:
        return run_rate(phases, {name: objective_rate(precision, full_softmax=name == "full") for name in phases})

    def objective_rate(precision: str, full_softmax: bool) -> float:
        copy_ = copy.deepcopy(module)
        if full_softmax:
            copy_.sampled_loss = None  # trains as after the sampled start: the exact softmax over the vocabulary
        spans: list[float] = []

        class Stamp(L.Callback):
            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
                self.started = time.process_time()

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
                spans.append(time.process_time() - self.started)  # forward, backward and the optimizer step

        with tempfile.TemporaryDirectory() as root, _quiet(), torch.random.fork_rng(devices=[]):
            trainer = L.Trainer(accelerator="cpu", devices=1, precision=precision, max_steps=total, max_epochs=1,
                                callbacks=[Stamp()], logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                                num_sanity_val_steps=0, use_distributed_sampler=False, default_root_dir=root)
            trainer.fit(copy_, datamodule=RandomTokens())
        timed = spans[warmup:]
        if len(timed) < windows:
            raise RuntimeError(f"{len(spans)} of {total} windows ran")
        return windows * batch_size * bptt / max(sum(timed), 1e-9)

    if len(phases) > 1:
        timing.basis = (f"timed apart and weighed by epochs: {phases['sampled']:g} of {sum(phases.values()):g} "
                        "with the sampled loss, the rest the full softmax")
    return timing


@contextlib.contextmanager
def _quiet():
    """The throwaway Trainer's banners and warnings kept out of the run's log."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def device_type_of(accelerator: Any) -> str:
    """``cpu``, ``cuda``, ``mps``, ... for a Trainer's ``accelerator`` value (a name or an Accelerator)."""
    import torch

    name = accelerator if isinstance(accelerator, str) else type(accelerator).__name__.lower().replace("accelerator", "")
    name = (name or "auto").lower()
    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        return "mps" if mps is not None and mps.is_available() else "cpu"
    return "cuda" if name == "gpu" else name


def several_processes(trainer_config) -> bool:
    """Whether the Trainer would run more than one process (``devices`` > 1 or ``num_nodes`` > 1): each would time
    on its own and might choose another precision than the others."""
    devices, nodes = trainer_config.get("devices"), trainer_config.get("num_nodes") or 1
    if int(nodes) != 1:
        return True
    if isinstance(devices, (list, tuple)):
        return len(devices) > 1
    text = str(devices if devices is not None else "auto").strip()
    if text in ("auto", ""):
        return False
    if "," in text:
        return len([d for d in text.split(",") if d.strip()]) > 1
    try:
        return int(text) > 1 or int(text) == -1
    except ValueError:
        return False


def resolve_auto_precision(trainer_config, module, datamodule, timing: Timing | None = None) -> dict[str, str]:
    """``{"precision": ...}`` for the Trainer when ``trainer_config``'s precision is ``auto``, else ``{}``;
    logs the choice. ``timing`` (default: :func:`language_model_timing` on ``module`` at ``datamodule``'s batch
    shape, on the CPU) is injectable for tests."""
    from lightning.pytorch.utilities import rank_zero_info

    if trainer_config.get("precision") != AUTO:
        return {}
    device = device_type_of(trainer_config.get("accelerator") or "auto")
    shape = (getattr(datamodule, "batch_size", None), getattr(datamodule, "bptt", None))
    several = several_processes(trainer_config)
    if timing is None and device == "cpu" and not several and hasattr(module, "hparams") \
            and "vocab_size" in module.hparams and all(isinstance(n, int) for n in shape):
        timing = language_model_timing(module, *shape, max_epochs=trainer_config.get("max_epochs"))
    if several:  # every process decides the same way, from the same hardware
        choice = choose_from_hardware(device, "not timed (several processes, each would time on its own)")
    elif timing is None:
        why = "not timed on a GPU" if device != "cpu" else "not timed (a language model's batch shape is needed)"
        choice = choose_from_hardware(device, why)
    else:
        try:
            choice = choose_precision(timing)
            if getattr(timing, "basis", None):
                choice = dataclasses.replace(choice, reason=f"{choice.reason} ({timing.basis})")
        except Exception as err:  # noqa: BLE001 - any failure of the throwaway run: decide without it, say why
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            choice = choose_from_hardware(device, f"timing failed ({reason[:200]})")
    rank_zero_info(choice.line())
    return {"precision": choice.precision}


def allow_auto_precision(parser) -> None:
    """Let ``--trainer.precision`` (and a recipe's ``trainer: precision:``) take ``auto``: Lightning's type for it is
    a Literal of its own values, so ``auto`` is added to it; :func:`resolve_auto_precision` replaces it before
    the Trainer is built."""
    action = next((a for a in getattr(parser, "_actions", ()) if getattr(a, "dest", None) == "trainer.precision"), None)
    hint = getattr(action, "_typehint", None)
    if hint is None:
        return
    action._typehint = typing.Union[hint, typing.Literal[AUTO]]  # noqa: UP007 - a runtime type for jsonargparse
    action.help = (action.help or "") + (
        "\n'auto' (dsf): times a few training windows in 32-true and bf16-mixed on this machine and takes the "
        "faster (a GPU: bf16-mixed where it supports bf16); the log says which and why.")
