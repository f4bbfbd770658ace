"""``from_pretrained`` / ``save_pretrained`` / ``push_to_hub`` on the model class itself, in the shape of
huggingface_hub's ``PyTorchModelHubMixin`` but with this library's strict folder format (the mixin's own
loading is not strict: it keeps random weights for renamed keys).

>>> model = RecurrentLM.from_pretrained("delta-rnn-ptb")      # doctest: +SKIP
>>> model.save_pretrained("my-model")                          # doctest: +SKIP
>>> model.push_to_hub("me/my-model")                           # doctest: +SKIP
>>> SequenceClassifier.from_pretrained("sr-lstm-p-imdb")       # doctest: +SKIP

One mixin for every kind of folder: a class says which it is with ``_hub_task`` (config.json's ``task``:
``language-model`` for :class:`~dsf_lightning.model.RecurrentLM`, ``text-classification`` for
:class:`~dsf_lightning.tasks.SequenceClassifier`) and hands over its folder format with
the folder format registered for that task (:func:`register_folder_format`: the in-memory type, the saving and
the loading function, by :mod:`dsf_lightning.model.pretrained` / :mod:`dsf_lightning.tasks.pretrained`); a folder of another kind
is refused with a message naming its loader. The hub itself (names, download, upload) is model-agnostic, so
the models can build on it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .folder import FOLDER_KINDS
from .publish import push_to_hub
from .registry import HUB_KEYWORDS, check_keywords, dtype_argument, load_with

#: per task, the folder parts a model from ``from_pretrained`` keeps as plain attributes (part -> attribute) and
#: ``save_pretrained`` writes back; ``vocab`` and ``tokenizer`` have no default
PARTS = {
    "language-model": {"vocab": "vocab", "tokenizer": "tokenizer", "info": "pretrained_info", "normalize": "pretrained_normalize",
                       "storage_dtype": "pretrained_storage_dtype", "card_data": "pretrained_card_data"},
    "text-classification": {"vocab": "vocab", "tokenizer": "tokenizer", "labels": "pretrained_labels", "info": "pretrained_info",
                            "normalize": "pretrained_normalize", "max_length": "pretrained_max_length",
                            "storage_dtype": "pretrained_storage_dtype", "card_data": "pretrained_card_data"},
}
REQUIRED = ("vocab", "tokenizer")

#: task -> (in-memory type, save(pretrained, folder, **options), load(folder, dtype=...)): each folder format
#: registers itself (:func:`register_folder_format`) in its module, which the model's package imports; the model
#: modules need not import their folder format (that format imports the model: one way)
FOLDER_FORMATS: dict[str, tuple] = {}


def register_folder_format(task: str, pretrained_type: type, save, load) -> None:
    """Make ``(pretrained_type, save, load)`` the folder format of the models whose ``_hub_task`` is ``task``."""
    FOLDER_FORMATS[task] = (pretrained_type, save, load)


class PretrainedModelMixin:
    """Adds Hub-style loading and saving to a model class (:data:`PARTS`: what a loaded model keeps).

    A model from :meth:`from_pretrained` keeps the folder's vocabulary, tokenizer, info and text normalizer
    (a classifier also its labels and length rule) as plain attributes (``vocab``, ``tokenizer``,
    ``pretrained_info``, ``pretrained_normalize``, ``pretrained_labels``, ``pretrained_max_length``; not in its
    ``state_dict``), so :meth:`save_pretrained` writes the same folder back.
    """

    _hub_task = "language-model"

    @classmethod
    def _pretrained_format(cls):
        """``(in-memory type, save(pretrained, folder, **options), load(folder, dtype=...))`` of this class's
        folder: the format registered for its ``_hub_task`` (:func:`register_folder_format`)."""
        try:
            return FOLDER_FORMATS[cls._hub_task]
        except KeyError:
            raise TypeError(f"{cls.__name__} does not say how it is saved: no folder format is registered for "
                            f"{cls._hub_task!r} (register_folder_format)") from None

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path,
        *,
        revision: str | None = None,
        cache_dir=None,
        force_download: bool = False,
        local_files_only: bool = False,
        token: str | bool | None = None,
        device=None,
        dtype=None,
        **unknown,
    ):
        """The model of a published name, a Hub repo id (``owner/name``) or a local folder, loaded strictly, in eval
        mode: :func:`dsf_lightning.hub.registry.resolve`, then the folder read as its kind's object
        (:data:`~.folder.FOLDER_KINDS`), then the class's loader builds the model from it. A folder of another kind (a
        text classifier for a language model, or the reverse) is a :class:`~dsf_lightning.hub.WrongTaskError` naming
        its loader.

        ``revision``, ``cache_dir``, ``force_download``, ``local_files_only``, ``token``: as in
        huggingface_hub, for the download (``snapshot_download`` of the model's files only). ``device``:
        where to put the model (default CPU; one this machine lacks is a ValueError before anything is read).
        ``dtype`` (alias ``torch_dtype``): ``torch.float16`` / ``torch.bfloat16`` / ``torch.float32`` or its name;
        the weights are cast after the strict load.
        """
        dtype = dtype_argument(f"{cls.__name__}.from_pretrained", dtype, unknown)
        check_keywords(f"{cls.__name__}.from_pretrained", unknown, (*HUB_KEYWORDS, "device", "dtype", "torch_dtype"))
        _, _, build = cls._pretrained_format()
        kind = FOLDER_KINDS[cls._hub_task]  # read the folder (a folder of another kind: WrongTaskError), then build

        def load_folder(folder, dtype):
            return build(kind.read(folder), dtype=dtype)

        pretrained = load_with(load_folder, pretrained_model_name_or_path, revision=revision, dtype=dtype, device=device, cache_dir=cache_dir,
                               force_download=force_download, local_files_only=local_files_only, token=token)
        model = pretrained.model
        if not isinstance(model, cls):
            raise TypeError(f"the folder holds a {type(model).__name__}, not a {cls.__name__}")
        for part, attribute in PARTS[cls._hub_task].items():
            setattr(model, attribute, getattr(pretrained, part, None))
        if device is not None:
            model.to(device)
        return model

    def _as_pretrained(self, **given):
        """The folder's in-memory form: ``given`` parts, else those :meth:`from_pretrained` kept."""
        parts = PARTS[self._hub_task]
        unknown = sorted(set(given) - set(parts))
        if unknown:
            raise TypeError(f"{type(self).__name__}.save_pretrained() got unexpected folder part(s) {unknown}; "
                            f"it keeps {', '.join(parts)}")
        values = {part: given[part] if given.get(part) is not None else getattr(self, attribute, None)
                  for part, attribute in parts.items()}
        if any(values[part] is None for part in REQUIRED):
            raise ValueError(
                f"this {type(self).__name__} has no vocabulary / tokenizer to save with it (it was not loaded with "
                "from_pretrained): pass vocab= and tokenizer= (e.g. a corpus's or DataModule's .vocab and its tokenizer)"
            )
        values["info"] = dict(values["info"] or {})
        if "labels" in values and values["labels"] is None:
            values["labels"] = [str(i) for i in range(int(self.hparams["num_classes"]))]
        if "max_length" in values and values["max_length"] is None and "max_length" not in given:
            values.pop("max_length")  # the folder format's default length rule
        pretrained_type, _, _ = self._pretrained_format()
        return pretrained_type(model=self, **values)

    def save_pretrained(self, save_directory, **kwargs) -> Path:
        """Write the model folder ``dsf export`` writes to ``save_directory``; returns its path.

        Folder parts (default: those :meth:`from_pretrained` kept): ``vocab``, ``tokenizer``, ``info``,
        ``normalize`` (the text normalizer's name, e.g. ``"ptb"``); a classifier also ``labels`` (default
        ``"0"``, ``"1"``, ...) and ``max_length``. Other keywords are the saving function's
        (:func:`dsf_lightning.model.pretrained.save_pretrained` / :func:`dsf_lightning.tasks.pretrained.save_classifier`:
        ``dtype``, ``eval_results``, ``card_extra``). The weights are saved in float32 (or ``dtype="float16"``)
        whatever dtype the model runs in.
        """
        parts = PARTS[self._hub_task]
        pretrained = self._as_pretrained(**{k: kwargs.pop(k) for k in list(kwargs) if k in parts})
        _, save, _ = self._pretrained_format()
        restore = next(self.parameters()).dtype
        try:
            self.float()  # the folder stores float32 (or float16) weights
            return save(pretrained, save_directory, **kwargs)
        finally:
            self.to(restore)

    def push_to_hub(
        self,
        repo_id: str,
        *,
        commit_message: str = "Upload dsf-lightning model",
        private: bool = False,
        token: str | None = None,
        branch: str | None = None,
        **kwargs,
    ):
        """:meth:`save_pretrained` (``kwargs``: its folder parts and options) to a temporary folder, then
        :func:`dsf_lightning.hub.publish.push_to_hub` of it to ``repo_id`` at ``branch`` (default ``main``).
        Returns the commit (its ``.oid`` is the sha)."""
        with tempfile.TemporaryDirectory(prefix="dsf-push-") as tmp:
            folder = self.save_pretrained(Path(tmp) / repo_id.split("/")[-1], **kwargs)
            return push_to_hub(folder, repo_id, load=self._pretrained_format()[2], revision=branch or "main", token=token, private=private,
                               commit_message=commit_message)
