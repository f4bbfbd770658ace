"""The pretrained-model hub: folder format, published names, publishing, CLI parts.

>>> from dsf_lightning.hub import load, save_pretrained
>>> pretrained = load("delta-rnn-ptb")        # bundled copy, Hub repo id "owner/name" or a folder
>>> pretrained.model, pretrained.vocab, pretrained.tokenizer, pretrained.info

:mod:`.format` writes and strictly reads folders (``config.json``, ``model.safetensors``,
``vocab.json``, ``dsf_tokenizer.json``, a ``tokenizers``-library ``tokenizer.json`` where exact, ``README.md``) and exports Lightning checkpoints;
:mod:`.registry` knows the published names and resolves names, folders and repo ids;
:mod:`.publish` uploads; :mod:`.card` builds model cards; :mod:`.commands` holds the CLI handlers.
"""

from .card import ModelCardError, build_model_card
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
    "PretrainedFormatError",
    "PublishedModel",
    "UnknownModelError",
    "build_model_card",
    "export_checkpoint",
    "list_models",
    "load",
    "load_pretrained",
    "pretrained_from_checkpoint",
    "push_to_hub",
    "resolve",
    "save_pretrained",
]
