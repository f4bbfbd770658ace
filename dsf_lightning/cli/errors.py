"""The one error policy of every ``dsf`` command: which errors are the user's, how they print, the exit codes.

* **exit 0**: the command did what was asked (also when its output pipe closed early: ``dsf ... | head``);
* **exit 1** (:data:`EXIT_FAILURE`): the command ran and its work failed: a training run diverged (non-finite
  weights), rows of ``dsf reproduce`` failed (recorded in the table; re-run to retry them);
* **exit 2** (:data:`EXIT_USAGE`): the user's input or environment is wrong: an unknown option or a bad value
  (argparse / LightningCLI print their usage), a file or model that cannot be found or read, a recipe the guards
  refuse, a text the model cannot read. Printed as ONE line on stderr, ``dsf COMMAND: error: what was wrong``,
  and the message says what to do;
* **exit 130** (:data:`EXIT_INTERRUPTED`): Ctrl-C.

Anything else is a bug and keeps its traceback. The user's errors are :data:`EXPECTED` (file, value and lookup
errors), any error raised by the hub / corpus / ``huggingface_hub`` / ``safetensors`` layers, and the error classes a
command names (e.g. ``ScoringError``). The training commands (``dsf fit`` ...) name their recipe and checkpoint
errors only: a ``ValueError`` raised inside a training step keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
#: kept for callers of the earlier name: the user's errors exit with :data:`EXIT_USAGE`
EXIT_ERROR = EXIT_USAGE

#: error types that are always the user's input or environment
EXPECTED = (OSError, ValueError, LookupError, ImportError)
#: modules whose every error is about the user's models, files or network, never a bug of the command
_EXPECTED_MODULES = ("dsf_lightning.hub", "dsf_lightning.data.corpora", "huggingface_hub", "safetensors")
#: errors (``module.Class`` prefixes) that are the user's for every command, the training ones too: reading a text
#: file the user named (``dsf predict --data.predict_file``: binary data, invalid UTF-8, a missing file), and a
#: prediction output that exists and was not named on the command line
_USER_FILE_ERRORS = ("dsf_lightning.data.textfile.", "dsf_lightning.training.prediction.PredictionOutputError",
                     "dsf_lightning.training.finetune.FinetuneConfigError")  # and settings that do not fit --model.init_from


class UsageError(ValueError):
    """A command's options do not fit together (exit 2, one line); raised by the commands themselves."""


def is_expected(err: BaseException, *extra: type[BaseException]) -> bool:
    """Whether ``err`` is the user's input or environment (``EXPECTED``, ``extra``, or raised by the hub /
    huggingface_hub / safetensors layers) rather than a bug."""
    if isinstance(err, (*EXPECTED, *extra)):
        return True
    module = type(err).__module__ or ""
    return module.startswith(_EXPECTED_MODULES)


def one_line(err: BaseException) -> str:
    """The error's message on one line (its lines joined by '; '), or its type name when it has none."""
    text = str(err).strip() or type(err).__name__
    if text.startswith(("'", '"')) and text.endswith(text[0]) and isinstance(err, KeyError):
        text = text[1:-1]  # KeyError quotes its message
    return "; ".join(part.strip() for part in text.splitlines() if part.strip())


def print_error(command: str, err: BaseException | str) -> None:
    """``dsf COMMAND: error: MESSAGE`` on stderr, one line."""
    message = err if isinstance(err, str) else one_line(err)
    print(f"dsf {command}: error: {message}", file=sys.stderr)


def _quiet_stdout() -> None:
    try:
        sys.stdout = open("/dev/null", "w")  # noqa: SIM115 - silence the interpreter's flush at exit
    except OSError:
        pass


def report_errors(command: str, body: Callable[[], int], *expected: type[BaseException], broad: bool = True,
                  failures: tuple[type[BaseException], ...] = ()) -> int:
    """Run ``body`` for ``dsf COMMAND`` under the policy above and return its exit code.

    ``expected``: the command's own user-error classes (exit 2); ``broad=False`` counts only those, not
    :func:`is_expected`'s file / value / lookup errors (the training commands); ``failures``: errors that mean
    the work failed (exit 1, one line)."""
    try:
        return body()
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"dsf {command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:  # noqa: BLE001 - the user's errors become one line, bugs keep their traceback
        if failures and isinstance(err, failures):
            print_error(command, err)
            return EXIT_FAILURE
        user_file = f"{type(err).__module__}.{type(err).__qualname__}".startswith(_USER_FILE_ERRORS)
        if not (isinstance(err, (UsageError, *expected)) or user_file or (broad and is_expected(err))):
            raise
        print_error(command, err)
        return EXIT_USAGE


def guard(command: str | Callable[[argparse.Namespace], str], *expected: type[BaseException]):
    """Decorator for an argparse handler ``run(args) -> int``: :func:`report_errors` around it. ``command`` is
    the name printed (``"score"``) or a function of the arguments (``dsf analyze TOOL``)."""

    def wrap(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        def handler(args: argparse.Namespace) -> int:
            name = command(args) if callable(command) else command
            return report_errors(name, lambda: run(args), *expected)

        handler.__name__, handler.__doc__, handler.__wrapped__ = run.__name__, run.__doc__, run
        return handler

    return wrap


def standalone_main(command: str, add_parser: Callable, argv: Sequence[str] | None) -> int:
    """``python -m dsf_lightning.cli.<module> ARGS`` for a command module: the same as ``dsf COMMAND ARGS``."""
    parser = argparse.ArgumentParser(prog="dsf")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([command, *(sys.argv[1:] if argv is None else argv)])
    return args.handler(args)
