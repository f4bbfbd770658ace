"""What scoring gives back: :class:`SentenceScore` (a text), :class:`DocumentScore` (a document), their
rates (perplexity, bits per character, surprisal), and :class:`ScoringError`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

LN2 = math.log(2.0)


class ScoringError(ValueError):
    """The text cannot be scored (empty, unknown symbol of a closed vocabulary, unreadable file, ...)."""


def _safe_exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


class _Rates:
    """Perplexity, bits per character and surprisal from ``logprob``, ``num_tokens``, ``logprobs`` and
    ``char_level`` (shared by sentence and document results)."""

    @property
    def ppl(self) -> float:
        """Perplexity ``exp(-mean logprob)``."""
        return _safe_exp(-self.logprob / self.num_tokens) if self.num_tokens else math.nan

    @property
    def bpc(self) -> float | None:
        """Bits per character (mean surprisal) for character models, else None."""
        if not self.char_level or not self.num_tokens:
            return None
        return -self.logprob / self.num_tokens / LN2

    @property
    def oov_rate(self) -> float:
        """Share of the scored tokens that were out-of-vocabulary words (scored as the unknown symbol)."""
        return self.num_oov / self.num_tokens if self.num_tokens else 0.0

    @property
    def surprisal(self) -> list[float] | None:
        """Per-token surprisal in bits: ``-logprob / ln 2`` (None when per-token values were not kept)."""
        return None if self.logprobs is None else [-lp / LN2 for lp in self.logprobs]

    def _dict(self, head: dict[str, Any], tail: dict[str, Any], per_token: bool) -> dict[str, Any]:
        """``to_dict``: ``head``, the counts and rates, ``bpc`` (character models), ``tail``, then the per-token
        values when kept and asked for."""
        out = {**head, "num_tokens": self.num_tokens, "num_oov": self.num_oov, "oov_rate": self.oov_rate,
               "logprob": self.logprob, "ppl": self.ppl}
        if self.char_level:
            out["bpc"] = self.bpc
        out.update(tail)
        if per_token and self.tokens is not None:
            out["tokens"] = [
                {"token": t, "logprob": lp, "surprisal": -lp / LN2} for t, lp in zip(self.tokens, self.logprobs)
            ]
        return out


@dataclass
class SentenceScore(_Rates):
    """The score of one text. ``tokens`` are the vocabulary symbols scored (an out-of-vocabulary word
    appears as the unknown symbol; the original words are in ``oov_words``), the end symbol included;
    ``logprobs[i]`` is the natural-log probability of ``tokens[i]`` given everything before it."""

    text: str
    tokens: list[str]
    logprobs: list[float]
    num_oov: int = 0
    oov_words: list[str] = field(default_factory=list)
    char_level: bool = field(default=False, repr=False)

    @property
    def num_tokens(self) -> int:
        return len(self.logprobs)

    @property
    def logprob(self) -> float:
        """Sum of the tokens' natural-log probabilities (log P(sentence | <eos>))."""
        return math.fsum(self.logprobs)

    def to_dict(self, per_token: bool = True) -> dict[str, Any]:
        return self._dict({"text": self.text}, {"oov_words": list(self.oov_words)} if self.oov_words else {}, per_token)


@dataclass
class DocumentScore(_Rates):
    """The score of a whole document (see :meth:`Scorer.score_document`). ``tokens`` and ``logprobs``
    are kept only when asked for (``per_token=True``); otherwise they are None."""

    num_tokens: int
    num_oov: int
    logprob: float
    num_lines: int = 0
    source: str | None = None
    char_level: bool = field(default=False, repr=False)
    tokens: list[str] | None = field(default=None, repr=False)
    logprobs: list[float] | None = field(default=None, repr=False)

    def to_dict(self, per_token: bool = True) -> dict[str, Any]:
        return self._dict({"source": self.source, "num_lines": self.num_lines}, {}, per_token)


