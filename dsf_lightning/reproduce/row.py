"""Child-process entry point of ``dsf reproduce`` for one row: ``python -m dsf_lightning.reproduce.row SPEC.json``.

Used when rows run isolated (``--jobs N``, ``--isolate``, or several devices through Lightning's own launcher,
which re-launches this very command once per device). The spec holds the LightningCLI arguments, the row's
folder, its metric and whether to resume; rank 0 writes ``result.json`` beside it. It trains through
:func:`~.runner.run_row`, which builds the row with :func:`dsf_lightning.recipe_cli.lightning_cli`, as ``dsf fit``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .._quiet import quiet_third_party
from .runner import CHILD_ENTRY, run_row  # noqa: F401 - CHILD_ENTRY: this module's name for python -m


def main(argv: list[str] | None = None) -> int:
    quiet_third_party()
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(f"usage: python -m {CHILD_ENTRY} SPEC.json", file=sys.stderr)
        return 2  # a usage error, as the CLI's EXIT_USAGE
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    run_row(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
