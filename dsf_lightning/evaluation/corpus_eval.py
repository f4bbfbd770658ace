"""Score a corpus split's own file with the :class:`~dsf_lightning.scoring.Scorer`.

This is how a model card's numbers are produced: the whole split as one document, one stream with the
state carried across lines from the ``<eos>`` context, exactly what ``dsf score --file`` and
``from_pretrained(...).score_document(path)`` compute, so a user can reproduce the card by scoring the
file. (Training-time ``val_ppl`` uses ``eval_batch_size`` parallel streams instead and differs slightly.)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..data.corpora import CorpusError
from ..data.corpora.base import get_corpus_spec
from ..data.corpora.files import resolve_data_root


def split_file(corpus_name: str, split: str, data_root=None, corpus_options: dict | None = None) -> Path:
    """The text file of ``split`` of a corpus (the first expected form that exists on disk)."""
    spec = get_corpus_spec(corpus_name)
    files = spec.files(spec.options(dict(corpus_options or {})))
    if split not in files:
        raise CorpusError(f"corpus {corpus_name!r} has no {split!r} split (it has: {', '.join(files)})")
    root, how = resolve_data_root(data_root)
    candidates = [f for spec_file in files[split] for f in (spec_file, *spec_file.alternatives)]
    for candidate in candidates:
        path = root / candidate.path
        if path.is_file() and not path.name.endswith((".xz", ".gz")):
            return path
    names = ", ".join(str(root / c.path) for c in candidates)
    raise CorpusError(f"no plain-text file for {corpus_name} {split} under the data root ({how}): expected {names}; "
                      "point to the data with --data-root (data_root=) or --corpus-option path=DIR (corpus_options=)")


def split_source(corpus_name: str, split: str, data_root=None, corpus_options: dict | None = None):
    """What :func:`evaluate_on_corpus` scores for ``split``: its own file, or, for a ``text-folder`` made of
    one file (split by lines), that split's lines."""
    path = split_file(corpus_name, split, data_root, corpus_options)
    spec = get_corpus_spec(corpus_name)
    if hasattr(spec, "one_file"):
        opts = spec.options(dict(corpus_options or {}))
        if spec.one_file(path, opts):
            return [line for _, _, line in spec.lines(split, [path], opts)]
    return path


def evaluate_on_corpus(
    pretrained: Any,
    corpus_name: str,
    splits: Sequence[str] = ("valid", "test"),
    data_root=None,
    corpus_options: dict | None = None,
) -> tuple[list[dict], dict[str, float]]:
    """Score each split's file as one document; returns (model-index ``eval_results``, ``metrics``).

    Perplexity is reported for word and subword models, bits per character for character models.
    """
    from ..scoring import Scorer

    scorer = Scorer(pretrained)
    results, metrics = [], {}
    for split in splits:
        path = split_source(corpus_name, split, data_root, corpus_options)
        start = time.perf_counter()
        doc = scorer.score_document(path, progress=True)  # a bar on a terminal only (dsf export --evaluate)
        seconds = time.perf_counter() - start
        metric, value = ("bpc", doc.bpc) if scorer.char_level else ("perplexity", doc.ppl)
        results.append({"metric": metric, "value": round(float(value), 4), "dataset": corpus_name, "split": split})
        key = "bpc" if metric == "bpc" else "ppl"
        metrics[f"{split}_{key}"] = round(float(value), 4)
        metrics[f"{split}_tokens"] = doc.num_tokens
        metrics[f"{split}_seconds"] = round(seconds, 2)
    return results, metrics


def dynamic_results_on_corpus(
    pretrained: Any,
    corpus_name: str,
    modes: Sequence[int] = (1, 2),
    data_root=None,
    corpus_options: dict | None = None,
    lr: float = 0.005,
    segment_length: int = 20,
    updates: str = "segment",
) -> tuple[list[dict], dict[str, float]]:
    """Test perplexity (or BPC) under dynamic evaluation #1 (test only) and #2 (validation, then test),
    DSF paper sec 4.2, as model-index results and metrics; the pretrained weights stay untouched.
    ``updates``: ``"segment"`` (every ``segment_length`` tokens) or ``"sentence"`` (after each line's
    ``<eos>``, the paper's per-sample updates); ``metrics["dynamic_updates"]`` records which."""
    from ..data.corpora import load_corpus
    from .dynamic import dynamic_evaluation

    corpus = load_corpus(corpus_name, data_root=data_root, vocab=pretrained.vocab, **dict(corpus_options or {}))
    char_level = getattr(pretrained.tokenizer, "name", "") == "char"
    results, metrics = [], {}
    for mode in modes:
        if mode not in (1, 2):
            raise ValueError(f"dynamic evaluation mode must be 1 or 2, got {mode!r}")
        order = ["test"] if mode == 1 else ["valid", "test"]
        start = time.perf_counter()
        split = dynamic_evaluation(
            pretrained.model, [(s, corpus.splits[s]) for s in order], lr=lr, segment_length=segment_length,
            context_token=pretrained.vocab.eos_id, updates=updates, sentence_end=pretrained.vocab.eos_id,
        )["test"]
        metric, value = ("bpc", split.bpc) if char_level else ("perplexity", split.ppl)
        name = f"test {'bits per character' if char_level else 'perplexity'}, dynamic evaluation #{mode}"
        results.append({"metric": metric, "value": round(value, 4), "dataset": corpus_name, "split": "test",
                        "metric_name": name})
        metrics[f"test_{'bpc' if char_level else 'ppl'}_dynamic{mode}"] = round(value, 4)
        metrics[f"dynamic{mode}_seconds"] = round(time.perf_counter() - start, 1)
    metrics["dynamic_lr"], metrics["dynamic_updates"] = lr, updates
    if updates == "segment":
        metrics["dynamic_segment_length"] = segment_length
    return results, metrics
