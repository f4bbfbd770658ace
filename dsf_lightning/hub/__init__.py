"""The Hub: the strict folder format every model shares, published names, download and upload; model-agnostic.

>>> from dsf_lightning.hub import resolve
>>> folder = resolve("delta-rnn-ptb")          # bundled copy, Hub repo id "owner/name" or a folder

:mod:`.folder` is the folder format: one object per kind of folder (:class:`LanguageModelFolder`,
:class:`ClassifierFolder`: ``read(path)`` / ``write(path)``) and what every kind shares (config.json's header,
sha256 records, bounded and strict reading of JSON and safetensors, the atomic write); :mod:`.registry` knows the published
names and resolves names, folders and repo ids; :mod:`.publish` uploads; :mod:`.card` builds model cards;
:mod:`.mixin` gives model classes ``from_pretrained`` / ``save_pretrained`` / ``push_to_hub``.
The models build themselves from a folder read here: :mod:`dsf_lightning.model.pretrained` (language models:
``load_pretrained``, ``save_pretrained``), :mod:`dsf_lightning.tasks.pretrained` (text classifiers);
:mod:`dsf_lightning.auto` loads either kind; :mod:`dsf_lightning.export` makes folders from checkpoints.
"""

from .card import ModelCardError, build_model_card
from .folder import (
    FORMAT,
    FORMAT_VERSION,
    CardInfo,
    CheckpointError,
    ClassifierFolder,
    LanguageModelFolder,
    ModelFolder,
    PretrainedFormatError,
    WrongTaskError,
    read_folder,
)
from .mixin import PretrainedModelMixin
from .registry import PUBLISHED, ModelDownloadError, PublishedModel, UnknownModelError, resolve

__all__ = [
    "FORMAT", "FORMAT_VERSION", "CardInfo", "CheckpointError", "ClassifierFolder", "LanguageModelFolder",
    "ModelCardError", "ModelDownloadError", "ModelFolder", "PUBLISHED", "PretrainedFormatError",
    "PretrainedModelMixin", "PublishedModel", "UnknownModelError", "WrongTaskError", "build_model_card",
    "read_folder", "resolve",
]
