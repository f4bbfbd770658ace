"""Text classifiers in a model folder: write it atomically, read it strictly, make it from a Lightning checkpoint.

The sr-RNN paper's classifiers (:class:`dsf_lightning.tasks.SequenceClassifier` over any cell, e.g. the
sr-LSTM-p sentiment model of sec. 4.3) in the same folder format as the language models (:mod:`.format`),
told apart by config.json's ``task``::

    config.json         {"format": "dsf-lightning", "format_version": 2, "task": "text-classification",
                         "library_version": ..., "model": {num_classes, input_mode, vocab_size, input_size,
                         embedding_size, cell, hidden_size, cell_options, readout, end_token} (the architecture:
                         SequenceClassifier(**model)), "labels": ["negative", "positive"] (class names in id
                         order), "max_length": 4096 (symbols read from each text), "info": {...},
                         "weights": {"dtype": "float32" | "float16", ...}, "files": {name: {"sha256", "size"}},
                         "tokenizer": {"name", "fingerprint"}, "vocabulary": {"size", "fingerprint"},
                         "normalize": "imdb" (the text normalizer; absent: none)}
    model.safetensors   the SequenceClassifier's state dict (float16 storage halves it; loading casts back)
    vocab.json          the task vocabulary (dsf_lightning.tasks.Vocabulary: <pad> <s> </s> [<unk>] symbols)
    dsf_tokenizer.json  the tokenizer that splits normalized text into symbols (``word``, or ``char`` for the
                        formal languages), without an end symbol: the vocabulary adds <s> ... </s>
    README.md           the model card: model-index accuracy and test error, the recipe, and for sr-RNNs the
                        centroids' prototypical words (sr-RNN paper Table 6)

Text is read as the training data was: the normalizer, the tokenizer, then the vocabulary (unknown words
``<unk>`` where it has one). ``max_length`` bounds the work per text: only the first ``max_length`` symbols
are read. :func:`export_classifier_checkpoint` sets it from the data the model was tested on: the longest of
the DataModule's ``test_max_lengths`` when every test set is cut (the IMDB prefix recipes: 200 words), else
:data:`DEFAULT_MAX_LENGTH` (4,096: above the longest IMDB review, 2,743 words after normalization, so no
review of the data set is cut and the card's accuracy holds for full reviews).

Loading is as strict as for language models (checksums, the identity of the vocabulary and tokenizer, a
weights file bounded by the architecture, every tensor present and shaped as the architecture implies); a
language-model folder raises :class:`~._folder.WrongTaskError` naming its loaders, and the language-model
loaders say the same of a classifier folder. :class:`dsf_lightning.classification.TextClassifier` classifies
raw texts with a loaded folder.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Sequence

import torch

from .._json import JSONLimitError, loads_bounded
from ..data.tokenizers import Tokenizer, get_tokenizer
from ._folder import (
    CONFIG_FILE,
    DSF_TOKENIZER_FILE,
    MAX_JSON_BYTES,
    TEXT_CLASSIFICATION,
    VOCAB_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    PretrainedFormatError,
    _check_normalize,
    _checked_bytes,
    _fail,
    _jsonable,
    _load_checkpoint,
    _plain_json,
    _unknown_cell,
    check_file_records,
    check_folder,
    check_vocab_size,
    cli_configs,
    config_header,
    fingerprint,
    load_state,
    match_state,
    parse_tokenizer,
    plain_info,
    read_cli_config,
    read_config_header,
    read_weights,
    resolve_dtype,
    round_to_storage,
    save_folder,
    state_for_saving,
    tokenizer_record,
)

logger = logging.getLogger(__name__)

DEFAULT_MAX_LENGTH = 4096
#: the SequenceClassifier arguments that build the network (config.json's ``model``); the rest are training settings
ARCHITECTURE = ("num_classes", "input_mode", "vocab_size", "input_size", "embedding_size", "cell", "hidden_size",
                "cell_options", "readout", "end_token")
TEXT_INPUTS = ("embedding", "one-hot")
CLASSIFIER_FILES = (WEIGHTS_FILE, VOCAB_FILE, DSF_TOKENIZER_FILE)
PROTOTYPE_TOP = 5  # words per centroid, as the paper's Table 6
PROTOTYPE_MIN_COUNT = 10  # a word read fewer times has a noisy mean transition probability
SPECIAL_SYMBOLS = ("<pad>", "<s>", "</s>", "<unk>")


@dataclass
class PretrainedClassifier:
    """A trained text classifier with everything needed to classify raw text.

    ``model``: a :class:`~dsf_lightning.tasks.SequenceClassifier` over token inputs; ``vocab``: its
    :class:`~dsf_lightning.tasks.Vocabulary`; ``tokenizer``: splits normalized text into symbols (no end
    symbol); ``labels``: the class names in id order; ``normalize``: the text normalizer's name (None: text is
    read as it is); ``max_length``: symbols read from each text (None: all). ``info``: plain JSON about where
    the model comes from (``corpus``, ``recipe``, ``metrics`` such as ``{"test_accuracy": 0.9, "test_error":
    0.1}``, ``training_time``, ``hardware``, ``comparison``, ``prototypes``, ...).
    """

    model: Any
    vocab: Any
    tokenizer: Tokenizer
    labels: list[str]
    info: dict = field(default_factory=dict)
    normalize: str | None = None
    max_length: int | None = DEFAULT_MAX_LENGTH
    task: ClassVar[str] = TEXT_CLASSIFICATION

    @property
    def config(self) -> dict:
        """The architecture (config.json's ``model``)."""
        return architecture(self.model)

    def save_pretrained(self, folder, **kwargs) -> Path:
        """Same as :func:`save_classifier` (``self`` first)."""
        return save_classifier(self, folder, **kwargs)


def architecture(model) -> dict:
    """The ``SequenceClassifier`` arguments that build ``model``'s network (:data:`ARCHITECTURE`)."""
    hparams = dict(getattr(model, "hparams", {}))
    missing = [k for k in ARCHITECTURE if k not in hparams]
    if missing:
        raise TypeError(f"{type(model).__name__} does not record {missing} in its hparams: not a SequenceClassifier")
    arch = {k: hparams[k] for k in ARCHITECTURE}
    arch["cell_options"] = dict(arch["cell_options"] or {})
    return _plain_json(arch, "the classifier's architecture")


def describe(arch: dict) -> str:
    return (f"cell={arch.get('cell')!r}, hidden_size={arch.get('hidden_size')}, embedding_size={arch.get('embedding_size')}, "
            f"vocab_size={arch.get('vocab_size')}, num_classes={arch.get('num_classes')}, readout={arch.get('readout')!r}")


def vocabulary_record(vocab) -> dict:
    """config.json's ``vocabulary`` record: the size and fingerprint of the task vocabulary."""
    return {"size": len(vocab), "fingerprint": fingerprint(json.loads(vocab.to_json()))}


def default_max_length(datamodule) -> int:
    """The length rule (module docstring): the longest of ``test_max_lengths`` when every test set is cut,
    else :data:`DEFAULT_MAX_LENGTH`."""
    lengths = tuple(getattr(datamodule, "test_max_lengths", None) or ())
    if lengths and all(type(n) is int and n > 0 for n in lengths):
        return max(lengths)
    return DEFAULT_MAX_LENGTH


def _check_labels(labels: Any, num_classes: int) -> list[str] | None:
    if (isinstance(labels, (list, tuple)) and len(labels) == num_classes and len(set(labels)) == num_classes
            and all(isinstance(x, str) and x.strip() and "\n" not in x for x in labels)):
        return list(labels)
    return None


def _check_max_length(value: Any) -> bool:
    return value is None or (type(value) is int and value > 0)


# =============================================================================================== saving
def save_classifier(
    pretrained: PretrainedClassifier,
    folder,
    *,
    dtype: str = "float32",
    eval_results: list[dict] | None = None,
    card_extra: dict | None = None,
) -> Path:
    """Write ``pretrained`` to ``folder`` (see the module docstring) atomically and return its path.

    ``dtype``: ``"float32"`` (bit-exact) or ``"float16"`` (half the size; loading casts back).
    ``eval_results``: the card's model-index results, e.g. ``[{"metric": "accuracy", "value": 0.9, "dataset":
    "imdb", "split": "test"}]`` (default: from ``info["metrics"]``'s ``<split>_accuracy`` / ``<split>_error``).
    ``card_extra``: card field / metadata overrides (:func:`~dsf_lightning.hub.card.build_model_card`).
    """
    from ..tasks.modules import SequenceClassifier

    if not isinstance(pretrained.model, SequenceClassifier):
        raise TypeError(f"pretrained.model must be a SequenceClassifier, got {type(pretrained.model).__name__}")
    arch = architecture(pretrained.model)
    if arch["input_mode"] not in TEXT_INPUTS:
        raise ValueError(f"a classifier folder holds a text classifier (input_mode one of {TEXT_INPUTS}); this one reads "
                         f"input_mode={arch['input_mode']!r} features, which have no text to classify")
    info = plain_info(pretrained.info, "PretrainedClassifier.info")
    check_vocab_size(pretrained.vocab, arch["vocab_size"])
    if not isinstance(pretrained.tokenizer, Tokenizer) or pretrained.tokenizer.eos is not None:
        raise ValueError("PretrainedClassifier.tokenizer must be a dsf_lightning tokenizer without an end symbol "
                         "(get_tokenizer('word', eos=None)): the vocabulary adds the start and end tokens")
    labels = _check_labels(pretrained.labels, arch["num_classes"])
    if labels is None:
        raise ValueError(f"PretrainedClassifier.labels must be {arch['num_classes']} distinct non-empty one-line names "
                         f"(class 0 first), got {pretrained.labels!r:.200}")
    if not _check_max_length(pretrained.max_length):
        raise ValueError(f"PretrainedClassifier.max_length must be a positive integer or None, got {pretrained.max_length!r}")
    normalize = _check_normalize(pretrained.normalize, "PretrainedClassifier.normalize")
    tensors, metadata = state_for_saving(pretrained.model, dtype)
    snapshot = dataclasses.replace(pretrained, labels=labels, info=info, normalize=normalize)

    texts = {VOCAB_FILE: pretrained.vocab.to_json(), DSF_TOKENIZER_FILE: pretrained.tokenizer.to_json()}
    config = {
        **config_header(TEXT_CLASSIFICATION),
        "model": arch,
        "labels": labels,
        "max_length": pretrained.max_length,
        "info": info,
        "weights": {"dtype": dtype, "aliases": json.loads(metadata["aliases"])},
        "files": None,  # filled in by save_folder
        "tokenizer": tokenizer_record(pretrained.tokenizer),
        "vocabulary": vocabulary_record(pretrained.vocab),
        **({"normalize": normalize} if normalize else {}),
    }
    return save_folder(folder, snapshot, tensors, metadata, texts, config, eval_results=eval_results, card_extra=card_extra)


# =============================================================================================== loading
def _read_vocab(path: Path, data: bytes):
    from ..tasks.data import Vocabulary

    try:
        doc = loads_bounded(data.decode("utf-8"))
    except (UnicodeDecodeError, JSONLimitError) as err:
        raise _fail(path, f"is not a valid vocabulary ({err})") from None
    ok = (isinstance(doc, dict) and isinstance(doc.get("alphabet"), list) and all(isinstance(s, str) for s in doc["alphabet"])
          and isinstance(doc.get("start_end_tokens"), bool) and isinstance(doc.get("unk"), bool))
    if not ok:
        raise _fail(path, "is not a task vocabulary (needs 'alphabet': a list of symbols, 'start_end_tokens' and 'unk': "
                    "true / false)")
    try:
        return Vocabulary(doc["alphabet"], doc["start_end_tokens"], doc["unk"])
    except ValueError as err:
        raise _fail(path, f"is not a valid vocabulary ({err})") from None


def _build(arch: dict, source: Path, *, error=PretrainedFormatError, fix: str | None = None):
    """The SequenceClassifier ``arch`` describes and its state dict; a configuration that cannot be built
    raises ``error`` naming ``source``."""
    from ..cells import UnknownCellError, get_cell
    from ..tasks.modules import SequenceClassifier

    try:
        get_cell(arch["cell"])
    except UnknownCellError:
        raise _unknown_cell(source, arch["cell"]) from None
    except TypeError:
        raise error(f"{source}: model.cell must be a cell name, got {arch['cell']!r:.80}") from None
    try:
        model = SequenceClassifier(**arch)
    except (ValueError, TypeError, KeyError, UnknownCellError) as err:
        raise error(f"{source}: this classifier configuration cannot be built: {err}; "
                    f"{fix or 'was it written by this library with a cell it provides?'}") from None
    return model, model.state_dict()


def load_classifier(folder, *, dtype=None) -> PretrainedClassifier:
    """Read a folder written by :func:`save_classifier` strictly (see the module docstring).

    Returns the classifier in eval mode on the CPU, float32 unless ``dtype`` (``torch.float16`` /
    ``torch.bfloat16`` or the names) asks otherwise (cast after the checked load). Raises
    :class:`~._folder.PretrainedFormatError`; :class:`~._folder.WrongTaskError` for a language-model folder.
    """
    dtype = resolve_dtype(dtype)
    folder = check_folder(folder)
    path = folder / CONFIG_FILE
    config = read_config_header(folder, TEXT_CLASSIFICATION)
    check_file_records(path, config, CLASSIFIER_FILES)
    arch = config["model"]
    missing, extra = [k for k in ARCHITECTURE if k not in arch], sorted(set(arch) - set(ARCHITECTURE))
    if missing or extra:
        raise _fail(path, f"the classifier configuration 'model' lacks {missing} / has unknown {extra} (it holds exactly "
                    f"{', '.join(ARCHITECTURE)})")
    if arch["input_mode"] not in TEXT_INPUTS:
        raise _fail(path, f"model.input_mode must be one of {TEXT_INPUTS} (a text classifier), got {arch['input_mode']!r:.80}")
    labels = _check_labels(config.get("labels"), arch["num_classes"] if type(arch["num_classes"]) is int else -1)
    if labels is None:
        raise _fail(path, f"'labels' must be {arch['num_classes']!r:.20} distinct non-empty one-line class names, got "
                    f"{config.get('labels')!r:.120}")
    max_length = config.get("max_length")
    if not _check_max_length(max_length):
        raise _fail(path, f"'max_length' must be a positive integer or null, got {max_length!r:.80}")
    normalize = config.get("normalize")
    try:
        normalize = _check_normalize(normalize, f"{path}: 'normalize'")
    except ValueError as err:
        raise _fail(path, str(err).removeprefix(f"{path}: "), "upgrade dsf-lightning (pip install -U dsf-lightning) or "
                    "register the normalizer (dsf_lightning.data.normalize.register_normalizer)") from None

    vocab = _read_vocab(folder / VOCAB_FILE, _checked_bytes(folder, VOCAB_FILE, config, MAX_JSON_BYTES))
    tok_path = folder / DSF_TOKENIZER_FILE
    tokenizer = parse_tokenizer(tok_path, _checked_bytes(folder, DSF_TOKENIZER_FILE, config, MAX_JSON_BYTES))
    tok_record, vocab_record = config.get("tokenizer"), config.get("vocabulary")
    if not (isinstance(tok_record, dict) and tok_record.get("fingerprint") == fingerprint(tokenizer.to_dict())
            and tok_record.get("name") == tokenizer.name):
        raise _fail(tok_path, f"is not the tokenizer the classifier was trained with: its kind, options or state differ "
                    f"from {CONFIG_FILE}'s 'tokenizer' record (the file was swapped or edited)")
    if tokenizer.eos is not None:
        raise _fail(tok_path, f"ends texts with {tokenizer.eos!r}; a classifier's tokenizer has no end symbol")
    if not (isinstance(vocab_record, dict) and vocab_record == vocabulary_record(vocab)):
        raise _fail(folder / VOCAB_FILE, f"is not the vocabulary the model was trained with: its symbols (or their order) "
                    f"differ from {CONFIG_FILE}'s 'vocabulary' record (the file was swapped or edited)")
    if len(vocab) != arch["vocab_size"]:
        raise _fail(folder / VOCAB_FILE, f"holds {len(vocab):,} symbols but {CONFIG_FILE} says vocab_size={arch['vocab_size']!r:.20}")

    model, expected = _build(arch, path)  # before the weights are read: its tensors bound the file's size
    tensors, _, aliases = read_weights(folder, config, expected, describe(arch))
    load_state(model, match_state(tensors, aliases, expected, describe(arch), str(folder / WEIGHTS_FILE)), dtype)
    return PretrainedClassifier(model=model, vocab=vocab, tokenizer=tokenizer, labels=labels, info=config["info"],
                                normalize=normalize, max_length=max_length)


# =============================================================================================== checkpoints
SEQUENCE_MODULES = ("SequenceClassifier", "SequenceTagger")


def sequence_module_name(ckpt: dict) -> str | None:
    """``"SequenceClassifier"`` / ``"SequenceTagger"`` for a checkpoint of a :mod:`dsf_lightning.tasks` module
    (by the class LightningCLI recorded, else by its hyper-parameters), None otherwise."""
    hparams = ckpt.get("hyper_parameters")
    if not isinstance(hparams, dict):
        return None
    path = hparams.get("_class_path")
    if isinstance(path, str) and path.rsplit(".", 1)[-1] in SEQUENCE_MODULES:
        return path.rsplit(".", 1)[-1]
    if {"num_classes", "input_mode", "cell", "hidden_size"} <= set(hparams):
        return "SequenceClassifier" if "readout" in hparams else "SequenceTagger"
    return None


def is_classifier_checkpoint(ckpt: dict) -> bool:
    """Whether a loaded checkpoint holds a :mod:`dsf_lightning.tasks` sequence module (not a language model)."""
    return sequence_module_name(ckpt) is not None


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
    given, else from the LightningCLI config.yaml of the run (:func:`~._folder.cli_configs`) whose model agrees
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
    ckpt = _load_checkpoint(path, "SequenceClassifier")
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
    model, expected = _build(arch, path, error=CheckpointError, fix=fix)
    state = match_state(dict(ckpt["state_dict"]), {}, expected, describe(arch), f"{path} (state_dict)",
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
    if max_length is not None and not _check_max_length(max_length):
        raise ValueError(f"max_length must be a positive integer, got {max_length!r}")
    training = {k: v for k, v in hparams.items() if k not in ARCHITECTURE and not k.startswith("_")}
    recorded = {
        "corpus": _task_name(type(datamodule)),
        "datamodule": type(datamodule).__name__,
        "data": _jsonable({k: v for k, v in args.items() if k != "data_root"}),
        "recipe": _shown_path(source),
        "checkpoint": {"file": path.name, "epoch": ckpt.get("epoch"), "global_step": ckpt.get("global_step"),
                       "lightning_version": ckpt.get("pytorch-lightning_version")},
        "training": _jsonable(training),
    }
    recorded.update(_plain_json(info or {}, "info"))
    pretrained = PretrainedClassifier(
        model=model, vocab=vocab, tokenizer=get_tokenizer(datamodule.text_tokenizer, eos=None), labels=labels,
        info=_plain_json(recorded, "info"), normalize=getattr(datamodule, "text_normalizer", None),
        max_length=max_length if max_length is not None else default_max_length(datamodule),
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
                                                        max_length=max_length)
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
