"""The time-to-quality benchmark runs end to end at a tiny budget: both contenders train in their own
processes, are measured by the same evaluation, and the report holds both curves and the budget table.
No perplexity is asserted beyond being finite: the numbers of a 12-second run mean nothing."""

import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA_ROOT = os.environ.get("DSF_DATA_ROOT", str(ROOT.parent / "shared" / "data"))


def time_to_quality_recipes() -> list[str]:
    """The recipes made for this benchmark, relative to ``recipes/``: those whose header has a
    ``# Bench: python -m benchmarks --only time-to-quality ... --ours recipes/<itself>`` line (the one list
    the tests that check them read)."""
    found = []
    for path in sorted((ROOT / "recipes").rglob("*.yaml")):
        bench = [line for line in path.read_text().splitlines()[:20] if line.startswith("# Bench:") and "time-to-quality" in line]
        if bench:
            relative = path.relative_to(ROOT / "recipes").as_posix()
            assert f"--ours recipes/{relative}" in bench[0], f"{relative}: its Bench line runs another recipe"
            found.append(relative)
    return found


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.skipif(not (Path(DATA_ROOT) / "ptb" / "ptb.train.txt").is_file(), reason="PTB not under the data root")
def test_time_to_quality_tiny_run_reports_both_contenders(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DSF_DATA_ROOT": DATA_ROOT}
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--only", "time-to-quality", "--minutes", "0.2", "--budgets", "0.1",
                           "0.2", "--eval-every", "0.1", "--max-valid-tokens", "2000", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "time_to_quality.json").read_text())
    for name in ("peer", "ours"):
        run = report["runs"][name]
        assert [r["minutes"] for r in run["at_budget"]] == [0.1, 0.2]
        assert all(math.isfinite(r["test_ppl"]) and r["best_val_ppl"] > 1 for r in run["at_budget"])
        cpu = [r["cpu_seconds"] for r in run["curve"]]
        assert cpu == sorted(cpu) and cpu[-1] >= 12.0  # measured until the budget was spent
    # equal parameters: the peer's 5.66M LSTM and the bundled recipe
    assert report["info"]["peer"]["parameters"] == 5_656_336
    assert abs(report["info"]["ours"]["parameters"] / report["info"]["peer"]["parameters"] - 1) < 0.01
    # ours trains as `dsf fit` does: with its allocator tuning (glibc), which it lacked before 2026-11-28
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert report["info"]["ours"]["allocator_tuned"] is (glibc and env.get("DSF_MALLOC_TUNING", "1") != "0")
    markdown = (tmp_path / "time_to_quality.md").read_text()
    assert "| 0.2 |" in markdown and "python -m benchmarks.time_to_quality" in markdown
    from .test_machine import assert_records_the_machine

    assert_records_the_machine(markdown, report["machine"])  # issue 39: the machine both trained on
    assert (tmp_path / "time_to_quality.png").read_bytes()[:4] == b"\x89PNG"


def test_the_report_records_the_machine_and_its_load(tmp_path):
    """Issue 39: time_to_quality.md and .json carry the machine record taken before the contenders started,
    finished with the load at the end (the report written from stand-in curves: no training)."""
    from benchmarks import time_to_quality
    from dsf_lightning._machine import machine_record

    from .test_machine import assert_records_the_machine

    for name, ppl, tokens in (("peer", 120.0, 1000), ("ours", 110.0, 2400)):
        at = {"minutes": 0.1, "cpu_seconds": 6.0, "best_val_ppl": ppl, "test_ppl": ppl - 3, "tokens": tokens}
        (tmp_path / f"{name}.json").write_text(json.dumps({"name": name, "at_budget": [at], "curve": [
            {"cpu_seconds": 6.0, "tokens": tokens, "val_loss": math.log(ppl), "val_ppl": ppl}]}))
        (tmp_path / f"{name}.info.json").write_text(json.dumps({"parameters": 1000, "recipe": "r.yaml"}))
    started = machine_record(own_processes=2)
    md = time_to_quality.report(tmp_path, (0.1,), "OMP_NUM_THREADS=1 python -m benchmarks.time_to_quality", started)
    saved = json.loads((tmp_path / "time_to_quality.json").read_text())
    assert saved["machine"]["started"] == started["started"] and saved["machine"]["own_processes"] == 2
    assert_records_the_machine(md.read_text(), saved["machine"])
    # how fast the machine ran that day: the peer's tokens per training CPU second (1000 / 6 s), ours beside it
    assert saved["tokens_per_cpu_second"] == {"peer": pytest.approx(1000 / 6), "ours": pytest.approx(400)}
    assert "trained 167 tokens per training CPU second (ours 400)" in md.read_text()


