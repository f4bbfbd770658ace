"""Published model names and where a name, path or repo id is found (:func:`resolve`).

Order of :func:`resolve`:

1. an existing local folder;
2. a short published name (:data:`PUBLISHED`): the copy bundled in the package
   (``dsf_lightning/pretrained/<bundled>/``) if it is there, else its Hub repo at the pinned revision
   (also when another ``revision`` is asked for explicitly);
3. a Hub repo id ``owner/name``: ``huggingface_hub.snapshot_download`` of the model's files only
   (honours ``HF_ENDPOINT``, ``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE``: offline, a cached snapshot is used).

The download keywords of huggingface_hub (:data:`HUB_KEYWORDS`: ``revision``, ``cache_dir``,
``force_download``, ``local_files_only``, ``token``) go to ``snapshot_download``; a local folder or the
bundled copy of a published name is not downloaded, so they do nothing there (``revision`` other than
the pinned one does download a published name).

A short name that is neither published nor a folder raises :class:`UnknownModelError` listing the
known names.

Reading what was resolved is the model's business (``RecurrentLM.from_pretrained``, ``Scorer``,
:func:`dsf_lightning.auto.load` for either kind): the hub knows names and files, not models.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .folder import LANGUAGE_MODEL, TEXT_CLASSIFICATION, resolve_dtype

logger = logging.getLogger(__name__)

BUNDLED_ROOT = Path(__file__).resolve().parent.parent / "pretrained"
HUB_KEYWORDS = ("revision", "cache_dir", "force_download", "local_files_only", "token")
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class UnknownModelError(KeyError):
    """A short model name that is not published (the message lists the known names)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class ModelDownloadError(OSError):
    """A model could not be fetched from the Hub (offline and not cached, repo or revision missing...)."""


@dataclass(frozen=True)
class PublishedModel:
    """A released model: its Hub repo, the pinned revision (a commit sha once published; ``None`` means
    the ``main`` branch until then), the folder name of the copy bundled in the package and what it is
    (``task``: ``language-model`` or ``text-classification``)."""

    repo_id: str
    revision: str | None = None
    bundled: str | None = None
    description: str = ""
    task: str = LANGUAGE_MODEL

    @property
    def bundled_path(self) -> Path | None:
        return BUNDLED_ROOT / self.bundled if self.bundled else None

    @property
    def is_bundled(self) -> bool:
        path = self.bundled_path
        return path is not None and (path / "config.json").is_file()


PUBLISHED: dict[str, PublishedModel] = {
    "delta-rnn-ptb": PublishedModel(
        repo_id="dsf-lightning/delta-rnn-ptb",
        revision=None,  # pinned to the commit sha when published
        bundled="delta-rnn-ptb",
        description="word-level Delta-RNN on the Penn Treebank (10k words); scores perplexity",
    ),
    "delta-rnn-ptb-char": PublishedModel(
        repo_id="dsf-lightning/delta-rnn-ptb-char",
        revision=None,  # pinned to the commit sha when published
        bundled="delta-rnn-ptb-char",
        description="character-level Delta-RNN on the Penn Treebank characters; scores bits per character",
    ),
    "lstm-ptb": PublishedModel(
        repo_id="dsf-lightning/lstm-ptb",
        revision=None,  # pinned to the commit sha when published
        bundled="lstm-ptb",
        description="word-level LSTM on the Penn Treebank: delta-rnn-ptb's baseline (same parameters, recipe and budget)",
    ),
    "sr-lstm-p-imdb": PublishedModel(
        repo_id="dsf-lightning/sr-lstm-p-imdb",
        revision=None,  # pinned to the commit sha when published
        bundled="sr-lstm-p-imdb",
        description="sr-LSTM-p (k = 10) sentiment classifier of IMDB reviews (sr-RNN paper sec. 4.3); reports accuracy",
        task=TEXT_CLASSIFICATION,
    ),
}


def _unknown(name: str) -> UnknownModelError:
    known = sorted(PUBLISHED)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return UnknownModelError(
        f"unknown model {name!r}: not a local folder, not a published name and not a Hub repo id (owner/name).{hint} "
        f"Published models: {', '.join(known)} (see `dsf list models`)"
    )


def _looks_like_path(text: str) -> bool:
    return text.startswith(("/", "./", "../", "~", "\\")) or text.endswith(("/", "\\")) or text.count("/") > 1 or "\\" in text


def check_keywords(where: str, unknown: dict, accepted) -> None:
    """A TypeError naming ``unknown`` keyword arguments of ``where`` and the accepted ones."""
    if unknown:
        names = ", ".join(repr(k) for k in sorted(unknown))
        raise TypeError(f"{where}() got unexpected keyword argument(s) {names}; it accepts: {', '.join(accepted)}")


