"""A ``SequenceClassifier`` checkpoint -> a text-classifier folder (:mod:`dsf_lightning.tasks.pretrained`).

The data section of the run's recipe (or LightningCLI ``config.yaml``) rebuilds the task DataModule, whose
vocabulary and tokenizer go into the folder; ``evaluate`` scores its test sets with the weights exactly as
stored, and ``prototypes`` adds the centroids' prototypical words of an sr-RNN (sr-RNN paper Table 6) to the card.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..data.tokenizers import get_tokenizer
from ..hub.folder import CheckpointError, jsonable, load_state, match_state, plain_json, round_to_storage
from ..tasks.pretrained import (
    ARCHITECTURE,
    PROTOTYPE_MIN_COUNT,
    PROTOTYPE_TOP,
    SPECIAL_SYMBOLS,
    TEXT_INPUTS,
    PretrainedClassifier,
    build_classifier,
    check_max_length,
    default_max_length,
    describe,
    save_classifier,
)
from ..training.read_checkpoint import checkpoint_weights, cli_configs, load_checkpoint, read_cli_config, sequence_module_name

logger = logging.getLogger(__name__)


def _task_datamodules() -> dict[str, type]:
    """The task DataModules a recipe's ``data.class_path`` may name, by every spelling of their path."""
    from ..tasks.catalog import list_tasks

    names: dict[str, type] = {}
    for task in list_tasks():
        cls = task.datamodule
        for name in (f"{cls.__module__}.{cls.__name__}", f"dsf_lightning.tasks.{cls.__name__}", cls.__name__):
            names[name] = cls
    return names


def _task_name(cls: type) -> str:
    from ..tasks.catalog import list_tasks

    return next((t.name for t in list_tasks() if t.datamodule is cls), cls.__name__)


def _shown_path(path: Path) -> str:
    """``path`` as recorded in info (meant for publishing: relative to the working directory, else its last
    parts, never an absolute local path)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(Path(*path.parts[-3:]))


def _data_section(path: Path, hparams: dict, recipe) -> tuple[dict, Path]:
    """The ``data:`` section (``class_path`` + ``init_args``) that built the training data: from ``recipe`` when
    given, else from the LightningCLI config.yaml of the run (:func:`~dsf_lightning.training.read_checkpoint.cli_configs`) whose model agrees
    with the checkpoint's hyper-parameters."""
    if recipe is not None:
        candidate = Path(recipe).expanduser()
        if not candidate.is_file():
            raise CheckpointError(f"{candidate}: no such recipe file")
        data = read_cli_config(candidate)
        section = data.get("data") if data else None
        if not (isinstance(section, dict) and section.get("class_path")):
            raise CheckpointError(f"{candidate}: not a task recipe: it needs a data: section with a class_path (a task "
                                  "DataModule of dsf_lightning.tasks, e.g. IMDBSentimentDataModule)")
        return section, candidate
    for candidate in cli_configs(path):
        data = read_cli_config(candidate) or {}
        section, model = data.get("data"), data.get("model")
        if not (isinstance(section, dict) and section.get("class_path")):
            continue
        given = model.get("init_args", {}) if isinstance(model, dict) else {}
        clash = [k for k in ("cell", "hidden_size", "embedding_size") if k in given and given[k] != hparams.get(k)]
        if clash:
            logger.info("skipping %s: its model differs from the checkpoint's in %s", candidate, clash)
            continue
        logger.info("data settings from %s", candidate)
        return section, candidate
    raise CheckpointError(
        f"{path}: cannot tell which data the classifier was trained on (no LightningCLI config.yaml beside the "
        "checkpoint or in its logger's version_*/ folder); name the recipe it was trained with: "
        "`dsf export CKPT OUT --recipe recipes/imdb_sentiment/sr_lstm_p.yaml` (recipe=...)"
    )


