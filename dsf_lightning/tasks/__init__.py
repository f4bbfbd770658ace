"""Sequence tasks of the sr-RNN paper (Wang & Niepert 2019): data, models and the Tomita experiment.

* :mod:`.languages`: seeded generators (Tomita grammars and their minimal DFAs, balanced
  parentheses, palindromes, copying memory), no torch;
* :mod:`.data`: vocabulary, padded / masked batches, length buckets, the base DataModule;
* :mod:`.datamodules`: one DataModule per task (Tomita, balanced parentheses, palindromes, copying
  memory, IMDB sentiment, pixel-by-pixel (permuted) MNIST and Fashion-MNIST);
* :mod:`.idx`: the IDX reader for the MNIST files;
* :mod:`.modules`: :class:`SequenceClassifier` and :class:`SequenceTagger` over any registered cell;
* :mod:`.tomita_experiment`: train sr-GRUs on Tomita grammars, extract and check their DFAs
  (``python -m dsf_lightning.tasks.tomita_experiment``).

DFA extraction itself is :func:`dsf_lightning.tasks.dfa.extract_dfa`.
"""

from . import pretrained  # noqa: F401 - registers the text-classifier folder for SequenceClassifier.from_pretrained
from .data import BucketBatchSampler, SequenceDataModule, TokenSequenceDataset, Vocabulary, collate
from .datamodules import (
    BalancedParenthesesDataModule,
    CopyingMemoryDataModule,
    IMDBSentimentDataModule,
    PalindromeDataModule,
    PixelMNISTDataModule,
    TomitaDataModule,
)
from .idx import load_mnist, read_idx
from .modules import SequenceClassifier, SequenceTagger

__all__ = [
    "BalancedParenthesesDataModule",
    "BucketBatchSampler",
    "CopyingMemoryDataModule",
    "IMDBSentimentDataModule",
    "PalindromeDataModule",
    "PixelMNISTDataModule",
    "SequenceClassifier",
    "SequenceDataModule",
    "SequenceTagger",
    "TokenSequenceDataset",
    "TomitaDataModule",
    "Vocabulary",
    "collate",
    "load_mnist",
    "read_idx",
]
