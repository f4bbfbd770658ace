"""Fixed parameter budgets: the hidden size whose language model has about a given number of parameters.

The DSF paper's subword experiments (Table 2, sec. 4.3) "fix the number of parameters for each model to
be equivalent to that of an LSTM with 100 hidden units for PTB and 50 hidden units for IMDB". Given a
cell, a vocabulary and the rest of the model's shape, :func:`hidden_size_for_budget` finds the hidden
size (the same for every layer) whose :class:`~dsf_lightning.model.RecurrentLM` has the parameter count
closest to the budget. Counts are exact: each candidate model is built on PyTorch's ``meta`` device
(shapes only, no memory, about a millisecond per build) and its distinct parameters are counted (a tied
matrix once), so every cell option that changes the count is taken into account.

>>> from dsf_lightning.model.budget import hidden_size_for_budget, lm_parameter_count
>>> budget = lm_parameter_count("lstm", 100, vocab_size=2404, embedding_size=0)
>>> hidden_size_for_budget("delta-rnn", budget, vocab_size=2404, embedding_size=0)
246

A budget can also be written as a reference model, ``"CELL:H"`` (``"lstm:100"``): the parameter count of
a model with that cell (default options) and hidden size, and otherwise the same vocabulary, layers,
embedding and tying (:func:`resolve_budget`). Cell options go in parentheses,
``"CELL(option=value, ...):H"``: the DSF paper's Table 2 budget is its own LSTM, with peephole matrices
(eqs 16-17), ``"lstm(peepholes=matrix):100"`` (1,274,804 parameters at V = 2,404, the paper's LSTM row).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from . import LMConfig

REFERENCE = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(?:\(([^()]*)\))?\s*:\s*([0-9]+)\s*$")
OPTION = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([^=]+?)\s*$")
MAX_HIDDEN = 1 << 16


class BudgetError(ValueError):
    """The budget cannot be met or is malformed (the message says why)."""


def lm_parameter_count(
    cell: str,
    hidden_size: int,
    vocab_size: int,
    *,
    layers: int = 1,
    embedding_size: int | None = None,
    tie_weights: bool = False,
    cell_options: dict[str, Any] | None = None,
) -> int:
    """Exact number of parameters of the LM with ``layers`` layers of ``hidden_size`` units
    (:meth:`LMConfig.num_parameters`: a ``meta``-device build, no memory is allocated)."""
    return LMConfig(
        vocab_size=vocab_size,
        cell=cell,
        hidden_sizes=[int(hidden_size)] * int(layers),
        cell_options=dict(cell_options or {}),
        embedding_size=embedding_size,
        tie_weights=tie_weights,
    ).num_parameters()


def resolve_budget(
    budget: int | str,
    vocab_size: int,
    *,
    layers: int = 1,
    embedding_size: int | None = None,
    tie_weights: bool = False,
) -> int:
    """A budget as a number of parameters: an int is returned as is; ``"CELL:H"`` is the parameter count
    of that reference model (cell ``CELL`` with its default options, or those given as
    ``"CELL(option=value, ...):H"``, ``H`` units per layer) with the same vocabulary, layers, embedding
    size and tying."""
    if isinstance(budget, bool):
        raise BudgetError(f"parameter budget must be a positive int or 'CELL:H', got {budget!r}")
    if isinstance(budget, int):
        if budget < 1:
            raise BudgetError(f"parameter budget must be positive, got {budget}")
        return budget
    if isinstance(budget, str):
        if budget.strip().isdigit():
            return resolve_budget(int(budget), vocab_size)
        match = REFERENCE.match(budget)
        if match:
            return lm_parameter_count(
                match.group(1), int(match.group(3)), vocab_size,
                layers=layers, embedding_size=embedding_size, tie_weights=tie_weights,
                cell_options=_reference_options(match.group(2), budget),
            )
    raise BudgetError(
        f"parameter budget must be a positive int, 'CELL:H' (e.g. 'lstm:100') or 'CELL(option=value, ...):H' "
        f"(e.g. 'lstm(peepholes=matrix):100'), got {budget!r}"
    )


def _reference_options(text: str | None, budget: str) -> dict[str, Any]:
    """``"peepholes=matrix, forget_bias=2"`` -> ``{"peepholes": "matrix", "forget_bias": 2}`` (values read
    as YAML scalars: ``true``, numbers and plain words)."""
    options: dict[str, Any] = {}
    for item in filter(str.strip, (text or "").split(",")):
        match = OPTION.match(item)
        if not match:
            raise BudgetError(f"parameter budget {budget!r}: cell options must read 'option=value', got {item.strip()!r}")
        options[match.group(1)] = yaml.safe_load(match.group(2))
    return options


def hidden_size_for_budget(
    cell: str,
    budget: int | str,
    vocab_size: int,
    layers: int = 1,
    embedding_size: int | None = None,
    tie_weights: bool = False,
    cell_options: dict[str, Any] | None = None,
) -> int:
    """The hidden size ``H`` (every layer) whose LM parameter count is closest to ``budget``.

    ``embedding_size=None`` means the embedding follows ``H`` (as in :class:`~dsf_lightning.model.LMConfig`);
    ``0`` feeds one-hot words (the DSF paper's models). Ties go to the smaller ``H``. The count grows with
    ``H``, so the search doubles ``H`` until the budget is passed and then bisects: about 2 log2(H) builds.
    A budget below the count at ``H = 1`` gives 1; :class:`BudgetError` when no ``H`` up to 65,536 reaches it.
    """
    target = resolve_budget(budget, vocab_size, layers=layers, embedding_size=embedding_size, tie_weights=tie_weights)

    def count(h: int) -> int:
        return lm_parameter_count(
            cell, h, vocab_size, layers=layers, embedding_size=embedding_size,
            tie_weights=tie_weights, cell_options=cell_options,
        )

    if count(1) >= target:
        return 1
    hi = 2
    while count(hi) < target:
        if hi >= MAX_HIDDEN:
            raise BudgetError(f"{cell}: no hidden size up to {MAX_HIDDEN} reaches the budget of {target:,} parameters")
        hi *= 2
    lo = hi // 2  # count(lo) < target <= count(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(mid) < target:
            lo = mid
        else:
            hi = mid
    return lo if target - count(lo) <= count(hi) - target else hi
