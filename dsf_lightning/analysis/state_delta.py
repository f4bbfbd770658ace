"""The state-delta score of the DSF paper (Ororbia II, Mikolov & Reitter 2017, "Learning Simpler Language Models
with the Differential State Framework", Fig. 2 and footnote 15).

For a sentence ``w_1 .. w_T`` run after the start/null token (``<eos>``, whose state is ``h_0``), the L1
norm (Manhattan distance) of every consecutive pair of hidden states::

    L1_t = || h_t - h_{t-1} ||_1          t = 1 .. T      (the start token's own L1 is excluded)

and its min-max normalization over the sentence::

    score_t = (L1_t - min L1) / (max L1 - min L1)

so the scores lie in [0, 1] with a 0 at the least and a 1 at the most state-changing word. The paper
observes lower scores for low-information words ("the", "of") and higher ones for content words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ._common import AnalysisError, encode_text, evaluating, layer_inputs, resolve_layer, run_layer_states, state_names

__all__ = ["StateDeltaResult", "min_max_normalize", "state_deltas"]


@dataclass
class StateDeltaResult:
    """Per word: the raw L1 distance ``l1[t] = ||h_t - h_{t-1}||_1`` and its min-max ``score``."""

    text: str
    tokens: list[str]
    l1: list[float]
    score: list[float]
    layer: int
    state: str
    oov: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "layer": self.layer,
            "state": self.state,
            "oov": list(self.oov),
            "tokens": [{"token": t, "l1": d, "score": s} for t, d, s in zip(self.tokens, self.l1, self.score)],
        }

    def to_csv_rows(self) -> list[list]:
        return [["position", "token", "l1", "score"]] + [
            [i + 1, t, d, s] for i, (t, d, s) in enumerate(zip(self.tokens, self.l1, self.score))
        ]


def min_max_normalize(values: list[float]) -> list[float]:
    """``(v - min) / (max - min)``; all zeros when every value is the same (nothing stands out)."""
    if not values:
        return []
    lo, hi = min(values), max(values)
    if hi - lo <= 0:
        return [0.0 for _ in values]
    return [(v - lo) / (hi - lo) for v in values]


@torch.no_grad()
def state_deltas(pretrained: Any, text: str, *, layer: int = -1, state_index: int = 0) -> StateDeltaResult:
    """The min-max normalized L1 state-delta score of every word of ``text`` (DSF footnote 15).

    Args:
        pretrained: a model with ``model``, ``vocab``, ``tokenizer`` (e.g. ``from_pretrained(...).pretrained``
            or :func:`dsf_lightning.model.pretrained.load_pretrained`).
        text: one sentence; the model's tokenizer splits it (the end symbol is not scored).
        layer: which layer's state (default the top one).
        state_index: which of the layer's state tensors (default 0: ``h`` of every cell but the SCRN,
            whose state is ``(s, h)``).
    """
    model = pretrained.model
    with evaluating(model):
        enc = encode_text(pretrained, text)
        layer = resolve_layer(model, layer)
        cell = model.layers[layer]
        n_states = len(cell.state_sizes)
        if isinstance(state_index, bool) or not isinstance(state_index, int) or not 0 <= state_index < n_states:
            raise AnalysisError(
                f"state_index must be in [0, {n_states - 1}] (layer {layer} has states {state_names(cell)}), got {state_index!r}"
            )
        x = layer_inputs(model, enc.input, layer)
        _, states = run_layer_states(cell, x)
        h = torch.stack([s[state_index][0] for s in states]).double()  # [len(ids), n]
    offset = 1 if enc.start_symbol is not None else 0
    if offset == 0:  # no start symbol: h_0 is the zero state
        h = torch.cat([torch.zeros_like(h[:1]), h])
    l1 = (h[1:] - h[:-1]).abs().sum(-1).tolist()  # L1_t for t = 1..T
    return StateDeltaResult(
        text=enc.text,
        tokens=enc.tokens,
        l1=l1,
        score=min_max_normalize(l1),
        layer=layer,
        state=state_names(cell)[state_index],
        oov=enc.oov,
    )
