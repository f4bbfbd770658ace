"""Short, fixed-length training runs so that the analysis commands work without a trained model.

These are demonstrations, not results: a few hundred Adam steps of a small model give gates,
timescales and centroids that have started to organize, far from a converged model. Everything they
produce is labelled as freshly trained (``info["freshly_trained"]``) and the plots say so.

* :func:`train_small_lm`: a small :class:`~dsf_lightning.model.RecurrentLM` of any registered cell on
  a corpus (PTB by default), truncated BPTT over contiguous streams, plain PyTorch loop.
* :func:`train_tomita_sr`: an sr-GRU :class:`~dsf_lightning.tasks.modules.SequenceClassifier` on a
  Tomita grammar (the sr-RNN paper's sec. 4.1 setting, shortened).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ._common import AnalysisError

logger = logging.getLogger(__name__)

__all__ = ["FreshClassifier", "train_small_lm", "train_tomita_sr"]


def _check_steps(steps: object) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise AnalysisError(f"the number of training steps must be a positive integer, got {steps!r}")
    return steps


def train_small_lm(
    cell: str,
    *,
    corpus: str = "ptb",
    data_root: str | None = None,
    corpus_options: dict | None = None,
    steps: int = 200,
    hidden_size: int = 128,
    embedding_size: int | None = None,
    cell_options: dict | None = None,
    batch_size: int = 32,
    bptt: int = 35,
    lr: float = 3e-3,
    clip: float = 1.0,
    seed: int = 0,
):
    """Train a one-layer ``cell`` language model for ``steps`` windows of ``batch_size x bptt`` tokens
    of the corpus's training split; returns a :class:`~dsf_lightning.model.pretrained.Pretrained` whose
    ``info`` says it was freshly trained (steps, seconds, last training loss)."""
    from ..data.corpora import CorpusError, load_corpus
    from ..data.streams import batchify
    from ..data.tokenizers import get_tokenizer
    from ..model import LMConfig, RecurrentLM
    from ..model.pretrained import Pretrained

    steps = _check_steps(steps)
    try:
        data = load_corpus(corpus, data_root=data_root, splits=["train"], **dict(corpus_options or {}))
    except (CorpusError, OSError) as err:
        raise AnalysisError(
            f"cannot load corpus {corpus!r} to train a small model ({err}); give --data-root (or set DSF_DATA_ROOT), "
            "or pass a trained model with --model"
        ) from None
    tokens = data.splits["train"]
    torch.manual_seed(seed)
    config = LMConfig(
        vocab_size=len(data.vocab), cell=cell, hidden_sizes=[hidden_size], cell_options=dict(cell_options or {}),
        embedding_size=hidden_size if embedding_size is None else embedding_size,
    )
    model = RecurrentLM(config)
    streams = batchify(tokens, batch_size)  # [B, n]
    n = streams.shape[1]
    if n < 2:
        raise AnalysisError(f"corpus {corpus!r} is too small for {batch_size} streams")
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    state = None
    pos, loss_value, start = 0, math.nan, time.perf_counter()
    for _ in range(steps):
        if pos + 1 >= n:
            pos, state = 0, None
        T = min(bptt, n - 1 - pos)
        inputs, targets = streams[:, pos : pos + T], streams[:, pos + 1 : pos + 1 + T]
        pos += T
        logits, state = model(inputs, state)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        state = tuple(tuple(s.detach() for s in layer) for layer in state)
        loss_value = float(loss.detach())
    seconds = time.perf_counter() - start
    model.eval()
    tokenizer = getattr(data, "tokenizer", None) or get_tokenizer(data.tokenizer_name)
    info = {
        "corpus": data.name,
        "freshly_trained": True,
        "fresh_training": {
            "steps": steps, "batch_size": batch_size, "bptt": bptt, "lr": lr, "seed": seed,
            "seconds": round(seconds, 2), "final_train_loss": loss_value,
            "final_train_ppl": math.exp(min(loss_value, 50.0)),
            "tokens_seen": steps * batch_size * bptt,
        },
    }
    logger.info("trained a small %s LM on %s: %d steps in %.1f s, loss %.3f", cell, data.name, steps, seconds, loss_value)
    return Pretrained(model=model, vocab=data.vocab, tokenizer=tokenizer, info=info)


@dataclass
class FreshClassifier:
    """A freshly trained sr-RNN classifier, its vocabulary, the training strings and how it was trained."""

    module: Any
    vocab: Any
    strings: list[str]
    labels: list[int]
    info: dict


def train_tomita_sr(
    grammar: int = 2,
    *,
    steps: int = 300,
    hidden_size: int = 16,
    embedding_size: int = 8,
    k: int = 10,
    tau: float = 1.0,
    lr: float = 0.01,
    batch_size: int = 32,
    seed: int = 0,
) -> FreshClassifier:
    """Train an sr-GRU (eqs 3 & 6) on Tomita grammar ``grammar`` for ``steps`` Adam steps."""
    import lightning as L

    from ..tasks.datamodules import TomitaDataModule
    from ..tasks.languages import TOMITA_DESCRIPTIONS
    from ..tasks.modules import SequenceClassifier

    steps = _check_steps(steps)
    if grammar not in TOMITA_DESCRIPTIONS:
        raise AnalysisError(f"Tomita grammars are numbered {min(TOMITA_DESCRIPTIONS)}-{max(TOMITA_DESCRIPTIONS)}, got {grammar!r}")
    L.seed_everything(seed, verbose=False)
    data = TomitaDataModule(grammar, batch_size=batch_size, seed=seed)
    data.setup("fit")
    module = SequenceClassifier(
        **data.model_options(), cell="sr-gru", hidden_size=hidden_size, embedding_size=embedding_size,
        cell_options={"k": k, "tau": tau}, lr=lr,
    )
    opt = torch.optim.Adam(module.parameters(), lr=lr)
    module.train()
    done, loss_value, start = 0, math.nan, time.perf_counter()
    while done < steps:
        for batch in data.train_dataloader():
            logits = module(batch["inputs"], batch["lengths"])
            loss = F.cross_entropy(logits.float(), batch["labels"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
            opt.step()
            loss_value = float(loss.detach())
            done += 1
            if done >= steps:
                break
    module.eval()
    strings, labels = data.split_strings("train")
    accuracy = float((module.predict_strings(strings, data.vocab) == torch.tensor(labels)).float().mean())
    info = {
        "task": f"tomita{grammar}",
        "language": TOMITA_DESCRIPTIONS[grammar],
        "cell": "sr-gru",
        "freshly_trained": True,
        "fresh_training": {
            "steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed, "hidden_size": hidden_size, "k": k,
            "tau": tau, "seconds": round(time.perf_counter() - start, 2), "final_train_loss": loss_value,
            "train_accuracy": accuracy,
        },
    }
    return FreshClassifier(module=module, vocab=data.vocab, strings=list(strings), labels=list(labels), info=info)
