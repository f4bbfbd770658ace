"""Lightning training: the language-model module with truncated BPTT and carried state."""

from .language_model import LanguageModelModule

__all__ = ["LanguageModelModule"]
