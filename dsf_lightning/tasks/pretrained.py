"""Text classifiers in a model folder: write it atomically, read it strictly, make it from a Lightning checkpoint.

The sr-RNN paper's classifiers (:class:`dsf_lightning.tasks.SequenceClassifier` over any cell, e.g. the
sr-LSTM-p sentiment model of sec. 4.3) in the same folder format as the language models (:mod:`.format`),
told apart by config.json's ``task``::

    config.json         {"format": "dsf-lightning", "format_version": 2, "task": "text-classification",
                         "library_version": ..., "model": {num_classes, input_mode, vocab_size, input_size,
                         embedding_size, cell, hidden_size, cell_options, readout, end_token} (the architecture:
                         SequenceClassifier(**model)), "labels": ["negative", "positive"] (class names in id
                         order), "max_length": 4096 (symbols read from each text), "keep": "first" | "last"
                         (which end of a longer text they are; absent: "first"), "info": {...},
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
are read, or the last with ``keep: "last"`` (a model trained on the last words of each review, the IMDB
DataModule's ``keep_words: last``). :func:`export_classifier_checkpoint` sets it from the data the model was tested on: the longest of
the DataModule's ``test_max_lengths`` when every test set is cut (the IMDB prefix recipes: 200 words), else
:data:`DEFAULT_MAX_LENGTH` (4,096: above the longest IMDB review, 2,743 words after normalization, so no
review of the data set is cut and the card's accuracy holds for full reviews).

Loading is as strict as for language models (checksums, the identity of the vocabulary and tokenizer, a
weights file bounded by the architecture, every tensor present and shaped as the architecture implies); a
language-model folder raises :class:`~dsf_lightning.hub.folder.WrongTaskError` naming its loaders, and the language-model
loaders say the same of a classifier folder. :class:`dsf_lightning.classification.TextClassifier` classifies
raw texts with a loaded folder.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .._json import JSONLimitError, loads_bounded
from .._keep import KEEP
from ..data.tokenizers import Tokenizer
from ..hub.card import kept_card
from ..hub.folder import (
    CONFIG_FILE,
    DSF_TOKENIZER_FILE,
    TEXT_CLASSIFICATION,
    VOCAB_FILE,
    WEIGHTS_FILE,
    CardInfo,
    ClassifierFolder,
    PretrainedFormatError,
    check_normalize,
    check_vocab_size,
    config_header,
    fingerprint,
    format_error,
    load_state,
    match_state,
    parse_tokenizer,
    plain_info,
    plain_json,
    resolve_dtype,
    state_for_saving,
    tokenizer_record,
    unknown_cell_error,
)
from ..hub.mixin import register_folder_format
from .data import Vocabulary
from .modules import SequenceClassifier

logger = logging.getLogger(__name__)

DEFAULT_MAX_LENGTH = 4096
#: the SequenceClassifier arguments that build the network (config.json's ``model``); the rest are training settings
ARCHITECTURE = ("num_classes", "input_mode", "vocab_size", "input_size", "embedding_size", "cell", "hidden_size",
                "cell_options", "readout", "end_token")
TEXT_INPUTS = ("embedding", "one-hot")
PROTOTYPE_TOP = 5  # words per centroid, as the paper's Table 6
PROTOTYPE_MIN_COUNT = 10  # a word read fewer times has a noisy mean transition probability
SPECIAL_SYMBOLS = ("<pad>", "<s>", "</s>", "<unk>")


@dataclass
class PretrainedClassifier:
    """A trained text classifier with everything needed to classify raw text.

    ``model``: a :class:`~dsf_lightning.tasks.SequenceClassifier` over token inputs; ``vocab``: its
    :class:`~dsf_lightning.tasks.Vocabulary`; ``tokenizer``: splits normalized text into symbols (no end
    symbol); ``labels``: the class names in id order; ``normalize``: the text normalizer's name (None: text is
    read as it is); ``max_length``: symbols read from each text (None: all); ``keep``: which of a longer text's
    symbols those are, ``"first"`` or ``"last"`` (as the model was trained). ``info``: plain JSON about where
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
    keep: str = "first"
    #: the folder's weight storage and card (license, results): what :func:`save_classifier` writes again by default
    storage_dtype: str | None = None
    card_data: dict | None = None
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
    return plain_json(arch, "the classifier's architecture")


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


