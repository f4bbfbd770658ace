"""The most influential predecessor of every word in a RAN (Lee, Levy & Zettlemoyer 2017, "Recurrent Additive
Networks", sec. 2.2 and 5).

A RAN's cell state is a component-wise weighted sum of its (projected) inputs (eq. 3)::

    c_t = sum_{j=1..t} w_j^t * c~_j        w_j^t = i_j * prod_{k=j+1..t} f_k

(for the simplified RAN, eq. 2, ``c~_j = x_j``). The word that most influenced the state at step t is
(eq. 7)::

    v_t = argmax_{j=1..t-1} ( max_{m=1..d_h} w_j^t(m) )

which the paper draws as an arrow from each word to its most influential predecessor (Fig. 1).

Here the sentence is run as ``<eos> w_1 .. w_T`` (the start symbol is context, not a candidate
predecessor) and the weights are those of the chosen layer's state (default the top layer, which the
decoder reads; in a one-layer RAN the only one). The first word has no predecessor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ._common import AnalysisError, cell_names, encode_text, evaluating, layer_inputs, resolve_layer

__all__ = ["InfluenceResult", "ran_gates", "ran_influence", "ran_weights"]

RAN_CELLS = ("ran", "ran-simple")


@dataclass
class InfluenceResult:
    """``predecessor[t]``: the index (into ``tokens``) of word t's most influential earlier word, None
    for the first word; ``strength[t]``: that word's largest weight ``max_m w_j^t(m)``;
    ``unit[t]``: the unit m where it is reached; ``weights[t][j]``: ``max_m w_j^t(m)`` for every
    ``j <= t`` (None above the diagonal)."""

    text: str
    tokens: list[str]
    predecessor: list[int | None]
    strength: list[float | None]
    unit: list[int | None]
    weights: list[list[float | None]]
    layer: int
    oov: list[str] = field(default_factory=list)

    def arrows(self) -> list[tuple[int, int]]:
        """``(t, v_t)`` for every word that has a predecessor."""
        return [(t, j) for t, j in enumerate(self.predecessor) if j is not None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "layer": self.layer,
            "oov": list(self.oov),
            "words": [
                {
                    "position": t,
                    "token": tok,
                    "predecessor": p,
                    "predecessor_token": None if p is None else self.tokens[p],
                    "strength": s,
                    "unit": u,
                }
                for t, (tok, p, s, u) in enumerate(zip(self.tokens, self.predecessor, self.strength, self.unit))
            ],
            "weights": self.weights,
        }

    def to_csv_rows(self) -> list[list]:
        rows = [["position", "token", "predecessor", "predecessor_token", "strength", "unit"]]
        for t, (tok, p, s, u) in enumerate(zip(self.tokens, self.predecessor, self.strength, self.unit)):
            rows.append([t, tok, "" if p is None else p, "" if p is None else self.tokens[p], "" if s is None else s, "" if u is None else u])
        return rows


def _check_ran(cell: Any, layer: int, model: Any) -> None:
    if getattr(cell, "cell_name", "") not in RAN_CELLS or not hasattr(cell, "gates"):
        raise AnalysisError(
            f"influence needs a RAN language model (cell {' or '.join(map(repr, RAN_CELLS))}); layer {layer} of this "
            f"model is {getattr(cell, 'cell_name', type(cell).__name__)!r} (layers: {cell_names(model)}). Give a RAN "
            "model with --model, or leave --model out to train a small one"
        )


@torch.no_grad()
def ran_gates(cell: Any, x: Tensor) -> tuple[Tensor, Tensor]:
    """The input and forget gates ``(i, f)``, each ``[T, H]``, of a RAN cell run over ``x [1, T, I]``
    from the zero state (the very gates its ``recur`` uses)."""
    state = cell.init_state(1, x.device, x.dtype)
    inputs, forgets = [], []
    for projected_t in cell.project_inputs(x).unbind(1):
        _, i, f = cell.gates(projected_t, state[0])
        inputs.append(i[0])
        forgets.append(f[0])
        _, state = cell.recur(projected_t, state)
    return torch.stack(inputs), torch.stack(forgets)


def ran_weights(i: Tensor, f: Tensor) -> Tensor:
    """``w[t, j] = i_j * prod_{k=j+1..t} f_k`` for ``j <= t`` (eq. 3), zero for ``j > t``: ``[T, T, H]``."""
    T, H = i.shape
    w = i.new_zeros(T, T, H)
    for t in range(T):
        # suffix products of f over k = j+1..t, for j = t, t-1, .., 0
        running = torch.ones(H, dtype=i.dtype, device=i.device)
        for j in range(t, -1, -1):
            w[t, j] = i[j] * running
            running = running * f[j]
    return w


@torch.no_grad()
def ran_influence(pretrained: Any, text: str, *, layer: int = -1) -> InfluenceResult:
    """Every word's most influential predecessor (RAN paper eq. 7) in ``text``.

    Raises :class:`AnalysisError` when the chosen layer is not a RAN cell (``ran`` / ``ran-simple``).
    """
    model = pretrained.model
    layer = resolve_layer(model, layer)
    cell = model.layers[layer]
    _check_ran(cell, layer, model)
    with evaluating(model):
        enc = encode_text(pretrained, text)
        x = layer_inputs(model, enc.input, layer)
        i, f = ran_gates(cell, x)
    w = ran_weights(i.double(), f.double())  # [S, S, H] over the run's positions
    offset = 1 if enc.start_symbol is not None else 0  # position of the first word in the run
    T = len(enc.tokens)
    best_m = w.max(dim=-1)  # values / indices [S, S]
    predecessor: list[int | None] = []
    strength: list[float | None] = []
    unit: list[int | None] = []
    weights: list[list[float | None]] = []
    for t in range(T):
        row = [float(best_m.values[t + offset, j + offset]) if j <= t else None for j in range(T)]
        weights.append(row)
        if t == 0:
            predecessor.append(None)
            strength.append(None)
            unit.append(None)
            continue
        cand = best_m.values[t + offset, offset : t + offset]  # j = 0 .. t-1 (words before t)
        j = int(cand.argmax())
        predecessor.append(j)
        strength.append(float(cand[j]))
        unit.append(int(best_m.indices[t + offset, j + offset]))
    return InfluenceResult(
        text=enc.text, tokens=enc.tokens, predecessor=predecessor, strength=strength, unit=unit,
        weights=weights, layer=layer, oov=enc.oov,
    )
