"""Fixtures for the sequence-task tests.

Real data (MNIST, Fashion-MNIST, IMDB) comes from ``DSF_DATA_ROOT`` (default ``/work/shared/data``); tests
that read it are marked ``corpus`` and skipped when the files are absent.
"""

import os
from pathlib import Path

import pytest
import torch

DEFAULT_DATA_ROOT = "/work/shared/data"


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = Path(os.environ.get("DSF_DATA_ROOT") or DEFAULT_DATA_ROOT)
    if not root.is_dir():
        pytest.skip(f"no data folder at {root} (set DSF_DATA_ROOT)")
    return root


def need(root: Path, *relpaths: str) -> None:
    missing = [p for p in relpaths if not (root / p).exists()]
    if missing:
        pytest.skip(f"data files absent: {missing}")


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
