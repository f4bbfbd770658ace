"""Exact resume: where in the run a checkpoint was written, and whether it may resume here.

**Position.** :class:`~dsf_lightning.training.LanguageModelModule` writes ``checkpoint["dsf_position"]``:
the epoch, how many of its windows were trained (``0 .. windows``), the number of windows and whether the
validation that follows the epoch's last window has run. Lightning's own loop counters cannot say this
reliably: a checkpoint written after the last window of an epoch (``ModelCheckpoint(every_n_train_steps=...)``
writes it *before* that epoch's validation) resumes, in Lightning 2.x, as if the epoch and its validation were
done (the validation is lost), and the checkpoints written by such a resumed process hold epoch counters
that say the next epoch has not started, so a second resume trains that epoch again (past ``max_epochs``).
:func:`normalize_fit_loop` rewrites the loop counters of a checkpoint being loaded from the position into
the form an uninterrupted run would have written at that point:

* inside an epoch (``0 < trained < windows``): resume after window ``trained - 1``;
* after the last window, validation not yet run: run that validation first, then the epoch's end, then
  the next epoch (the run that was killed during validation resumes exactly);
* after the last window and its validation: the epoch's end, then the next epoch.

Checkpoints written before ``dsf_position`` existed get a position inferred from Lightning's counters
(:func:`infer_position`).

**Layout.** A resume continues the token streams where they stopped, with the carried state of every
stream: the corpus, the number of streams (``batch_size``) and the window length (``bptt``) must be those
of the checkpoint (:func:`data_fingerprint`, checked by :func:`check_data_fingerprint`; a mismatch is a
:class:`ResumeMismatchError` naming the old and new values). The number of processes may change: the
streams and the carried state are global (every rank reads its own block of them), so a resume on more or
fewer processes continues the same streams; only the dropout masks, seeded per rank, then differ from an
uninterrupted run (docs/train.md, "Several GPUs and nodes").
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any

import torch

__all__ = [
    "ResumeMismatchError",
    "check_data_fingerprint",
    "check_hyperparameters",
    "data_fingerprint",
    "infer_position",
    "normalize_fit_loop",
]

FRESH_RUN_ADVICE = (
    "a resume continues the run exactly as it was written; to train with other settings start a fresh run "
    "(without --ckpt_path), or start from these weights with --model.init_from (after exporting them with "
    "`dsf export`)"
)


class ResumeMismatchError(ValueError):
    """A checkpoint cannot resume with these settings (another corpus, stream layout or model options).
    The message names every difference (checkpoint value vs value now) and what to do."""


# ----------------------------------------------------------------------------------------------- layout
def tokens_sha256(tokens: torch.Tensor) -> str:
    """sha256 of a split's token ids (int64, in order): what the streams are made of."""
    data = tokens.detach().to("cpu", torch.int64).contiguous()
    return hashlib.sha256(data.numpy().tobytes()).hexdigest()


def data_fingerprint(corpus: Any, batch_size: int, bptt: int, eval_batch_size: int, world_size: int,
                     batching: str = "streams", seed: int = 0) -> dict[str, Any]:
    """What a resume must find unchanged: the corpus (name, vocabulary size, each split's token count and
    token sha256, and the sha256 of its files as ``load_corpus`` verified them) and the layout (streams, or
    padded sentences and the seed of their order: ``batching`` and ``seed`` are recorded only then, so a
    stream run's fingerprint is what it always was)."""
    splits = {name: {"tokens": int(t.numel()), "sha256": tokens_sha256(t)} for name, t in corpus.splits.items()}
    files = dict(getattr(corpus, "info", {}).get("files", {}) or {})
    return {
        "corpus": str(corpus.name),
        "vocab_size": len(corpus.vocab),
        "splits": splits,
        "files": files,
        "batch_size": int(batch_size),
        "bptt": int(bptt),
        "eval_batch_size": int(eval_batch_size),
        "world_size": int(world_size),
        **({"batching": str(batching), "seed": int(seed)} if batching != "streams" else {}),
    }


_LAYOUT_ADVICE = {
    "bptt": "the saved position is a window index and the carried state belongs to the token where the old windows stopped",
    "batch_size": "the streams are cut at other places and the carried state has one row per old stream",
    "batching": "the saved position is a window index of the other layout",
    "seed": "the sentences of the resumed epoch would come in another order",
}


