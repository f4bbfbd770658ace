"""Initialization schemes of a :class:`~dsf_lightning.model.RecurrentLM` (``LMConfig.init``).

``{"scheme": "uniform", "scale": r}`` draws every parameter from U[-r, r] (SCRN paper sec. 5, Tables 1 and 3);
``{"scheme": "normal", "std": sigma}`` draws every non-bias (matrix) parameter from N(0, sigma) and keeps the
biases' own initialization (DSF paper sec. 4.2); None: each cell's own.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..cells.base import CellOptionError

INIT_SCHEMES = {"uniform": "scale", "normal": "std"}  # scheme -> its one number


def check_init(init: Any) -> dict[str, Any] | None:
    """``init`` as a plain dict (``{"scheme": "uniform", "scale": r}`` or ``{"scheme": "normal", "std":
    sigma}``) or None; raises :class:`CellOptionError` naming what is wrong."""
    if init is None:
        return None
    example = "e.g. {scheme: uniform, scale: 0.3} (SCRN paper) or {scheme: normal, std: 0.01} (DSF paper)"
    if not isinstance(init, dict):
        raise CellOptionError(f"init must be null (each cell's own initialization) or a dict, {example}; got {init!r:.80}")
    scheme = init.get("scheme")
    if scheme not in INIT_SCHEMES:
        raise CellOptionError(f"init.scheme must be one of {', '.join(map(repr, INIT_SCHEMES))}; got {scheme!r:.80}")
    key = INIT_SCHEMES[scheme]
    extra = sorted(set(init) - {"scheme", key}, key=str)
    value = init.get(key)
    if extra or isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise CellOptionError(
            f"init with scheme {scheme!r} takes exactly one positive number, init.{key} ({example}); got {init!r:.120}"
        )
    return {"scheme": scheme, key: float(value)}


@torch.no_grad()
def initialize(model: nn.Module, init: dict[str, Any]) -> None:
    """Re-draw ``model``'s parameters by the scheme ``init`` (see :func:`check_init`): uniform -> every
    parameter ~ U[-scale, scale]; normal -> every parameter with two or more dimensions ~ N(0, std)."""
    for p in model.parameters():
        if init["scheme"] == "uniform":
            p.uniform_(-init["scale"], init["scale"])
        elif p.dim() >= 2:
            p.normal_(0.0, init["std"])
