"""Long work shows a progress bar on a terminal and nothing in a log or a pipe (issue 35, "Progress on long work"):
``dsf score --file``, ``dsf export --evaluate`` (evaluate_on_corpus) and dynamic evaluation. The terminal is a real
pseudo-terminal (``pty``); the bar is tqdm's."""

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios

import pytest

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
BAR = ("%|", "it/s", "B/s", "tok/s")  # what a tqdm bar draws
TEXT = "the company said it expects higher earnings in the third quarter\n" * 200
# files under 256 KiB get no bar (a second of work): the child lowers the size so that a small file shows one
SCORE = ("import sys, dsf_lightning.data.textfile as t; t._PROGRESS_MIN_BYTES = 0; from dsf_lightning.cli import main; "
         "sys.exit(main(['score', '--file', sys.argv[1]]))")


def open_terminal() -> tuple[int, int]:
    """A pseudo-terminal (master, slave) of 80 x 24, as a terminal window is (a bare pty is 0 x 0)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    return master, slave


def run_in_pty(args: list[str]) -> tuple[int, str]:
    """``args`` with stdin, stdout and stderr on a pseudo-terminal: (exit code, all it printed)."""
    master, slave = open_terminal()
    child = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=ENV, close_fds=True)
    os.close(slave)
    out = bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            out += data
        elif child.poll() is not None:
            break
    os.close(master)
    return child.wait(timeout=300), out.decode("utf-8", "replace")


def test_dsf_score_file_draws_a_bar_on_a_terminal(tmp_path):
    (tmp_path / "doc.txt").write_text(TEXT)
    code, printed = run_in_pty([sys.executable, "-c", SCORE, str(tmp_path / "doc.txt")])
    assert code == 0, printed[-3000:]
    assert "ppl" in printed
    assert any(mark in printed for mark in BAR), printed[-3000:]


def test_dsf_score_file_draws_no_bar_into_a_pipe(tmp_path):
    (tmp_path / "doc.txt").write_text(TEXT)
    done = subprocess.run([sys.executable, "-c", SCORE, str(tmp_path / "doc.txt")], capture_output=True, text=True,
                          env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ppl" in done.stdout
    assert not any(mark in done.stderr for mark in BAR) and "\r" not in done.stderr, done.stderr


DYNAMIC = """
import torch
from dsf_lightning.evaluation import dynamic_evaluation
from dsf_lightning.model import LMConfig, RecurrentLM
torch.manual_seed(0)
model = RecurrentLM(LMConfig(vocab_size=17, hidden_sizes=[16], embedding_size=16)).eval()
ids = torch.randint(0, 17, (400,))
print("tokens", dynamic_evaluation(model, {"valid": ids[:200], "test": ids[200:]}, segment_length=20, context_token=0)["test"].tokens)
"""

# what `dsf export --evaluate test` runs: the bundled model scores a text folder's test file (a small one: the size
# under which no bar is drawn is lowered)
EVALUATE = """
import sys
from pathlib import Path
import dsf_lightning
import dsf_lightning.data.textfile as textfile
from dsf_lightning.evaluation.corpus_eval import evaluate_on_corpus
from dsf_lightning.model.pretrained import load_pretrained
textfile._PROGRESS_MIN_BYTES = 0
model = load_pretrained(Path(dsf_lightning.__file__).parent / "pretrained" / "delta-rnn-ptb")
metrics = evaluate_on_corpus(model, "text-folder", splits=("test",), corpus_options={"path": sys.argv[1]})[1]
print("tokens", metrics["test_tokens"])
"""


def _folder(tmp_path):
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text(TEXT)
    return str(tmp_path)


@pytest.mark.parametrize("code, label, folder", [(DYNAMIC, "dynamic evaluation", False), (EVALUATE, "scoring test.txt", True)])
def test_long_evaluations_draw_a_bar_on_a_terminal(tmp_path, code, label, folder):
    args = [sys.executable, "-c", code, *([_folder(tmp_path)] if folder else [])]
    status, printed = run_in_pty(args)
    assert status == 0, printed[-3000:]
    assert "tokens" in printed
    assert label in printed and any(mark in printed for mark in BAR), printed[-3000:]


@pytest.mark.parametrize("code, folder", [(DYNAMIC, False), (EVALUATE, True)])
def test_long_evaluations_are_quiet_in_a_pipe(tmp_path, code, folder):
    args = [sys.executable, "-c", code, *([_folder(tmp_path)] if folder else [])]
    done = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tokens" in done.stdout
    assert not any(mark in done.stderr for mark in BAR) and "\r" not in done.stderr, done.stderr
