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

from ._folder import MODEL_FILES

logger = logging.getLogger(__name__)

UPLOADED = MODEL_FILES


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
    pretrained = load(folder)  # raises PretrainedFormatError: never publish a broken folder
    if "/" not in repo_id:
        raise ValueError(f"repo_id must be 'owner/name', got {repo_id!r}")
    api = HfApi(endpoint=endpoint, token=token, library_name="dsf-lightning")
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    if revision != "main":
        api.create_branch(repo_id, branch=revision, repo_type="model", exist_ok=True)
    present = [name for name in UPLOADED if (folder / name).is_file()]
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
