"""Helpers shared by the data-layer tests."""

from pathlib import Path

import pytest


def need(root: Path, *relpaths: str) -> None:
    """Skip unless every file exists under the data root."""
    missing = [p for p in relpaths if not (root / p).exists()]
    if missing:
        pytest.skip(f"corpus files absent: {missing}")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
