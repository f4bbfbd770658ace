"""How the ``dsf`` subcommands report errors: the user's input or environment is one line on stderr and
exit code 2; anything else is a bug and keeps its traceback."""

from __future__ import annotations

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
