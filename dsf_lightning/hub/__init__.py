"""The pretrained-model hub: folder format, published names, publishing, CLI parts.

>>> from dsf_lightning.hub import load, save_pretrained
>>> pretrained = load("delta-rnn-ptb")        # bundled copy, Hub repo id "owner/name" or a folder
>>> pretrained.model, pretrained.vocab, pretrained.tokenizer, pretrained.info

:mod:`.format` writes and strictly reads language-model folders (``config.json``, ``model.safetensors``,
``vocab.json``, ``dsf_tokenizer.json``, a ``tokenizers``-library ``tokenizer.json`` where exact, ``README.md``) and exports Lightning checkpoints;
:mod:`.classifier` the same for text classifiers (``task: text-classification``; ``load(name, task="auto")``
returns either kind); :mod:`._folder` holds what both kinds share;
:mod:`.registry` knows the published names and resolves names, folders and repo ids;
:mod:`.publish` uploads; :mod:`.card` builds model cards; :mod:`.commands` holds the CLI handlers.
"""

from ._folder import WrongTaskError
from .card import ModelCardError, build_model_card
from .classifier import (
    PretrainedClassifier,
    classifier_from_checkpoint,
    export_classifier_checkpoint,
    load_classifier,
    save_classifier,
)
from .format import (
    FORMAT,
    FORMAT_VERSION,
    CheckpointError,
    Pretrained,
    PretrainedFormatError,
    export_checkpoint,
    load_pretrained,
    pretrained_from_checkpoint,
    save_pretrained,
)
from .publish import push_to_hub
from .registry import (
    PUBLISHED,
    ModelDownloadError,
    PublishedModel,
    UnknownModelError,
    list_models,
    load,
    load_folder,
    resolve,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "PUBLISHED",
    "CheckpointError",
    "ModelCardError",
    "ModelDownloadError",
    "Pretrained",
    "PretrainedClassifier",
    "PretrainedFormatError",
    "PublishedModel",
    "UnknownModelError",
    "WrongTaskError",
    "build_model_card",
    "classifier_from_checkpoint",
    "export_checkpoint",
    "export_classifier_checkpoint",
    "list_models",
    "load",
    "load_classifier",
    "load_folder",
    "load_pretrained",
    "pretrained_from_checkpoint",
    "push_to_hub",
    "resolve",
    "save_classifier",
    "save_pretrained",
]