def check_data_fingerprint(saved: Mapping[str, Any] | None, now: Mapping[str, Any], source: str = "the checkpoint") -> None:
    """Raise :class:`ResumeMismatchError` when ``now`` differs from ``saved`` in anything but the number of
    processes (``saved`` None: a checkpoint written before fingerprints existed, nothing to check)."""
    if not saved:
        return
    problems = []
    for key in ("batch_size", "bptt"):
        if key in saved and saved[key] != now[key]:
            problems.append(f"data.{key} is {now[key]} but {source} was written with {saved[key]} ({_LAYOUT_ADVICE[key]})")
    for key, default in (("batching", "streams"), ("seed", 0)):  # absent: a stream run, or one from before
        if saved.get(key, default) != now.get(key, default):
            problems.append(f"data.{key} is {now.get(key, default)} but {source} was written with "
                            f"{saved.get(key, default)} ({_LAYOUT_ADVICE[key]})")
    if "eval_batch_size" in saved and saved["eval_batch_size"] != now["eval_batch_size"]:
        problems.append(
            f"data.eval_batch_size is {now['eval_batch_size']} but {source} was written with {saved['eval_batch_size']} "
            "(validation perplexities would not be comparable with the ones already logged)"
        )
    if saved.get("corpus") != now["corpus"]:
        problems.append(f"data.corpus is {now['corpus']!r} but {source} was trained on {saved.get('corpus')!r}")
    elif saved.get("vocab_size") != now["vocab_size"]:
        problems.append(f"the corpus vocabulary has {now['vocab_size']} symbols but {source}'s had {saved.get('vocab_size')}")
    else:
        for split, old in sorted((saved.get("splits") or {}).items()):
            new = now["splits"].get(split)
            if new is None:
                problems.append(f"the corpus has no {split!r} split now ({source} had one of {old['tokens']:,} tokens)")
            elif new != old:
                changed = [f"{path}" for path, digest in (now.get("files") or {}).items()
                           if (saved.get("files") or {}).get(path) not in (None, digest)]
                what = f" (files changed: {', '.join(changed)})" if changed else ""
                problems.append(
                    f"the {split!r} split of corpus {now['corpus']!r} is not the one {source} was trained on: "
                    f"{new['tokens']:,} tokens, sha256 {new['sha256'][:12]}... now; {old['tokens']:,} tokens, "
                    f"sha256 {old['sha256'][:12]}... then{what}"
                )
    if problems:
        raise ResumeMismatchError(
            "cannot resume: " + "; ".join(problems) + ". Resume with the corpus and data options the run was started "
            "with, or " + FRESH_RUN_ADVICE.split("; ", 1)[1]
        )


# ----------------------------------------------------------------------------------------------- model options
# Options that never change what a resumed run computes.
IGNORED_HPARAMS = frozenset({"_instantiator", "_class_path"})
#: Options that decide which model is built: a recipe that leaves one of these out does not get the checkpoint's
#: value (as other options do) when it differs from the default, but a :class:`ResumeMismatchError` naming both
#: (the user asked for the default model and would silently train another one)
ARCHITECTURE_HPARAMS = ("cell", "hidden_sizes", "cell_options", "embedding_size", "tie_weights", "parameter_budget",
                        "init_from")


def check_hyperparameters(saved: Mapping[str, Any] | None, now: Mapping[str, Any], source: str = "the checkpoint",
                          defaulted: frozenset[str] | set[str] = frozenset()) -> None:
    """Raise :class:`ResumeMismatchError` listing every model option whose value now differs from the one
    the checkpoint was written with (a resume would silently train another model, or load weights of
    another shape). Options the checkpoint does not know (added to the library later) are not compared.
    ``defaulted``: the options of ``now`` that the recipe left at their default (the message says so, and
    how to resume)."""
    if not saved:
        return
    differ = [
        f"model.{key}: {now[key]!r} now{' (the default: the recipe leaves it out)' if key in defaulted else ''}, "
        f"{saved[key]!r} in {source}"
        for key in sorted(saved)
        if key in now and key not in IGNORED_HPARAMS and _plain(now[key]) != _plain(saved[key])
    ]
    if differ:
        hint = ""
        if any(key in defaulted for key in saved if key in now and _plain(now[key]) != _plain(saved[key])):
            hint = "to resume this run, set the options the recipe leaves out to the checkpoint's values; "
        raise ResumeMismatchError("cannot resume with other model options (" + "; ".join(differ) + "): " + hint + FRESH_RUN_ADVICE)


