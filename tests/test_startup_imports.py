"""Scoring with a language model does not import Lightning (it costs seconds at every `dsf score`): the
classifier side (dsf_lightning.tasks) and the training module are imported only where they are used."""

import subprocess
import sys

CHECK = """
import sys
import dsf_lightning as dsf
from dsf_lightning.cli import build_parser
build_parser()                                  # every command's parser, as `dsf score ...` builds them
scorer = dsf.from_pretrained("delta-rnn-ptb")   # the bundled language model
scorer.score("the company said")
heavy = sorted(m for m in ("lightning", "lightning.pytorch", "dsf_lightning.tasks", "dsf_lightning.training.language_model")
               if m in sys.modules)
print(heavy)
"""


def test_scoring_a_sentence_does_not_import_lightning():
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1",
                          "OMP_NUM_THREADS": "1", "PATH": ""}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


HELP_CHECK = """
import contextlib, io, sys, time
start = time.perf_counter()
from dsf_lightning.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(["--help"])
    except SystemExit as done:
        assert done.code == 0, done.code
assert "classify" in out.getvalue() and "reproduce" in out.getvalue(), out.getvalue()
print(sorted(m for m in ("torch", "lightning", "numpy", "huggingface_hub") if m in sys.modules))
print(time.perf_counter() - start)
"""


def test_dsf_help_imports_no_torch_and_is_fast():
    """`dsf --help` lists every command without importing torch, Lightning or the hub client (was 2.4 s of torch)."""
    done = subprocess.run([sys.executable, "-c", HELP_CHECK], capture_output=True, text=True,
                          env={"OMP_NUM_THREADS": "1", "PATH": ""}, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    heavy, seconds = done.stdout.strip().splitlines()[-2:]
    assert heavy == "[]"
    assert float(seconds) < 1.0, f"dsf --help took {seconds} s"
