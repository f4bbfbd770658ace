"""A normal `dsf fit` on a word corpus prints no third-party tips, no deprecation warnings and no val_bpc
(issue 35, "Quiet output")."""

import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_dsf_fit_on_words_prints_no_tips_deprecations_or_bpc(tmp_path):
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    folder = tmp_path / "text"
    folder.mkdir()
    for split, lines in (("train", 160), ("valid", 30), ("test", 30)):
        (folder / f"{split}.txt").write_text("".join(" ".join(rng.choice(words) for _ in range(12)) + "\n" for _ in range(lines)))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "dsf_lightning.cli", "fit", "--config", str(ROOT / "recipes" / "ptb" / "delta_rnn.yaml"),
         "--data.corpus", "text-folder", "--data.corpus_options", f"{{path: {folder}}}", "--trainer.max_steps", "3",
         "--trainer.default_root_dir", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    printed = done.stdout + done.stderr
    assert done.returncode == 0, done.stderr[-3000:]
    assert "val_ppl" in printed  # the run validated and its bar showed the metrics
    assert "Tip:" not in printed and "litlogger" not in printed and "litmodels" not in printed
    assert "deprecated" not in printed.lower()
    assert "val_bpc" not in printed
