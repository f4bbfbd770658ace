"""Lightning training: the language-model module with truncated BPTT and carried state.

``LanguageModelModule`` is imported on first use, so that the modules here which need no Lightning (reading a
checkpoint, recipe files, the optimizer builder) keep the command line quick to start.
"""

from importlib import import_module

__all__ = ["LanguageModelModule"]


def __getattr__(name: str):
    if name == "LanguageModelModule":
        value = import_module(".language_model", __name__).LanguageModelModule
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
