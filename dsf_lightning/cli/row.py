"""Child-process entry point of ``dsf reproduce`` for one row: ``python -m dsf_lightning.cli.row SPEC.json``.

Used when rows run isolated (``--jobs N``, ``--isolate``, or several devices through Lightning's own launcher,
which re-launches this very command once per device). The spec holds the LightningCLI arguments, the row's
folder, its metric and whether to resume; rank 0 writes ``result.json`` beside it. It lives in the CLI package
because it runs :func:`.lightning.lightning_cli`; the runner below is told its name (:data:`CHILD_ENTRY`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..reproduce.runner import run_row
from .errors import EXIT_USAGE

#: the module ``python -m`` runs for one row (handed to :func:`dsf_lightning.reproduce.runner.run_table`)
CHILD_ENTRY = "dsf_lightning.cli.row"


def main(argv: list[str] | None = None) -> int:
    from .lightning import lightning_cli
    from .quiet import quiet_third_party

    quiet_third_party()
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(f"usage: python -m {CHILD_ENTRY} SPEC.json", file=sys.stderr)
        return EXIT_USAGE
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    run_row(spec, build_cli=lightning_cli)
    return 0


if __name__ == "__main__":
    sys.exit(main())