def check_max_length(value: Any) -> bool:
    return value is None or (type(value) is int and value > 0)


# =============================================================================================== saving
def save_classifier(
    pretrained: PretrainedClassifier,
    folder,
    *,
    dtype: str | None = None,
    eval_results: list[dict] | None = None,
    card_extra: dict | None = None,
) -> Path:
    """Write ``pretrained`` to ``folder`` (see the module docstring) atomically and return its path.

    ``dtype``: ``"float32"`` (bit-exact) or ``"float16"`` (half the size; loading casts back); default: the
    storage of the folder it was loaded from, else float32. The loaded card's results and license are kept
    unless ``eval_results`` / ``card_extra`` say otherwise.
    ``eval_results``: the card's model-index results, e.g. ``[{"metric": "accuracy", "value": 0.9, "dataset":
    "imdb", "split": "test"}]`` (default: from ``info["metrics"]``'s ``<split>_accuracy`` / ``<split>_error``).
    ``card_extra``: card field / metadata overrides (:func:`~dsf_lightning.hub.card.build_model_card`).
    """
    return to_folder(pretrained, dtype=dtype, eval_results=eval_results, card_extra=card_extra).write(folder)


def to_folder(
    pretrained: PretrainedClassifier,
    *,
    dtype: str | None = None,
    eval_results: list[dict] | None = None,
    card_extra: dict | None = None,
) -> ClassifierFolder:
    """The :class:`~dsf_lightning.hub.folder.ClassifierFolder` of ``pretrained`` (its files, not yet written:
    :meth:`~dsf_lightning.hub.folder.ModelFolder.write` writes them); the options as in :func:`save_classifier`."""
    if not isinstance(pretrained.model, SequenceClassifier):
        raise TypeError(f"pretrained.model must be a SequenceClassifier, got {type(pretrained.model).__name__}")
    arch = architecture(pretrained.model)
    if arch["input_mode"] not in TEXT_INPUTS:
        raise ValueError(f"a classifier folder holds a text classifier (input_mode one of {TEXT_INPUTS}); this one reads "
                         f"input_mode={arch['input_mode']!r} features, which have no text to classify")
    info = plain_info(pretrained.info, "PretrainedClassifier.info")
    check_vocab_size(pretrained.vocab, arch["vocab_size"])
    dtype = dtype or pretrained.storage_dtype or "float32"
    eval_results, card_extra = kept_card(pretrained.card_data, eval_results, card_extra)
    if not isinstance(pretrained.tokenizer, Tokenizer) or pretrained.tokenizer.eos is not None:
        raise ValueError("PretrainedClassifier.tokenizer must be a dsf_lightning tokenizer without an end symbol "
                         "(get_tokenizer('word', eos=None)): the vocabulary adds the start and end tokens")
    labels = _check_labels(pretrained.labels, arch["num_classes"])
    if labels is None:
        raise ValueError(f"PretrainedClassifier.labels must be {arch['num_classes']} distinct non-empty one-line names "
                         f"(class 0 first), got {pretrained.labels!r:.200}")
    if not check_max_length(pretrained.max_length):
        raise ValueError(f"PretrainedClassifier.max_length must be a positive integer or None, got {pretrained.max_length!r}")
    if pretrained.keep not in KEEP:
        raise ValueError(f"PretrainedClassifier.keep must be one of {KEEP} (which symbols of a text longer than max_length "
                         f"are read), got {pretrained.keep!r:.80}")
    normalize = check_normalize(pretrained.normalize, "PretrainedClassifier.normalize")
    tensors, metadata = state_for_saving(pretrained.model, dtype)
    snapshot = dataclasses.replace(pretrained, labels=labels, info=info, normalize=normalize)

    config = {
        **config_header(TEXT_CLASSIFICATION),
        "model": arch,
        "labels": labels,
        "max_length": pretrained.max_length,
        "keep": pretrained.keep,
        "info": info,
        "weights": {"dtype": dtype, "aliases": json.loads(metadata["aliases"])},
        "files": None,  # filled in by ClassifierFolder.write
        "tokenizer": tokenizer_record(pretrained.tokenizer),
        "vocabulary": vocabulary_record(pretrained.vocab),
        **({"normalize": normalize} if normalize else {}),
    }
    return ClassifierFolder(
        config=config, vocab_json=pretrained.vocab.to_json().encode("utf-8"),
        tokenizer_json=pretrained.tokenizer.to_json().encode("utf-8"), tensors=tensors, metadata=metadata,
        card=CardInfo(snapshot, eval_results, card_extra),
    )