def download(
    repo_id: str,
    revision: str | None = None,
    *,
    cache_dir=None,
    force_download: bool = False,
    local_files_only: bool = False,
    token: str | bool | None = None,
) -> Path:
    """``snapshot_download`` of a model repo's files (``allow_patterns``: the model folder's files only),
    with errors turned into :class:`ModelDownloadError`."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        IncompleteSnapshotError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    from .folder import MODEL_FILES

    where = f"{repo_id}@{revision or 'main'} from {constants.ENDPOINT}"
    try:
        return Path(snapshot_download(
            repo_id, revision=revision, repo_type="model", allow_patterns=list(MODEL_FILES), cache_dir=cache_dir,
            force_download=force_download, local_files_only=local_files_only, token=token,
        ))
    except RevisionNotFoundError:
        raise ModelDownloadError(f"cannot download {where}: the repo has no revision {revision!r}") from None
    except RepositoryNotFoundError:
        raise ModelDownloadError(
            f"cannot download {where}: no such repo (or it is private: log in with `hf auth login` / set HF_TOKEN)"
        ) from None
    except IncompleteSnapshotError:
        raise ModelDownloadError(
            f"cannot download {where}: the cached copy is incomplete and the Hub cannot be reached; go online to complete it"
        ) from None
    except LocalEntryNotFoundError:
        cache = cache_dir if cache_dir is not None else constants.HF_HUB_CACHE
        if local_files_only:
            raise ModelDownloadError(
                f"cannot load {where}: local_files_only=True and it is not in the cache {cache}; download it once "
                "without local_files_only (or pass the cache_dir it was downloaded to, or a local folder)"
            ) from None
        why = ("HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the Hub cannot be reached")
        raise ModelDownloadError(
            f"cannot download {where}: {why} and it is not in the cache {cache}; "
            "go online (unset HF_HUB_OFFLINE), point HF_ENDPOINT at a mirror, or pass a local folder"
        ) from None
    except (EntryNotFoundError, HfHubHTTPError, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelDownloadError(f"cannot download {where}: {first}") from None


def resolve(name_or_path, revision: str | None = None, **hub) -> Path:
    """The local folder holding the model ``name_or_path`` (see the module docstring for the order).
    ``hub``: ``cache_dir``, ``force_download``, ``local_files_only``, ``token`` (for a download only)."""
    check_keywords("resolve", {k: v for k, v in hub.items() if k not in HUB_KEYWORDS}, HUB_KEYWORDS)
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if text in PUBLISHED:
        published = PUBLISHED[text]
        if revision is None or revision == published.revision:
            if published.is_bundled:
                return published.bundled_path
            revision = published.revision
            if revision is None:
                logger.warning("%s is not pinned to a revision yet: downloading the main branch of %s", text, published.repo_id)
        return download(published.repo_id, revision, **hub)
    if _looks_like_path(text) or isinstance(name_or_path, Path):
        raise FileNotFoundError(f"{text}: no such model folder")
    if "/" not in text:
        raise _unknown(text)
    if not REPO_ID.match(text):
        raise UnknownModelError(f"{text!r} is not a local folder and not a valid Hub repo id (owner/name)")
    return download(text, revision, **hub)


def cached_copy(published: PublishedModel) -> Path | None:
    """The Hub cache's copy of a published model, if one was downloaded (nothing is fetched)."""
    try:
        return download(published.repo_id, published.revision, local_files_only=True)
    except ModelDownloadError:
        return None


def dtype_argument(where: str, dtype, unknown: dict):
    """``dtype``, or ``torch_dtype`` (popped from ``unknown``: the name transformers' ``from_pretrained`` uses) as its
    alias; both given and different is a TypeError."""
    if "torch_dtype" not in unknown:
        return dtype
    alias = unknown.pop("torch_dtype")
    if dtype is not None and alias is not None and resolve_dtype(dtype) != resolve_dtype(alias):
        raise TypeError(f"{where}() got dtype={dtype!r} and torch_dtype={alias!r}: torch_dtype is another name for dtype, give one")
    return alias if dtype is None else dtype


def load_with(load_folder: Callable, name_or_path, *, revision: str | None = None, dtype=None, device=None, **hub):
    """``load_folder(folder, dtype=...)`` (a model kind's strict folder loader) of what :func:`resolve` finds for
    ``name_or_path`` (``revision`` and the other :data:`HUB_KEYWORDS`); a bad ``dtype`` or a ``device`` this machine
    lacks (:func:`~dsf_lightning._machine.check_device`: ``cuda`` on a CPU build) fails before any download."""
    dtype = resolve_dtype(dtype)
    if device is not None:
        from .._machine import check_device

        check_device(device)
    return load_folder(resolve(name_or_path, revision, **hub), dtype=dtype)
