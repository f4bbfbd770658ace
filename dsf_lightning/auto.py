"""``dsf_lightning.from_pretrained``: one entry point for every kind of hub folder.

A model folder says what it holds (config.json's ``task``): a language model gives a
:class:`~dsf_lightning.scoring.Scorer` (score text: log-probabilities, perplexity; generate), a text classifier
a :class:`~dsf_lightning.classification.TextClassifier` (``classify(texts)``: labels and probabilities).
"""

from __future__ import annotations

import os


def from_pretrained(name_or_path: str | os.PathLike, revision: str | None = None, **options):
    """The :class:`~dsf_lightning.scoring.Scorer` of a language model or the
    :class:`~dsf_lightning.classification.TextClassifier` of a text classifier, for a published name, a Hub
    repo id (``owner/name``) or a local folder.

    ``revision`` and huggingface_hub's ``cache_dir``, ``force_download``, ``local_files_only``, ``token``: the
    download (only the model's files are fetched; a local folder or a bundled copy needs none). The other
    ``options`` go to the object's ``from_pretrained``: ``dtype`` and ``device`` for both; ``batch_size``,
    ``window``, ``normalize`` for a Scorer; ``batch_size``, ``max_length`` for a TextClassifier.
    """
    from .hub._folder import TEXT_CLASSIFICATION, check_folder, folder_task
    from .hub.registry import HUB_KEYWORDS, resolve

    hub = {k: options.pop(k) for k in list(options) if k in HUB_KEYWORDS and k != "revision"}
    folder = resolve(name_or_path, revision, **hub)
    if folder_task(check_folder(folder)) == TEXT_CLASSIFICATION:
        from .classification import TextClassifier

        return TextClassifier.from_pretrained(folder, **options)
    from .scoring import Scorer

    return Scorer.from_pretrained(folder, **options)
