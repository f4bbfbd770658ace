"""The one JSON convention of the ``dsf`` commands that print results (``score``, ``classify``, ``generate``,
``predict``): JSON lines. One complete JSON object per line, UTF-8 (not ASCII-escaped), one line per result as
it is produced (a sentence, a text, a sample, a token, a document's summary); no enclosing array or object, so
``head``, ``grep`` and ``jq -c`` work line by line and a long output is never held whole. Numbers that JSON
cannot hold (NaN, infinity) are ``null``."""

from __future__ import annotations

import json
import math
from typing import Any, TextIO


def _plain(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


def write_json_line(out: TextIO, record: dict) -> None:
    """``record`` as one line of JSON on ``out`` (its top-level NaN / infinite numbers as null)."""
    out.write(json.dumps({k: _plain(v) for k, v in record.items()}, ensure_ascii=False) + "\n")
