"""IRLM timescales (Pachitariu & Sahani 2013, "Regularization and nonlinearities for neural language models: when
are they needed?", sec. 5.1 and Fig. 1).

In the IRLM ``x_t = W y_t + r * x_{t-1}`` the contribution of a word ``tau`` steps back decays like
``r^tau = exp(tau log r)``, so each unit's timescale is ``-1 / log|r|`` (in words). The paper's
Fig. 1a shows a histogram of them on a log axis: mostly short (local grammar), a few up to ~50 words;
Fig. 1b shows the long-context units (LCUs, kept in (0.7, 1)) of sec. 5.3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ._common import AnalysisError, cell_names

__all__ = ["TimescaleResult", "irlm_timescales"]


@dataclass
class TimescaleResult:
    """One row per IRLM unit: its ``layer``, ``unit``, self-connection ``r``, ``timescale`` = -1/log|r|
    (0 when r = 0) and whether it is a long-context unit."""

    layer: list[int]
    unit: list[int]
    r: list[float]
    timescale: list[float]
    long_context: list[bool]

    def __len__(self) -> int:
        return len(self.unit)

    def summary(self) -> dict[str, Any]:
        ts = sorted(self.timescale)
        n = len(ts)

        def q(p: float) -> float:
            return ts[min(n - 1, int(p * (n - 1) + 0.5))]

        return {
            "units": n,
            "long_context_units": sum(self.long_context),
            "min": ts[0],
            "median": q(0.5),
            "p90": q(0.9),
            "max": ts[-1],
            "over_10_words": sum(1 for v in ts if v > 10),
            "over_50_words": sum(1 for v in ts if v > 50),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "definition": "-1/log|r| per unit (IRLM paper sec. 5.1)",
            "summary": self.summary(),
            "units": [
                {"layer": l, "unit": u, "r": r, "timescale": t, "long_context": lc}
                for l, u, r, t, lc in zip(self.layer, self.unit, self.r, self.timescale, self.long_context)
            ],
        }

    def to_csv_rows(self) -> list[list]:
        return [["layer", "unit", "r", "timescale", "long_context"]] + [
            [l, u, r, t, int(lc)] for l, u, r, t, lc in zip(self.layer, self.unit, self.r, self.timescale, self.long_context)
        ]


def _timescale(r: float) -> float:
    a = abs(r)
    if a == 0.0:
        return 0.0
    return -1.0 / math.log(a)


@torch.no_grad()
def irlm_timescales(model: Any) -> TimescaleResult:
    """The timescales ``-1/log|r|`` of every unit of every IRLM layer of ``model`` (a
    :class:`~dsf_lightning.model.RecurrentLM`, a pretrained with ``.model``, or a single IRLM cell).

    Raises :class:`AnalysisError` when there is no IRLM layer."""
    model = getattr(model, "model", model)
    layers = list(model.layers) if hasattr(model, "layers") else [model]
    rows = TimescaleResult([], [], [], [], [])
    found = False
    for index, cell in enumerate(layers):
        if getattr(cell, "cell_name", "") != "irlm" or not hasattr(cell, "r"):
            continue
        found = True
        r = cell.r.double().tolist()
        lcu = cell.long_context_mask.tolist()
        for u, (ru, is_lcu) in enumerate(zip(r, lcu)):
            rows.layer.append(index)
            rows.unit.append(u)
            rows.r.append(ru)
            rows.timescale.append(_timescale(ru))
            rows.long_context.append(bool(is_lcu))
    if not found:
        names = cell_names(model) if hasattr(model, "layers") else [getattr(model, "cell_name", type(model).__name__)]
        raise AnalysisError(
            f"timescales need an IRLM (cell 'irlm'); this model's layers are {names}. Give an IRLM with --model, "
            "or leave --model out to train a small one"
        )
    return rows
