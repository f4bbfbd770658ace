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
