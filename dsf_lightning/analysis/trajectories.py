"""Hidden- and cell-state trajectories over a sentence: every state tensor of a layer after each
word, projected onto its first two principal components (PCA by an SVD of the centred states), and
the raw values as a units x time heat map.

The run is ``<eos> w_1 .. w_T`` from the zero state, so the first point is the state after the
start symbol (DSF paper's ``h_0``). For the LSTM family both ``h`` and the cell state ``c`` are
returned (the sr-RNN paper's point that an sr-LSTM memorizes in ``c``, not ``h``, is visible here);
the SCRN gives its context ``s`` and ``h``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ._common import encode_text, evaluating, layer_inputs, resolve_layer, run_layer_states, state_names

__all__ = ["StateTrajectory", "TrajectoryResult", "pca_2d", "state_trajectories"]


def pca_2d(states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Project ``states [N, n]`` on their first two principal components.

    Returns ``(points [N, 2], explained variance ratio [2], components [2, n])``; when the states span
    fewer than two directions the missing coordinates are zero. Signs are fixed so that each
    component's largest-magnitude loading is positive (deterministic output)."""
    x = states.double()
    centred = x - x.mean(0, keepdim=True)
    _, s, vh = torch.linalg.svd(centred, full_matrices=False)
    n_comp = min(2, vh.shape[0])
    comps = vh[:n_comp]
    signs = torch.sign(comps.gather(1, comps.abs().argmax(1, keepdim=True)))
    signs[signs == 0] = 1
    comps = comps * signs
    points = centred @ comps.T
    var = s**2
    total = float(var.sum())
    ratio = var[:n_comp] / total if total > 0 else torch.zeros(n_comp, dtype=x.dtype)
    if n_comp < 2:
        points = torch.cat([points, points.new_zeros(points.shape[0], 2 - n_comp)], 1)
        ratio = torch.cat([ratio, ratio.new_zeros(2 - n_comp)])
        comps = torch.cat([comps, comps.new_zeros(2 - n_comp, comps.shape[1])])
    return points, ratio, comps


@dataclass
class StateTrajectory:
    """One state tensor (``name`` e.g. ``h`` or ``c``) over the run: ``values [T+1, n]`` (row 0 after
    the start symbol), its 2-D PCA ``points [T+1, 2]`` and their explained variance ratios."""

    name: str
    values: Tensor
    points: Tensor
    explained: list[float]

    def to_dict(self, include_values: bool = True) -> dict[str, Any]:
        out = {
            "name": self.name,
            "size": int(self.values.shape[1]),
            "explained_variance_ratio": self.explained,
            "points": self.points.tolist(),
        }
        if include_values:
            out["values"] = self.values.tolist()
        return out


@dataclass
class TrajectoryResult:
    text: str
    labels: list[str]  # one per row: the start symbol, then the words
    layer: int
    states: list[StateTrajectory]
    oov: list[str] = field(default_factory=list)

    def to_dict(self, include_values: bool = True) -> dict[str, Any]:
        return {
            "text": self.text,
            "layer": self.layer,
            "labels": self.labels,
            "oov": list(self.oov),
            "states": [s.to_dict(include_values) for s in self.states],
        }

    def to_csv_rows(self) -> list[list]:
        head = ["step", "token"]
        for s in self.states:
            head += [f"{s.name}_pc1", f"{s.name}_pc2"]
        rows = [head]
        for t, label in enumerate(self.labels):
            row = [t, label]
            for s in self.states:
                row += [float(s.points[t, 0]), float(s.points[t, 1])]
            rows.append(row)
        return rows


@torch.no_grad()
def state_trajectories(pretrained: Any, text: str, *, layer: int = -1) -> TrajectoryResult:
    """Every state tensor of ``layer`` (default the top one) after each word of ``text``, with PCA."""
    model = pretrained.model
    layer = resolve_layer(model, layer)
    cell = model.layers[layer]
    with evaluating(model):
        enc = encode_text(pretrained, text)
        x = layer_inputs(model, enc.input, layer)
        _, states = run_layer_states(cell, x)
    labels = ([enc.start_symbol] if enc.start_symbol is not None else []) + enc.tokens
    out = []
    for index, name in enumerate(state_names(cell)):
        values = torch.stack([s[index][0] for s in states]).double()  # [T+1, n]
        points, ratio, _ = pca_2d(values)
        out.append(StateTrajectory(name=name, values=values, points=points, explained=ratio.tolist()))
    return TrajectoryResult(text=enc.text, labels=labels, layer=layer, states=out, oov=enc.oov)
