"""The ruff configuration of pyproject.toml holds for the package, the tests and the benchmarks (issue 14)."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    try:
        from ruff.__main__ import find_ruff_bin
    except ImportError as err:  # pragma: no cover - the test extra installs it
        raise AssertionError("ruff is not installed: pip install -e '.[test]'") from err
    done = subprocess.run([find_ruff_bin(), "check", "--no-cache", "dsf_lightning", "tests", "benchmarks"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
