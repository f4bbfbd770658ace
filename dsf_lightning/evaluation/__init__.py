"""Evaluation beyond the training loop: a pretrained model on a corpus's files (the card's numbers) and
dynamic evaluation (DSF sec 4.2)."""

from .corpus_eval import evaluate_on_corpus, split_file
from .dynamic import SplitResult, dynamic_evaluation

__all__ = ["SplitResult", "dynamic_evaluation", "evaluate_on_corpus", "split_file"]
