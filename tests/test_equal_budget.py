"""The equal-budget PTB comparison runs end to end (tiny budget) and reads the ordering correctly."""

import json
import os
from pathlib import Path

import pytest

from dsf_lightning.reproduce import equal_budget

ROOT = Path(__file__).resolve().parents[1]
DATA_ROOT = Path(os.environ.get("DSF_DATA_ROOT", ROOT.parent / "shared" / "data"))


def test_ordering_checks_the_papers_strict_relations():
    records = [{"cell": c, "test_ppl": p} for c, p in
               (("delta-rnn", 100.0), ("lstm", 110.0), ("scrn", 105.0), ("elman", 120.0), ("ran", 90.0))]
    verdict = equal_budget.ordering_holds(records)
    assert set(verdict["relations"]) == {"delta-rnn < lstm", "delta-rnn < scrn", "delta-rnn < elman",
                                         "lstm < elman", "scrn < elman"}  # no lstm/scrn tie, no RAN row
    assert verdict["all_hold"] is True
    records[0]["test_ppl"] = 111.0
    verdict = equal_budget.ordering_holds(records)
    assert verdict["relations"]["delta-rnn < lstm"] is False and verdict["all_hold"] is False


@pytest.mark.skipif(not (DATA_ROOT / "ptb" / "ptb.train.txt").is_file(), reason="PTB not available")
def test_tiny_run_writes_table_json_and_plot(tmp_path, monkeypatch):
    monkeypatch.setenv("DSF_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    records = equal_budget.main(["--data-root", str(DATA_ROOT), "--cells", "delta-rnn", "elman", "--budget", "lstm:16",
                                 "--cpu-minutes", "0.01", "--limit-eval-batches", "0.01", "--out", str(out)])
    assert [r["cell"] for r in records] == ["delta-rnn", "elman"]
    for r in records:
        assert r["cpu_minutes"] >= 0.01 and r["tokens"] == r["steps"] * 20 * 35
        assert 1 < r["test_ppl"] < 10_000 and 1 < r["val_ppl"] < 10_000
    # equal budget: the hidden sizes differ so that the parameter counts agree to within one unit's worth
    assert abs(records[0]["parameters"] - records[1]["parameters"]) < 0.02 * records[0]["parameters"]
    saved = json.loads((out / "results.json").read_text())
    assert saved["ordering"]["relations"].keys() == {"delta-rnn < elman"}
    table = (out / "README.md").read_text()
    assert "| 1 |" in table and "| 2 |" in table and "delta-rnn < elman" in table
    from .test_machine import assert_records_the_machine

    assert_records_the_machine(table, saved["machine"])  # issue 39: the machine and its load
    import matplotlib.image

    image = matplotlib.image.imread(out / "curves.png")
    assert image.shape[:2] == (450, 700)