def _datamodule(section: dict, source: Path, data_root) -> tuple[Any, dict]:
    """The task DataModule ``section`` describes, built only from the allowed classes, and its settings."""
    import inspect

    classes = _task_datamodules()
    class_path = section.get("class_path")
    cls = classes.get(class_path) if isinstance(class_path, str) else None
    if cls is None:
        allowed = sorted({c.__name__ for c in classes.values()})
        raise CheckpointError(f"{source}: data.class_path {class_path!r:.120} is not a task DataModule of dsf_lightning.tasks "
                              f"(one of {', '.join(allowed)}); a classifier folder is exported from those only")
    args = section.get("init_args") or {}
    if not isinstance(args, dict):
        raise CheckpointError(f"{source}: data.init_args must be a mapping of {cls.__name__}'s arguments")
    args = dict(args)
    if data_root is not None:
        if "data_root" not in inspect.signature(cls).parameters:
            raise CheckpointError(f"--data-root / data_root: {cls.__name__} reads no files (it generates its data)")
        args["data_root"] = str(data_root)
    try:
        return cls(**args), args
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{source}: {cls.__name__}({', '.join(args)}) cannot be built: {err}") from None


def classifier_from_checkpoint(
    ckpt_path,
    *,
    recipe=None,
    data_root=None,
    info: dict | None = None,
    max_length: int | None = None,
    weights: str = "auto",
) -> tuple[PretrainedClassifier, Any]:
    """A :class:`PretrainedClassifier` (and its DataModule) from a ``SequenceClassifier`` checkpoint of ``dsf fit``.

    The checkpoint is read with ``torch.load(weights_only=True)``; the architecture comes from its
    ``hyper_parameters``, the weights from its ``state_dict`` (checked strictly). The vocabulary, label names,
    normalizer and tokenizer come from the task DataModule the training used: the ``data:`` section of
    ``recipe`` when given, else of the run's LightningCLI ``config.yaml`` (beside the checkpoint or in its
    logger's ``version_*/`` folder); ``data_root`` overrides where its files are. ``max_length``: symbols read
    per text (default: the rule of the module docstring). ``info`` is merged over what is recorded
    automatically (task, data settings, checkpoint epoch/step, training settings).
    """
    path = Path(ckpt_path).expanduser()
    ckpt = load_checkpoint(path, "SequenceClassifier")
    kind = sequence_module_name(ckpt)
    if kind is None:
        raise CheckpointError(f"{path}: not a SequenceClassifier checkpoint (a language model's? export it with `dsf export` "
                              "with --corpus, or dsf_lightning.hub.export_checkpoint)")
    if kind != "SequenceClassifier":
        raise CheckpointError(f"{path}: holds a {kind} (one class per step); only SequenceClassifier models (one class per "
                              "text) have a hub folder")
    hparams = ckpt["hyper_parameters"]
    arch = {k: hparams.get(k) for k in ARCHITECTURE}
    arch["cell_options"] = dict(arch["cell_options"] or {})
    if arch["input_mode"] not in TEXT_INPUTS:
        raise CheckpointError(f"{path}: the classifier reads input_mode={arch['input_mode']!r} features, not text: a classifier "
                              "folder holds text classifiers only")
    fix = "was the checkpoint written by SequenceClassifier with a cell this installation provides?"
    model, expected = build_classifier(arch, path, error=CheckpointError, fix=fix)
    state_dict, which_weights = checkpoint_weights(ckpt, path, weights)  # the average a PolyakAveraging run validated
    state = match_state(dict(state_dict), {}, expected, describe(arch), f"{path} (state_dict)",
                        described_by="its hyper_parameters", error=CheckpointError, fix=fix)
    load_state(model, state)

    section, source = _data_section(path, hparams, recipe)
    datamodule, args = _datamodule(section, source, data_root)
    if getattr(datamodule, "text_tokenizer", None) is None or getattr(datamodule, "task", "classification") != "classification":
        raise CheckpointError(f"{source}: {type(datamodule).__name__}'s inputs are not text: a classifier folder holds text "
                              "classifiers only")
    vocab = datamodule.prepare_vocab() if hasattr(datamodule, "prepare_vocab") else datamodule.vocab
    if vocab is None or len(vocab) != arch["vocab_size"]:
        raise CheckpointError(
            f"{path}: the model has vocab_size={arch['vocab_size']} but the {type(datamodule).__name__} of {source} gives "
            f"{len(vocab) if vocab is not None else 0} symbols: wrong recipe or data (its data options, e.g. max_vocab, "
            "must be the ones the model was trained with)"
        )
    labels = list(getattr(datamodule, "label_names", None) or [str(i) for i in range(arch["num_classes"])])
    if len(labels) != arch["num_classes"]:
        labels = [str(i) for i in range(arch["num_classes"])]
    if getattr(datamodule, "pad_to_cut", False):
        raise CheckpointError(
            f"{path}: the data of {source} pads short reviews to their cut (pad_to_cut: true), but a classifier "
            "folder reads a text as it is, unpadded, so its card would report an accuracy it does not have: "
            "export with the recipe's pad_to_cut set to false"
        )
    if max_length is not None and not check_max_length(max_length):
        raise ValueError(f"max_length must be a positive integer, got {max_length!r}")
    training = {k: v for k, v in hparams.items() if k not in ARCHITECTURE and not k.startswith("_")}
    recorded = {
        "corpus": _task_name(type(datamodule)),
        "datamodule": type(datamodule).__name__,
        "data": jsonable({k: v for k, v in args.items() if k != "data_root"}),
        "recipe": _shown_path(source),
        "checkpoint": {"file": path.name, "epoch": ckpt.get("epoch"), "global_step": ckpt.get("global_step"),
                       "lightning_version": ckpt.get("pytorch-lightning_version")},
        "training": jsonable(training),
    }
    if which_weights is not None:
        recorded["checkpoint"]["weights"] = which_weights
    recorded.update(plain_json(info or {}, "info"))
    pretrained = PretrainedClassifier(
        model=model, vocab=vocab, tokenizer=get_tokenizer(datamodule.text_tokenizer, eos=None), labels=labels,
        info=plain_json(recorded, "info"), normalize=getattr(datamodule, "text_normalizer", None),
        max_length=max_length if max_length is not None else default_max_length(datamodule),
        keep=getattr(datamodule, "keep_words", "first"),  # the end of a long review the model was trained on
    )
    return pretrained, datamodule


