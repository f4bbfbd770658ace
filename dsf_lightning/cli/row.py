"""``python -m dsf_lightning.cli.row SPEC.json``: the row child entry's former name, kept for runs whose recorded
child command names it; the entry is :mod:`dsf_lightning.reproduce.row`."""

from __future__ import annotations

import sys

from ..reproduce.row import CHILD_ENTRY, main  # noqa: F401 - the entry's public names

if __name__ == "__main__":
    sys.exit(main())
