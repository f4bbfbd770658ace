"""A tiny structured corpus and a helper that trains on it with the real Lightning Trainer."""

import types

import lightning as L
import pytest
import torch

from dsf_lightning.training import LanguageModelModule
from dsf_lightning.training.datamodule import LanguageModelDataModule

VOCAB = 13


def make_toy_corpus(seed: int = 0, n_train: int = 2400, n_eval: int = 400):
    """A learnable stream: noisy counting modulo VOCAB (next token is usually previous + 1)."""
    g = torch.Generator().manual_seed(seed)

    def stream(n):
        steps = torch.where(torch.rand(n, generator=g) < 0.8, 1, torch.randint(0, VOCAB, (n,), generator=g))
        return torch.cumsum(steps, 0) % VOCAB

    return types.SimpleNamespace(
        name="toy", vocab=[str(i) for i in range(VOCAB)],
        splits={"train": stream(n_train), "valid": stream(n_eval), "test": stream(n_eval)},
    )


@pytest.fixture
def toy_corpus():
    return make_toy_corpus()


def toy_modules(corpus, batch_size=4, bptt=7, eval_batch_size=2, **model_kwargs):
    data = LanguageModelDataModule(corpus, batch_size=batch_size, bptt=bptt, eval_batch_size=eval_batch_size)
    options = dict(vocab_size=data.vocab_size, hidden_sizes=[16], embedding_size=8, lr=3e-3)
    options.update(model_kwargs)
    return LanguageModelModule(**options), data


def quiet_trainer(**kwargs):
    options = dict(
        accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, use_distributed_sampler=False,
    )
    options.update(kwargs)
    return L.Trainer(**options)
