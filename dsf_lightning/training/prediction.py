"""``dsf predict``: per-token log-probabilities of a split (or a text file) as JSON lines.

:meth:`LanguageModelModule.predict_step <dsf_lightning.training.LanguageModelModule.predict_step>`
scores every window of the predict split with the state carried, exactly as ``dsf test`` does (the same
contiguous streams, the same targets); :class:`TokenLogprobWriter` (a Lightning ``BasePredictionWriter``)
writes one line per scored token::

    {"token": "market", "id": 231, "logprob": -5.12, "surprisal": 7.39, "position": 17}

``logprob`` is the natural log of the token's probability given everything before it in its stream,
``surprisal`` is in bits (``-logprob / ln 2``), ``position`` is the token's index in the split's token
sequence (the corpus's ids, ``<eos>`` after every line). The split is cut into ``eval_batch_size``
contiguous streams (``batchify``): the first token of each stream is context only and the tail that does
not fill the last stream is dropped, as in ``dsf test``, so the lines are exactly the tokens the test
scores and the sum of their ``-logprob`` is ``test_loss * test_tokens``. Lines are in stream order:
stream 0's tokens, then stream 1's, ..., which for contiguous streams is increasing ``position``.

Under DDP each rank owns a contiguous block of streams (``dsf_lightning.data.streams``): it writes its
lines to ``OUTPUT.rank{r}-of-{W}`` (spooled per stream, so memory does not grow with the split), and after
a barrier rank 0 concatenates the rank files in rank order into ``OUTPUT`` and removes them. On several
nodes this needs ``OUTPUT`` on a filesystem every node sees; with ``merge=False`` the per-rank files are
kept as they are (``cat OUTPUT.rank*`` in rank order gives the same file).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from .._checks import check_bool
from .._fs import write_atomic

__all__ = ["TokenLogprobWriter", "DEFAULT_PREDICT_OUTPUT", "PredictionOutputError"]

logger = logging.getLogger(__name__)
LN2 = math.log(2.0)
DEFAULT_PREDICT_OUTPUT = "predictions.jsonl"  # under the trainer's default_root_dir


class PredictionOutputError(FileExistsError):
    """The prediction output exists and the writer was not told to replace it (``overwrite``)."""


def _symbols(trainer) -> Sequence[str] | None:
    """The vocabulary symbols of the trainer's data (a Vocabulary, or a plain list of symbols)."""
    corpus = getattr(getattr(trainer, "datamodule", None), "corpus", None)
    vocab = getattr(corpus, "vocab", None)
    if vocab is None:
        return None
    return getattr(vocab, "symbols", vocab)


