"""Evaluation beyond the training loop: a pretrained model on a corpus's files (the card's numbers)."""

from .corpus_eval import evaluate_on_corpus, split_file

__all__ = ["evaluate_on_corpus", "split_file"]
