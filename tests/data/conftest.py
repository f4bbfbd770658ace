"""Fixtures for the data-layer tests.

Real corpora come from ``DSF_DATA_ROOT`` (default ``/work/shared/data``); tests that read them are
marked ``corpus`` and skipped when the folder or the corpus is absent. Every test gets its own
tokenized-cache dir (``DSF_CACHE_DIR``), so nothing is written to the user's ~/.cache.
"""

import os
from pathlib import Path

import pytest

DEFAULT_DATA_ROOT = "/work/shared/data"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DSF_CACHE_DIR", str(tmp_path / "dsf-cache"))


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = Path(os.environ.get("DSF_DATA_ROOT") or DEFAULT_DATA_ROOT)
    if not root.is_dir():
        pytest.skip(f"no corpus folder at {root} (set DSF_DATA_ROOT)")
    return root


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """One cache dir for the whole session, so a corpus is tokenized once across tests."""
    return tmp_path_factory.mktemp("tokenized")

