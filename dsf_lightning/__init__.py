"""dsf-lightning: the Differential State Framework family of recurrent language models for Lightning.

>>> import dsf_lightning as dsf
>>> scorer = dsf.from_pretrained("delta-rnn-ptb")          # the bundled model, offline
>>> scorer.score("the company said it expects higher earnings").ppl
>>> dsf.from_pretrained("sr-lstm-p-imdb").classify("A great movie!").label   # a text classifier

Public API: :func:`from_pretrained` (a :class:`Scorer` for a language model, a :class:`TextClassifier` for a
text classifier: the folder says which), :func:`list_models` (published models), the cell registry
(:func:`list_cells`, :func:`get_cell`, :func:`register_cell`), the model
(:class:`LMConfig`, :class:`RecurrentLM`), training (:class:`LanguageModelModule`, :class:`TrainConfig`,
:class:`LanguageModelDataModule`) and corpora (:func:`load_corpus`, :func:`list_corpora`). Every part
(torch, Lightning, the hub client) is imported on first use.
"""

from importlib import import_module

from ._version import __version__

# Everything is imported on first use, the cells (torch) too: `dsf --help` and `import dsf_lightning` stay fast
_LAZY = {
    "get_cell": "dsf_lightning.cells",
    "list_cells": "dsf_lightning.cells",
    "register_cell": "dsf_lightning.cells",
    "from_pretrained": "dsf_lightning.auto",
    "Scorer": "dsf_lightning.scoring",
    "ScoringError": "dsf_lightning.scoring",
    "TextClassifier": "dsf_lightning.classification",
    "ClassificationError": "dsf_lightning.classification",
    "list_models": "dsf_lightning.auto",
    "save_pretrained": "dsf_lightning.model.pretrained",
    "load_pretrained": "dsf_lightning.model.pretrained",
    "LMConfig": "dsf_lightning.model",
    "RecurrentLM": "dsf_lightning.model",
    "LanguageModelModule": "dsf_lightning.training",
    "TrainConfig": "dsf_lightning.training.config",
    "LanguageModelDataModule": "dsf_lightning.training.datamodule",
    "load_corpus": "dsf_lightning.data.corpora",
    "list_corpora": "dsf_lightning.data.corpora",
}

__all__ = ["__version__", "get_cell", "list_cells", "register_cell", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dsf_lightning' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