# =============================================================================================== evaluation
def _split_sets(datamodule, split: str) -> dict[str, Any]:
    """``{name: DataLoader}`` of a split: ``test`` (every test set of the DataModule) or ``valid``."""
    if split == "test":
        loaders = datamodule.test_dataloader()
        loaders = loaders if isinstance(loaders, (list, tuple)) else [loaders]
        return dict(zip(datamodule.test_set_names, loaders))
    if split in ("valid", "validation"):
        datamodule.setup("fit")
        if datamodule.val_set is None:
            raise ValueError(f"{type(datamodule).__name__} has no validation set (valid_every=0?): --evaluate test only")
        return {"valid": datamodule.val_dataloader()}
    raise ValueError(f"--evaluate: unknown split {split!r}; choose among valid, test")


@torch.no_grad()
def evaluate_classifier(model, datamodule, splits: Sequence[str], dataset: str) -> tuple[list[dict], dict]:
    """Accuracy and error of ``model`` on ``splits`` of ``datamodule`` (the batches its loaders give, as
    ``dsf test`` scores them): the card's eval results and ``info["metrics"]`` entries
    (``<split>_accuracy`` / ``_error`` / ``_sequences``; ``<split>_<set>_...`` when the split has several
    test sets, e.g. IMDB cut at 100 and 200 words)."""
    model.eval()
    results, metrics = [], {}
    for split in splits:
        sets = _split_sets(datamodule, split)
        for name, loader in sets.items():
            correct = total = 0
            for batch in loader:
                logits = model(batch["inputs"].to(model.device), batch["lengths"].to(model.device))
                correct += int((logits.argmax(-1).cpu() == batch["labels"]).sum())
                total += int(batch["labels"].numel())
            if not total:
                continue
            key = "valid" if split in ("valid", "validation") else ("test" if len(sets) == 1 else f"test_{name}")
            accuracy = correct / total
            metrics.update({f"{key}_accuracy": accuracy, f"{key}_error": 1 - accuracy, f"{key}_sequences": total})
            extra = {"dataset_config": name} if key.startswith("test_") else {}
            for metric, value in (("accuracy", accuracy), ("error", 1 - accuracy)):
                results.append({"metric": metric, "value": value, "dataset": dataset, "split": key.split("_")[0], **extra})
            logger.info("%s %s: accuracy %.4f on %d sequences", split, name, accuracy, total)
    return results, metrics


