"""Every recurrent cell of the five papers, behind one registry.

>>> from dsf_lightning.cells import list_cells, get_cell
>>> cell = get_cell("delta-rnn")(input_size=32, hidden_size=64)
>>> outputs, state = cell(torch.randn(8, 35, 32))        # [B, T, I] -> [B, T, 64]

One module per family: :mod:`.delta` (DSF / Delta-RNN), :mod:`.scrn`, :mod:`.ran`, :mod:`.irlm`,
:mod:`.classic` (Elman, MI-RNN, LSTM, GRU, MGU, smoothed-rectifier RNN) and :mod:`.state_reg`
(state-regularized wrappers). :mod:`.base` holds the contract, :mod:`.registry` the names.
"""

from .base import CellOptionError, RecurrentCell, State, UnknownCellOptionError
from .registry import (
    DuplicateCellError,
    UnknownCellError,
    build_cell,
    get_cell,
    list_cells,
    register_cell,
)

# Importing the family modules registers their cells.
from . import classic, delta, irlm, ran, scrn, state_reg  # noqa: E402,F401  (order: wrappers last)

__all__ = [
    "CellOptionError",
    "DuplicateCellError",
    "RecurrentCell",
    "State",
    "UnknownCellError",
    "UnknownCellOptionError",
    "build_cell",
    "get_cell",
    "list_cells",
    "register_cell",
]
