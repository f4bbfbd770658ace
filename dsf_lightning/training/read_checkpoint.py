"""Reading what a training run left behind: a Lightning checkpoint (safely, ``weights_only``), the LightningCLI
``config.yaml`` that describes it, and a ``LanguageModelModule`` checkpoint as a :class:`Pretrained` (the model
with its corpus's vocabulary and tokenizer). :mod:`dsf_lightning.export` turns these into hub folders; the
analysis tools read checkpoints with :func:`pretrained_from_checkpoint` too.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import pickle
import re
from pathlib import Path

import torch

from ..data.tokenizers import get_tokenizer
from ..data.vocab import Vocabulary
from ..hub.folder import CheckpointError, check_normalize, jsonable, load_state, match_state, plain_json
from ..model import LMConfig
from ..model.pretrained import Pretrained, describe_config, expected_state
from .config import CONFIG_KEY, TrainConfig, check_config_record, checkpoint_configs

logger = logging.getLogger(__name__)


def load_checkpoint(path: Path, what: str = "LanguageModelModule") -> dict:
    """``torch.load(weights_only=True)``: tensors, numbers, strings and plain containers only."""
    if path.is_dir():
        near = sorted(p.relative_to(path).as_posix() for p in path.glob("**/*.ckpt"))[:5]
        hint = f"it holds {', '.join(near)}" if near else "there is no .ckpt file in it"
        if not near and (path / "config.json").is_file() and (path / "model.safetensors").is_file():
            hint += "; it is a pretrained model folder already: use it as it is, or give --format onnx to convert it"
        raise CheckpointError(f"{path} is a folder, not a checkpoint file ({hint}); give the path of one .ckpt file a run wrote")
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    not_readable = f"{path}: not a readable PyTorch Lightning checkpoint"
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"(?:Unsupported global|GLOBAL)[^\n]*", str(err))
        if not found:  # random bytes, a text file: pickle's opcode errors are no Python objects
            raise CheckpointError(f"{not_readable} (not a torch.save file); give a .ckpt file a run wrote") from None
        described = found.group(0).strip()
        raise CheckpointError(
            f"{path}: holds Python objects that safe (weights_only) loading refuses ({described}); dsf-lightning never "
            "unpickles arbitrary objects. If you trust the file and the type is harmless, allow it with "
            "torch.serialization.add_safe_globals([...]) and retry"
        ) from None
    except Exception as err:  # noqa: BLE001 - whatever torch.load raised (KeyError on a text file), it is no checkpoint
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        raise CheckpointError(f"{not_readable} ({type(err).__name__}: {first}); is it a .ckpt file a run wrote, and complete?") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "hyper_parameters" not in ckpt:
        keys = sorted(ckpt)[:10] if isinstance(ckpt, dict) else type(ckpt).__name__
        raise CheckpointError(
            f"{path}: not a {what} checkpoint (needs 'state_dict' and 'hyper_parameters', found {keys})"
        )
    return ckpt


#: which weights of a checkpoint to read: ``auto`` the averaged ones when the run kept an average, else the training ones
WEIGHTS = ("auto", "averaged", "training")


def checkpoint_weights(ckpt: dict, path: Path, weights: str = "auto") -> tuple[dict, str | None]:
    """The checkpoint's ``state_dict`` with the weights asked for, and a line saying which they are.

    A run with :class:`~dsf_lightning.training.callbacks.PolyakAveraging` validated (and its ModelCheckpoint
    chose ``best.ckpt`` by) the *averaged* weights, but the checkpoint's ``state_dict`` holds the training
    iterate, so the averages (the callback's state) replace the matching entries for ``weights="auto"`` /
    ``"averaged"``. The line is None for the training weights of a run that kept no average.
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    kept = {k: v for k, v in (ckpt.get("callbacks") or {}).items()
            if str(k).startswith("PolyakAveraging") and isinstance(v, dict) and v.get("averages")}
    if weights == "training" or (weights == "auto" and not kept):
        return ckpt["state_dict"], ("the training weights (the run also kept an average: --weights averaged reads it)"
                                    if kept else None)
    if not kept:
        raise CheckpointError(f"{path}: holds no averaged weights (its run had no PolyakAveraging callback, or it saved "
                              "before the average began): read its training weights (weights='training' / --weights training)")
    if len(kept) > 1:
        raise CheckpointError(f"{path}: holds {len(kept)} PolyakAveraging averages ({', '.join(sorted(kept))}); read its "
                              "training weights, or load the one you want from checkpoint['callbacks'] yourself")
    (state,) = kept.values()
    averages = state["averages"]
    missing = sorted(set(averages) - set(ckpt["state_dict"]))
    if missing:
        raise CheckpointError(f"{path}: the PolyakAveraging average has weights the model lacks ({', '.join(missing[:5])})")
    merged = dict(ckpt["state_dict"])
    for name, value in averages.items():
        merged[name] = value.to(merged[name].dtype)
    decay = state.get("decay")
    kind = "arithmetic mean" if decay is None else f"exponential moving average (decay {decay:g})"
    return merged, f"PolyakAveraging: the {kind} of {int(state.get('num_averaged') or 0):,} training iterates"


def cli_configs(path: Path) -> list[Path]:
    """The LightningCLI ``config.yaml`` files that may describe the run that wrote checkpoint ``path``, nearest
    first: beside it, one or two folders up, then in the loggers' ``<run>/*/version_*/`` folders (the newest
    version first), where ``dsf fit`` with a CSVLogger saves it. In a folder, ``config.dsf*.yaml`` (newest first)
    comes before ``config.yaml``: a run saves its configuration there when ``config.yaml`` is a file no run wrote."""
    found: list[Path] = []
    for folder in (path.parent, path.parent.parent, path.parent.parent.parent):
        beside = sorted(folder.glob("config.dsf*.yaml"), key=lambda p: -p.stat().st_mtime) if folder.is_dir() else []
        for candidate in [*beside, folder / "config.yaml"]:
            if candidate.is_file() and candidate not in found:
                found.append(candidate)
    versions = [p for p in path.parent.parent.glob("*/version_*/config.yaml") if p.is_file()]

    def number(p: Path) -> int:
        digits = p.parent.name.removeprefix("version_")
        return int(digits) if digits.isdigit() else -1

    found += sorted((p for p in versions if p not in found), key=lambda p: (-number(p), str(p)))
    return found


def read_cli_config(candidate: Path) -> dict | None:
    """A LightningCLI config / recipe YAML as a dict (bounded, safe YAML); None when it cannot be read."""
    import yaml

    from .recipe_guard import check_config_structure

    try:
        data = yaml.load(candidate.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        check_config_structure(data, str(candidate))  # no alias bomb, nothing thousands of levels deep
    except (yaml.YAMLError, RecursionError, OSError, UnicodeDecodeError, ValueError) as err:
        logger.warning("ignoring %s: %s", candidate, err)
        return None
    return data if isinstance(data, dict) else None


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


def _configs(ckpt: dict, path: Path) -> tuple[LMConfig, TrainConfig]:
    """The model and training configs of a ``LanguageModelModule`` checkpoint (:func:`~.config.checkpoint_configs`:
    its ``dsf_config``, else its migrated ``hyper_parameters``), or a :class:`CheckpointError` naming the fault."""
    hparams = ckpt["hyper_parameters"]
    if not isinstance(hparams, dict):
        raise CheckpointError(f"{path}: hyper_parameters is a {type(hparams).__name__}, not a dict")
    if "vocab_size" not in hparams:
        raise CheckpointError(f"{path}: hyper_parameters has no vocab_size: not a LanguageModelModule checkpoint")
    try:
        check_config_record(ckpt.get(CONFIG_KEY))
    except ValueError as err:
        raise CheckpointError(f"{path}: {err}") from None
    try:
        return checkpoint_configs(ckpt)
    except (ValueError, TypeError, KeyError) as err:  # ModelConfigError is a ValueError
        raise CheckpointError(f"{path}: hyper_parameters do not make a valid model: {err}") from None


def _cli_data_config(path: Path) -> dict:
    """The ``data`` section of the LightningCLI ``config.yaml`` of the run that wrote checkpoint ``path``
    (:func:`~dsf_lightning.training.read_checkpoint.cli_configs`: beside it, one or two levels up, or in its logger's version folder)."""
    for candidate in cli_configs(path):
        data = read_cli_config(candidate) or {}
        section = data.get("data")
        if isinstance(section, dict):
            section = section.get("init_args", section)
            if isinstance(section, dict) and section.get("corpus"):
                logger.info("corpus settings from %s", candidate)
                return dict(section, _source=str(candidate))
    return {}


def _dm_settings(ckpt: dict, path: Path) -> dict:
    dm = ckpt.get("datamodule_hyper_parameters")
    if isinstance(dm, dict) and dm.get("corpus"):
        return dict(dm, _source=f"{path.name} datamodule_hyper_parameters")
    return {}


def recorded_data(ckpt: dict, path: Path) -> dict:
    """The data settings of the run that wrote checkpoint ``path`` (``corpus``, ``data_root``,
    ``corpus_options``, ``normalize``, ``vocab_from``): its ``datamodule_hyper_parameters``, else the
    LightningCLI ``config.yaml`` beside it; ``{}`` when neither says."""
    return _dm_settings(ckpt, path) or _cli_data_config(path)


@dataclasses.dataclass
class _Reader:
    """What a run read text with, as recorded: stands in for a loaded corpus (``name``, ``vocab``, ``tokenizer``)."""

    name: str
    vocab: Vocabulary
    tokenizer: object
    normalize: str | None

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name


def _reader_of(ckpt: dict, settings: dict, path: Path) -> _Reader | None:
    """The vocabulary, tokenizer and normalizer the run read text with: the DataModule's checkpoint state
    (``reader``), else, for a fine-tuning run (``vocab_from``), the pretrained model's; None when neither
    (an older checkpoint of a corpus run: the corpus is loaded again)."""
    from ..data.tokenizers import TokenizerError, tokenizer_from_json
    from ..data.vocab import VocabularyError

    name = str(settings.get("corpus") or "text")
    state = next((v for k, v in ckpt.items() if str(k).endswith("DataModule") and isinstance(v, dict)), None)
    reader = (state or {}).get("reader")
    if isinstance(reader, dict) and isinstance(reader.get("vocab"), dict) and isinstance(reader.get("tokenizer"), dict):
        import json

        try:
            vocab = Vocabulary.from_dict(reader["vocab"])
            tokenizer = tokenizer_from_json(json.dumps(reader["tokenizer"]))
        except (VocabularyError, TokenizerError, TypeError, KeyError) as err:
            raise CheckpointError(f"{path}: its DataModule state has an unreadable vocabulary or tokenizer ({err})") from None
        normalize = reader.get("normalize")
        return _Reader(name, vocab, tokenizer, normalize if isinstance(normalize, str) else None)
    source = settings.get("vocab_from")
    if isinstance(source, str) and source:
        from .finetune import load_for_finetuning

        pretrained = load_for_finetuning(source)
        own = getattr(pretrained, "normalize", None)
        from ..data.corpora import normalizer_for_corpus

        normalize = own if own and normalizer_for_corpus(name) != own else None
        return _Reader(name, pretrained.vocab, pretrained.tokenizer, normalize)
    return None


def pretrained_from_checkpoint(
    ckpt_path,
    corpus=None,
    *,
    data_root=None,
    corpus_options: dict | None = None,
    info: dict | None = None,
    weights: str = "auto",
) -> Pretrained:
    """A :class:`Pretrained` from a ``LanguageModelModule`` checkpoint.

    The checkpoint is read with ``torch.load(weights_only=True)`` (never a full unpickle). The model
    config comes from ``hyper_parameters``, the weights from the ``state_dict`` keys under ``model.``
    (checked strictly); ``weights`` picks the averaged or the training weights (:func:`checkpoint_weights`:
    by default the average a PolyakAveraging run validated, where it kept one). The vocabulary and tokenizer
    come from ``corpus``: a loaded ``Corpus``, or a corpus name; when ``None``, from what the run read text
    with (:func:`_reader_of`: the DataModule's checkpoint state, or the pretrained model a fine-tuning run
    started from), else the corpus named (with data root / options) by the checkpoint's
    ``datamodule_hyper_parameters`` or a LightningCLI ``config.yaml`` beside it, loaded again. ``info`` is
    merged over what is recorded automatically (corpus, checkpoint epoch/step, training settings).
    """
    path = Path(ckpt_path).expanduser()
    ckpt = load_checkpoint(path)
    if is_classifier_checkpoint(ckpt):
        raise CheckpointError(
            f"{path}: holds a SequenceClassifier (a text classifier), not a LanguageModelModule: export it with "
            "`dsf export` (which tells the kinds apart) or dsf_lightning.tasks.pretrained.export_classifier_checkpoint"
        )
    config, train_config = _configs(ckpt, path)
    state_dict, which_weights = checkpoint_weights(ckpt, path, weights)
    state = {k[len("model."):]: v for k, v in state_dict.items() if k.startswith("model.")}
    if not state:
        raise CheckpointError(f"{path}: state_dict has no 'model.' entries: not a LanguageModelModule checkpoint")
    model, expected = expected_state(
        config, path, error=CheckpointError,
        fix="was the checkpoint written by LanguageModelModule, with a cell and options this installation provides?"
    )
    checked = match_state(
        state, {}, expected, describe_config(config), f"{path} (state_dict)", described_by="its hyper_parameters", error=CheckpointError,
        fix="was the checkpoint written by LanguageModelModule with these settings?",
    )
    load_state(model, checked)

    settings = recorded_data(ckpt, path) if corpus is None else _dm_settings(ckpt, path)
    reader = None if corpus is not None else _reader_of(ckpt, settings, path)
    if reader is not None:  # what the run read text with: never rebuilt from the corpus files
        corpus = reader
    if corpus is None:
        corpus = settings.get("corpus")
    if corpus is None:
        raise CheckpointError(
            f"{path}: cannot tell which corpus the model was trained on (no datamodule_hyper_parameters in the "
            "checkpoint and no LightningCLI config.yaml beside it); pass the corpus name "
            "(corpus_name=... / `dsf export --corpus NAME`)"
        )
    if isinstance(corpus, str):
        from ..data.corpora import load_corpus

        options = dict(settings.get("corpus_options") or {}) if settings.get("corpus") == corpus else {}
        options.update(corpus_options or {})
        root = data_root if data_root is not None else (settings.get("data_root") if settings.get("corpus") == corpus else None)
        corpus_obj = load_corpus(corpus, data_root=root, **options)
    else:
        corpus_obj, options = corpus, dict(corpus_options or {})
        if reader is not None:
            options = {**dict(settings.get("corpus_options") or {}), **options}
        if not hasattr(corpus_obj, "vocab"):
            raise TypeError(f"corpus must be a corpus name or a loaded Corpus, got {type(corpus).__name__}")
    vocab = corpus_obj.vocab
    if not isinstance(vocab, Vocabulary):
        raise CheckpointError(f"corpus {getattr(corpus_obj, 'name', corpus)!r} has no Vocabulary object (got {type(vocab).__name__})")
    if len(vocab) != config.vocab_size:
        raise CheckpointError(
            f"{path}: the model has vocab_size={config.vocab_size:,} but corpus {corpus_obj.name!r} "
            f"(options {options}) gives {len(vocab):,} symbols: wrong corpus or corpus options"
        )
    tokenizer = getattr(corpus_obj, "tokenizer", None) or get_tokenizer(corpus_obj.tokenizer_name)
    training = train_config.to_dict()
    recorded = {
        "corpus": corpus_obj.name,
        "corpus_options": jsonable({k: v for k, v in options.items() if k != "path"}),
        "tokenizer": tokenizer.name,
        "checkpoint": {
            "file": path.name,
            "epoch": ckpt.get("epoch"),
            "global_step": ckpt.get("global_step"),
            "lightning_version": ckpt.get("pytorch-lightning_version"),
        },
        "training": jsonable(training),
    }
    if which_weights is not None:
        recorded["checkpoint"]["weights"] = which_weights
    recorded.update(copy.deepcopy(info or {}))
    # the text normalizer: the one the data module applied (data.normalize), else the corpus's own form
    from ..data.corpora import normalizer_for_corpus

    asked = settings.get("normalize")
    if asked is None and reader is not None:
        asked = reader.normalize
    normalize = check_normalize(asked) if asked is not None else normalizer_for_corpus(corpus_obj.name)
    return Pretrained(model=model, vocab=vocab, tokenizer=tokenizer, info=plain_json(recorded, "info"), normalize=normalize)
