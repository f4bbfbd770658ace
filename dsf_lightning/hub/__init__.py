"""The Hub: the strict folder format every model shares, published names, download and upload; model-agnostic.

>>> from dsf_lightning.hub import resolve
>>> folder = resolve("delta-rnn-ptb")          # bundled copy, Hub repo id "owner/name" or a folder

:mod:`.folder` holds what every kind of model folder shares (config.json's header, sha256 records, bounded
and strict reading of JSON and safetensors, the atomic write, the card); :mod:`.registry` knows the published
names and resolves names, folders and repo ids; :mod:`.publish` uploads; :mod:`.card` builds model cards;
:mod:`.mixin` gives model classes ``from_pretrained`` / ``save_pretrained`` / ``push_to_hub``.
The models know their own folders: :mod:`dsf_lightning.model.pretrained` (language models:
``load_pretrained``, ``save_pretrained``), :mod:`dsf_lightning.tasks.pretrained` (text classifiers);
:mod:`dsf_lightning.auto` loads either kind; :mod:`dsf_lightning.export` makes folders from checkpoints.
"""

from .card import ModelCardError, build_model_card
from .folder import FORMAT, FORMAT_VERSION, CheckpointError, PretrainedFormatError, WrongTaskError
from .mixin import PretrainedModelMixin
from .registry import PUBLISHED, ModelDownloadError, PublishedModel, UnknownModelError, resolve

__all__ = [
    "FORMAT", "FORMAT_VERSION", "CheckpointError", "ModelCardError", "ModelDownloadError", "PUBLISHED",
    "PretrainedFormatError", "PretrainedModelMixin", "PublishedModel", "UnknownModelError", "WrongTaskError",
    "build_model_card", "resolve",
]
