"""One entry point for every kind of hub folder: ``dsf_lightning.from_pretrained``, :func:`load`,
:func:`list_models` and :func:`push_to_hub`.

A model folder says what it holds (config.json's ``task``): a language model gives a
:class:`~dsf_lightning.scoring.Scorer` (score text: log-probabilities, perplexity; generate), a text classifier
a :class:`~dsf_lightning.classification.TextClassifier` (``classify(texts)``: labels and probabilities).
:func:`load` returns the folder's in-memory form for either kind (``task="auto"``) or refuses the other kind
with a :class:`~dsf_lightning.hub.WrongTaskError` naming its loader. The hub below knows names and files; the
models know their folders (:mod:`dsf_lightning.model.pretrained`, :mod:`dsf_lightning.tasks.pretrained`);
this module is where the two kinds meet.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .hub import publish
from .hub.folder import (
    AUTO,
    CARD_FILE,
    CONFIG_FILE,
    LANGUAGE_MODEL,
    TASKS,
    TEXT_CLASSIFICATION,
    ClassifierFolder,
    PretrainedFormatError,
    check_folder,
    folder_task,
    read_folder,
    read_json,
    resolve_dtype,
)
from .hub.registry import HUB_KEYWORDS, PUBLISHED, cached_copy, check_keywords, load_with, resolve
from .model import LMConfig, RecurrentLM
from .model.pretrained import load_pretrained
from .scoring import Scorer

# the text-classifier side (dsf_lightning.tasks, which brings Lightning) is imported where a classifier is met,
# so that scoring text with a language model stays quick to start

logger = logging.getLogger(__name__)


def from_pretrained(name_or_path: str | os.PathLike, revision: str | None = None, **options):
    """The :class:`~dsf_lightning.scoring.Scorer` of a language model or the
    :class:`~dsf_lightning.classification.TextClassifier` of a text classifier, for a published name, a Hub
    repo id (``owner/name``) or a local folder.

    ``revision`` and huggingface_hub's ``cache_dir``, ``force_download``, ``local_files_only``, ``token``: the
    download (only the model's files are fetched; a local folder or a bundled copy needs none). The other
    ``options`` go to the object's ``from_pretrained``: ``dtype`` and ``device`` for both; ``batch_size``,
    ``window``, ``normalize`` for a Scorer; ``batch_size``, ``max_length`` for a TextClassifier.
    """
    hub = {k: options.pop(k) for k in list(options) if k in HUB_KEYWORDS and k != "revision"}
    folder = resolve(name_or_path, revision, **hub)
    if folder_task(check_folder(folder)) == TEXT_CLASSIFICATION:
        from .classification import TextClassifier

        return TextClassifier.from_pretrained(folder, **options)
    return Scorer.from_pretrained(folder, **options)


def list_models() -> list[dict]:
    """The published models: name, task, repo_id, revision, source ("bundled (path)" or "hub"), description,
    and, where a copy is here (bundled, or in the Hub cache), what its folder says (:func:`folder_summary`):
    metric, value, parameters, size_bytes (None where unknown)."""
    rows = []
    for name, published in sorted(PUBLISHED.items()):
        folder = published.bundled_path if published.is_bundled else cached_copy(published)
        summary = folder_summary(folder) if folder is not None else {}
        rows.append({
            "name": name,
            "task": summary.get("task", published.task),
            "repo_id": published.repo_id,
            "revision": published.revision,
            "source": f"bundled ({published.bundled_path})" if published.is_bundled else "hub",
            "cached": folder is not None and not published.is_bundled,
            "description": published.description,
            "metric": summary.get("metric"),
            "value": summary.get("value"),
            "parameters": summary.get("parameters"),
            "size_bytes": summary.get("size_bytes"),
        })
    return rows


#: the headline metric of each kind, in order of preference (the model-index's metric types)
HEADLINE = {LANGUAGE_MODEL: ("perplexity", "bpc"), TEXT_CLASSIFICATION: ("accuracy",)}


def folder_summary(folder: Path) -> dict:
    """What ``dsf list models`` shows of a model folder: ``task``, ``metric`` (e.g. ``"test perplexity"``) and
    ``value`` (the card's model-index: its first test-split result of the kind's headline metric, static
    evaluation), ``parameters`` (of the model config.json describes, tied weights once) and ``size_bytes``
    (the folder's files). A folder that cannot be read gives ``metric="unreadable"``."""
    folder = Path(folder)
    out: dict = {"size_bytes": sum(p.stat().st_size for p in folder.iterdir() if p.is_file())}
    try:
        task = folder_task(folder)
        config = read_json(folder / CONFIG_FILE)
        out.update(task=task, parameters=_parameters(task, config["model"]))
    except (PretrainedFormatError, KeyError, TypeError, ValueError) as err:
        logger.warning("cannot read %s: %s", folder, err)
        return {**out, "metric": "unreadable"}
    try:
        from huggingface_hub import ModelCard

        results = ModelCard.load(folder / CARD_FILE).data.eval_results or []
    except Exception as err:  # noqa: BLE001 - a card that does not parse: the row says so, the listing goes on
        logger.warning("cannot read the model card of %s: %s", folder, err)
        results = []
    for metric in HEADLINE[task]:
        for r in results:
            if r.metric_type == metric and r.dataset_split == "test" and "dynamic" not in str(r.metric_name or ""):
                return {**out, "metric": f"test {metric}", "value": float(r.metric_value)}
    return out


def _parameters(task: str, model: dict) -> int:
    """Parameters of the model a folder's config.json describes (built on the CPU; shared tensors once)."""
    if task == TEXT_CLASSIFICATION:
        from .tasks.modules import SequenceClassifier
        from .tasks.pretrained import ARCHITECTURE

        module = SequenceClassifier(**{k: model[k] for k in ARCHITECTURE})
    else:
        module = RecurrentLM(LMConfig.from_dict(model))
    return sum(p.numel() for p in module.parameters())


def load_folder(folder, *, task: str = LANGUAGE_MODEL, dtype=None):
    """Load the model folder ``folder`` strictly, top-down: read it as the kind ``task`` names (see the module
    docstring; :func:`~dsf_lightning.hub.folder.read_folder`), then build its model:
    :func:`~dsf_lightning.model.pretrained.load_pretrained` for a language model,
    :func:`~dsf_lightning.tasks.pretrained.load_classifier` for a text classifier."""
    if task != AUTO and task not in TASKS:
        raise ValueError(f"task must be one of {[*TASKS, AUTO]}, got {task!r}")
    dtype = resolve_dtype(dtype)  # a bad dtype fails before the folder is read
    files = read_folder(folder, task)
    if isinstance(files, ClassifierFolder):
        from .tasks.pretrained import load_classifier

        return load_classifier(files, dtype=dtype)
    return load_pretrained(files, dtype=dtype)


def load(name_or_path, *, revision: str | None = None, dtype=None, task: str = LANGUAGE_MODEL, **hub):
    """:func:`resolve` (``revision`` and the other :data:`HUB_KEYWORDS`) then :func:`load_folder` (``dtype``,
    ``task``: ``"language-model"`` (default), ``"text-classification"`` or ``"auto"``)."""
    check_keywords("load", {k: v for k, v in hub.items() if k not in HUB_KEYWORDS}, (*HUB_KEYWORDS, "dtype", "task"))
    if task != AUTO and task not in TASKS:
        raise ValueError(f"task must be one of {[*TASKS, AUTO]}, got {task!r}")
    return load_with(lambda folder, dtype: load_folder(folder, task=task, dtype=dtype), name_or_path, revision=revision,
                     dtype=dtype, **hub)


def push_to_hub(folder, repo_id: str, **options):
    """:func:`dsf_lightning.hub.publish.push_to_hub` of a folder of either kind, validated first by the strict
    loader of the kind it holds (``options``: ``revision``, ``token``, ``private``, ``commit_message``,
    ``endpoint``)."""
    return publish.push_to_hub(folder, repo_id, load=lambda path: load_folder(path, task=AUTO), **options)
