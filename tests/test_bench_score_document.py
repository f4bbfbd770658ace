"""Benchmark part 8 (``python -m benchmarks --only score-document``) at tiny size on CPU: its rows, its
targets, and that rerunning one part keeps the other parts an earlier run wrote to the same folder.
No timing is asserted: the numbers of a tiny run mean nothing."""

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA_ROOT = Path(os.environ.get("DSF_DATA_ROOT") or ROOT.parent / "shared" / "data")


@pytest.mark.slow
@pytest.mark.skipif(not (DATA_ROOT / "ptb" / "ptb.test.txt").exists(), reason="PTB not found")
def test_score_document_part_tiny_keeps_the_other_parts(tmp_path):
    sys.path.insert(0, str(ROOT))
    from benchmarks._timing import PartResult, Row, Stat, Target, write_results

    earlier = PartResult(4, "The scorer", "what part 4 measured earlier",
                         [Row(4, "case", "batch 32", "scoring tokens/s", "tokens/s", Stat([1.0, 2.0, 3.0]))],
                         [Target("part 4's target", "2", ">= 1", True)], 7.0)
    write_results(tmp_path, [earlier], command="OMP_NUM_THREADS=1 python -m benchmarks", machine={"date": "earlier"},
                  total_seconds=60.0)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "DSF_DATA_ROOT": str(DATA_ROOT)}
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--tiny", "--only", "score-document", "--out",
                           str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    with open(tmp_path / "results.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [(r["part"], r["contender"], r["median"]) for r in rows if r["part"] == "4"] == [("4", "batch 32", "2.0")]
    speed = [r for r in rows if r["part"] == "8" and r["metric"] == "tokens/s"]
    assert [r["contender"] for r in speed] == ["before (window loop)", "exact", "parallel S=3 W=4", "decoder alone"]
    assert all(float(r["median"]) > 0 and r["ratio_vs"] == "before (window loop)" for r in speed)
    ppl_vs_exact = {r["contender"]: float(re.search(r"\(([-+][\d.]+)% vs exact\)", r["note"]).group(1)) for r in speed}
    # the baseline, the exact mode and the decoder alone score the same numbers; the parallel mode differs
    assert ppl_vs_exact["before (window loop)"] == ppl_vs_exact["exact"] == ppl_vs_exact["decoder alone"] == 0.0
    assert ppl_vs_exact["parallel S=3 W=4"] != 0.0
    grid = [r["contender"] for r in rows if r["part"] == "8" and r["metric"] == "perplexity"]
    assert grid == ["exact", "parallel S=2 W=0", "parallel S=3 W=4"]

    results = json.loads((tmp_path / "results.json").read_text())
    assert results["command"] == "OMP_NUM_THREADS=1 python -m benchmarks"  # the earlier run's header is kept
    assert [t["part"] for t in results["targets"]] == [4, 8, 8, 8]
    md = (tmp_path / "RESULTS.md").read_text()
    assert "## 4. The scorer\n\nwhat part 4 measured earlier" in md and "_(part 4: 7 s)_" in md
    assert "## 8. " in md and "Rerun on its own: `OMP_NUM_THREADS=1 python -m benchmarks --tiny --only score-document" in md


def test_only_takes_part_names():
    sys.path.insert(0, str(ROOT))
    import argparse

    from benchmarks.run import _parts

    assert _parts("score-document") == [8] and _parts("8,2") == [2, 8] and _parts("score-document,1") == [1, 8]
    with pytest.raises(argparse.ArgumentTypeError, match="score-document"):
        _parts("scoring")