@pytest.mark.corpus
@pytest.mark.skipif(not (Path(DATA_ROOT) / "ptb" / "ptb.train.txt").is_file(), reason="PTB not under the data root")
def test_a_contender_that_fails_makes_the_benchmark_exit_non_zero(tmp_path):
    """``python -m benchmarks --only time-to-quality`` exited 0 when a contender failed (``main()``'s status was
    dropped by ``benchmarks/__main__.py``), so the tiny run's test read a report that was never written."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DSF_DATA_ROOT": DATA_ROOT}
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--only", "time-to-quality", "--minutes", "0.01",
                           "--ours", str(tmp_path / "no-such-recipe.yaml"), "--max-steps", "1", "--max-valid-tokens",
                           "200", "--out", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and "a contender failed" in done.stderr
    assert not (tmp_path / "time_to_quality.md").exists()


@pytest.mark.parametrize("averaged", [False, True])
def test_a_contender_its_own_rule_stops_early_still_gets_every_mark(tmp_path, averaged):
    """The tied Delta-RNN's 80-minute run (2026-11-30) stopped at 70 CPU minutes by its recipe's EarlyStopping and
    its report had no 80-minute row. Now training's end measures once more (on the averaged weights when the
    recipe averages) and gives every mark not reached the best so far, flagged, and the report says so."""
    import torch

    from benchmarks import time_to_quality as ttq
    from dsf_lightning.training.callbacks import PolyakAveraging

    from .training.conftest import make_toy_corpus, quiet_trainer, toy_modules
    from .training.test_time_to_quality_measure import _lm_step

    corpus = make_toy_corpus()
    module, data = toy_modules(corpus)
    valid, test = ttq.batchify(corpus.splits["valid"], 2), ttq.batchify(corpus.splits["test"], 2)
    tracker = ttq.Tracker("ours", tmp_path, (1000.0, 2000.0), eval_every=1e9, valid=valid, test=test, bptt=7)
    callbacks = [ttq.measure_callback(tracker, module)]
    if averaged:
        callbacks.insert(0, PolyakAveraging(decay=0.5))
    quiet_trainer(max_epochs=1, callbacks=callbacks).fit(module, data)  # stops long before the marks

    assert [r["minutes"] for r in tracker.at_budget] == [1000.0, 2000.0]
    assert len(tracker.curve) == 1 and tracker.curve[0]["tokens"] == tracker.tokens > 0
    final = tracker.curve[0]
    for row in tracker.at_budget:
        assert row["stopped_at_cpu_seconds"] == final["cpu_seconds"] == row["cpu_seconds"]
        assert row["best_val_ppl"] == pytest.approx(final["val_ppl"]) and math.isfinite(row["test_ppl"])

    module.eval()  # the benchmark's evaluation of the weights the run delivers: the average when it averages
    with torch.no_grad():
        raw = math.exp(ttq.evaluate(_lm_step(module), valid, 7))
        if averaged:
            with callbacks[0].averaged(module):
                average = math.exp(ttq.evaluate(_lm_step(module), valid, 7))
            assert final["val_ppl"] == pytest.approx(average, rel=1e-5) and final["val_ppl"] != pytest.approx(raw, rel=1e-4)
        else:
            assert final["val_ppl"] == pytest.approx(raw, rel=1e-5)

    for name in ("peer", "ours"):  # the report: ours' rows carry the flag and a line says where it stopped
        tracker.name = name
        tracker.save()
        (tmp_path / f"{name}.info.json").write_text(json.dumps({"parameters": 1000, "recipe": "r.yaml"}))
    md = ttq.report(tmp_path, (1000.0, 2000.0), "python -m benchmarks.time_to_quality").read_text()
    assert f"ours stopped by its own rule (the recipe's EarlyStopping) at {final['cpu_seconds'] / 60:.1f} CPU minutes: " \
           "its rows at 1000, 2000 carry its best by then." in md

