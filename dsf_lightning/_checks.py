"""Option checks every layer shares (stdlib only): each raises the caller's own error class, so a cell
option says ``CellOptionError`` and a tokenizer field ``TokenizerError``, with one wording."""

from __future__ import annotations


def check_bool(name: str, value: object, error: type[Exception] = ValueError) -> bool:
    """``value`` if it is a bool (``1``, ``"yes"``, ``None`` are refused: a recipe typo must not pass)."""
    if not isinstance(value, bool):
        raise error(f"{name} must be true or false, got {value!r:.80}")
    return value
