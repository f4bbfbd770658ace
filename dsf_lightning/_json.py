"""JSON from files a user, a download or a forger supplied, parsed within bounds.

``json.loads`` raises ``RecursionError`` on input nested a few thousand levels deep, a bare
``ValueError`` that names nothing on an integer of more than 4,300 digits, and accepts ``NaN`` and
``Infinity``. :func:`loads_bounded` turns each into a :class:`JSONLimitError` that says what is wrong
and where in the document (``model.vocab_size``); callers add the file name.
"""

from __future__ import annotations

import json
from typing import Any

#: deepest nesting accepted (the files this library writes nest 4 levels at most)
MAX_DEPTH = 64
#: longest integer accepted, in digits (int64 has 19)
MAX_INT_DIGITS = 30


class JSONLimitError(ValueError):
    """A JSON document is malformed or beyond the bounds (depth, integer size, non-finite numbers)."""


class _LongInt(str):
    """An integer literal too long to convert: kept as text until the walk can say where it is."""


def _parse_int(text: str) -> int | _LongInt:
    return _LongInt(text) if len(text.lstrip("-")) > MAX_INT_DIGITS else int(text)


class _Constant(str):
    """``NaN`` / ``Infinity`` / ``-Infinity``, which Python's json accepts but JSON does not."""


def _where(path: list) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    out = out or "the top level"
    return out if len(out) <= 100 else out[:100] + "..."


def loads_bounded(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(text)`` that raises :class:`JSONLimitError` (a ``ValueError``) for invalid JSON,
    nesting deeper than ``max_depth``, integers longer than :data:`MAX_INT_DIGITS` digits, and
    ``NaN`` / ``Infinity``; the message names the place (e.g. ``model.vocab_size``)."""
    try:
        value = json.loads(text, parse_int=_parse_int, parse_constant=_Constant)
    except RecursionError:
        raise JSONLimitError(f"it is nested deeper than {max_depth} levels (thousands deep: forged or corrupted)") from None
    except json.JSONDecodeError as err:
        raise JSONLimitError(f"it is not valid JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    except UnicodeDecodeError as err:
        raise JSONLimitError(f"it is not UTF-8 text ({err.reason} at byte {err.start})") from None
    except JSONLimitError:
        raise
    except ValueError as err:  # e.g. a float literal the interpreter refuses
        raise JSONLimitError(f"it is not acceptable JSON ({err})") from None
    # iterative walk (a recursive one is what blows the stack): depth, long integers, infinite floats;
    # only containers are pushed, so a list of a million strings costs no extra memory
    _check_scalar(value, [])
    stack: list[tuple[Any, list, int]] = [(value, [], 0)] if isinstance(value, (dict, list)) else []
    while stack:
        item, path, depth = stack.pop()
        if depth >= max_depth:
            raise JSONLimitError(f"{_where(path)} is nested more than {max_depth} levels deep (limit {max_depth})")
        for key, child in item.items() if isinstance(item, dict) else enumerate(item):
            if isinstance(child, (dict, list)):
                stack.append((child, [*path, key], depth + 1))
            elif isinstance(child, (str, float)) and type(child) is not str:  # _LongInt, _Constant, float
                _check_scalar(child, [*path, key])
    return value


def _check_scalar(item: Any, path: list) -> None:
    if isinstance(item, _LongInt):
        digits = len(item.lstrip("-"))
        raise JSONLimitError(f"{_where(path)} is a {digits:,}-digit integer (at most {MAX_INT_DIGITS} digits)")
    if isinstance(item, _Constant):
        raise JSONLimitError(f"{_where(path)} is {item}, which is not a JSON number")
    if isinstance(item, float) and item in (float("inf"), float("-inf")):
        raise JSONLimitError(f"{_where(path)} is a number too large for a float ({item})")