# =============================================================================================== loading
def _read_vocab(path: Path, data: bytes):
    try:
        doc = loads_bounded(data.decode("utf-8"))
    except (UnicodeDecodeError, JSONLimitError) as err:
        raise format_error(path, f"is not a valid vocabulary ({err})") from None
    ok = (isinstance(doc, dict) and isinstance(doc.get("alphabet"), list) and all(isinstance(s, str) for s in doc["alphabet"])
          and isinstance(doc.get("start_end_tokens"), bool) and isinstance(doc.get("unk"), bool))
    if not ok:
        raise format_error(path, "is not a task vocabulary (needs 'alphabet': a list of symbols, 'start_end_tokens' and 'unk': "
                    "true / false)")
    try:
        return Vocabulary(doc["alphabet"], doc["start_end_tokens"], doc["unk"])
    except ValueError as err:
        raise format_error(path, f"is not a valid vocabulary ({err})") from None


def build_classifier(arch: dict, source: Path, *, error=PretrainedFormatError, fix: str | None = None):
    """The SequenceClassifier ``arch`` describes and its state dict; a configuration that cannot be built
    raises ``error`` naming ``source``."""
    from ..cells import UnknownCellError, get_cell

    try:
        get_cell(arch["cell"])
    except UnknownCellError:
        raise unknown_cell_error(source, arch["cell"]) from None
    except TypeError:
        raise error(f"{source}: model.cell must be a cell name, got {arch['cell']!r:.80}") from None
    try:
        model = SequenceClassifier(**arch)
    except (ValueError, TypeError, KeyError, UnknownCellError) as err:
        raise error(f"{source}: this classifier configuration cannot be built: {err}; "
                    f"{fix or 'was it written by this library with a cell it provides?'}") from None
    return model, model.state_dict()


def _check_sizes(files: ClassifierFolder, arch: dict) -> None:
    """The sizes config.json gives against model.safetensors' header, before the classifier is built: each no
    larger than a stored dimension, then the shapes of the classifier built on the meta device (nothing
    allocated) against every stored tensor (:func:`~dsf_lightning.hub.folder.check_weights_header`)."""
    import torch

    fields = ("vocab_size", "hidden_size", *(("embedding_size",) if arch["input_mode"] == "embedding" else ()))
    sizes = {f"model.{name}": arch[name] for name in fields if type(arch[name]) is int}
    files.check_sizes(sizes, ("model.hidden_size", 1))
    with torch.device("meta"):
        _, shapes = build_classifier(arch, files.path / CONFIG_FILE)
    files.check_shapes(shapes, describe(arch))


