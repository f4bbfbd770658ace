"""A ``LanguageModelModule`` checkpoint -> a language-model folder (:mod:`dsf_lightning.model.pretrained`).

The checkpoint is read with ``torch.load(weights_only=True)`` (never a full unpickle); the vocabulary and
tokenizer come from the corpus the run trained on (named in the checkpoint or in the LightningCLI
``config.yaml`` beside it). :func:`export_checkpoint` can score the corpus's splits with the weights exactly as
stored and put the numbers in the card (``dsf export --evaluate``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from ..hub.folder import round_to_storage
from ..model.pretrained import save_pretrained
from ..training.read_checkpoint import pretrained_from_checkpoint

logger = logging.getLogger(__name__)


def export_checkpoint(
    ckpt_path,
    folder,
    *,
    corpus_name: str | None = None,
    data_root=None,
    corpus_options: dict | None = None,
    dtype: str = "float32",
    eval_results: list[dict] | None = None,
    info: dict | None = None,
    card_extra: dict | None = None,
    evaluate: Sequence[str] = (),
    dynamic: Sequence[int] = (),
    dynamic_updates: str = "segment",
    weights: str = "auto",
) -> Path:
    """:func:`pretrained_from_checkpoint` then :func:`save_pretrained`; returns the folder.

    ``evaluate`` (e.g. ``("valid", "test")``) scores those splits' files with the weights exactly as
    stored (rounded to ``dtype`` first) and puts the numbers in the card and ``info["metrics"]``;
    ``dynamic`` (``(1, 2)``) adds the test numbers under dynamic evaluation #1 / #2 (DSF sec 4.2), with an
    SGD update every 20 tokens (``dynamic_updates="segment"``) or after each sentence (``"sentence"``, the
    paper's); ``info["metrics"]["dynamic_updates"]`` and the card record which. ``weights``: which weights of the
    checkpoint (:func:`~dsf_lightning.training.read_checkpoint.checkpoint_weights`: by default the PolyakAveraging
    average where the run kept one, as its validation did).
    """
    if dynamic and dynamic_updates not in ("segment", "sentence"):
        raise ValueError(f"dynamic_updates must be 'segment' (every 20 tokens) or 'sentence' (after each sentence), "
                         f"got {dynamic_updates!r}")
    pretrained = pretrained_from_checkpoint(ckpt_path, corpus_name, data_root=data_root, corpus_options=corpus_options,
                                            info=info, weights=weights)
    if evaluate:
        from ..evaluation import evaluate_on_corpus

        data_root, corpus_options = _trained_on(ckpt_path, pretrained.info["corpus"], data_root, corpus_options)

        round_to_storage(pretrained.model, dtype)  # evaluate the weights the folder will hold
        results, metrics = evaluate_on_corpus(
            pretrained, pretrained.info["corpus"], evaluate, data_root=data_root, corpus_options=corpus_options
        )
        if dynamic:
            from ..evaluation.corpus_eval import dynamic_results_on_corpus

            more, more_metrics = dynamic_results_on_corpus(
                pretrained, pretrained.info["corpus"], dynamic, data_root=data_root, corpus_options=corpus_options,
                updates=dynamic_updates,
            )
            results, metrics = [*results, *more], {**metrics, **more_metrics}
        eval_results = [*(eval_results or []), *results]
        pretrained.info = {**pretrained.info, "metrics": {**pretrained.info.get("metrics", {}), **metrics}}
    return save_pretrained(pretrained, folder, dtype=dtype, eval_results=eval_results, card_extra=card_extra)


def _trained_on(ckpt_path, corpus: str, data_root, corpus_options: dict | None) -> tuple:
    """The data root and corpus options ``--evaluate`` reads: those the run trained on (recorded in the
    checkpoint, or its config.yaml), with what the caller gives (``data_root``, ``corpus_options``) over them."""
    from ..training.read_checkpoint import load_checkpoint, recorded_data

    path = Path(ckpt_path).expanduser()
    recorded = recorded_data(load_checkpoint(path), path)
    if recorded.get("corpus") != corpus:
        return data_root, corpus_options
    options = {k: v for k, v in dict(recorded.get("corpus_options") or {}).items() if k not in _READER_OPTIONS}
    options.update(corpus_options or {})
    return (data_root if data_root is not None else recorded.get("data_root")), options


#: corpus options that say how text is read (the checkpoint's vocabulary does), not where the data is
_READER_OPTIONS = ("tokenizer", "tokenizer_options", "unk", "min_count", "max_size")