def centroid_prototypes(model, datamodule, vocab, sequences: int | None = None, *, top: int = PROTOTYPE_TOP,
                        min_count: int = PROTOTYPE_MIN_COUNT, batch_tokens: int = 65536) -> dict:
    """The centroids' prototypical words (sr-RNN paper sec. 5 and Table 6: "we fed all test samples ... and
    select those words with the highest average transition probability to a centroid"), from the first
    test set of ``datamodule`` (its first ``sequences`` sequences; None: all), with
    :func:`dsf_lightning.analysis.centroids.centroid_statistics`. Words read fewer than ``min_count`` times and
    the special symbols are left out."""
    from ..analysis.centroids import centroid_statistics, classifier_transition_traces
    from ..tasks.data import token_budget_batches

    if not getattr(model, "is_state_regularized", False):
        raise ValueError(f"prototypes need a state-regularized classifier (an sr-* cell); this one's cell is "
                         f"{model.hparams.get('cell')!r}")
    datamodule.setup("test")
    name, dataset = next(iter(datamodule.test_sets.items()))
    n = len(dataset) if sequences is None else min(int(sequences), len(dataset))
    strings = [vocab.decode(dataset[i]["inputs"].tolist()) for i in range(n)]
    traces = []
    for group in token_budget_batches([len(s) + 2 for s in strings], 512, batch_tokens):  # bounded memory on long reviews
        traces += classifier_transition_traces(model, [strings[i] for i in group], vocab, batch_size=len(group))
    stats = centroid_statistics(traces, top=top + len(SPECIAL_SYMBOLS), min_count=min_count)
    centroids = []
    for i in range(stats.k):
        words = [(s, p, c) for s, p, c in stats.prototypes[i] if s not in SPECIAL_SYMBOLS][:top]
        centroids.append({"centroid": i, "visits": int(stats.visits[i]),
                          "top": [{"symbol": s, "mean_prob": round(p, 4), "count": c} for s, p, c in words]})
    return {"split": f"test/{name}", "sequences": n, "min_count": min_count, "top": top, "centroids": centroids}


def export_classifier_checkpoint(
    ckpt_path,
    folder,
    *,
    recipe=None,
    data_root=None,
    dtype: str = "float32",
    eval_results: list[dict] | None = None,
    info: dict | None = None,
    card_extra: dict | None = None,
    evaluate: Sequence[str] = (),
    prototypes: int | None = 0,
    max_length: int | None = None,
    weights: str = "auto",
) -> Path:
    """:func:`classifier_from_checkpoint` then :func:`save_classifier`; returns the folder.

    ``evaluate`` (``("test",)``, ``("valid", "test")``) measures accuracy on those splits of the DataModule
    with the weights exactly as stored (rounded to ``dtype`` first) and puts the numbers in the card and
    ``info["metrics"]``. ``prototypes``: for sr-RNN classifiers, compute the centroids' prototypical words
    from that many test sequences (None: all of them; 0: none) into ``info["prototypes"]`` and the card.
    """
    if dtype not in ("float32", "float16"):
        raise ValueError(f"dtype must be 'float32' or 'float16', got {dtype!r}")
    pretrained, datamodule = classifier_from_checkpoint(ckpt_path, recipe=recipe, data_root=data_root, info=info,
                                                        max_length=max_length, weights=weights)
    if evaluate or prototypes != 0:
        round_to_storage(pretrained.model, dtype)  # measure the weights the folder will hold
    if evaluate:
        results, metrics = evaluate_classifier(pretrained.model, datamodule, evaluate, pretrained.info["corpus"])
        eval_results = [*(eval_results or []), *results]
        pretrained.info = {**pretrained.info, "metrics": {**pretrained.info.get("metrics", {}), **metrics}}
    if prototypes != 0:
        pretrained.info = {**pretrained.info, "prototypes": centroid_prototypes(pretrained.model, datamodule, pretrained.vocab,
                                                                                prototypes)}
    return save_classifier(pretrained, folder, dtype=dtype, eval_results=eval_results, card_extra=card_extra)