def load_classifier(folder, *, dtype=None) -> PretrainedClassifier:
    """Read a folder written by :func:`save_classifier` strictly (see the module docstring), then build its classifier.

    ``folder``: its path, or its :class:`~dsf_lightning.hub.folder.ClassifierFolder` already read. Returns the
    classifier in eval mode on the CPU, float32 unless ``dtype`` (``torch.float16`` / ``torch.bfloat16`` or the
    names) asks otherwise (cast after the checked load). Raises :class:`~dsf_lightning.hub.folder.PretrainedFormatError`;
    :class:`~dsf_lightning.hub.folder.WrongTaskError` for a language-model folder.
    """
    dtype = resolve_dtype(dtype)
    files = ClassifierFolder.of(folder)
    folder, config = files.path, files.config
    path = folder / CONFIG_FILE
    arch = config["model"]
    missing, extra = [k for k in ARCHITECTURE if k not in arch], sorted(set(arch) - set(ARCHITECTURE))
    if missing or extra:
        raise format_error(path, f"the classifier configuration 'model' lacks {missing} / has unknown {extra} (it holds exactly "
                    f"{', '.join(ARCHITECTURE)})")
    if arch["input_mode"] not in TEXT_INPUTS:
        raise format_error(path, f"model.input_mode must be one of {TEXT_INPUTS} (a text classifier), got {arch['input_mode']!r:.80}")
    labels = _check_labels(config.get("labels"), arch["num_classes"] if type(arch["num_classes"]) is int else -1)
    if labels is None:
        raise format_error(path, f"'labels' must be {arch['num_classes']!r:.20} distinct non-empty one-line class names, got "
                    f"{config.get('labels')!r:.120}")
    max_length = config.get("max_length")
    if not check_max_length(max_length):
        raise format_error(path, f"'max_length' must be a positive integer or null, got {max_length!r:.80}")
    keep = config.get("keep", "first")  # folders written before the field read the first symbols
    if keep not in KEEP:
        raise format_error(path, f"'keep' must be one of {KEEP} (which symbols of a long text are read), got {keep!r:.80}")
    normalize = config.get("normalize")
    try:
        normalize = check_normalize(normalize, f"{path}: 'normalize'")
    except ValueError as err:
        raise format_error(path, str(err).removeprefix(f"{path}: "), "upgrade dsf-lightning (pip install -U dsf-lightning) or "
                    "register the normalizer (dsf_lightning.data.normalize.register_normalizer)") from None

    vocab = _read_vocab(folder / VOCAB_FILE, files.vocab_json)
    tok_path = folder / DSF_TOKENIZER_FILE
    tokenizer = parse_tokenizer(tok_path, files.tokenizer_json)
    tok_record, vocab_record = config.get("tokenizer"), config.get("vocabulary")
    if not (isinstance(tok_record, dict) and tok_record.get("fingerprint") == fingerprint(tokenizer.to_dict())
            and tok_record.get("name") == tokenizer.name):
        raise format_error(tok_path, f"is not the tokenizer the classifier was trained with: its kind, options or state differ "
                    f"from {CONFIG_FILE}'s 'tokenizer' record (the file was swapped or edited)")
    if tokenizer.eos is not None:
        raise format_error(tok_path, f"ends texts with {tokenizer.eos!r}; a classifier's tokenizer has no end symbol")
    if not (isinstance(vocab_record, dict) and vocab_record == vocabulary_record(vocab)):
        raise format_error(folder / VOCAB_FILE, f"is not the vocabulary the model was trained with: its symbols (or their order) "
                    f"differ from {CONFIG_FILE}'s 'vocabulary' record (the file was swapped or edited)")
    if len(vocab) != arch["vocab_size"]:
        raise format_error(folder / VOCAB_FILE, f"holds {len(vocab):,} symbols but {CONFIG_FILE} says vocab_size={arch['vocab_size']!r:.20}")

    _check_sizes(files, arch)  # against the weights' header (read alone) before anything is allocated
    model, expected = build_classifier(arch, path)
    tensors, _, aliases = files.read_weights(expected, describe(arch))
    load_state(model, match_state(tensors, aliases, expected, describe(arch), str(folder / WEIGHTS_FILE)), dtype)
    return PretrainedClassifier(model=model, vocab=vocab, tokenizer=tokenizer, labels=labels, info=config["info"],
                                normalize=normalize, max_length=max_length, keep=keep,
                                storage_dtype=config["weights"].get("dtype"), card_data=files.card.data)


# SequenceClassifier.from_pretrained / save_pretrained / push_to_hub (the hub mixin) read and write this folder
register_folder_format(SequenceClassifier._hub_task, PretrainedClassifier, save_classifier, load_classifier)
