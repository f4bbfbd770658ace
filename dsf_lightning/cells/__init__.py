"""Every recurrent cell of the five papers, behind one registry.

>>> from dsf_lightning.cells import list_cells, get_cell
>>> cell = get_cell("delta-rnn")(input_size=32, hidden_size=64)
>>> outputs, state = cell(torch.randn(8, 35, 32))        # [B, T, I] -> [B, T, 64]

One module per family: :mod:`.delta` (DSF / Delta-RNN), :mod:`.scrn`, :mod:`.ran`, :mod:`.irlm`,
:mod:`.classic` (Elman, MI-RNN, LSTM, GRU, MGU, smoothed-rectifier RNN) and :mod:`.state_reg`
(state-regularized wrappers). :mod:`.base` holds the contract (``RecurrentCell``, whose class attributes
declare everything the package knows about a cell: citation, state names, size options, the Sobolev
penalty's closed form, ...; and ``SequenceLoopCell``), :mod:`.registry` the names. A new cell is one file
plus its entry in ``tests/cells/variants.py`` (docs/cells.md, "Add a cell").
"""

# Importing the family modules registers their cells.
from . import classic, delta, irlm, ran, scrn, state_reg  # noqa: E402,F401  (order: wrappers last)
from .base import CellOptionError, RecurrentCell, SequenceLoopCell, State, UnknownCellOptionError
from .registry import (
    DuplicateCellError,
    UnknownCellError,
    build_cell,
    get_cell,
    list_cells,
    register_cell,
)

__all__ = [
    "CellOptionError",
    "DuplicateCellError",
    "RecurrentCell",
    "SequenceLoopCell",
    "State",
    "UnknownCellError",
    "UnknownCellOptionError",
    "build_cell",
    "get_cell",
    "list_cells",
    "register_cell",
]
