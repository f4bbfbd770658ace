"""``from_pretrained`` / ``save_pretrained`` / ``push_to_hub`` on the model class itself, in the shape of
huggingface_hub's ``PyTorchModelHubMixin`` but with this library's strict folder format (the mixin's own
loading is not strict: it keeps random weights for renamed keys).

>>> model = RecurrentLM.from_pretrained("delta-rnn-ptb")      # doctest: +SKIP
>>> model.save_pretrained("my-model")                          # doctest: +SKIP
>>> model.push_to_hub("me/my-model")                           # doctest: +SKIP

Kept apart from :mod:`dsf_lightning.hub` (imported lazily) because the hub's format module imports the model.
"""

from __future__ import annotations

import tempfile
from pathlib import Path


class PretrainedModelMixin:
    """Adds Hub-style loading and saving to :class:`~dsf_lightning.model.RecurrentLM`.

    A model from :meth:`from_pretrained` keeps the folder's vocabulary, tokenizer, info and text normalizer
    as plain attributes (``vocab``, ``tokenizer``, ``pretrained_info``, ``pretrained_normalize``; not in its
    ``state_dict``), so :meth:`save_pretrained` writes the same folder back.
    """

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
        """The model of a published name, a Hub repo id (``owner/name``) or a local folder, loaded strictly
        (:func:`dsf_lightning.hub.format.load_pretrained`), in eval mode.

        ``revision``, ``cache_dir``, ``force_download``, ``local_files_only``, ``token``: as in
        huggingface_hub, for the download (``snapshot_download`` of the model's files only). ``device``:
        where to put the model (default CPU). ``dtype``: ``torch.float16`` / ``torch.bfloat16`` /
        ``torch.float32`` or its name; the weights are cast after the strict load.
        """
        from .hub.registry import HUB_KEYWORDS, check_keywords, load

        check_keywords(f"{cls.__name__}.from_pretrained", unknown, (*HUB_KEYWORDS, "device", "dtype"))
        pretrained = load(
            pretrained_model_name_or_path, revision=revision, dtype=dtype, cache_dir=cache_dir,
            force_download=force_download, local_files_only=local_files_only, token=token,
        )
        model = pretrained.model
        if not isinstance(model, cls):
            raise TypeError(f"the folder holds a {type(model).__name__}, not a {cls.__name__}")
        model.vocab, model.tokenizer, model.pretrained_info = pretrained.vocab, pretrained.tokenizer, pretrained.info
        model.pretrained_normalize = getattr(pretrained, "normalize", None)
        if device is not None:
            model.to(device)
        return model

    def _as_pretrained(self, vocab=None, tokenizer=None, info=None, normalize=None):
        from .hub.format import Pretrained

        vocab = vocab if vocab is not None else getattr(self, "vocab", None)
        tokenizer = tokenizer if tokenizer is not None else getattr(self, "tokenizer", None)
        if vocab is None or tokenizer is None:
            raise ValueError(
                f"this {type(self).__name__} has no vocabulary / tokenizer to save with it (it was not loaded with "
                "from_pretrained): pass vocab= and tokenizer= (e.g. a corpus's .vocab and .tokenizer)"
            )
        info = info if info is not None else getattr(self, "pretrained_info", None)
        normalize = normalize if normalize is not None else getattr(self, "pretrained_normalize", None)
        return Pretrained(model=self, vocab=vocab, tokenizer=tokenizer, info=dict(info or {}), normalize=normalize)

    def save_pretrained(self, save_directory, *, vocab=None, tokenizer=None, info=None, normalize=None, **options) -> Path:
        """Write the model folder ``dsf export`` writes (config.json, model.safetensors, vocab.json,
        dsf_tokenizer.json, tokenizer.json where exact, README.md) to ``save_directory``; returns its path.

        ``vocab`` / ``tokenizer`` / ``info`` / ``normalize`` (the text normalizer's name, e.g. ``"ptb"``):
        default to those :meth:`from_pretrained` kept. ``options``:
        those of :func:`dsf_lightning.hub.format.save_pretrained` (``dtype``, ``eval_results``, ``card_extra``).
        The weights are saved in float32 (or ``dtype="float16"``) whatever dtype the model runs in.
        """
        from .hub.format import save_pretrained

        pretrained = self._as_pretrained(vocab, tokenizer, info, normalize)
        restore = next(self.parameters()).dtype
        try:
            self.float()  # the folder stores float32 (or float16) weights
            return save_pretrained(pretrained, save_directory, **options)
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
        vocab=None,
        tokenizer=None,
        info=None,
        normalize=None,
        **options,
    ):
        """:meth:`save_pretrained` to a temporary folder, then :func:`dsf_lightning.hub.publish.push_to_hub`
        of it to ``repo_id`` at ``branch`` (default ``main``). Returns the commit (its ``.oid`` is the sha)."""
        from .hub.publish import push_to_hub

        with tempfile.TemporaryDirectory(prefix="dsf-push-") as tmp:
            folder = self.save_pretrained(Path(tmp) / repo_id.split("/")[-1], vocab=vocab, tokenizer=tokenizer, info=info,
                                          normalize=normalize, **options)
            return push_to_hub(folder, repo_id, revision=branch or "main", token=token, private=private,
                               commit_message=commit_message)
