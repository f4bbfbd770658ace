"""End to end at tiny size: the balanced-parentheses experiment's main() trains, evaluates and writes Table 1
in the paper's layout (one row per test set, paper / ours per data set and model) plus the raw JSON (~5 s)."""

import json

from dsf_lightning.tasks import parentheses_experiment as bp

TINY = ["--datasets", "small", "--models", "lstm", "sr-lstm-p", "--seeds", "0", "--limit", "64", "--test-size", "12",
        "--hidden-size", "8", "--embedding-size", "4", "--max-epochs", "2", "--curriculum-epochs", "1"]


def test_main_writes_table1_layout(tmp_path):
    records = bp.main([*TINY, "--out", str(tmp_path)])
    assert [(r["dataset"], r["model"]) for r in records] == [("small", "lstm"), ("small", "sr-lstm-p")]
    for r in records:
        assert set(r["test_error"]) == set(bp.TEST_SETS)
        assert all(0.0 <= e <= 1.0 for e in r["test_error"].values())
        assert sum(b["count"] for b in r["error_by_depth"].values()) == 6 * 12
        assert sum(b["count"] for b in r["error_by_length"].values()) == 6 * 12
        assert r["epochs"] <= 2 and r["train_cpu_seconds"] > 0

    md = (tmp_path / "parentheses.md").read_text()
    assert md.startswith("# Balanced parentheses")
    assert "Command: `python -m dsf_lightning.tasks.parentheses_experiment --datasets small" in md
    lines = md.splitlines()
    head = lines.index("| test set | small: LSTM paper / ours | small: sr-LSTM-p paper / ours |")
    assert lines[head + 1] == "| --- | --- | --- |"
    rows = lines[head + 2 : head + 2 + len(bp.TEST_SETS)]
    for name, row, lstm, srp in zip(bp.TEST_SETS, rows, bp.PAPER["small"]["lstm"], bp.PAPER["small"]["sr-lstm-p"]):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[0] == bp.TEST_LABELS[name]
        assert cells[1].startswith(f"{lstm:.3f} / **") and cells[2].startswith(f"{srp:.3f} / **")
    assert lines[head + 2 + len(bp.TEST_SETS)] == ""  # exactly the six rows of Table 1
    assert "| depth | strings | small: LSTM | small: sr-LSTM-p |" in md
    assert "| length | strings | small: LSTM | small: sr-LSTM-p |" in md

    saved = json.loads((tmp_path / "parentheses.json").read_text())
    assert saved["test_sets"] == list(bp.TEST_SETS) and len(saved["records"]) == 2
    assert saved["paper"]["large"]["sr-lstm-p"][-1] == 0.020


def test_curriculum_grows_to_the_full_training_set():
    data = bp.CurriculumParentheses(size="small", curriculum_epochs=4, curriculum_start=10, limit=None)
    lengths = [data.max_length_at(e) for e in range(6)]
    assert lengths[:4] == sorted(lengths[:4]) and lengths[0] > 10 and lengths[3] == data.train_max_length
    assert lengths[4] is None and lengths[5] is None  # the whole training set from then on
