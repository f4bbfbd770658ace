"""How the ``dsf`` subcommands report errors: the user's input or environment is one line on stderr and
exit code 2; anything else is a bug and keeps its traceback. Also the plumbing the argparse subcommands
share (their run wrapper and their ``python -m`` entry point)."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

EXIT_ERROR = 2
#: error types that are always the user's input or environment
EXPECTED = (OSError, ValueError, LookupError, ImportError)


def is_expected(err: BaseException, *extra: type[BaseException]) -> bool:
    """Whether ``err`` is the user's input or environment (``EXPECTED``, ``extra``, or raised by the hub /
    huggingface_hub / safetensors layers) rather than a bug."""
    if isinstance(err, (*EXPECTED, *extra)):
        return True
    module = type(err).__module__ or ""
    return module.startswith(("dsf_lightning.hub", "huggingface_hub", "safetensors"))


def one_line(err: BaseException) -> str:
    """The error's message on one line (its lines joined by '; '), or its type name when it has none."""
    text = str(err).strip() or type(err).__name__
    return "; ".join(part.strip() for part in text.splitlines() if part.strip())


def report_errors(command: str, body: Callable[[], int], *expected: type[BaseException]) -> int:
    """Run ``body`` for ``dsf COMMAND``: expected errors (see :func:`is_expected`) become one line on stderr
    and exit code 2; a closed stdout (``dsf COMMAND ... | head``) ends quietly with 0; bugs propagate."""
    try:
        return body()
    except BrokenPipeError:
        try:
            sys.stdout = open("/dev/null", "w")  # noqa: SIM115 - silence the interpreter's flush at exit
        except OSError:
            pass
        return 0
    except Exception as err:  # noqa: BLE001 - expected errors become one line, bugs keep their traceback
        if not is_expected(err, *expected):
            raise
        print(f"dsf {command}: error: {one_line(err)}", file=sys.stderr)
        return EXIT_ERROR


def standalone_main(command: str, add_parser: Callable, argv: Sequence[str] | None) -> int:
    """``python -m <module> ARGS`` for a subcommand module: the same as ``dsf COMMAND ARGS``."""
    parser = argparse.ArgumentParser(prog="dsf")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([command, *(sys.argv[1:] if argv is None else argv)])
    return args.handler(args)
