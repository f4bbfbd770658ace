"""``python -m benchmarks --device``: part 1 runs on the device named (the same code path on the CPU
here as on a GPU), bad devices are refused with a message that says what to do.

``DSF_TEST_DEVICE=cuda`` runs the in-process test on a GPU (as on the device machine)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import bench_cells
from benchmarks._settings import Settings
from benchmarks._timing import clock, use_device
from dsf_lightning.cells import list_cells

ROOT = Path(__file__).resolve().parents[1]
DEVICE = os.environ.get("DSF_TEST_DEVICE", "cpu")


def test_part_1_times_every_cell_and_a_compiled_delta_rnn_on_the_device():
    use_device(DEVICE)
    try:
        settings = Settings.for_mode("tiny", device=DEVICE, cell_compiled=("delta-rnn",), compile_backend="eager")
        part = bench_cells.run(settings)
    finally:
        use_device("cpu")
    rates = {r.contender: r.value.median for r in part.rows if r.metric == "fwd+bwd tokens/s"}
    assert set(rates) == {"nn.LSTM", "nn.GRU", *list_cells(), "delta-rnn (torch.compile)"}
    assert all(rate > 0 for rate in rates.values())
    assert "delta-rnn (torch.compile)" in part.markdown


def test_fwd_bwd_puts_the_module_its_data_and_its_gradients_on_the_device():
    module = torch.nn.LSTM(4, 4, batch_first=True)
    run = bench_cells.fwd_bwd(module, 2, 3, 4, device=DEVICE)
    run()
    assert all(p.device.type == torch.device(DEVICE).type and p.grad is not None for p in module.parameters())


def test_a_cuda_clock_waits_for_the_gpu_at_both_ends(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append("sync"))
    use_device("cuda")
    try:
        clock(lambda: calls.append("work"))
    finally:
        use_device("cpu")
    assert calls == ["sync", "work", "sync"]
    calls.clear()
    clock(lambda: calls.append("work"))
    assert calls == ["work"]


def _benchmarks(*args):
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_device_cuda_without_a_gpu_says_so(tmp_path):
    done = _benchmarks("--tiny", "--device", "cuda", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "sees no CUDA device" in done.stderr and "leave --device out" in done.stderr
    assert not (tmp_path / "RESULTS.md").exists()


def test_an_unknown_device_is_refused(tmp_path):
    done = _benchmarks("--tiny", "--device", "tpu", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "--device takes cpu or cuda[:N], got 'tpu'" in done.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_device_cuda_refuses_the_cpu_only_parts(tmp_path):
    done = _benchmarks("--tiny", "--device", "cuda", "--only", "3", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "measure CPU paths" in done.stderr


def test_compile_names_cells_the_registry_knows(tmp_path):
    done = _benchmarks("--tiny", "--compile", "delta-rnn,nope", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "--compile: unknown cell(s) nope" in done.stderr


def test_part_1_times_every_cell_with_its_fast_gpu_path_on_and_off_side_by_side():
    """What ``--device cuda`` turns on (issue 37): each cell beside its fast path off, the on/off ratio, and
    a target per cell and H against nn.LSTM (here on the CPU, where the numbers mean nothing)."""
    use_device(DEVICE)
    try:
        settings = Settings.for_mode("tiny", device=DEVICE, cell_fast_path_off=True, cell_hidden=(16, 24))
        part = bench_cells.run(settings)
    finally:
        use_device("cpu")
    rates = {r.contender for r in part.rows if r.metric == "fwd+bwd tokens/s"}
    assert rates == {"nn.LSTM", "nn.GRU", *list_cells(), *(f"{c} (fast path off)" for c in list_cells())}
    assert "| `delta-rnn` |" in part.markdown.split("on vs off, same run:")[1]  # the on / off table
    goals = {t.what: t.goal for t in part.targets}
    assert len(goals) == 2 * len(list_cells())
    assert goals["delta-rnn fwd+bwd vs cuDNN nn.LSTM, H=16"] == ">= 0.5x"  # the goals are at 512 / 1024
    assert all(t.met in (True, False) for t in part.targets)
