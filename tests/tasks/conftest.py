"""Fixtures for the sequence-task tests.

Real data (MNIST, Fashion-MNIST, IMDB) comes from ``DSF_DATA_ROOT`` (default ``/work/shared/data``); tests
that read it are marked ``corpus`` and skipped when the files are absent.
"""

import json
import lzma
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


WORDS = [f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(30)]  # waa, wab, ...: the normalizer keeps them


def write_numbered_imdb(root, n_words=30):
    """Two reviews per split whose words are the letters-only WORDS[:n_words] (so a cut shows which end it kept)."""
    (root / "imdb").mkdir(parents=True)
    for split in ("train", "test"):
        with lzma.open(root / "imdb" / f"{split}.jsonl.xz", "wt", encoding="utf-8") as f:
            for label in (0, 1):
                f.write(json.dumps({"id": label, "rating": 9 if label else 2, "label": label,
                                    "text": " ".join(WORDS[:n_words])}) + "\n")
    return root
