"""A real training run SIGKILLed at random points and resumed from ``last.ckpt`` each time ends with
exactly the weights, metrics and per-step losses of a run that was never interrupted.

The run (``train_worker.py``, a subprocess) uses dropout and iterative inference, so exactness needs
the module's per-window seeding and carried-state checkpointing as well as checkpoint files that are
never half-written (:class:`~dsf_lightning.training.checkpoint_io.AtomicCheckpointIO`). Kill points, drawn
from a seeded RNG (``DSF_KILL_SEED`` changes it), in one chain of runs:

1. right after a random optimizer step in the middle of epoch 0 (no checkpoint at that step);
2. half-way through writing a random checkpoint file (temporary file half-written, fsynced, then SIGKILL);
3. right after a random ``last.ckpt`` was renamed into place, before anything else;
4. from outside, at a random moment of epoch 1 (the parent polls the worker's progress, waits a random
   few milliseconds, SIGKILLs);

then a last resume runs to the end.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dsf_lightning.training.checkpoint_io import remove_stale_temporaries

ROOT = Path(__file__).resolve().parents[2]
EVERY = 5  # train_worker.EVERY
STEPS_PER_EPOCH = 86  # toy corpus: 2400 tokens / 4 streams, windows of 7
pytestmark = pytest.mark.slow


def worker(out: Path, ckpt_dir: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "tests.reliability.train_worker", str(out), "--ckpt-dir", str(ckpt_dir), *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 180) -> int:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the training worker hung")
    if proc.returncode not in (0, -signal.SIGKILL):
        pytest.fail(f"the training worker failed ({proc.returncode}):\n{err[-3000:]}")
    return proc.returncode


def losses(folder: Path) -> dict[int, list[float]]:
    seen: dict[int, list[float]] = {}
    for path in sorted(folder.glob("losses-*.txt")):
        for line in path.read_text().split("\n")[:-1]:  # complete lines only (a kill may cut the last)
            step, value = line.split()
            seen.setdefault(int(step), []).append(float.fromhex(value))
    return seen


def step_of(ckpt: Path) -> int:
    return int(torch.load(ckpt, map_location="cpu", weights_only=True)["global_step"])


def temporaries(ckpt_dir: Path) -> list[Path]:
    return [p for p in ckpt_dir.glob(".*") if ".tmp-" in p.name]


def test_sigkill_at_random_points_then_resume_equals_an_uninterrupted_run(tmp_path):
    seed = int(os.environ.get("DSF_KILL_SEED", "20240607"))
    rng = random.Random(seed)
    finish(worker(tmp_path / "straight", tmp_path / "straight" / "ckpt"))
    straight = losses(tmp_path / "straight")
    assert sorted(straight) == list(range(1, 2 * STEPS_PER_EPOCH + 1))

    chain, ckpts = tmp_path / "chain", tmp_path / "chain" / "ckpt"
    last = ckpts / "last.ckpt"
    report = []

    # 1. mid-epoch 0, between two checkpoints
    k = rng.choice([s for s in range(12, STEPS_PER_EPOCH - 12) if s % EVERY])
    assert finish(worker(chain, ckpts, "--kill", f"step:{k}")) == -signal.SIGKILL
    resumed_at = step_of(last)
    assert resumed_at == k - k % EVERY  # the last checkpoint before the kill
    report.append(f"step {k} (mid epoch 0) -> resumed from step {resumed_at}")

    # 2. half-way through a checkpoint write (each checkpoint event writes two files: step-K then last)
    writes = rng.randint(3, 8)
    assert finish(worker(chain, ckpts, "--resume", str(last), "--kill", f"midsave:{writes}")) == -signal.SIGKILL
    event = (writes + 1) // 2  # the event whose write was killed
    expected = resumed_at + EVERY * (event - 1)
    left = temporaries(ckpts)
    assert left, "the killed write should have left its temporary file"
    assert step_of(last) == expected  # the previous complete last.ckpt, untouched
    report.append(f"during checkpoint write #{writes} (step {resumed_at + EVERY * event}) -> last.ckpt intact at step {expected}")
    resumed_at = expected

    # 3. right after a last.ckpt was renamed into place
    writes = 2 * rng.randint(1, 4)
    assert finish(worker(chain, ckpts, "--resume", str(last), "--kill", f"replaced:{writes}")) == -signal.SIGKILL
    assert not temporaries(ckpts), "a successful save removes what a killed save of this machine left"
    expected = resumed_at + EVERY * (writes // 2)
    assert step_of(last) == expected
    report.append(f"right after last.ckpt #{writes // 2} was renamed (step {expected}) -> resumed from step {expected}")
    resumed_at = expected

    # 4. from outside, at a random moment of epoch 1
    target = rng.randint(STEPS_PER_EPOCH + 5, 2 * STEPS_PER_EPOCH - 10)
    proc = worker(chain, ckpts, "--resume", str(last), "--sleep", "0.004")
    deadline = time.monotonic() + 120
    progress = chain / "progress"
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if int(progress.read_text() or 0) >= target:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.002)
    time.sleep(rng.uniform(0, 0.02))
    proc.send_signal(signal.SIGKILL)
    assert finish(proc) == -signal.SIGKILL, "the worker finished before the external kill"
    lines = (chain / f"losses-{proc.pid}.txt").read_text().splitlines()
    killed_near = max(int(line.split()[0]) for line in lines if len(line.split()) == 2)  # last step it reported
    resumed_at = step_of(last)
    assert killed_near - EVERY <= resumed_at <= killed_near + 1
    report.append(f"external SIGKILL near step {killed_near} (epoch 1) -> resumed from step {resumed_at}")

    # the last resume runs to the end
    assert finish(worker(chain, ckpts, "--resume", str(last))) == 0
    remove_stale_temporaries(last)
    print(f"\nkill points (seed {seed}):\n  " + "\n  ".join(report))

    chained = losses(chain)
    assert sorted(chained) == sorted(straight)
    for step, values in chained.items():  # steps redone after a resume repeat the very same loss
        assert all(v == straight[step][0] for v in values), (step, values, straight[step])
    assert sum(len(v) for v in chained.values()) > len(straight)  # some steps were redone

    w_straight = torch.load(tmp_path / "straight" / "weights.pt", weights_only=True)
    w_chain = torch.load(chain / "weights.pt", weights_only=True)
    for name in w_straight:
        torch.testing.assert_close(w_chain[name], w_straight[name], rtol=0, atol=0, msg=name)
    m_straight = json.loads((tmp_path / "straight" / "metrics.json").read_text())
    m_chain = json.loads((chain / "metrics.json").read_text())
    for key in ("val_loss", "val_ppl", "val_tokens"):
        assert m_chain[key] == m_straight[key], key
