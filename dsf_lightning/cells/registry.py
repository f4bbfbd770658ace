"""The registry of cells by name: a plain string in a config resolves to a cell class here.

Cells register with :func:`register_cell`; a user's own package may do the same at import time, or
declare an entry point in the group ``dsf_lightning.cells`` (``name = "pkg.module:CellClass"``),
which is loaded the first time a name is looked up.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from importlib import metadata
from typing import TypeVar

from .base import RecurrentCell, UnknownCellOptionError

ENTRY_POINT_GROUP = "dsf_lightning.cells"

_CELLS: dict[str, type[RecurrentCell]] = {}
_entry_points_loaded = False

C = TypeVar("C", bound=type[RecurrentCell])


class UnknownCellError(KeyError):
    """No cell is registered under the requested name (the message lists the known names)."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class DuplicateCellError(ValueError):
    """A second, different cell class tried to take a name that is already registered."""


def register_cell(name: str) -> Callable[[C], C]:
    """Class decorator: register a :class:`RecurrentCell` subclass under ``name``."""
    if not isinstance(name, str) or not name or name != name.strip():
        raise ValueError(f"a cell name must be a non-empty string without surrounding spaces, got {name!r}")

    def decorate(cls: C) -> C:
        if not (isinstance(cls, type) and issubclass(cls, RecurrentCell)):
            raise TypeError(f"only RecurrentCell subclasses can be registered, got {cls!r} for {name!r}")
        existing = _CELLS.get(name)
        if existing is not None and existing is not cls:
            raise DuplicateCellError(
                f"cell name {name!r} is already registered to {existing.__module__}.{existing.__qualname__}"
            )
        _CELLS[name] = cls
        if not cls.__dict__.get("cell_name"):
            cls.cell_name = name
        return cls

    return decorate


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _CELLS:
            register_cell(ep.name)(ep.load())


def list_cells() -> list[str]:
    """The registered cell names, sorted."""
    _load_entry_points()
    return sorted(_CELLS)


def get_cell(name: str) -> type[RecurrentCell]:
    """The cell class registered under ``name``; call it as ``cls(input_size, hidden_size, **options)``."""
    _load_entry_points()
    try:
        return _CELLS[name]
    except (KeyError, TypeError):
        close = difflib.get_close_matches(str(name), _CELLS, n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise UnknownCellError(
            f"unknown cell {name!r}.{hint} Known cells: {', '.join(sorted(_CELLS))}"
        ) from None


SIZE_ARGUMENTS = ("input_size", "hidden_size")
#: options every cell takes, whether or not its ``__init__`` names them: :func:`build_cell` sets them as
#: attributes of the built cell (``implementation``: :attr:`RecurrentCell.implementation`; ``cuda_graphs``:
#: :attr:`RecurrentCell.cuda_graphs`)
COMMON_OPTIONS = ("implementation", "cuda_graphs")


def cell_options(cls: type[RecurrentCell]) -> list[str] | None:
    """The keyword options ``cls.__init__`` takes besides ``input_size`` / ``hidden_size`` (in signature
    order), or ``None`` when it takes any keyword (``**kwargs``)."""
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())
    except (TypeError, ValueError):  # pragma: no cover - no introspectable signature
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    names = [
        p.name for p in params[1:]  # [0] is self
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in SIZE_ARGUMENTS
    ]
    return names + [n for n in COMMON_OPTIONS if n not in names]


def check_cell_options(name: str, cls: type[RecurrentCell], options: dict) -> None:
    """Raise :class:`~dsf_lightning.cells.base.UnknownCellOptionError` (a ``CellOptionError``) for an
    option the cell ``name`` does not take, listing the ones it does."""
    sizes = [k for k in options if k in SIZE_ARGUMENTS]
    if sizes:
        raise UnknownCellOptionError(
            f"cell {name!r}: {' and '.join(sizes)} cannot be a cell option: the model sets the sizes "
            "(use hidden_sizes / embedding_size); remove it from the cell options"
        )
    accepted = cell_options(cls)
    if accepted is None:
        return
    unknown = [k for k in options if k not in accepted]
    if unknown:
        takes = f"it accepts: {', '.join(accepted)}" if accepted else "it takes no options"
        hints = []
        for option in unknown:
            close = difflib.get_close_matches(str(option), accepted, n=1)
            if close:
                hints.append(f"{close[0]!r} for {option!r}")
        hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
        elsewhere = []  # e.g. 'peepholes' on a cell without a cell state: say which cells define it
        for option in unknown:
            owners = [n for n in list_cells() if option in (cell_options(_CELLS[n]) or ())]
            if owners:
                elsewhere.append(f"{option!r} is accepted by: {', '.join(owners)}")
        where = f" ({'; '.join(elsewhere)})" if elsewhere else ""
        raise UnknownCellOptionError(
            f"cell {name!r} does not take the option(s) {', '.join(map(repr, unknown))}{hint}; {takes}. "
            f"Remove the option or choose a cell that takes it{where}"
        )


def build_cell(name: str, input_size: int, hidden_size: int, /, **options: object) -> RecurrentCell:
    """Build the cell registered under ``name`` (the config-friendly path: names and numbers only).

    Raises :class:`UnknownCellError` for an unknown name and a ``CellOptionError`` for an option the
    cell does not take (naming it and the options the cell accepts) or cannot accept.
    """
    cls = get_cell(name)
    check_cell_options(name, cls, options)
    takes = cell_options(cls)
    common = {k: options.pop(k) for k in COMMON_OPTIONS if k in options and takes is not None
              and k not in _init_options(cls)}
    cell = cls(input_size, hidden_size, **options)
    for key, value in common.items():
        setattr(cell, key, value)  # checked by the attribute (a CellOptionError naming it)
    return cell


def _init_options(cls: type[RecurrentCell]) -> set[str]:
    return set(inspect.signature(cls.__init__).parameters)
