"""Issue 38 item 4: the sizes a folder's config.json gives are checked against model.safetensors' header
(read alone) and a cap before the model is built.

config.json is not checksummed (it holds the checksums), so a forger changes its sizes at will: ``hidden_sizes``
[30000] over a tiny weights file allocated 3.6 GB before the weights were read; 200,000 layers took minutes to
build. Each tampered folder is loaded in a subprocess that reports its peak RSS growth and CPU time: refused
with a one-line error naming the field, within a few MB and well under a second of work.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dsf_lightning.data.tokenizers import get_tokenizer
from dsf_lightning.data.vocab import Vocabulary
from dsf_lightning.model import LMConfig, RecurrentLM
from dsf_lightning.model.pretrained import Pretrained, load_pretrained, save_pretrained

from .conftest import edit_config, tiny_pretrained

LOAD = """
import json, resource, sys, time
import torch
from dsf_lightning.hub import PretrainedFormatError
from importlib import import_module
load = getattr(import_module(sys.argv[2]), sys.argv[3])
torch.zeros(1000, 1000).sum()  # the allocator warmed up: its first pages are not the load's
before = resource.getrusage(resource.RUSAGE_SELF)
try:
    load(sys.argv[1])
    error = None
except PretrainedFormatError as err:
    error = str(err)
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"error": error, "rss_growth_mib": (after.ru_maxrss - before.ru_maxrss) / 1024,
                  "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime}))
"""
RSS_GROWTH_MIB = 64  # the bundled model's own weights are 28 MiB; the forged sizes asked for up to 3.6 GB
CPU_S = 5.0  # refusing reads a few KB; building 200,000 layers took over 90 s


def _load_in_subprocess(folder, module: str = "dsf_lightning.model.pretrained", loader: str = "load_pretrained") -> dict:
    try:
        done = subprocess.run([sys.executable, "-c", LOAD, str(folder), module, loader], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"loading {folder} ran past 60 s (built what config.json says before checking it)")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def wide_folder(tmp_path):
    """A small model with a 3000-symbol vocabulary: a hidden size up to 3000 is as large as a stored dimension,
    so only the shapes (on the meta device) can tell that config.json does not fit the weights."""
    vocab = Vocabulary(["<eos>", "<unk>"] + [f"w{i}" for i in range(2998)], eos="<eos>", unk="<unk>")
    model = RecurrentLM(LMConfig(vocab_size=len(vocab), hidden_sizes=[8], embedding_size=8, tie_weights=True))
    return save_pretrained(Pretrained(model, vocab, get_tokenizer("word")), tmp_path / "wide")


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda m: m.update(hidden_sizes=[30000], embedding_size=8), "model.hidden_sizes[0]=30,000"),
        (lambda m: m.update(hidden_sizes=[8] * 200_000), "model.hidden_sizes lists 200,000 layers"),
        (lambda m: m.update(hidden_sizes=[8] * 200), "model.hidden_sizes lists 200 layers but model.safetensors"),
        (lambda m: m.update(embedding_size=50_000, tie_weights=False), "model.embedding_size=50,000"),
    ],
    ids=["hidden-30000", "layers-200000", "more-layers-than-tensors", "embedding-50000"],
)
def test_tampered_sizes_are_refused_before_allocation(folder, change, field):
    edit_config(folder, lambda c: change(c["model"]))
    out = _load_in_subprocess(folder)
    assert out["error"] is not None, "the tampered folder loaded"
    assert "\n" not in out["error"] and "config.json" in out["error"] and field in out["error"], out["error"]
    assert out["rss_growth_mib"] < RSS_GROWTH_MIB, out
    assert out["cpu_s"] < CPU_S, out


def test_a_huge_vocab_size_is_refused_before_allocation(folder):
    edit_config(folder, lambda c: c["model"].update(vocab_size=10**9))
    out = _load_in_subprocess(folder)
    assert out["error"] is not None and "vocab_size=1,000,000,000" in out["error"], out
    assert out["rss_growth_mib"] < RSS_GROWTH_MIB and out["cpu_s"] < CPU_S, out


def test_a_size_within_the_stored_dimensions_is_refused_by_its_shapes_before_allocation(wide_folder):
    """hidden 2900 <= the 3000-symbol decoder passes the size bound; the model's shapes on the meta device do
    not match the header's (a real build would allocate 2900 x 2900 matrices: ~100 MiB each)."""
    edit_config(wide_folder, lambda c: c["model"].update(hidden_sizes=[2900], embedding_size=2900))
    out = _load_in_subprocess(wide_folder)
    assert out["error"] is not None and "\n" not in out["error"], out
    assert "model.safetensors" in out["error"] and "hidden_sizes=[2900]" in out["error"] and "do not belong together" in out["error"], out
    assert out["rss_growth_mib"] < RSS_GROWTH_MIB and out["cpu_s"] < CPU_S, out


@pytest.mark.parametrize("cell", ["delta-rnn", "lstm", "gru", "scrn", "ran", "elman"])
def test_honest_folders_pass_the_size_checks_whatever_the_cell(tmp_path, cell, tokens):
    """Every size field is a dimension of some stored tensor, also where a hidden size exceeds the vocabulary."""
    for i, sizes in enumerate(([8], [20, 6], [30])):
        pretrained = tiny_pretrained(cell, tie=False, hidden_sizes=sizes, embedding_size=5)
        loaded = load_pretrained(save_pretrained(pretrained, tmp_path / f"{cell}-{i}"))
        assert loaded.config.hidden_sizes == sizes


@pytest.mark.parametrize("change, field", [({"hidden_size": 3000}, "model.hidden_size=3,000"),
                                           ({"embedding_size": 40000}, "model.embedding_size=40,000")])
def test_a_classifier_folder_with_tampered_sizes_is_refused_before_allocation(tmp_path, change, field):
    from dsf_lightning.tasks.pretrained import save_classifier

    from .conftest import tiny_classifier

    folder = save_classifier(tiny_classifier(), tmp_path / "clf")
    edit_config(folder, lambda c: c["model"].update(change))
    out = _load_in_subprocess(folder, "dsf_lightning.tasks.pretrained", "load_classifier")
    assert out["error"] is not None and "\n" not in out["error"] and field in out["error"], out
    assert out["rss_growth_mib"] < RSS_GROWTH_MIB and out["cpu_s"] < CPU_S, out
