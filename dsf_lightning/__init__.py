"""dsf-lightning: the Differential State Framework family of recurrent language models for Lightning."""

from .cells import get_cell, list_cells, register_cell

__version__ = "0.1.0"

__all__ = ["__version__", "get_cell", "list_cells", "register_cell"]
