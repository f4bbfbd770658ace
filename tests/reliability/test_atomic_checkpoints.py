"""Checkpoint files are replaced atomically: a SIGKILL at any instant of a save leaves the previous
complete ``last.ckpt`` (or none before the first save), never a truncated one; the ``dsf`` CLI uses the
atomic writer by default."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

import pytest
import torch

from dsf_lightning.training.checkpoint_io import AtomicCheckpointIO, atomic_torch_save, remove_stale_temporaries

KILLS = 16
ELEMENTS = 4_000_000  # a 16 MB tensor: each save takes tens of milliseconds, so kills land inside saves


def _save_forever(path: str, first: int, use_lightning: str | None) -> None:
    """Child: save checkpoints {"k": k, "w": full(k)} to ``path`` until killed."""
    io = None
    if use_lightning:
        import tempfile

        from lightning.pytorch.plugins.io import TorchCheckpointIO

        tempfile.tempdir = use_lightning  # the system temp folder, on another file system than the checkpoint
        io = TorchCheckpointIO()
    k = first
    while True:
        checkpoint = {"k": k, "w": torch.full((ELEMENTS,), float(k))}
        if io is None:
            AtomicCheckpointIO().save_checkpoint(checkpoint, path)
        else:
            io.save_checkpoint(checkpoint, path)
        k += 1


def _kill_during_saves(tmp_path: Path, use_lightning: str | None, kills: int = KILLS) -> dict:
    """Start a saving child, SIGKILL it at a random moment, inspect last.ckpt; ``kills`` times."""
    path = tmp_path / "last.ckpt"
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(11)
    outcome = {"absent": 0, "intact": 0, "broken": 0, "mid_write": 0, "seen": set()}
    for round_ in range(kills):
        child = ctx.Process(target=_save_forever, args=(str(path), 1000 * round_, use_lightning), daemon=True)
        child.start()
        time.sleep(rng.uniform(0.05, 0.6))
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
        assert child.exitcode == -signal.SIGKILL
        if any(".tmp-" in p.name for p in tmp_path.iterdir()):
            outcome["mid_write"] += 1  # the kill landed inside an atomic save (its temporary file is left)
        if not path.exists():
            outcome["absent"] += 1
            continue
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
            assert bool((ckpt["w"] == float(ckpt["k"])).all()) and ckpt["w"].numel() == ELEMENTS
            outcome["intact"] += 1
            outcome["seen"].add(ckpt["k"])
        except Exception:  # noqa: BLE001 - any failure to load is a broken checkpoint
            outcome["broken"] += 1
    return outcome


def test_sigkill_during_big_atomic_saves_never_breaks_last_ckpt(tmp_path, hostile_counts):
    outcome = _kill_during_saves(tmp_path, use_lightning=None)
    hostile_counts["sigkill during atomic checkpoint save"] += KILLS
    print(f"\nAtomicCheckpointIO, {KILLS} SIGKILLs during saves: {outcome}")
    assert outcome["broken"] == 0
    assert outcome["intact"] + outcome["absent"] == KILLS
    assert outcome["mid_write"] >= KILLS // 4  # most kills really landed inside a save
    assert outcome["intact"] >= 1  # (how many distinct saves completed depends on the machine's speed)
    remove_stale_temporaries(tmp_path / "last.ckpt")
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # leftovers of dead writers are removed


@pytest.mark.skipif(
    not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == os.stat(os.environ.get("TMPDIR", "/tmp")).st_dev,
    reason="needs /dev/shm on another file system than the test's temporary folder",
)
def test_why_lightning_s_own_writer_is_not_enough_across_file_systems(tmp_path):
    """Lightning's TorchCheckpointIO stages the file in the *system* temp folder; when that is another
    file system, shutil.move copies into last.ckpt in place, and a kill during the copy truncates it.
    (A documentation test of the hazard AtomicCheckpointIO removes: it must not fail when the hazard
    happens not to be hit.)"""
    import shutil
    import tempfile

    staging = tempfile.mkdtemp(dir="/dev/shm", prefix="dsf-reliability-")  # killed saves leave orphans here
    try:
        outcome = _kill_during_saves(tmp_path, use_lightning=staging, kills=8)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"\nLightning TorchCheckpointIO with its temp folder on another file system, 8 kills: {outcome}")
    assert outcome["broken"] + outcome["intact"] + outcome["absent"] == 8


def test_a_failed_save_leaves_the_previous_file_and_no_temporary(tmp_path):
    path = tmp_path / "last.ckpt"
    atomic_torch_save({"k": 1}, path)

    def explode(obj, f):
        f.write(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_torch_save({"k": 2}, path, write=explode)
    assert torch.load(path, weights_only=True) == {"k": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_stale_temporaries_of_live_processes_and_other_hosts_are_kept(tmp_path):
    from dsf_lightning._fs import _host_tag

    path = tmp_path / "last.ckpt"
    mine_alive = tmp_path / f".last.ckpt.tmp-{_host_tag()}-{os.getpid()}-abc123"
    other_host = tmp_path / f".last.ckpt.tmp-elsewhere-{os.getpid() + 1}-abc123"
    dead = tmp_path / f".last.ckpt.tmp-{_host_tag()}-{2**22 + 12345}-abc123"  # beyond pid_max: no such process
    other_file = tmp_path / f".best.ckpt.tmp-{_host_tag()}-{2**22 + 12345}-abc123"
    for p in (mine_alive, other_host, dead, other_file):
        p.write_bytes(b"x")
    assert remove_stale_temporaries(path) == [dead]
    assert mine_alive.exists() and other_host.exists() and other_file.exists()


def test_the_dsf_cli_writes_checkpoints_with_the_atomic_writer(tmp_path, monkeypatch, text_folder):
    from lightning.pytorch.plugins.io import TorchCheckpointIO

    from dsf_lightning.cli import lightning_cli

    monkeypatch.chdir(tmp_path)
    base = ["--data.corpus", "text-folder", "--data.data_root", str(text_folder), "--model.hidden_sizes", "[8]",
            "--trainer.logger", "false"]
    cli = lightning_cli(base, run=False)
    assert type(cli.trainer.strategy.checkpoint_io) is AtomicCheckpointIO
    # a CheckpointIO the user gives is kept, and the default is not added beside it
    cli = lightning_cli([*base, "--trainer.plugins", "lightning.pytorch.plugins.io.TorchCheckpointIO"], run=False)
    assert type(cli.trainer.strategy.checkpoint_io) is TorchCheckpointIO
    # other plugins are kept and the atomic writer is added
    cli = lightning_cli([*base, "--trainer.plugins", "lightning.pytorch.plugins.precision.MixedPrecision",
                         "--trainer.plugins.precision", "bf16-mixed", "--trainer.plugins.device", "cpu"], run=False)
    assert type(cli.trainer.strategy.checkpoint_io) is AtomicCheckpointIO
    assert type(cli.trainer.precision_plugin).__name__ == "MixedPrecision"