class TokenLogprobWriter(BasePredictionWriter):
    """Write the predict split's per-token log-probabilities as JSON lines (see the module docstring).

    Args:
        output: the JSON-lines file (its folder is created). None: ``predictions.jsonl`` in the
            trainer's ``default_root_dir``.
        merge: under DDP, join the per-rank files into ``output`` on rank 0 (True) or keep them.
        overwrite: replace an existing ``output``. False (the default, and what a recipe gets): an existing file is
            a :class:`PredictionOutputError` before anything is scored, so a recipe cannot replace a file the user
            did not name; ``dsf predict --predict_output PATH`` on the command line is the way to replace PATH.

    The file is written to a temporary sibling and renamed into place when complete (a kill or a full disk
    leaves the previous file, or none).
    """

    def __init__(self, output: str | os.PathLike | None = None, merge: bool = True, overwrite: bool = False) -> None:
        super().__init__(write_interval="batch")
        self.output = None if output is None else Path(output)
        self.merge = merge
        self.overwrite = check_bool("overwrite", overwrite)
        self._spool: Path | None = None
        self._files: list[Any] = []
        self._loader = None

    def _path(self, trainer) -> Path:
        return self.output if self.output is not None else Path(trainer.default_root_dir) / DEFAULT_PREDICT_OUTPUT

    def _part(self, trainer) -> Path:
        out = self._path(trainer)
        if trainer.world_size == 1:
            return out
        return out.with_name(f"{out.name}.rank{trainer.global_rank}-of-{trainer.world_size}")

    def on_predict_epoch_start(self, trainer, pl_module) -> None:
        loaders = trainer.predict_dataloaders
        loader = loaders[0] if isinstance(loaders, (list, tuple)) else loaders
        if not hasattr(loader, "streams") or not hasattr(loader, "first_stream"):
            raise TypeError(
                "TokenLogprobWriter writes the stream windows of LanguageModelDataModule.predict_dataloader; "
                f"got a {type(loader).__name__}"
            )
        self._loader = loader
        self._symbols = _symbols(trainer)
        out = self._part(trainer)
        final = self._path(trainer) if self.merge else out  # the file this rank's lines end up in
        if not self.overwrite and (final.exists() or final.is_symlink()):
            raise PredictionOutputError(
                f"the prediction output {final} exists and is not replaced: name it on the command line "
                f"(dsf predict --predict_output {final}) to replace it, or remove it"
            )
        out.parent.mkdir(parents=True, exist_ok=True)
        # one spool file per stream: lines arrive window by window (all streams at once) but are written in
        # stream order, without holding the split in memory
        self._spool = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        self._files = [open(self._spool / f"{s:06d}", "w", encoding="utf-8") for s in range(loader.streams.shape[0])]

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx=0):
        logprobs, ids, index = prediction["logprobs"], prediction["targets"], int(prediction["window"])
        loader = self._loader
        n, first = loader.streams.shape[1], loader.first_stream
        start = index * loader.bptt + 1  # the column of the first target of this window
        symbols = self._symbols
        for s, (row_lp, row_ids) in enumerate(zip(logprobs.tolist(), ids.tolist())):
            base = (first + s) * n + start
            lines = []
            for t, (lp, i) in enumerate(zip(row_lp, row_ids)):
                token = symbols[i] if symbols is not None else str(i)
                lines.append(json.dumps({"token": token, "id": i, "logprob": lp, "surprisal": -lp / LN2,
                                         "position": base + t}, ensure_ascii=False))
            self._files[s].write("\n".join(lines) + "\n")

    def on_predict_epoch_end(self, trainer, pl_module) -> None:
        part = self._part(trainer)
        for f in self._files:
            f.close()
        write_atomic(part, lambda out: _concatenate([Path(f.name) for f in self._files], out))
        shutil.rmtree(self._spool, ignore_errors=True)
        self._files, self._spool = [], None
        if trainer.world_size > 1:
            trainer.strategy.barrier("dsf_predict_written")
            if self.merge and trainer.global_rank == 0:
                self._merge(trainer)
            trainer.strategy.barrier("dsf_predict_merged")
        if trainer.global_rank == 0:
            logger.info("per-token log-probabilities written to %s", self._path(trainer) if self.merge else part)

    def _merge(self, trainer) -> None:
        out = self._path(trainer)
        parts = [out.with_name(f"{out.name}.rank{r}-of-{trainer.world_size}") for r in range(trainer.world_size)]
        missing = [str(p) for p in parts if not p.is_file()]
        if missing:
            raise FileNotFoundError(
                f"rank 0 cannot see the per-rank prediction files {missing}: put the predict output on a filesystem "
                "every node shares, or use TokenLogprobWriter(merge=False) and join the rank files yourself"
            )
        write_atomic(out, lambda dst: _concatenate(parts, dst))
        for p in parts:
            p.unlink()

    def on_exception(self, trainer, pl_module, exception) -> None:
        for f in self._files:
            f.close()
        if self._spool is not None:
            shutil.rmtree(self._spool, ignore_errors=True)
        self._files, self._spool = [], None


def _concatenate(paths: Sequence[Path], out) -> None:
    for path in paths:
        with open(path, "rb") as src:
            shutil.copyfileobj(src, out)


def predict_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log p(target)`` per position in float64, from a log-softmax in fp32 (never half precision)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1).double()
