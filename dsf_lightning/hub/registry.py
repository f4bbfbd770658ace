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

:func:`load` reads what it resolved by the folder's ``task`` (config.json): ``task="language-model"`` (the
default, what the Scorer and ``RecurrentLM.from_pretrained`` ask for) or ``"text-classification"`` reads that
kind only and raises :class:`~._folder.WrongTaskError` naming the right loader for the other;
``task="auto"`` returns whichever the folder holds (:class:`~.format.Pretrained` or
:class:`~.classifier.PretrainedClassifier`).
"""

from __future__ import annotations

import difflib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from ._folder import AUTO, LANGUAGE_MODEL, TASKS, TEXT_CLASSIFICATION

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

    from .format import MODEL_FILES

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


def list_models() -> list[dict]:
    """The published models: name, task, repo_id, revision, source ("bundled (path)" or "hub"), description,
    and, where a copy is here (bundled, or in the Hub cache), what its folder says (:func:`folder_summary`):
    metric, value, parameters, size_bytes (None where unknown)."""
    rows = []
    for name, published in sorted(PUBLISHED.items()):
        folder = published.bundled_path if published.is_bundled else _cached(published)
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


def _cached(published: PublishedModel) -> Path | None:
    """The Hub cache's copy of a published model, if one was downloaded (nothing is fetched)."""
    try:
        return download(published.repo_id, published.revision, local_files_only=True)
    except ModelDownloadError:
        return None


#: the headline metric of each kind, in order of preference (the model-index's metric types)
HEADLINE = {LANGUAGE_MODEL: ("perplexity", "bpc"), TEXT_CLASSIFICATION: ("accuracy",)}


def folder_summary(folder: Path) -> dict:
    """What ``dsf list models`` shows of a model folder: ``task``, ``metric`` (e.g. ``"test perplexity"``) and
    ``value`` (the card's model-index: its first test-split result of the kind's headline metric, static
    evaluation), ``parameters`` (of the model config.json describes, tied weights once) and ``size_bytes``
    (the folder's files). A folder that cannot be read gives ``metric="unreadable"``."""
    from ._folder import (
        CARD_FILE,
        CONFIG_FILE,
        PretrainedFormatError,
        _read_json,
        folder_task,
    )

    folder = Path(folder)
    out: dict = {"size_bytes": sum(p.stat().st_size for p in folder.iterdir() if p.is_file())}
    try:
        task = folder_task(folder)
        config = _read_json(folder / CONFIG_FILE)
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
        from ..tasks.modules import SequenceClassifier
        from .classifier import ARCHITECTURE

        module = SequenceClassifier(**{k: model[k] for k in ARCHITECTURE})
    else:
        from ..model import LMConfig, RecurrentLM

        module = RecurrentLM(LMConfig.from_dict(model))
    return sum(p.numel() for p in module.parameters())


def load_folder(folder, *, task: str = LANGUAGE_MODEL, dtype=None):
    """Load the model folder ``folder`` strictly: :func:`~.format.load_pretrained` for a language model,
    :func:`~.classifier.load_classifier` for a text classifier; ``task`` (see the module docstring) says which
    kinds are accepted."""
    if task != AUTO and task not in TASKS:
        raise ValueError(f"task must be one of {[*TASKS, AUTO]}, got {task!r}")
    from ._folder import check_folder, folder_task

    if task == AUTO:
        task = folder_task(check_folder(folder))
    if task == TEXT_CLASSIFICATION:
        from .classifier import load_classifier

        return load_classifier(folder, dtype=dtype)
    from .format import load_pretrained

    return load_pretrained(folder, dtype=dtype)


def load(name_or_path, *, revision: str | None = None, dtype=None, task: str = LANGUAGE_MODEL, **hub):
    """:func:`resolve` (``revision`` and the other :data:`HUB_KEYWORDS`) then :func:`load_folder` (``dtype``,
    ``task``: ``"language-model"`` (default), ``"text-classification"`` or ``"auto"``)."""
    from .format import resolve_dtype

    check_keywords("load", {k: v for k, v in hub.items() if k not in HUB_KEYWORDS}, (*HUB_KEYWORDS, "dtype", "task"))
    if task != AUTO and task not in TASKS:
        raise ValueError(f"task must be one of {[*TASKS, AUTO]}, got {task!r}")
    dtype = resolve_dtype(dtype)  # a bad dtype fails before any download
    return load_folder(resolve(name_or_path, revision, **hub), task=task, dtype=dtype)
