"""Performance-oriented drop-in replacements for torch ops (see each module's docstring)."""

from .fast_linear import (
    FastLinear,
    fast_linear,
    fast_linear_enabled,
    fast_linear_min_work,
    set_fast_linear_enabled,
    set_fast_linear_min_work,
    would_use_fast_path,
)

__all__ = [
    "FastLinear",
    "fast_linear",
    "fast_linear_enabled",
    "fast_linear_min_work",
    "set_fast_linear_enabled",
    "set_fast_linear_min_work",
    "would_use_fast_path",
]
