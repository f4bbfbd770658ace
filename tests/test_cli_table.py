"""One command table, one error policy (issue 14): every command of ``dsf_lightning.cli.COMMANDS`` answers
``dsf CMD --help`` with exit 0 and a bad option with the one usage exit code, 2; the user's errors are one line."""

import subprocess
import sys

import pytest

from dsf_lightning.cli import COMMANDS, main
from dsf_lightning.cli.errors import EXIT_FAILURE, EXIT_USAGE


def _exit_code(argv) -> int:
    """``dsf ARGV``'s exit code, whether the command returns it or argparse / LightningCLI exits with it."""
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 1  # SystemExit("message") exits 1


def test_the_exit_codes():
    assert (EXIT_FAILURE, EXIT_USAGE) == (1, 2)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_has_help_and_refuses_a_bad_option_with_exit_2(command, capsys):
    assert _exit_code([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert command in out.splitlines()[0] or f"dsf {command}" in out or "usage:" in out.lower()
    assert _exit_code([command, "--no-such-option"]) == EXIT_USAGE
    assert "error" in capsys.readouterr().err.lower()  # argparse's / LightningCLI's usage message


def test_dsf_help_lists_every_command_of_the_table_with_its_help(capsys):
    assert _exit_code(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert f"    {name} " in out or f"    {name}\n" in out, name


@pytest.mark.parametrize("what", ["cells", "corpora", "tasks", "models", "recipes", "tables"])
def test_every_list_subcommand_has_help(what, capsys):
    assert _exit_code(["list", what, "--help"]) == 0
    assert _exit_code(["list", what, "--no-such-option"]) == EXIT_USAGE


def test_reproduce_refuses_a_bad_row_option_with_the_usage_code_on_one_line(capsys):
    """Options after TABLE go to the rows' LightningCLI, so dsf reproduce checks them itself: exit 2 (was 1)."""
    assert _exit_code(["reproduce", "scrn-table2", "--bogus", "1"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("dsf reproduce: error: unrecognized arguments: --bogus") and err.count("\n") == 1
    assert _exit_code(["reproduce", "scrn-table2", "--jobs", "0"]) == EXIT_USAGE
    assert "--jobs and --threads must be 1 or more" in capsys.readouterr().err


def test_export_user_errors_exit_2_on_one_line_like_every_command(tmp_path, capsys):
    """dsf export / push / list models reported the user's errors with exit 1 and no command name (was)."""
    assert _exit_code(["export", str(tmp_path / "missing.ckpt"), str(tmp_path / "out")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("dsf export: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert _exit_code(["score", "--file", str(tmp_path / "missing.txt")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("dsf score: error: ") and err.count("\n") == 1


def test_list_recipes_of_an_empty_folder_is_a_usage_error(tmp_path, capsys):
    assert _exit_code(["list", "recipes", "--recipes-dir", str(tmp_path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("dsf list recipes: error: no recipes under") and "--recipes-dir" in err


def test_python_dash_m_dsf_lightning_cli_is_dsf():
    done = subprocess.run([sys.executable, "-m", "dsf_lightning.cli", "list", "tables"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "scrn-table2" in done.stdout
