"""The ``dsf`` command line, through its function and through the installed console script."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dsf_lightning.cells import list_cells
from dsf_lightning.cli import main


def test_list_cells_prints_one_name_per_line(capsys):
    assert main(["list", "cells"]) == 0
    assert capsys.readouterr().out.splitlines() == list_cells()


def test_list_cells_details_has_a_row_per_cell_with_a_parameter_count(capsys):
    assert main(["list", "cells", "--details", "--input-size", "10", "--hidden-size", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(list_cells())
    row = next(line for line in lines if line.startswith("delta-rnn "))
    assert row.split()[1] == f"{8 * 8 + 8 * 10 + 5 * 8:,}"  # H*H + H*I + 5H


def test_unknown_subcommand_exits_with_usage(capsys):
    with pytest.raises(SystemExit) as info:
        main(["list", "spaceships"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_installed_console_script():
    script = Path(sys.executable).with_name("dsf")
    if not script.exists():
        script = shutil.which("dsf")
    assert script, "the `dsf` console script is not installed next to this Python (pip install -e .)"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([str(script), "list", "cells"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == list_cells()


def test_list_corpora(capsys):
    from dsf_lightning.data.corpora import list_corpora

    assert main(["list", "corpora"]) == 0
    names = capsys.readouterr().out.split()
    assert names == list_corpora() and "ptb" in names and "text-folder" in names
