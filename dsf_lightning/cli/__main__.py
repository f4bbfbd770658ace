"""``python -m dsf_lightning.cli ARGS``: the same as ``dsf ARGS``."""

import sys

from . import main

sys.exit(main())
