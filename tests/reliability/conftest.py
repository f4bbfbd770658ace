"""Shared pieces of the reliability tests: a hypothesis profile, a count of the hostile cases each entry
point received (printed in pytest's summary), tiny corpora and models."""

from __future__ import annotations

import collections
import random
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Every property test here says how many examples it wants; the profile only turns off what would make
# them slow or flaky on a loaded machine (no deadline: one core is shared with other jobs).
settings.register_profile(
    "reliability",
    deadline=None,
    derandomize=True,  # the same cases on every run: a CI failure reproduces locally
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    print_blob=True,
)

COUNTS: collections.Counter = collections.Counter()


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """An importable module whose import creates a marker (as a malicious package would run code)."""
    marker = tmp_path / "IMPORTED"
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "dsf_planted_plugin.py").write_text(textwrap.dedent(f"""
        import lightning as L
        open({str(marker)!r}, "w").close()

        class Hook(L.Callback):
            pass
    """))
    monkeypatch.syspath_prepend(str(folder))
    return marker


@pytest.fixture
def hostile_counts() -> collections.Counter:
    """Add the number of hostile cases a test fed to an entry point: ``hostile_counts[name] += 1``."""
    return COUNTS


def pytest_terminal_summary(terminalreporter):
    if not COUNTS:
        return
    terminalreporter.section("hostile inputs per entry point")
    cases = {k: n for k, n in COUNTS.items() if not k.startswith("known defect")}
    for name, n in sorted(cases.items()):
        terminalreporter.write_line(f"{n:6d}  {name}")
    terminalreporter.write_line(f"{sum(cases.values()):6d}  total")
    defects = {k: n for k, n in COUNTS.items() if k.startswith("known defect")}
    if defects:
        terminalreporter.write_line("of which ended in a known (reported) defect instead of a documented error:")
        for name, n in sorted(defects.items()):
            terminalreporter.write_line(f"{n:6d}  {name[len('known defect: '):]}")


def write_text_folder(root: Path, seed: int = 0, lines: int = 120) -> Path:
    """A tiny word-level text-folder corpus (train / valid / test .txt)."""
    rng = random.Random(seed)
    words = "the cat sat on a mat and the dog ran far away from home".split()
    root.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", lines), ("valid", lines // 4), ("test", lines // 4)):
        text = []
        for _ in range(n):
            start = rng.randrange(len(words))
            text.append(" ".join(words[(start + i) % len(words)] for i in range(rng.randint(3, 9))))
        (root / f"{split}.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def text_folder(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("DSF_CACHE_DIR", str(tmp_path / "dsf-cache"))
    return write_text_folder(tmp_path / "corpus")


# ----------------------------------------------------------------------------------------------- guards
class Hang(BaseException):
    """Raised by :func:`within` when a call outlives its time limit (a BaseException, so library code
    that catches Exception cannot swallow it)."""


class within:
    """``with within(seconds):`` fails the test with :class:`Hang` instead of hanging (SIGALRM timer)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def _alarm(self, signum, frame):
        raise Hang(f"still running after {self.seconds} s: a hang")

    def __enter__(self):
        import signal

        self._old = signal.signal(signal.SIGALRM, self._alarm)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        import signal

        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._old)
        return False


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def tiny_pretrained(kind: str = "word", seed: int = 0):
    """A tiny randomly initialised model: ``word`` (open vocabulary, with <unk>), ``char`` (closed,
    plain characters) or ``char-ptb`` (closed, PTB-char format)."""
    import torch

    from dsf_lightning.data.tokenizers import get_tokenizer
    from dsf_lightning.data.vocab import Vocabulary
    from dsf_lightning.model import LMConfig, RecurrentLM
    from dsf_lightning.model.pretrained import Pretrained

    if kind == "word":
        symbols, unk, tok = ["<eos>", "<unk>", *"the cat sat on a mat and dog ran far".split()], "<unk>", get_tokenizer("word")
    else:
        symbols, unk = ["<eos>", "_", *"abcdefghijk"], None
        tok = get_tokenizer("char", mode="plain" if kind == "char" else "ptb")
    torch.manual_seed(seed)
    model = RecurrentLM(LMConfig(vocab_size=len(symbols), hidden_sizes=[8], embedding_size=8, tie_weights=True))
    model.eval()
    return Pretrained(model=model, vocab=Vocabulary(symbols, eos="<eos>", unk=unk), tokenizer=tok, info={"corpus": "toy"})


# ----------------------------------------------------------------------------------------------- known defects
def raised_in(err: BaseException) -> str:
    """The file of the frame that raised ``err``."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    return frames[-1].filename if frames else ""


# Defects found by these tests in code this suite does not own: they are reported, counted as
# "known defect: ..." in the summary and tolerated; anything else that escapes fails the test. Each
# must have a deterministic reproducer marked xfail(strict=True), which turns red once it is fixed.
# Entry format: "what goes wrong": lambda err: <True when err is that defect>. None is known at present.
KNOWN_DEFECTS: dict = {}


def tolerate_known(err: BaseException, counts, *allowed: str) -> None:
    """Count ``err`` as one of the ``allowed`` known defects, or re-raise it."""
    for name in allowed:
        if KNOWN_DEFECTS[name](err):
            counts[f"known defect: {name}"] += 1
            return
    raise err
