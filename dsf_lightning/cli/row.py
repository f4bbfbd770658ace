"""Child-process entry point of ``dsf reproduce`` for one row: ``python -m dsf_lightning.reproduce.row SPEC.json``.

Used when rows run isolated (several devices through Lightning's own launcher, which re-launches this
very command once per device). The spec holds the LightningCLI arguments, the row's folder, its metric
and whether to resume; rank 0 writes ``result.json`` beside it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .runner import run_row


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m dsf_lightning.reproduce.row SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    run_row(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
