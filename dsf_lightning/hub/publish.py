"""Publish a pretrained folder to the Hugging Face Hub (or any server speaking its protocol).

The folder is loaded first with the strict loader the caller passes (``load``: the model class's own, or
:func:`dsf_lightning.auto.load_folder` for whichever kind the folder holds), so a broken folder is never published;
then ``HfApi.create_repo(exist_ok=True)``, ``create_branch`` for a revision other than ``main``, and
``upload_folder`` of exactly the folder's model files (stray files such as editor backups or hidden temporary
folders are not uploaded). ``HF_ENDPOINT`` / ``HF_TOKEN`` apply as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from .folder import CARD_FILE, CONFIG_FILE, MODEL_FILES, PretrainedFormatError, _read_format_config

logger = logging.getLogger(__name__)

UPLOADED = MODEL_FILES


def _uploadable(folder: Path) -> list[str]:
    """The model files ``folder`` holds; a symlink among them that leads outside the folder is refused
    (:class:`PretrainedFormatError`): the upload would send its target, whatever file that is."""
    root = folder.resolve()
    present = []
    for name in UPLOADED:
        path = folder / name
        if path.is_symlink():
            try:
                target = path.resolve()
            except (OSError, RuntimeError) as err:  # a loop (RuntimeError before Python 3.13)
                raise PretrainedFormatError(f"{path}: is a symbolic link that cannot be followed ({err}): refusing "
                                            "to push; replace it with the file") from None
            if not target.is_relative_to(root):
                raise PretrainedFormatError(
                    f"{path}: is a symbolic link to {target}, outside the folder: refusing to push (the upload would "
                    "send that file); replace the link with a copy of the file if it belongs to the model"
                )
        if path.is_file():
            present.append(name)
    return present


def _recorded(folder: Path, present: list[str]) -> list[str]:
    """Of ``present``, what the (loaded, so valid) folder vouches for: config.json, the card, and the files
    config.json records with their checksums (an unrecorded tokenizer.json dropped in is never uploaded)."""
    files = _read_format_config(folder / CONFIG_FILE).get("files")
    recorded = set(files) if isinstance(files, dict) else set()
    kept = [name for name in present if name in (CONFIG_FILE, CARD_FILE) or name in recorded]
    for name in sorted(set(present) - set(kept)):
        logger.warning("%s: not recorded in %s (no checksum): not uploaded", folder / name, CONFIG_FILE)
    return kept


def push_to_hub(
    folder,
    repo_id: str,
    *,
    load: Callable,
    revision: str = "main",
    token: str | None = None,
    private: bool = False,
    commit_message: str = "Upload dsf-lightning model",
    endpoint: str | None = None,
) -> str:
    """Validate ``folder`` (``load(folder)``: a strict folder loader) and upload it to ``repo_id`` at branch
    ``revision``. :func:`dsf_lightning.auto.push_to_hub` passes the loader of whichever kind the folder holds.

    Returns the commit URL (a ``huggingface_hub.CommitInfo``, a ``str`` whose ``.oid`` is the commit
    sha: pin that sha as the published revision). Raises
    :class:`~dsf_lightning.hub.PretrainedFormatError` for a folder that does not load, and
    huggingface_hub's HTTP errors for the Hub's refusals.
    """
    from huggingface_hub import HfApi

    folder = Path(folder).expanduser()
    present = _uploadable(folder)  # before anything is read: no file outside the folder is ever opened
    pretrained = load(folder)  # raises PretrainedFormatError: never publish a broken folder
    present = _recorded(folder, present)
    if "/" not in repo_id:
        raise ValueError(f"repo_id must be 'owner/name', got {repo_id!r}")
    api = HfApi(endpoint=endpoint, token=token, library_name="dsf-lightning")
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    if revision != "main":
        api.create_branch(repo_id, branch=revision, repo_type="model", exist_ok=True)
    commit = api.upload_folder(
        repo_id=repo_id,
        folder_path=str(folder),
        repo_type="model",
        revision=revision,
        commit_message=commit_message,
        allow_patterns=present,
    )
    logger.info(
        "pushed %s (%s %s, %d parameters) to %s@%s: %s", folder, type(pretrained.model).__name__,
        pretrained.config["cell"] if isinstance(pretrained.config, dict) else pretrained.config.cell,
        sum(p.numel() for p in pretrained.model.parameters()), repo_id, revision, commit,
    )
    return commit
