"""save_pretrained is atomic: a failure, or a kill, mid-save leaves the previous folder intact and loadable."""

import subprocess
import sys
import textwrap

import pytest
import torch

from dsf_lightning.hub import folder as hub_format
from dsf_lightning.model.pretrained import load_pretrained, save_pretrained

from .conftest import logits_of, tiny_pretrained


def _visible(path):
    return sorted(p.name for p in path.iterdir() if not p.name.startswith("."))


def test_failure_mid_save_keeps_the_previous_folder(tmp_path, tokens, monkeypatch):
    old, new = tiny_pretrained(seed=0), tiny_pretrained(seed=1)
    folder = save_pretrained(old, tmp_path / "model")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    real_write = hub_format.write_file

    def failing_write(path, text):
        if path.name == "tokenizer.json":  # the weights and the vocabulary are already written
            raise OSError(28, "No space left on device")
        real_write(path, text)

    monkeypatch.setattr(hub_format, "write_file", failing_write)
    with pytest.raises(OSError, match="No space left"):
        save_pretrained(new, folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert torch.equal(logits_of(load_pretrained(folder).model, tokens), logits_of(old.model, tokens))
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # the temporary folder was removed

    monkeypatch.setattr(hub_format, "write_file", real_write)
    save_pretrained(new, folder)  # a later save replaces it
    assert torch.equal(logits_of(load_pretrained(folder).model, tokens), logits_of(new.model, tokens))
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_a_process_killed_mid_save_leaves_the_previous_folder(tmp_path, tokens):
    """A real SIGKILL after the weights are written and before the config: no cleanup code runs."""
    old = tiny_pretrained(seed=0)
    folder = save_pretrained(old, tmp_path / "model")
    script = textwrap.dedent(
        f"""
        import os, signal
        from dsf_lightning.hub import folder as hub_format
        from dsf_lightning.model.pretrained import save_pretrained
        from tests.hub.conftest import tiny_pretrained
        real = hub_format.write_file
        def write(path, text):
            if path.name == "config.json":
                os.kill(os.getpid(), signal.SIGKILL)
            real(path, text)
        hub_format.write_file = write
        save_pretrained(tiny_pretrained(seed=1), {str(folder)!r})
        """
    )
    from pathlib import Path

    result = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2], capture_output=True, text=True, timeout=120)
    assert result.returncode == -9, result.stderr
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".model.tmp-")]
    assert len(leftovers) == 1 and (leftovers[0] / "model.safetensors").exists()  # killed half-way indeed
    assert torch.equal(logits_of(load_pretrained(folder).model, tokens), logits_of(old.model, tokens))
    save_pretrained(tiny_pretrained(seed=2), folder)  # the leftover does not get in the way
    assert _visible(tmp_path) == ["model"]


def test_an_interrupted_swap_is_explained(tmp_path):
    """Where the folder swap is two renames (no renameat2), a kill between them leaves the previous
    version beside the target; loading the target then says where it is."""
    save_pretrained(tiny_pretrained(), tmp_path / "model")
    (tmp_path / "model").rename(tmp_path / ".model.old-123456")
    with pytest.raises(hub_format.PretrainedFormatError, match=r"\.model\.old-123456; rename it to model"):
        load_pretrained(tmp_path / "model")


def test_fallback_swap_without_renameat2(tmp_path, tokens, monkeypatch):
    from dsf_lightning.hub import _atomic

    monkeypatch.setattr(_atomic, "_exchange", lambda a, b: False)
    folder = save_pretrained(tiny_pretrained(seed=0), tmp_path / "model")
    new = tiny_pretrained(seed=1)
    save_pretrained(new, folder)
    assert torch.equal(logits_of(load_pretrained(folder).model, tokens), logits_of(new.model, tokens))
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_never_replaces_a_folder_that_is_not_a_model(tmp_path):
    precious = tmp_path / "thesis"
    precious.mkdir()
    (precious / "chapter1.tex").write_text("years of work")
    with pytest.raises(FileExistsError, match="not a dsf-lightning pretrained folder"):
        save_pretrained(tiny_pretrained(), precious)
    assert _visible(precious) == ["chapter1.tex"]
    assert [p.name for p in tmp_path.iterdir()] == ["thesis"]
    with pytest.raises(FileExistsError, match="not a folder"):
        (tmp_path / "file").write_text("x")
        save_pretrained(tiny_pretrained(), tmp_path / "file")


def test_saving_into_an_empty_folder_and_new_parents(tmp_path, tokens):
    (tmp_path / "empty").mkdir()
    save_pretrained(tiny_pretrained(), tmp_path / "empty")
    save_pretrained(tiny_pretrained(), tmp_path / "a" / "b" / "c")
    assert load_pretrained(tmp_path / "empty") and load_pretrained(tmp_path / "a" / "b" / "c")


def test_linux_swaps_the_folders_in_one_step(tmp_path):
    from dsf_lightning.hub import _atomic

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "from_a").touch()
    if not _atomic._exchange(tmp_path / "a", tmp_path / "b"):
        pytest.skip("renameat2(RENAME_EXCHANGE) is not available here: the two-rename fallback is used")
    assert (tmp_path / "b" / "from_a").exists() and not any((tmp_path / "a").iterdir())
