"""Tiny models and corpora for the analysis tests (everything builds in well under a second)."""

from __future__ import annotations

import random

import pytest
import torch

from dsf_lightning.data.tokenizers import get_tokenizer
from dsf_lightning.data.vocab import Vocabulary
from dsf_lightning.model import LMConfig, RecurrentLM
from dsf_lightning.model.pretrained import Pretrained, save_pretrained

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "mat", "rug", "big", "small", "and", "saw", "bird", "tree"]
VOCAB = Vocabulary(["<eos>", "<unk>", *WORDS], eos="<eos>", unk="<unk>")


def make_pretrained(cell: str, hidden: int = 8, *, embedding: int | None = None, layers: int = 1,
                    cell_options: dict | None = None, seed: int = 0) -> Pretrained:
    """A randomly initialized word LM over :data:`VOCAB` (evaluation mode)."""
    torch.manual_seed(seed)
    config = LMConfig(
        vocab_size=len(VOCAB), cell=cell, hidden_sizes=[hidden] * layers, cell_options=dict(cell_options or {}),
        embedding_size=hidden if embedding is None else embedding,
    )
    model = RecurrentLM(config).eval()
    return Pretrained(model=model, vocab=VOCAB, tokenizer=get_tokenizer("word"), info={"corpus": "toy"})


@pytest.fixture(scope="session")
def toy_models(tmp_path_factory):
    """Hub folders of tiny models, one per cell the tools need, keyed by cell name."""
    root = tmp_path_factory.mktemp("toy_models")
    folders = {}
    for name, cell, options in [
        ("delta-rnn", "delta-rnn", {}),
        ("ran", "ran", {}),
        ("irlm", "irlm", {"long_context_units": 6}),
        ("sr-lstm", "sr-lstm", {"k": 4}),
        ("lstm", "lstm", {}),
    ]:
        folders[name] = save_pretrained(make_pretrained(cell, cell_options=options), root / name)
    return folders


def _sentence(rng: random.Random) -> str:
    return f"the {rng.choice(['big', 'small'])} {rng.choice(['cat', 'dog'])} sat on the {rng.choice(['mat', 'rug'])}"


@pytest.fixture(scope="session")
def toy_corpus(tmp_path_factory):
    """A text-folder corpus (train/valid/test.txt) of one sentence template: 'the big cat sat on the mat'."""
    root = tmp_path_factory.mktemp("toy_corpus")
    rng = random.Random(0)
    for split, n in (("train", 300), ("valid", 20), ("test", 20)):
        (root / f"{split}.txt").write_text("\n".join(_sentence(rng) for _ in range(n)) + "\n", encoding="utf-8")
    return root


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Tokenized corpora are cached in the test's own folder, never in the user's cache."""
    monkeypatch.setenv("DSF_CACHE_DIR", str(tmp_path / "cache"))
