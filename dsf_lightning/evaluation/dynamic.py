"""Dynamic evaluation (DSF paper sec 4.2, after Mikolov 2012; IRLM paper Table 2).

The model keeps learning while it is evaluated, strictly *test-then-train*: each segment of the stream
is first predicted with the current weights (its log-probabilities are what is reported), then one SGD
step on that segment's summed negative log-likelihood updates the weights, and the carried state moves
on to the next segment. A segment is ``segment_length`` tokens (``updates="segment"``, the default: 20)
or one sentence, through its end-of-sentence token (``updates="sentence"``): the DSF paper updates
"sample-by-sample after each evaluation" and its samples are sentences. ``#1`` runs over the test split alone; ``#2`` first over the validation split
and then the test split (the model "compresses" both). The caller's model is never modified: the
updates happen on a copy.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from .._progress import progress_bar
from ..model import RecurrentLM, detach_state


@dataclass
class SplitResult:
    """Summed natural-log NLL and the number of predicted tokens of one split."""

    nll: float
    tokens: int

    @property
    def ppl(self) -> float:
        return math.exp(self.nll / self.tokens)

    @property
    def bpc(self) -> float:
        return self.nll / self.tokens / math.log(2)


def dynamic_evaluation(
    model: RecurrentLM,
    splits: Mapping[str, Tensor] | Sequence[tuple[str, Tensor]],
    *,
    lr: float = 0.005,
    segment_length: int = 20,
    context_token: int | None = None,
    clip_norm: float | None = None,
    updates: Literal["segment", "sentence"] = "segment",
    sentence_end: int | None = None,
) -> dict[str, SplitResult]:
    """Test-then-train over the splits in order (one continuous stream), on a copy of ``model``.

    Args:
        splits: ``{"valid": ids, "test": ids}`` (1-D token ids) in the order to run them; pass only the
            test split for dynamic #1, validation then test for dynamic #2.
        lr: the SGD step size (0.005 in the DSF paper); 0 gives static evaluation of one stream.
        segment_length: tokens predicted before each update (``updates="segment"``).
        context_token: the token that precedes the first prediction (``<eos>`` for sentence corpora);
            None uses the first token of the first split as context only.
        clip_norm: optional gradient-norm clip per update.
        updates: ``"segment"`` (an update every ``segment_length`` tokens) or ``"sentence"`` (an update
            after each sentence, the DSF paper's per-sample updates; a last unfinished sentence is one
            segment too).
        sentence_end: the token that ends a sentence (``<eos>``); ``updates="sentence"`` needs it
            (default: ``context_token``).
    """
    if isinstance(segment_length, bool) or not isinstance(segment_length, int) or segment_length < 1:
        raise ValueError(f"segment_length must be a positive integer, got {segment_length!r}")
    if updates not in ("segment", "sentence"):
        raise ValueError(f"updates must be 'segment' (every segment_length tokens) or 'sentence' (after each "
                         f"sentence), got {updates!r}")
    if updates == "sentence":
        sentence_end = context_token if sentence_end is None else sentence_end
        if sentence_end is None:
            raise ValueError("updates='sentence' needs sentence_end (or context_token): the id of the token that "
                             "ends a sentence, e.g. the vocabulary's <eos>")
    if not (isinstance(lr, (int, float)) and lr >= 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a finite number >= 0, got {lr!r}")
    items = list(splits.items()) if isinstance(splits, Mapping) else list(splits)
    if not items:
        raise ValueError("splits is empty: give at least the test split")
    learner = copy.deepcopy(model).eval()  # no dropout; the caller's weights stay as they are
    for p in learner.parameters():
        p.requires_grad_(True)
    optimizer = torch.optim.SGD(learner.parameters(), lr=lr)
    device = next(learner.parameters()).device  # the splits go where the model is (a GPU's for a fast run)
    results: dict[str, SplitResult] = {}
    state = None
    prev: int | None = context_token
    # minutes of work (6-11 on PTB): a bar on a terminal, nothing in a log
    bar = progress_bar(sum(ids.numel() for _, ids in items), "dynamic evaluation", unit="tok", unit_scale=True)
    for name, ids in items:
        ids = ids.reshape(-1).long().to(device)
        start = 0
        if prev is None:  # the very first token is context only
            prev, start = int(ids[0]), 1
        nll_sum, count = 0.0, 0
        for lo, hi in _segments(ids, start, segment_length if updates == "segment" else None, sentence_end):
            targets = ids[lo:hi]
            inputs = torch.cat([torch.tensor([prev], device=device), targets[:-1]])
            logits, new_state = learner(inputs[None], state)  # predict the whole segment first
            loss = F.cross_entropy(logits[0].float(), targets, reduction="sum")
            nll_sum += float(loss.detach().double())
            count += targets.numel()
            if lr > 0:  # ... then learn from it
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if clip_norm is not None:
                    torch.nn.utils.clip_grad_norm_(learner.parameters(), clip_norm)
                optimizer.step()
            state = detach_state(new_state)
            prev = int(targets[-1])
            if bar is not None:
                bar.update(hi - lo)
        results[name] = SplitResult(nll_sum, count)
    if bar is not None:
        bar.close()
    return results


def _segments(ids: Tensor, start: int, length: int | None, sentence_end: int | None) -> list[tuple[int, int]]:
    """``[lo, hi)`` bounds of the segments after ``start``: every ``length`` tokens, or (``length`` None)
    each sentence through its ``sentence_end`` token, plus a last unfinished one."""
    n = ids.numel()
    if length is not None:
        return [(lo, min(lo + length, n)) for lo in range(start, n, length)]
    ends = ((ids[start:] == sentence_end).nonzero().flatten() + start + 1).tolist()
    bounds = [start, *ends] + ([n] if not ends or ends[-1] != n else [])
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]
