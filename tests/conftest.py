"""Test-wide settings: no network (the Hub client reads these at import), one thread per process."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402 - after the environment above, which the Hub client reads at import


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A tiny text-folder corpus (train / valid / test) for CLI runs that only need something to read."""
    folder = tmp_path_factory.mktemp("tiny_corpus")
    text = "the cat sat on the mat\nthe dog sat on the log\n" * 40
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text(text)
    return folder
