"""The benchmark suite runs end to end (``python -m benchmarks --tiny``: every part at the smallest
sizes) and writes its results files with the expected columns. No timing is asserted: the numbers of
a tiny run mean nothing."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["part", "case", "contender", "metric", "unit", "median", "min", "max", "rounds",
           "ratio_vs", "ratio", "ratio_min", "ratio_max", "note"]


def test_suite_writes_results(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "DSF_DATA_ROOT": os.environ.get("DSF_DATA_ROOT", str(ROOT.parent / "shared" / "data"))}
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--tiny", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    with open(tmp_path / "results.csv", newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        rows = list(reader)
    assert {int(r["part"]) for r in rows} == {1, 2, 3, 4, 5, 6, 7, 8}
    part7 = [r for r in rows if r["part"] == "7"]
    assert {(r["contender"], r["metric"]) for r in part7} == {
        ("eager", "tokens/s"), ("compiled", "tokens/s"), ("compiled", "compile seconds (first call less a steady one)")}
    assert all(float(r["ratio"]) > 0 for r in part7 if r["contender"] == "compiled" and r["metric"] == "tokens/s")
    part6 = [r for r in rows if r["part"] == "6"]
    assert [r["contender"] for r in part6] == ["batch 1", "batch 2"]
    assert all(r["metric"] == "generated tokens/s" and float(r["median"]) > 0 for r in part6)
    part1 = [r for r in rows if r["part"] == "1" and r["metric"] == "fwd+bwd tokens/s"]
    from dsf_lightning.cells import list_cells

    assert {r["contender"] for r in part1} == {"nn.LSTM", "nn.GRU", *list_cells()}
    assert all(float(r["median"]) > 0 and r["ratio_vs"] == "nn.LSTM" for r in part1)

    results = json.loads((tmp_path / "results.json").read_text())
    assert results["command"].startswith("OMP_NUM_THREADS=1 python -m benchmarks --tiny")
    assert {"CPU", "torch", "threads", "date"} <= set(results["machine"])
    assert len(results["rows"]) == len(rows)

    md = (tmp_path / "RESULTS.md").read_text()
    for heading in ("## Targets", "## 1. ", "## 2. ", "## 3. ", "## 4. ", "## 5. ", "## 6. ", "## 7. ", "## 8. "):
        assert heading in md
    assert "python -m benchmarks --tiny" in md


def test_the_report_records_the_machine_and_its_load_also_after_a_rerun_of_one_part(tmp_path):
    """Issue 39: RESULTS.md and results.json carry the machine record (CPU, ISA flags, cores, torch, oneDNN,
    load at start and end, loaded or not), written by the first run and again by an ``--only`` rerun."""
    from .test_machine import assert_records_the_machine

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "DSF_DATA_ROOT": os.environ.get("DSF_DATA_ROOT", str(ROOT.parent / "shared" / "data"))}
    for only in ("6", "score-document"):  # the second keeps part 6 of the first: the --only path
        done = subprocess.run([sys.executable, "-m", "benchmarks", "--tiny", "--only", only, "--out", str(tmp_path)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        results = json.loads((tmp_path / "results.json").read_text())
        md = (tmp_path / "RESULTS.md").read_text()
        assert_records_the_machine(md, results["machine_record"])
    assert "## 6. " in md and "## 8. " in md
    assert f"on {results['machine_record']['cpu']}, load average at start" in md  # the rerun part names its CPU
