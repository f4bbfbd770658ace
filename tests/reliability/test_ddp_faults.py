"""A DDP rank that raises stops the whole run with that rank's error, within a timeout, instead of
leaving the other rank blocked in a collective (2 processes, ``ddp_fork``, gloo on CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 90  # seconds; a hang fails the test instead of hanging CI


@pytest.mark.parametrize("rank", [1, 0])
def test_a_rank_that_raises_stops_the_run_with_its_error(rank):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    start = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.reliability.ddp_worker", str(rank), "3"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the DDP run hung for {TIMEOUT} s after rank {rank} raised")
    elapsed = time.monotonic() - start
    assert done.returncode != 0
    assert f"rank {rank} exploded at step 3" in done.stderr, done.stderr[-3000:]
    print(f"\nrank {rank} raised at step 3: the run stopped in {elapsed:.1f} s with exit code {done.returncode}")
