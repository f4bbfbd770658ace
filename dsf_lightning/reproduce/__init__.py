"""Reproduce the papers' tables: recipes run through the real CLI, measured against the published numbers.

:mod:`.tables` is the registry (table id -> rows: recipe, published value, metric, split),
:mod:`.runner` runs a table (``dsf reproduce TABLE``) at a scale (``tiny`` / ``small`` / ``paper``) in three
steps: it plans the rows (rank 0 decides each, :mod:`.ranks`), trains them (:mod:`.train`: here, in child
processes, :mod:`.child`, or side by side, :mod:`.parallel`) and records every outcome (:mod:`.state`), from which
:mod:`.report` writes ``<out>/<table>.md`` and ``.csv``. :mod:`dsf_lightning.model.budget` finds hidden sizes for
a fixed parameter budget (the DSF paper's Table 2). Submodules are imported on use, so importing this package stays cheap.
"""

from importlib import import_module

_LAZY = {
    "hidden_size_for_budget": "dsf_lightning.model.budget",
    "lm_parameter_count": "dsf_lightning.model.budget",
    "resolve_budget": "dsf_lightning.model.budget",
    "BudgetError": "dsf_lightning.model.budget",
    "TABLES": "dsf_lightning.reproduce.tables",
    "Row": "dsf_lightning.reproduce.tables",
    "Table": "dsf_lightning.reproduce.tables",
    "get_table": "dsf_lightning.reproduce.tables",
    "list_tables": "dsf_lightning.reproduce.tables",
    "list_recipes": "dsf_lightning.reproduce.tables",
    "run_table": "dsf_lightning.reproduce.runner",
    "SCALES": "dsf_lightning.reproduce.runner",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
