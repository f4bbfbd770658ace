"""Classify raw text with a pretrained text classifier (a hub folder of :mod:`dsf_lightning.tasks.pretrained`).

>>> import dsf_lightning as dsf
>>> classifier = dsf.from_pretrained("sr-lstm-p-imdb")          # doctest: +SKIP
>>> classifier.classify("A great movie, I loved every minute of it!")   # doctest: +SKIP
Classification(label='positive', probability=0.97, probabilities={'negative': 0.03, 'positive': 0.97}, ...)

Each text is read as the training data was: the folder's text normalizer (e.g. ``imdb``: lower case,
``<br />`` dropped, numbers as ``<num>``, punctuation split off), its tokenizer (words, or characters for the
formal languages), then the vocabulary, which wraps the symbols in the start and end tokens (sr-RNN paper sec.
3.3) and maps unknown words to ``<unk>`` (a closed vocabulary refuses them: :class:`ClassificationError`).

Edge cases, defined:

* an empty text (or one with no symbols, e.g. only spaces) is the model's reading of its start and end
  tokens alone: a defined label (for a formal language, whether the empty string is in it), with
  ``num_tokens == 0`` and a logged warning for text classifiers;
* a batch is classified exactly as its texts one by one (texts are grouped by length, padded and masked);
* a long text is cut: only its first ``max_length`` symbols (after normalization) are read, the rest is
  ignored (``truncated=True``), or its last ones for a folder whose ``keep`` is ``"last"`` (a model trained on
  the last words of each review); ``max_length`` is the folder's (the rule in :mod:`dsf_lightning.tasks.pretrained`:
  4,096 for full-length IMDB models, above any review of the data set) unless given. Normalizing a text reads
  all of it (linear: about 0.2 s per MB here); the network then runs at most ``max_length`` steps, and a batch
  at most ``max_batch_tokens`` padded steps at once, so 1 MB of text takes seconds and bounded memory.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ._keep import cut
from ._machine import check_device
from .hub.registry import HUB_KEYWORDS, check_keywords, resolve

logger = logging.getLogger(__name__)

__all__ = ["Classification", "ClassificationError", "TextClassifier"]


class ClassificationError(ValueError):
    """The input cannot be classified (the message says which text and what to do)."""


@dataclass(frozen=True)
class Classification:
    """One text's result.

    ``label``: the most probable class; ``probability``: its probability; ``probabilities``: every label's
    probability (the softmax of the logits, in label order); ``num_tokens``: symbols the model read (start and
    end tokens not counted); ``num_unknown``: of those, how many the vocabulary maps to ``<unk>``;
    ``truncated``: the text had more than ``max_length`` symbols and only the first (or, with the folder's
    ``keep: last``, the last) were read.
    """

    text: str
    label: str
    probability: float
    probabilities: dict[str, float]
    num_tokens: int
    num_unknown: int
    truncated: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class TextClassifier:
    """Labels and probabilities of raw texts from a :class:`~dsf_lightning.tasks.pretrained.PretrainedClassifier`.

    ``batch_size``: texts per forward pass; ``max_batch_tokens``: padded steps per forward pass (bounds the
    memory of long texts); ``max_length``: symbols read from each text (default: the folder's; None: all).
    """

    def __init__(self, pretrained: Any, device: str | torch.device = "cpu", batch_size: int = 32,
                 max_length: int | None | str = "folder", max_batch_tokens: int = 16384, folder: Path | None = None):
        from .data.normalize import get_normalizer

        for name, value in (("batch_size", batch_size), ("max_batch_tokens", max_batch_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ClassificationError(f"{name} must be a positive integer, got {value!r}")
        if getattr(pretrained, "task", None) != "text-classification":
            raise ClassificationError(
                f"a TextClassifier needs a text classifier (dsf_lightning.auto.load(..., task='text-classification')), got "
                f"{type(pretrained).__name__}; a language model scores text: dsf_lightning.from_pretrained / Scorer"
            )
        self.pretrained = pretrained
        self.labels = list(pretrained.labels)
        self.vocab, self.tokenizer = pretrained.vocab, pretrained.tokenizer
        self.normalizer = get_normalizer(pretrained.normalize)
        self.device = check_device(device, ClassificationError)
        self.model = pretrained.model.to(self.device).eval()
        self.model.requires_grad_(False)
        self.batch_size, self.max_batch_tokens = batch_size, max_batch_tokens
        self.max_length = self._check_max_length(pretrained.max_length if max_length == "folder" else max_length)
        self.keep = getattr(pretrained, "keep", "first")  # which end of a longer text is read
        self.folder = Path(folder) if folder is not None else None

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        revision: str | None = None,
        *,
        cache_dir: str | os.PathLike | None = None,
        force_download: bool = False,
        local_files_only: bool = False,
        token: str | bool | None = None,
        dtype: Any = None,
        device: str | torch.device = "cpu",
        batch_size: int = 32,
        max_length: int | None | str = "folder",
        **unknown,
    ) -> TextClassifier:
        """Resolve (published name, Hub repo id or local folder), load strictly and wrap a text classifier.

        ``revision``, ``cache_dir``, ``force_download``, ``local_files_only``, ``token``: huggingface_hub's
        download keywords. ``dtype``: cast the weights after the strict load. ``device``, ``batch_size``,
        ``max_length``: the classifier's. A language-model folder is a
        :class:`~dsf_lightning.hub.WrongTaskError` naming its loaders.
        """
        check_keywords(f"{cls.__name__}.from_pretrained", unknown, (*HUB_KEYWORDS, "dtype", "device", "batch_size", "max_length"))
        folder = resolve(name_or_path, revision, cache_dir=cache_dir, force_download=force_download,
                         local_files_only=local_files_only, token=token)
        from .tasks.pretrained import load_classifier  # Lightning comes with it: only when a classifier is loaded

        pretrained = load_classifier(folder, dtype=dtype)
        return cls(pretrained, device=device, batch_size=batch_size, max_length=max_length, folder=folder)

    # -- text -> symbols --------------------------------------------------------------------------------
    @staticmethod
    def _check_max_length(value) -> int | None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ClassificationError(f"max_length must be a positive integer or None (read whole texts), got {value!r}")
        return value

    def symbols(self, text: str, max_length: int | None = None) -> tuple[list[str], bool]:
        """The symbols of ``text`` the model reads (normalized, tokenized, cut to ``max_length``: its first or,
        when the classifier's ``keep`` is ``"last"``, its last symbols) and whether it was cut."""
        normalized = self.normalizer.normalize(text) if self.normalizer is not None else text
        symbols = self.tokenizer.tokenize_line(normalized)
        if max_length is not None and len(symbols) > max_length:
            return cut(symbols, max_length, self.keep), True
        return symbols, False

    # -- classification ---------------------------------------------------------------------------------
    @torch.no_grad()
    def logits(self, texts: Sequence[str], max_length: int | None | str = "default") -> tuple[torch.Tensor, list[dict]]:
        """Float32 logits ``[len(texts), num_classes]`` and, per text, what was read (``num_tokens``,
        ``num_unknown``, ``truncated``)."""
        from .tasks.data import UnknownSymbolError, pad_ids, token_budget_batches

        limit = self.max_length if max_length == "default" else self._check_max_length(max_length)
        encoded, read = [], []
        for i, text in enumerate(texts):
            symbols, truncated = self.symbols(text, limit)
            try:
                encoded.append(self.vocab.encode(symbols))
            except UnknownSymbolError as err:
                raise ClassificationError(f"texts[{i}]: {err}") from None
            unknown = sum(1 for s in symbols if s not in self.vocab.index) if self.vocab.unk_id is not None else 0
            read.append({"num_tokens": len(symbols), "num_unknown": unknown, "truncated": truncated})
        out = torch.empty(len(texts), len(self.labels))
        for batch in token_budget_batches([len(e) for e in encoded], self.batch_size, self.max_batch_tokens):
            inputs, lengths = pad_ids([encoded[i] for i in batch], self.vocab.pad_id)
            out[batch] = self.model(inputs.to(self.device), lengths.to(self.device)).float().cpu()
        return out, read

    def classify(self, texts: str | Sequence[str], *, max_length: int | None | str = "default"):
        """The :class:`Classification` of one text, or a list of them (in order) for a list of texts.

        ``max_length``: symbols read from each text (default: the classifier's; None: whole texts). See the
        module docstring for empty texts and long ones.
        """
        single = isinstance(texts, str)
        if not single and not isinstance(texts, (list, tuple)):
            raise ClassificationError(f"classify() takes a text (str) or a list of texts, got {type(texts).__name__}")
        items = [texts] if single else list(texts)
        for i, text in enumerate(items):
            if not isinstance(text, str):
                raise ClassificationError(f"texts[{i}] is a {type(text).__name__}, not a str: decode bytes first")
        logits, read = self.logits(items, max_length)
        probs = torch.softmax(logits, dim=-1)
        results = []
        for i, (text, p, what) in enumerate(zip(items, probs.tolist(), read)):
            if what["num_tokens"] == 0 and self.tokenizer.name != "char":
                logger.warning("text %d has no words: its label is the model's reading of no words (start and end tokens only)", i)
            best = max(range(len(p)), key=p.__getitem__)
            results.append(Classification(
                text=text, label=self.labels[best], probability=p[best], probabilities=dict(zip(self.labels, p)), **what,
            ))
        return results[0] if single else results

    def __repr__(self) -> str:
        return (f"TextClassifier(labels={self.labels}, vocab={len(self.vocab):,}, normalize="
                f"{getattr(self.normalizer, 'name', None)!r}, max_length={self.max_length}, keep={self.keep!r}, device={str(self.device)!r})")
