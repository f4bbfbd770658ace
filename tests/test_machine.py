"""The machine record every benchmark report carries (issue 39): CPU, the ISA flags that decide which kernels are
fast, cores, torch and oneDNN, the load at start and end, and whether the machine was loaded. The writers' own
tests (test_benchmarks, test_time_to_quality, test_recipe_speed, test_equal_budget) check each report with
:func:`assert_records_the_machine`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from dsf_lightning import _machine

ROOT = Path(__file__).resolve().parents[1]
RECORD_KEYS = {"cpu", "isa", "isa_limits", "torch_cpu_capability", "logical_cores", "usable_cores", "torch", "onednn", "threads",
               "started", "own_processes", "load_start", "load_end", "loaded", "load_rule"}


def assert_records_the_machine(text: str, record: dict | None = None) -> None:
    """``text`` (a report) holds this machine's record, load at start and end included; ``record`` (the one a
    results.json holds), if given, is complete and finished."""
    assert f"- CPU: {_machine.cpu_model()}" in text
    for name in _machine.ISA_FLAGS.values():
        assert f"{name} yes" in text or f"{name} no" in text or "not readable on this OS" in text, name
    assert f"{os.cpu_count()} logical, {_machine.usable_cores()} usable by this process" in text
    assert f"- torch {torch.__version__}, oneDNN {_machine.onednn_version()}" in text
    assert "- load average (1 / 5 / 15 min) at start (" in text
    at_end = text.split("at end: ", 1)[1].split(";", 1)[0]
    assert at_end != "not recorded" and len(at_end.split(" / ")) == 3  # the end's load, not only the start's
    assert "- load: quiet machine." in text or "- load: **made on a loaded machine**" in text
    assert _machine.LOADED_RULE in text
    if record is not None:
        assert set(record) == RECORD_KEYS
        assert record["cpu"] == _machine.cpu_model() and record["load_end"] is not None
        assert record["loaded"] is _machine.is_loaded(record)


def test_the_record_says_the_cpu_its_flags_cores_torch_and_onednn():
    record = _machine.machine_record(own_processes=2)
    assert set(record) == RECORD_KEYS and record["own_processes"] == 2
    assert set(record["isa"]) == {"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}
    flags = Path("/proc/cpuinfo").read_text().split("\nflags", 1)[1].split("\n", 1)[0].split()
    assert record["isa"]["avx2"] is ("avx2" in flags) and record["isa"]["amx_bf16"] is ("amx_bf16" in flags)
    assert record["usable_cores"] == len(os.sched_getaffinity(0)) <= record["logical_cores"] == os.cpu_count()
    assert record["onednn"].startswith("v") if torch.backends.mkldnn.is_available() else record["onednn"] == "not available"
    assert record["onednn"][1:] in torch.__config__.show()
    assert record["load_end"] is None and record["loaded"] is None  # finished at the end of the run
    assert_records_the_machine("\n".join(_machine.machine_markdown(_machine.finish_record(record))), record)


def test_a_run_kept_below_the_cpus_instruction_set_says_so(monkeypatch):
    for name in _machine.ISA_LIMIT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    plain = _machine.machine_record()
    assert plain["isa_limits"] == {}
    assert not any("ISA limited" in line for line in _machine.machine_markdown(plain))
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    limited = _machine.machine_record()
    assert limited["isa_limits"] == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    lines = [line for line in _machine.machine_markdown(limited) if "ISA limited" in line]
    assert lines == ["- **ISA limited by the environment** (this machine ran as one with a smaller instruction set): "
                     "ATEN_CPU_CAPABILITY=avx2, MKL_ENABLE_INSTRUCTIONS=AVX2"]
    old_record = {k: v for k, v in limited.items() if k != "isa_limits"}  # a report's JSON from before the field
    assert not any("ISA limited" in line for line in _machine.machine_markdown(old_record))


def test_loaded_is_others_load_above_half_a_usable_core_each():
    record = {"usable_cores": 4, "own_processes": 2, "load_start": [1.9, 0, 0], "load_end": [3.9, 0, 0]}
    assert _machine.is_loaded(record) is False  # 1.9 of others at the start, 3.9 - 2 own at the end: <= 2
    assert _machine.is_loaded({**record, "load_start": [2.1, 0, 0]}) is True  # others' load at the start
    assert _machine.is_loaded({**record, "load_end": [4.1, 0, 0]}) is True  # others' load came during the run
    assert _machine.is_loaded({**record, "load_start": None, "load_end": None}) is None
    assert _machine.is_loaded({**record, "load_end": None}) is False  # the start alone, before the end is known
    lines = _machine.machine_markdown({**_machine.machine_record(), "load_end": [4.1, 0, 0], "loaded": True})
    assert any(line.startswith("- load: **made on a loaded machine**") for line in lines)


def test_a_shell_benchmark_records_the_machine_at_start_and_prints_it_at_the_end(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    record_file = tmp_path / "machine.json"
    command = [sys.executable, "-m", "dsf_lightning._machine"]
    done = subprocess.run([*command, "start", str(record_file), "--own-processes", "6"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(record_file.read_text())["load_end"] is None
    done = subprocess.run([*command, "end", str(record_file)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    record = json.loads(record_file.read_text())
    assert record["own_processes"] == 6
    assert_records_the_machine(done.stdout, record)
    missing = subprocess.run([*command, "end", str(tmp_path / "none.json")], env=env, capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 2 and "no machine record from 'start'" in missing.stderr


def test_the_shell_benchmarks_that_write_a_report_record_the_machine():
    """The report writers in shell (the CUDA fit speed, the budget sweep, the hub's GPU runs) call the record's
    start before their runs and its end into their report."""
    for script in ("cuda/run_all.sh", "budget_sweep/sweep.sh", "hub_gpu/train.sh"):
        text = (ROOT / "benchmarks" / script).read_text()
        start, end = text.find("dsf_lightning._machine start"), text.find("dsf_lightning._machine end")
        assert 0 <= start < end, script
