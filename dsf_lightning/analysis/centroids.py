"""Centroid prototypes and transition counts of state-regularized RNNs (Wang & Niepert 2019, "State-Regularized
Recurrent Neural Networks": sec. 3.1, appendix E, and the prototypes of sec. 5 / Fig. 13).

An sr-RNN moves, at every step, to centroid ``i`` with probability ``alpha_i`` (eq. 2). Running a
data set through it and following the most probable centroid at each step (as DFA extraction does,
appendix E) gives:

* **visits**: how many steps end in each centroid (the counts sum to the number of steps);
* **transitions**: counts of ``c_{t-1} = i -> c_t = j`` inside each sequence, in all and per input
  symbol (the first step of a sequence, the start symbol, sets the start state and has no source);
* **prototypes**: "for each state i, the input tokens that have the highest average probability
  leading to state i" (sec. 5, Fig. 13, the paper's table of centroids and their top words):
  ``mean_prob[s, i]`` = the mean of ``alpha_i`` over the steps that read symbol ``s``.

Traces come from an sr language model (:func:`lm_transition_traces`, e.g. an ``sr-lstm`` LM) or an
sr-RNN classifier of :mod:`dsf_lightning.tasks` (:func:`classifier_transition_traces`, e.g. an sr-GRU
trained on a Tomita grammar); :func:`centroid_statistics` is the same for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..tasks.data import pad_ids
from ._common import AnalysisError, cell_names, encode_text, evaluating, layer_inputs, resolve_layer

__all__ = [
    "CentroidStatistics",
    "CentroidTrace",
    "centroid_statistics",
    "classifier_transition_traces",
    "lm_transition_traces",
    "sr_layer_index",
]


@dataclass
class CentroidTrace:
    """One sequence: the symbol read at every step and the transition probabilities ``alpha [T, k]``."""

    symbols: list[str]
    alpha: Tensor

    def __post_init__(self) -> None:
        if self.alpha.dim() != 2 or self.alpha.shape[0] != len(self.symbols):
            raise AnalysisError(
                f"a trace needs one row of transition probabilities per symbol: {len(self.symbols)} symbols, "
                f"alpha of shape {tuple(self.alpha.shape)}"
            )


@dataclass
class CentroidStatistics:
    """See the module docstring. ``symbols`` index the rows of ``mean_prob`` / ``symbol_counts`` and
    the first axis of ``symbol_transitions``."""

    k: int
    symbols: list[str]
    visits: np.ndarray  # [k]
    transitions: np.ndarray  # [k, k]   from i (row) to j (column)
    symbol_transitions: np.ndarray  # [S, k, k]
    symbol_counts: np.ndarray  # [S]
    mean_prob: np.ndarray  # [S, k]
    start_counts: np.ndarray  # [k]     the state after each sequence's first symbol
    prototypes: list[list[tuple[str, float, int]]]  # per centroid: (symbol, mean prob, count), best first
    num_sequences: int
    num_steps: int

    @property
    def used(self) -> list[int]:
        """The centroids that some step ended in."""
        return [i for i in range(self.k) if self.visits[i] > 0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "num_sequences": self.num_sequences,
            "num_steps": self.num_steps,
            "used_centroids": self.used,
            "visits": self.visits.tolist(),
            "start_counts": self.start_counts.tolist(),
            "transitions": self.transitions.tolist(),
            "symbols": list(self.symbols),
            "symbol_counts": self.symbol_counts.tolist(),
            "symbol_transitions": {s: self.symbol_transitions[n].tolist() for n, s in enumerate(self.symbols)},
            "mean_prob": {s: self.mean_prob[n].tolist() for n, s in enumerate(self.symbols)},
            "prototypes": [
                {"centroid": i, "visits": int(self.visits[i]),
                 "top": [{"symbol": s, "mean_prob": p, "count": c} for s, p, c in self.prototypes[i]]}
                for i in range(self.k)
            ],
        }

    def prototype_csv_rows(self) -> list[list]:
        rows = [["centroid", "rank", "symbol", "mean_prob", "count", "visits"]]
        for i in range(self.k):
            for rank, (s, p, c) in enumerate(self.prototypes[i], 1):
                rows.append([i, rank, s, p, c, int(self.visits[i])])
        return rows

    def transition_csv_rows(self) -> list[list]:
        return [["from \\ to", *range(self.k)]] + [[i, *map(int, self.transitions[i])] for i in range(self.k)]


def centroid_statistics(
    traces: Sequence[CentroidTrace], k: int | None = None, *, top: int = 5, min_count: int = 1
) -> CentroidStatistics:
    """Visits, transition counts (all and per symbol) and prototypes from ``traces``.

    ``top``: prototypes kept per centroid; ``min_count``: symbols read fewer times are not prototypes
    (a word seen once has a noisy mean)."""
    traces = list(traces)
    if not traces:
        raise AnalysisError("no sequence to analyse: give at least one text / string")
    if k is None:
        k = int(traces[0].alpha.shape[1])
    for n, tr in enumerate(traces):
        if tr.alpha.shape[1] != k:
            raise AnalysisError(f"trace {n} has {tr.alpha.shape[1]} centroids, expected {k}")
    symbols = sorted({s for tr in traces for s in tr.symbols})
    index = {s: n for n, s in enumerate(symbols)}
    S = len(symbols)
    visits = np.zeros(k, dtype=np.int64)
    start = np.zeros(k, dtype=np.int64)
    transitions = np.zeros((k, k), dtype=np.int64)
    per_symbol = np.zeros((S, k, k), dtype=np.int64)
    counts = np.zeros(S, dtype=np.int64)
    prob_sums = np.zeros((S, k), dtype=np.float64)
    steps = 0
    for tr in traces:
        alpha = tr.alpha.detach().double().cpu().numpy()
        best = alpha.argmax(-1)
        sym = np.array([index[s] for s in tr.symbols], dtype=np.int64)
        steps += len(best)
        np.add.at(visits, best, 1)
        np.add.at(counts, sym, 1)
        np.add.at(prob_sums, sym, alpha)
        if len(best):
            start[best[0]] += 1
        if len(best) > 1:
            np.add.at(transitions, (best[:-1], best[1:]), 1)
            np.add.at(per_symbol, (sym[1:], best[:-1], best[1:]), 1)
    mean_prob = prob_sums / np.maximum(counts, 1)[:, None]
    prototypes = []
    for i in range(k):
        order = sorted(
            (n for n in range(S) if counts[n] >= min_count), key=lambda n: (-mean_prob[n, i], -counts[n], symbols[n])
        )
        prototypes.append([(symbols[n], float(mean_prob[n, i]), int(counts[n])) for n in order[:top]])
    return CentroidStatistics(
        k=k, symbols=symbols, visits=visits, transitions=transitions, symbol_transitions=per_symbol,
        symbol_counts=counts, mean_prob=mean_prob, start_counts=start, prototypes=prototypes,
        num_sequences=len(traces), num_steps=steps,
    )


# ------------------------------------------------------------------------------------------- traces
def _is_sr(cell: Any) -> bool:
    return hasattr(cell, "centroids") and hasattr(cell, "forward_with_probs")


def sr_layer_index(model: Any, layer: int | None = None) -> int:
    """The layer to read (``layer``, or the lowest state-regularized one); :class:`AnalysisError` when
    it has no centroids."""
    if layer is None:
        for n, cell in enumerate(model.layers):
            if _is_sr(cell):
                return n
        raise AnalysisError(
            f"centroids need a state-regularized model (cells sr, sr-gru, sr-lstm, sr-lstm-p); this model's layers "
            f"are {cell_names(model)}, none has centroids. Give an sr-RNN with --model, or leave --model out to "
            "train an sr-GRU on a Tomita grammar"
        )
    layer = resolve_layer(model, layer)
    if not _is_sr(model.layers[layer]):
        raise AnalysisError(
            f"layer {layer} ({cell_names(model)[layer]!r}) has no centroids: it is not a state-regularized cell"
        )
    return layer


@torch.no_grad()
def lm_transition_traces(pretrained: Any, texts: Sequence[str], *, layer: int | None = None) -> list[CentroidTrace]:
    """Transition traces of an sr language model: each text run as ``<eos> w_1 .. w_T`` from the zero
    state; the symbols are what the model read (out-of-vocabulary words as the unknown symbol)."""
    model = pretrained.model
    layer = sr_layer_index(model, layer)
    cell = model.layers[layer]
    traces = []
    with evaluating(model):
        for text in texts:
            enc = encode_text(pretrained, text)
            x = layer_inputs(model, enc.input, layer)
            _, _, alpha = cell.forward_with_probs(x)
            traces.append(CentroidTrace(pretrained.vocab.decode(enc.ids), alpha[0]))
    return traces


@torch.no_grad()
def classifier_transition_traces(
    module: Any, strings: Sequence[Sequence[str]], vocab: Any, *, batch_size: int = 512, start_symbol: str = "<s>"
) -> list[CentroidTrace]:
    """Transition traces of an sr-RNN :class:`~dsf_lightning.tasks.modules.SequenceClassifier`: the
    start token and every symbol of each string (the end token is applied without the stochastic
    component, so it has no transition)."""
    if not getattr(module, "is_state_regularized", False):
        raise AnalysisError("centroids need a state-regularized classifier (an sr-* cell)")
    traces: list[CentroidTrace] = []
    with evaluating(module):
        for lo in range(0, len(strings), batch_size):
            chunk = strings[lo : lo + batch_size]
            inputs, lengths = pad_ids([vocab.encode(s) for s in chunk], vocab.pad_id)
            alpha = module.transition_trace(inputs.to(module.device), lengths.to(module.device)).float().cpu()
            for row, s in enumerate(chunk):
                n = len(s) + 1  # the start token and every symbol
                traces.append(CentroidTrace([start_symbol, *map(str, s)], alpha[row, :n]))
    return traces