def _plain(value: Any) -> Any:
    """Compare containers by value (jsonargparse Namespaces, tuples vs lists, ints vs equal floats)."""
    if isinstance(value, Mapping) or hasattr(value, "as_dict"):
        value = value.as_dict() if hasattr(value, "as_dict") else value
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# ----------------------------------------------------------------------------------------------- position
def infer_position(checkpoint: Mapping[str, Any], windows: int) -> dict[str, Any] | None:
    """The position of a checkpoint written before ``dsf_position`` existed, from Lightning's counters
    (None when they cannot say). Written at ``on_train_batch_end``, the window is trained, its later hooks
    (and, after the last window, the validation) not yet run."""
    try:
        fit = checkpoint["loops"]["fit_loop"]
        batches = fit["epoch_loop.batch_progress"]["current"]
        epoch = int(checkpoint["epoch"])
    except (KeyError, TypeError, ValueError):
        return None
    trained = int(batches["processed"])
    if not 0 <= trained <= windows:
        return None
    return {
        "epoch": epoch,
        "trained": trained,
        "windows": windows,
        "validated": trained == windows and batches["completed"] == batches["processed"],
        "global_step": int(checkpoint.get("global_step", 0)),
    }


def _tracker(ready: int, started: int, processed: int, completed: int) -> dict[str, int]:
    return {"ready": ready, "started": started, "processed": processed, "completed": completed}


def normalize_fit_loop(checkpoint: dict[str, Any], position: Mapping[str, Any], validation_due: bool) -> None:
    """Rewrite ``checkpoint["loops"]["fit_loop"]`` (in place) into the counters an uninterrupted Lightning
    run has at ``position`` (see the module docstring); ``validation_due``: the epoch ends with a
    validation (``check_val_every_n_epoch``). The training loader resumes at window ``trained`` of the
    epoch, or at 0 of the next one."""
    loops = checkpoint.get("loops")
    if not isinstance(loops, dict) or not isinstance(loops.get("fit_loop"), dict):
        return
    fit = copy.deepcopy(loops["fit_loop"])
    epoch, trained, windows = int(position["epoch"]), int(position["trained"]), int(position["windows"])
    epochs = fit.get("epoch_progress", {})
    ended = int(epochs.get("current", {}).get("processed", epoch)) > epoch  # saved in on_train_epoch_end or later
    if ended:  # the epoch's end hooks ran (also when max_steps stopped it early): the next pass starts at 0
        trained = 0
    loader = {"start": trained % max(windows, 1), "trained": trained, "windows": windows}
    saved = fit.get("state_dict", {}).get("combined_loader")
    if isinstance(saved, list) and len(saved) == 1 and isinstance(saved[0], dict) and "epoch" in saved[0]:
        loader["epoch"] = saved[0]["epoch"]  # the pass's epoch (sentence batches: the order it resumes in)
    fit.setdefault("state_dict", {})["combined_loader"] = [loader]
    if ended or trained == 0 or (trained == windows and not validation_due):
        # Lightning's own counters resume these right: an epoch that ended goes on with the next one, and
        # so does a checkpoint after the last window of an epoch that has no validation
        loops["fit_loop"] = fit
        return
    in_epoch = _tracker(epoch + 1, epoch + 1, epoch, epoch)
    fit["epoch_progress"] = {"total": dict(in_epoch), "current": dict(in_epoch)}
    batches = fit["epoch_loop.batch_progress"]
    total = int(batches["total"]["processed"])
    if trained < windows:  # after window trained - 1, at its on_train_batch_end
        batches["current"] = _tracker(trained, trained, trained, trained - 1)
        batches["total"] = _tracker(total, total, total, total - 1)
        batches["is_last_batch"] = False
    else:  # the epoch's training is done: its validation is pending, or has run
        batches["current"] = _tracker(windows, windows, windows, windows)
        batches["total"] = _tracker(total, total, total, total)
        batches["is_last_batch"] = True
        val = fit.get("epoch_loop.val_loop.batch_progress")
        if isinstance(val, dict):
            n = max(int(val["total"]["completed"]), 1)
            # pending: "restarted during validation, before its first batch" makes Lightning run all of it
            counts = _tracker(n, n, n, n) if position.get("validated") else _tracker(1, 1, 0, 0)
            val["total"], val["current"] = dict(counts), dict(counts)
            val["is_last_batch"] = bool(position.get("validated"))
    loops["fit_loop"] = fit
