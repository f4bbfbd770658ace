"""``keep_freed_memory``: the glibc tuning LanguageModelModule.setup applies (benchmarks part 3 measures
what it is worth: the kernel's page faults on every step's large buffers), and its opt-out."""

import platform
import sys

import pytest

from dsf_lightning.training import allocator as lm


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_applied_on_glibc(monkeypatch):
    monkeypatch.delenv(lm.MALLOC_TUNING_ENV, raising=False)
    monkeypatch.setattr(lm, "_malloc_tuned", False)
    assert lm.keep_freed_memory() is True
    assert lm.keep_freed_memory() is True  # idempotent


def test_opt_out(monkeypatch):
    monkeypatch.setenv(lm.MALLOC_TUNING_ENV, "0")
    monkeypatch.setattr(lm, "_malloc_tuned", False)
    assert lm.keep_freed_memory() is False
