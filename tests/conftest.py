"""Test-wide settings: no network (the Hub client reads these at import), one thread per process."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
