"""Issue 36: training from plain Python (``lightning.Trainer`` + ``LanguageModelModule`` + ``LanguageModelDataModule``,
no ``dsf`` command, no jsonargparse) gets the training policy from the module: killed with SIGKILL mid-epoch and
rerun, it resumes from ``last.ckpt`` and ends with every weight bit-identical to a run that never stopped, with the
non-finite guard and the atomic checkpoint writer in place (``plain_trainer_worker.py``, docs/python.md
"Resume after a crash")."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.reliability.test_sigkill_resume import finish, step_of

ROOT = Path(__file__).resolve().parents[2]
EVERY = 3  # plain_trainer_worker: ModelCheckpoint(every_n_train_steps=3)
pytestmark = pytest.mark.slow


def write_text(folder: Path) -> Path:
    """A small text folder (train / valid / test) of seeded word salad over 30 words."""
    rng = random.Random(36)
    words = [f"w{i}" for i in range(30)]
    folder.mkdir(parents=True)
    for split, lines in (("train", 160), ("valid", 20), ("test", 20)):
        text = "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 10))) for _ in range(lines))
        (folder / f"{split}.txt").write_text(text + "\n", encoding="utf-8")
    return folder


def worker(out: Path, text: Path, cache: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), DSF_CACHE_DIR=str(cache))
    cmd = [sys.executable, "-m", "tests.reliability.plain_trainer_worker", str(out), str(text), *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def reports(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("policy-*.json"), key=lambda p: p.stat().st_mtime)]


def train_windows(text: Path, cache: Path, monkeypatch) -> int:
    from dsf_lightning.training.datamodule import LanguageModelDataModule

    monkeypatch.setenv("DSF_CACHE_DIR", str(cache))
    data = LanguageModelDataModule(corpus="text-folder", corpus_options={"path": str(text)}, batch_size=4, bptt=8,
                                   eval_batch_size=2)
    data.setup("fit")
    return len(data.train_dataloader())


def test_plain_python_training_killed_mid_epoch_resumes_bit_identical_with_the_policy_on(tmp_path, monkeypatch):
    text, cache = write_text(tmp_path / "text"), tmp_path / "cache"
    windows = train_windows(text, cache, monkeypatch)
    kill = windows // 2 + (1 if (windows // 2) % EVERY == 0 else 0)  # mid epoch 0, between two checkpoints
    assert 2 * EVERY < kill < windows - EVERY and kill % EVERY

    assert finish(worker(tmp_path / "straight", text, cache)) == 0
    chain = tmp_path / "chain"
    assert finish(worker(chain, text, cache, "--kill-at", str(kill))) == -signal.SIGKILL
    last = chain / "ckpt" / "last.ckpt"
    assert step_of(last) == kill - kill % EVERY  # the last checkpoint before the kill, in epoch 0
    assert torch.load(last, map_location="cpu", weights_only=True)["epoch"] == 0
    assert not (chain / "weights.pt").exists()
    assert finish(worker(chain, text, cache)) == 0  # the same script again: it resumes from last.ckpt

    seen = reports(tmp_path / "straight") + reports(chain)
    assert [r["global_step"] for r in reports(chain)] == [0, kill - kill % EVERY]  # the rerun resumed mid-epoch
    for report in seen:  # what the module's configure_callbacks put in a Trainer that was given none of it
        assert report["jsonargparse"] is False, report
        assert "NonFiniteGuard" in report["callbacks"], report
        assert "AtomicCheckpointIOPolicy" in report["callbacks"] and report["checkpoint_io"] == "AtomicCheckpointIO", report
        assert "LastCheckpointAtEveryValidation" in report["callbacks"], report  # beside ModelCheckpoint(save_last=True)
    print(f"\n{windows} windows an epoch, killed after step {kill}, resumed at step {kill - kill % EVERY}; "
          f"the child's trainer: {seen[-1]['callbacks']}, checkpoint_io {seen[-1]['checkpoint_io']}, "
          f"jsonargparse imported: {seen[-1]['jsonargparse']}")

    straight = torch.load(tmp_path / "straight" / "weights.pt", weights_only=True)
    resumed = torch.load(chain / "weights.pt", weights_only=True)
    assert straight.keys() == resumed.keys() and len(straight) > 3
    different = [name for name in straight if not torch.equal(straight[name], resumed[name])]
    assert not different, f"weights differ after the resume: {different}"
    metrics = [json.loads((folder / "metrics.json").read_text()) for folder in (tmp_path / "straight", chain)]
    assert metrics[0]["val_loss"] == metrics[1]["val_loss"]
