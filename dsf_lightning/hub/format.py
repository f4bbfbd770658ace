"""The pretrained-model folder: write it atomically, read it strictly, make it from a Lightning checkpoint.

A folder holds (Hugging Face convention)::

    config.json         {"format": "dsf-lightning", "format_version": 2, "library_version": ...,
                         "model": LMConfig.to_dict(), "info": {...},
                         "weights": {"dtype": "float32" | "float16", "tied_weights": {...}},
                         "files": {name: {"sha256": ..., "size": ...}},   (checksums of the files below
                                                                          but README.md)
                         "tokenizer": {"name": ..., "fingerprint": ...},  (what the model was trained
                         "vocabulary": {"size": ..., "fingerprint": ...},  with; absent in older folders)
                         "normalize": "ptb"}  (the text normalizer, dsf_lightning.data.normalize; absent: none)
    model.safetensors   the RecurrentLM state dict; every tensor stored once (tied / shared tensors are
                        recorded in the metadata, never duplicated); float16 storage halves the
                        parameters and loading casts them back to the model's float32
    vocab.json          Vocabulary.to_json()
    dsf_tokenizer.json  Tokenizer.to_json() (options and learned state, e.g. the subword dictionary)
    tokenizer.json      a Hugging Face ``tokenizers``-library file giving exactly the same ids, written only
                        where one is exact (word and character models; not the subword splitter): see
                        :mod:`.hf_tokenizer`. Format version 1 folders held our tokenizer under this name;
                        they are still read (their ``tokenizer.json`` is read as ``dsf_tokenizer.json``)
    README.md           the model card, with model-index evaluation results (not checksummed: cards
                        are edited on the Hub)

Loading is strict (unlike huggingface_hub's mixin, which keeps random weights for renamed keys): a
missing or extra tensor, a shape that config.json does not imply, a checksum mismatch, a truncated or
forged safetensors file, a pickle in disguise, a config that is not JSON or comes from a newer format,
a missing file, a dsf_tokenizer.json / vocab.json that is not the one config.json records (older folders:
a tokenizer that cannot produce the vocabulary's symbols, or of another kind than ``info.tokenizer``),
JSON nested deeper than 64 levels or holding a 30+-digit integer, a model.safetensors larger than the
model config.json describes (refused from its size, before it is read) — each raises
:class:`PretrainedFormatError` naming the file, what is wrong and what to do. Nothing is ever unpickled: JSON and safetensors only. Lightning checkpoints are read with
``torch.load(weights_only=True)``, which only rebuilds tensors and plain containers.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import math
import os
import pickle
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from .. import __version__
from .._json import JSONLimitError, loads_bounded
from ..cells import UnknownCellError, get_cell, list_cells
from ..data.tokenizers import Tokenizer, TokenizerError, get_tokenizer, tokenizer_from_json
from ..data.vocab import Vocabulary, VocabularyError
from ..model import LMConfig, ModelConfigError, RecurrentLM
from . import _atomic, _safetensors
from .card import build_model_card, normalize_eval_results
from .hf_tokenizer import hf_tokenizer_json

logger = logging.getLogger(__name__)

FORMAT = "dsf-lightning"
FORMAT_VERSION = 2  # 2: our tokenizer in dsf_tokenizer.json, tokenizer.json a tokenizers-library file
READABLE_VERSIONS = (1, 2)  # 1: our tokenizer in tokenizer.json
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
VOCAB_FILE = "vocab.json"
DSF_TOKENIZER_FILE = "dsf_tokenizer.json"
HF_TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_FILE = DSF_TOKENIZER_FILE  # where this library's tokenizer lives in the current format
LEGACY_TOKENIZER_FILE = HF_TOKENIZER_FILE  # where format version 1 kept it
CARD_FILE = "README.md"
CHECKSUMMED = (WEIGHTS_FILE, VOCAB_FILE, DSF_TOKENIZER_FILE)  # always present (format version 2)
OPTIONAL_CHECKSUMMED = (HF_TOKENIZER_FILE,)  # present where exact; checked when config.json records it
#: every file a model folder may hold: what a download fetches (allow_patterns) and a push uploads
MODEL_FILES = (CONFIG_FILE, WEIGHTS_FILE, VOCAB_FILE, DSF_TOKENIZER_FILE, HF_TOKENIZER_FILE, CARD_FILE)
STORAGE_DTYPES = {"float32": torch.float32, "float16": torch.float16}
#: what loading may cast the weights to (``dtype=`` of load_pretrained / from_pretrained)
LOAD_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
FLOAT16_MAX = 65504.0
MAX_JSON_BYTES = 256 * 1024 * 1024
TIED = {"decoder.weight": "embedding.weight"}  # what tie_weights means in a RecurrentLM
REDO = "re-export it (save_pretrained / `dsf export`) or download it again"
HEADER_ALLOWANCE = 1 << 20  # bytes allowed for model.safetensors' header on top of its tensors


class PretrainedFormatError(ValueError):
    """A pretrained folder (or checkpoint) cannot be loaded; the message names the file and the fix."""


class CheckpointError(PretrainedFormatError):
    """A Lightning checkpoint cannot be turned into a pretrained model."""


@dataclass
class Pretrained:
    """A trained language model with everything needed to score text.

    ``info`` is plain JSON about where the model comes from. Keys the model card uses when present:
    ``corpus``, ``recipe``, ``metrics`` (e.g. ``{"valid_ppl": 97.2, "test_ppl": 93.1}`` or ``*_bpc``),
    ``training_time``, ``hardware``, ``training`` (optimizer settings), ``comparison`` (lines),
    ``description``, ``intended_use``, ``limitations``, ``name``, ``repo_id``.

    ``normalize``: the text normalizer the training data calls for (:mod:`dsf_lightning.data.normalize`,
    e.g. ``"ptb"``), recorded as config.json's ``normalize`` and applied by the Scorer by default; None:
    text is read as it is.
    """

    model: RecurrentLM
    vocab: Vocabulary
    tokenizer: Tokenizer
    info: dict = field(default_factory=dict)
    normalize: str | None = None

    @property
    def config(self) -> LMConfig:
        return self.model.config

    def save_pretrained(self, folder, **kwargs) -> Path:
        """Same as :func:`save_pretrained` (``self`` first)."""
        return save_pretrained(self, folder, **kwargs)


# =============================================================================================== saving
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_text(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def _plain_json(value: Any, what: str) -> Any:
    """A deep copy of ``value`` through strict JSON (no NaN, no objects), or a ValueError naming it."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} must be plain JSON (dicts, lists, strings, finite numbers): {err}") from None


def _shared_aliases(state: dict[str, torch.Tensor], parameters: set[str]) -> dict[str, str]:
    """``{alias: canonical}`` for state-dict entries that are the very same tensor as another one
    (the canonical name is a parameter's when one of them is a parameter)."""
    seen: dict[tuple, str] = {}
    aliases = {}
    order = sorted(state, key=lambda name: name not in parameters)  # stable: parameters first
    for name in order:
        t = state[name]
        if t.numel() == 0:
            continue
        key = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if key in seen:
            aliases[name] = seen[key]
        else:
            seen[key] = name
    return aliases


def weights_for_saving(model: RecurrentLM, dtype: str = "float32") -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and safetensors metadata :func:`save_pretrained` writes for ``model``.

    Tensors that share memory are stored once (``aliases`` metadata); with ``dtype="float16"`` every
    floating-point *parameter* is stored in half precision (buffers keep their dtype), refusing values
    beyond float16's range rather than writing infinities.
    """
    if dtype not in STORAGE_DTYPES:
        raise ValueError(f"dtype must be one of {sorted(STORAGE_DTYPES)}, got {dtype!r}")
    state = model.state_dict()
    parameters = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    aliases = _shared_aliases(state, parameters)
    tensors = {}
    for name, t in state.items():
        if name in aliases:
            continue
        t = t.detach().to("cpu")
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise ValueError(f"tensor {name!r} holds NaN or infinite values: refusing to save a broken model")
        if dtype == "float16" and name in parameters and t.is_floating_point():
            peak = float(t.abs().max()) if t.numel() else 0.0
            if peak > FLOAT16_MAX:
                raise ValueError(f"tensor {name!r} has values up to {peak:.4g}, beyond float16's {FLOAT16_MAX}: save with dtype='float32'")
            t = t.to(torch.float16)
        tensors[name] = t.contiguous()
    metadata = {
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "dtype": dtype,
        "aliases": json.dumps(aliases, sort_keys=True),
        "tied_weights": json.dumps(TIED if model.config.tie_weights else {}, sort_keys=True),
    }
    return tensors, metadata


def save_pretrained(
    pretrained: Pretrained,
    folder,
    *,
    dtype: str = "float32",
    eval_results: list[dict] | None = None,
    card_extra: dict | None = None,
) -> Path:
    """Write ``pretrained`` to ``folder`` (see the module docstring) atomically and return its path.

    The folder is built as a hidden temporary sibling and swapped into place only when complete, so a
    failure or a kill at any point leaves the previous folder (if any) untouched. An existing folder is
    replaced only if it is empty or is itself a dsf-lightning pretrained folder.

    ``dtype``: ``"float32"`` (bit-exact) or ``"float16"`` (half the size; loading casts back).
    ``eval_results``: the card's model-index results, e.g.
    ``[{"metric": "perplexity", "value": 93.1, "dataset": "ptb", "split": "test"}]`` (default: from
    ``info["metrics"]``). ``card_extra``: card field / metadata overrides (see
    :func:`~dsf_lightning.hub.card.build_model_card`).
    """
    if not isinstance(pretrained.model, RecurrentLM):
        raise TypeError(f"pretrained.model must be a RecurrentLM, got {type(pretrained.model).__name__}")
    info = _plain_json(pretrained.info if pretrained.info is not None else {}, "Pretrained.info")
    if not isinstance(info, dict):
        raise ValueError(f"Pretrained.info must be a dict, got {type(info).__name__}")
    if len(pretrained.vocab) != pretrained.model.config.vocab_size:
        raise ValueError(
            f"the vocabulary has {len(pretrained.vocab):,} symbols but the model's vocab_size is "
            f"{pretrained.model.config.vocab_size:,}: they do not belong together"
        )
    tensors, metadata = weights_for_saving(pretrained.model, dtype)
    folder = Path(folder).expanduser()
    # build the card before touching the disk, so bad eval_results / card_extra fail early
    if eval_results is not None:
        eval_results = normalize_eval_results(eval_results)
    normalize = _check_normalize(pretrained.normalize)
    snapshot = Pretrained(pretrained.model, pretrained.vocab, pretrained.tokenizer, info, normalize)
    hf_tokenizer = hf_tokenizer_json(pretrained.tokenizer, pretrained.vocab)
    build_model_card(snapshot, eval_results=eval_results, card_extra=card_extra, name=folder.name)

    def write(tmp: Path) -> None:
        with open(tmp / WEIGHTS_FILE, "wb") as f:
            f.write(_safetensors.serialize(tensors, metadata))
        _write_text(tmp / VOCAB_FILE, pretrained.vocab.to_json())
        _write_text(tmp / DSF_TOKENIZER_FILE, pretrained.tokenizer.to_json())
        if hf_tokenizer is not None:
            _write_text(tmp / HF_TOKENIZER_FILE, hf_tokenizer)
        written = [name for name in (*CHECKSUMMED, *OPTIONAL_CHECKSUMMED) if (tmp / name).is_file()]
        files = {name: {"sha256": _sha256(tmp / name), "size": (tmp / name).stat().st_size} for name in written}
        config = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "library_version": __version__,
            "torch_version": torch.__version__.split("+")[0],
            "model": pretrained.model.config.to_dict(),
            "info": info,
            "weights": {"dtype": dtype, "tied_weights": json.loads(metadata["tied_weights"]), "aliases": json.loads(metadata["aliases"])},
            "files": files,
            # what the model was trained with: checked on load, so a swapped tokenizer.json / vocab.json is
            # refused even when a forger rehashed "files" (issue 13 item 6)
            **identity_records(pretrained.tokenizer, pretrained.vocab),
            **({"normalize": normalize} if normalize else {}),  # the text normalizer (absent: none)
        }
        _write_text(tmp / CONFIG_FILE, json.dumps(config, indent=2, ensure_ascii=False) + "\n")
        sizes = {name: (tmp / name).stat().st_size for name in (CONFIG_FILE, *written)}
        card = build_model_card(snapshot, eval_results=eval_results, card_extra=card_extra, files=sizes, name=folder.name)
        _write_text(tmp / CARD_FILE, str(card))

    path = _atomic.write_folder_atomically(folder, write, may_replace=_is_pretrained_folder)
    logger.info("saved %s (%s weights)", path, dtype)
    return path


def _check_normalize(name) -> str | None:
    """A normalizer name to record (None for ``"none"`` or None); an unknown one is a ValueError."""
    from ..data.normalize import NormalizerError, get_normalizer

    try:
        normalizer = get_normalizer(name)
    except NormalizerError as err:
        raise ValueError(f"Pretrained.normalize: {err}") from None
    return normalizer.name if normalizer is not None else None


def fingerprint(document: dict) -> str:
    """sha256 of a canonical JSON rendering of ``document`` (a tokenizer's or vocabulary's ``to_dict()``):
    the same content gives the same fingerprint however its file is formatted."""
    text = json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def identity_records(tokenizer: Tokenizer, vocab: Vocabulary) -> dict:
    """config.json's ``tokenizer`` and ``vocabulary`` records: which tokenizer (kind and fingerprint of its
    options and learned state) and which vocabulary (size and fingerprint) the model was trained with."""
    return {
        "tokenizer": {"name": tokenizer.name, "fingerprint": fingerprint(tokenizer.to_dict())},
        "vocabulary": {"size": len(vocab), "fingerprint": fingerprint(vocab.to_dict())},
    }


def _is_pretrained_folder(folder: Path) -> bool:
    """True when ``folder`` looks like a (possibly broken) dsf-lightning folder that may be replaced."""
    try:
        head = (folder / CONFIG_FILE).read_bytes()[:4096]
    except OSError:
        return False
    return b'"dsf-lightning"' in head and b'"format"' in head


# =============================================================================================== loading
def _fail(path: Path, problem: str, fix: str = REDO) -> PretrainedFormatError:
    return PretrainedFormatError(f"{path}: {problem}; {fix}")


def _read_bytes(path: Path, limit: int | None = None) -> bytes:
    if not path.is_file():
        raise _fail(path, "missing file" if not path.exists() else "not a regular file",
                    f"a dsf-lightning model folder holds {CONFIG_FILE}, {WEIGHTS_FILE}, {VOCAB_FILE} and {DSF_TOKENIZER_FILE}; {REDO}")
    size = path.stat().st_size
    if limit is not None and size > limit:
        raise _fail(path, f"{size:,} bytes is far larger than such a file can be (limit {limit:,})")
    try:
        with open(path, "rb") as f:  # never more than the limit, even if the file grows meanwhile
            data = f.read() if limit is None else f.read(min(os.fstat(f.fileno()).st_size, limit) + 1)
    except OSError as err:
        raise _fail(path, f"cannot be read ({err.strerror or err})", "check its permissions") from None
    if limit is not None and len(data) > limit:
        raise _fail(path, f"grew past {limit:,} bytes while it was being read")
    return data


def _read_json(path: Path) -> Any:
    """A JSON file, bounded (depth, integer sizes, no NaN: :func:`loads_bounded`); errors name the file
    and the place in it (e.g. ``model.vocab_size``), never a RecursionError."""
    data = _read_bytes(path, MAX_JSON_BYTES)
    try:
        return loads_bounded(data.decode("utf-8"))
    except (UnicodeDecodeError, JSONLimitError) as err:
        if _safetensors._sniff_pickle(data):
            raise _fail(path, "is a binary pickle / zip file, not JSON (refused: nothing was unpickled)") from None
        if isinstance(err, JSONLimitError):
            raise _fail(path, str(err).removeprefix("it ")) from None
        raise _fail(path, f"is not UTF-8 text ({err.reason} at byte {err.start})") from None


def _read_config(folder: Path) -> dict:
    path = folder / CONFIG_FILE
    config = _read_json(path)
    if not isinstance(config, dict):
        raise _fail(path, f"holds a JSON {type(config).__name__}, not an object")
    if config.get("format") != FORMAT:
        raise _fail(path, f"format is {config.get('format')!r}, not {FORMAT!r}: this is not a dsf-lightning model folder",
                    "load it with the library that wrote it")
    version = config.get("format_version")
    if type(version) is not int:
        raise _fail(path, f"format_version must be an integer, got {version!r}")
    if version not in READABLE_VERSIONS:
        written = config.get("library_version", "an unknown version")
        if version > FORMAT_VERSION:
            raise _fail(path, f"format_version {version} is newer than this dsf-lightning {__version__} reads "
                        f"(version {FORMAT_VERSION}); it was written by dsf-lightning {written}",
                        "upgrade: pip install -U dsf-lightning")
        raise _fail(path, f"format_version {version} is no longer supported (this library reads {READABLE_VERSIONS})",
                    f"load it with dsf-lightning {written} and save it again with this version")
    for key, kind in (("model", dict), ("info", dict), ("weights", dict), ("files", dict)):
        if not isinstance(config.get(key), kind):
            raise _fail(path, f"{key!r} is missing or not a JSON object")
    try:
        config["model_config"] = LMConfig.from_dict(config["model"])
    except (ModelConfigError, TypeError, ValueError) as err:
        raise _fail(path, f"the model configuration is invalid: {err}") from None
    try:
        get_cell(config["model_config"].cell)
    except UnknownCellError:
        raise _unknown_cell(path, config["model_config"].cell) from None
    dtype = config["weights"].get("dtype")
    if dtype not in STORAGE_DTYPES:
        raise _fail(path, f"weights.dtype is {dtype!r}, not one of {sorted(STORAGE_DTYPES)}")
    config["tokenizer_file"] = tokenizer_file = DSF_TOKENIZER_FILE if version >= 2 else LEGACY_TOKENIZER_FILE
    required = (WEIGHTS_FILE, VOCAB_FILE, tokenizer_file)
    optional = OPTIONAL_CHECKSUMMED if version >= 2 else ()
    for name in (*required, *(n for n in optional if n in config["files"])):
        record = config["files"].get(name)
        if not (isinstance(record, dict) and isinstance(record.get("sha256"), str) and type(record.get("size")) is int):
            raise _fail(path, f"files[{name!r}] must record the file's sha256 and size")
    return config


def _weights_bound(folder: Path, config: dict, expected: dict[str, torch.Tensor], lm_config: LMConfig) -> int:
    """The most bytes model.safetensors can hold for the model config.json describes (every tensor of
    its state dict in its own dtype, none shared, plus :data:`HEADER_ALLOWANCE`), checked against the
    file's size on disk before anything is read: a forged (e.g. sparse multi-GB) file is refused
    without allocating its size."""
    path = folder / WEIGHTS_FILE
    bound = HEADER_ALLOWANCE + sum(t.numel() * t.element_size() for t in expected.values())
    if path.is_file():
        size = path.stat().st_size
        recorded = config["files"][WEIGHTS_FILE]["size"]
        if size != recorded:
            hint = " (truncated: an interrupted download or copy?)" if size < recorded else ""
            raise _fail(path, f"has {size:,} bytes but {CONFIG_FILE} records {recorded:,}{hint}")
        if size > bound:
            raise _fail(path, f"has {size:,} bytes, but the model {CONFIG_FILE} describes ({_describe(lm_config)}) "
                        f"stores at most {bound:,}: these are not its weights (forged or corrupted)")
    return bound


def _check_identity(folder: Path, config: dict, tokenizer: Tokenizer, vocab: Vocabulary) -> None:
    """tokenizer.json and vocab.json are the ones the model was trained with (config.json's ``tokenizer``
    and ``vocabulary`` records). A folder written before those records existed is checked by what can
    be inferred: ``info.tokenizer`` (written by the checkpoint export) names the kind, and the tokenizer
    must be able to produce the vocabulary's symbols."""
    config_path, tok_path, vocab_path = folder / CONFIG_FILE, folder / config["tokenizer_file"], folder / VOCAB_FILE
    records = {key: config.get(key) for key in ("tokenizer", "vocabulary")}
    for key, rec in records.items():
        fields = ("name", "fingerprint") if key == "tokenizer" else ("size", "fingerprint")
        if rec is not None and not (isinstance(rec, dict) and isinstance(rec.get("fingerprint"), str)
                                    and type(rec.get(fields[0])) is (str if key == "tokenizer" else int)):
            raise _fail(config_path, f"{key!r} must record the {' and '.join(fields)} of the model's {key}")
    rec = records["tokenizer"]
    if rec is not None:
        if tokenizer.name != rec["name"]:
            raise _fail(tok_path, f"holds a {tokenizer.name!r} tokenizer but {CONFIG_FILE} says the model was trained "
                        f"with a {rec['name']!r} tokenizer: the file was swapped")
        if fingerprint(tokenizer.to_dict()) != rec["fingerprint"]:
            raise _fail(tok_path, f"is not the {rec['name']!r} tokenizer the model was trained with: its options or "
                        f"learned state differ from {CONFIG_FILE}'s fingerprint (the file was swapped or edited)")
    else:
        named = config["info"].get("tokenizer")
        if isinstance(named, str) and named != tokenizer.name:
            raise _fail(tok_path, f"holds a {tokenizer.name!r} tokenizer but {CONFIG_FILE}'s info.tokenizer says the "
                        f"model was trained with a {named!r} tokenizer: the file was swapped")
        made, sampled = _producible(tokenizer, vocab)
        if sampled and made * 2 < sampled:
            raise _fail(tok_path, f"a {tokenizer.name!r} tokenizer produces only {made:,} of {sampled:,} sampled "
                        f"symbols of {VOCAB_FILE}: it is not the tokenizer the model was trained with (swapped?)")
    rec = records["vocabulary"]
    if rec is not None and (len(vocab) != rec["size"] or fingerprint(vocab.to_dict()) != rec["fingerprint"]):
        raise _fail(vocab_path, f"is not the vocabulary the model was trained with: its symbols (or their order) "
                    f"differ from {CONFIG_FILE}'s fingerprint (the file was swapped or edited)")


def _producible(tokenizer: Tokenizer, vocab: Vocabulary, sample: int = 2000) -> tuple[int, int]:
    """How many of (up to ``sample``, evenly spaced) ordinary vocabulary symbols the tokenizer turns into
    exactly that symbol: a word vocabulary read by a character tokenizer scores almost none."""
    specials = {vocab.eos, vocab.unk}
    symbols = [s for s in vocab.symbols if s not in specials and not (s.startswith("<") and s.endswith(">"))]
    if len(symbols) > sample:
        symbols = symbols[:: len(symbols) // sample][:sample]
    made = 0
    for symbol in symbols:
        try:
            tokens = tokenizer.tokenize_line(symbol)
        except Exception:  # noqa: BLE001 - a tokenizer that cannot read the symbol does not produce it
            continue
        if tokenizer.eos is not None and tokens and tokens[-1] == tokenizer.eos:
            tokens = tokens[:-1]
        made += tokens == [symbol]
    return made, len(symbols)


def _checked_bytes(folder: Path, name: str, config: dict, limit: int | None = None) -> bytes:
    path = folder / name
    data = _read_bytes(path, limit)
    record = config["files"][name]
    if len(data) != record["size"]:
        hint = " (truncated: an interrupted download or copy?)" if len(data) < record["size"] else ""
        raise _fail(path, f"has {len(data):,} bytes but {CONFIG_FILE} records {record['size']:,}{hint}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != record["sha256"]:
        raise _fail(path, f"sha256 {digest[:16]}... does not match {CONFIG_FILE}'s {record['sha256'][:16]}...: "
                    "the file is corrupted or was replaced")
    return data


CELL_FIX = ("install the package that provides that cell (entry point group 'dsf_lightning.cells'), upgrade "
            "dsf-lightning (pip install -U dsf-lightning), or correct the cell name")


def _unknown_cell(source: Path, name: object) -> PretrainedFormatError:
    return _fail(source, f"model.cell {name!r} is not a cell this installation knows (known cells: {', '.join(list_cells())})",
                 CELL_FIX)


def _expected_state(
    config: LMConfig,
    source: Path,
    *,
    error: type[PretrainedFormatError] = PretrainedFormatError,
    fix: str = REDO,
) -> tuple[RecurrentLM, dict[str, torch.Tensor]]:
    """The model ``config`` describes (read from ``source``: a folder's config.json or a checkpoint)
    and its state dict; a configuration that cannot be built raises ``error`` naming ``source``."""
    try:
        model = RecurrentLM(config)
    except UnknownCellError as err:  # e.g. an unknown base cell in the options of a wrapper cell
        raise error(f"{source}: this model configuration cannot be built: {err}; {CELL_FIX}") from None
    except (ModelConfigError, ValueError, TypeError) as err:
        raise error(f"{source}: this model configuration cannot be built: {err}; {fix}") from None
    return model, model.state_dict()


def _describe(config: LMConfig) -> str:
    return (f"cell={config.cell!r}, hidden_sizes={config.hidden_sizes}, embedding_size={config.embedding_size}, "
            f"vocab_size={config.vocab_size}, tie_weights={config.tie_weights}")


def match_state(
    tensors: dict[str, torch.Tensor],
    aliases: dict[str, str],
    expected: dict[str, torch.Tensor],
    config: LMConfig,
    source: str,
    *,
    described_by: str = CONFIG_FILE,
    error: type[PretrainedFormatError] = PretrainedFormatError,
    fix: str = REDO,
) -> dict[str, torch.Tensor]:
    """Check ``tensors`` (+ ``aliases``) against the state dict of the model ``config`` describes and
    return the state dict to load (floating tensors cast to the model's dtypes). Raises ``error``
    naming ``source`` for a missing, extra, misshapen, wrongly typed or non-finite tensor."""
    bad_alias = {a: t for a, t in aliases.items() if t not in tensors}
    if bad_alias:
        raise error(f"{source}: aliases {bad_alias} point at tensors the file does not hold; {fix}")
    available = {**tensors, **{a: tensors[t] for a, t in aliases.items()}}
    missing = [k for k in expected if k not in available]
    extra = [k for k in available if k not in expected]
    problems = []
    if missing:
        problems.append(f"missing tensor(s) {missing[:10]}{' ...' if len(missing) > 10 else ''}")
    if extra:
        problems.append(f"unexpected tensor(s) {extra[:10]}{' ...' if len(extra) > 10 else ''}")
    if problems:
        raise error(
            f"{source}: {' and '.join(problems)} for the model {described_by} describes ({_describe(config)}); "
            f"the weights and {described_by} do not belong together; {fix}"
        )
    state = {}
    for name, want in expected.items():
        got = available[name]
        if tuple(got.shape) != tuple(want.shape):
            raise error(
                f"{source}: tensor {name!r} has shape {list(got.shape)} but {described_by} ({_describe(config)}) "
                f"implies {list(want.shape)}; the weights and {described_by} do not belong together; {fix}"
            )
        if want.is_floating_point():
            if not got.is_floating_point():
                raise error(f"{source}: tensor {name!r} is stored as {got.dtype}, expected a floating type; {fix}")
            if not torch.isfinite(got).all():
                raise error(f"{source}: tensor {name!r} holds NaN or infinite values: the weights are corrupted; {fix}")
            got = got.to(want.dtype)
        elif got.dtype != want.dtype:
            raise error(f"{source}: tensor {name!r} is stored as {got.dtype}, expected {want.dtype}; {fix}")
        state[name] = got
    return state


def _json_metadata(meta: dict[str, str], key: str, path: Path) -> dict:
    try:
        value = loads_bounded(meta.get(key, "{}"))
    except JSONLimitError as err:
        raise _fail(path, f"metadata {key!r} is not a JSON map of tensor names ({err})") from None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise _fail(path, f"metadata {key!r} is not a JSON map of tensor names")
    return value


def resolve_dtype(dtype) -> torch.dtype | None:
    """``dtype`` of the loading functions: None, a torch dtype or its name (``torch.bfloat16``,
    ``"bfloat16"``, ``"torch.bfloat16"``), one of :data:`LOAD_DTYPES`."""
    if dtype is None:
        return None
    choices = "torch.float16, torch.bfloat16 or torch.float32 (or the names 'float16', 'bfloat16', 'float32')"
    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        name = dtype.strip().removeprefix("torch.")
    else:
        raise TypeError(f"dtype must be {choices}, got {dtype!r} ({type(dtype).__name__})")
    if name not in LOAD_DTYPES:
        raise ValueError(f"dtype must be {choices}, got {dtype!r}")
    return LOAD_DTYPES[name]


def load_pretrained(folder, *, dtype=None) -> Pretrained:
    """Read a folder written by :func:`save_pretrained` strictly (see the module docstring).

    Returns the model in eval mode on the CPU, float32 unless ``dtype`` (see :func:`resolve_dtype`) asks
    for float16 / bfloat16: the weights are cast after the strict, checked load. Raises
    :class:`PretrainedFormatError`.
    """
    dtype = resolve_dtype(dtype)
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        leftovers = [p for p in _atomic.interrupted_leftovers(folder) if p.name.startswith(f".{folder.name}.old-")]
        hint = (f"an interrupted save left the previous version at {leftovers[0]}; rename it to {folder.name}"
                if leftovers else "give the folder that holds config.json and model.safetensors")
        raise PretrainedFormatError(f"{folder}: {'no such folder' if not folder.exists() else 'not a folder'}; {hint}")
    config = _read_config(folder)
    lm_config: LMConfig = config["model_config"]

    vocab_path, tok_path, weights_path = folder / VOCAB_FILE, folder / config["tokenizer_file"], folder / WEIGHTS_FILE
    vocab_bytes = _checked_bytes(folder, VOCAB_FILE, config, MAX_JSON_BYTES)
    try:
        vocab = Vocabulary.from_json(vocab_bytes.decode("utf-8"))
    except (VocabularyError, TokenizerError, UnicodeDecodeError) as err:
        raise _fail(vocab_path, f"is not a valid vocabulary ({err})") from None
    except (KeyError, TypeError, AttributeError, ValueError) as err:  # should not happen: from_json checks its input
        raise _fail(vocab_path, f"is not a valid vocabulary ({type(err).__name__}: {err})") from None
    tok_bytes = _checked_bytes(folder, config["tokenizer_file"], config, MAX_JSON_BYTES)
    for name in OPTIONAL_CHECKSUMMED if config["format_version"] >= 2 else ():
        if name in config["files"]:  # not read by this library, but served to tokenizers users: must be intact
            _checked_bytes(folder, name, config, MAX_JSON_BYTES)
    try:
        tokenizer = tokenizer_from_json(tok_bytes.decode("utf-8"))
    except (TokenizerError, VocabularyError, UnicodeDecodeError) as err:
        raise _fail(tok_path, f"is not a valid tokenizer ({err})") from None
    except (KeyError, TypeError, AttributeError, ValueError) as err:  # e.g. a user-registered tokenizer's own checks
        raise _fail(tok_path, f"is not a valid tokenizer ({type(err).__name__}: {err})") from None
    if len(vocab) != lm_config.vocab_size:
        raise _fail(vocab_path, f"holds {len(vocab):,} symbols but {CONFIG_FILE} says vocab_size={lm_config.vocab_size:,}")
    if tokenizer.eos != vocab.eos:
        raise _fail(tok_path, f"ends lines with {tokenizer.eos!r} but the vocabulary's end symbol is {vocab.eos!r}")
    _check_identity(folder, config, tokenizer, vocab)

    # the model config.json describes, built before the weights are read: its tensors bound the file's size
    model, expected = _expected_state(lm_config, folder / CONFIG_FILE)
    data = _checked_bytes(folder, WEIGHTS_FILE, config, _weights_bound(folder, config, expected, lm_config))
    try:
        tensors, meta = _safetensors.parse(data)
    except _safetensors.SafetensorsFormatError as err:
        raise _fail(weights_path, f"is not a valid safetensors file: {err}") from None
    if meta.get("format") != FORMAT:
        raise _fail(weights_path, f"metadata format is {meta.get('format')!r}, not {FORMAT!r}: not written by save_pretrained")
    if meta.get("dtype") != config["weights"]["dtype"]:
        raise _fail(weights_path, f"metadata dtype {meta.get('dtype')!r} differs from {CONFIG_FILE}'s {config['weights']['dtype']!r}")
    tied = _json_metadata(meta, "tied_weights", weights_path)
    if bool(tied) != lm_config.tie_weights or (tied and tied != TIED):
        raise _fail(weights_path, f"records tied weights {tied} but {CONFIG_FILE} says tie_weights={lm_config.tie_weights}")
    aliases = _json_metadata(meta, "aliases", weights_path)
    state = match_state(tensors, aliases, expected, lm_config, str(weights_path))
    model.load_state_dict(state, strict=True)
    model.eval()
    if dtype is not None:
        model.to(dtype)
    info = config["info"]
    normalize = config.get("normalize")  # a name this installation may not know: the Scorer says so
    if normalize is not None and not (isinstance(normalize, str) and normalize.strip()):
        raise _fail(folder / CONFIG_FILE, f"'normalize' must name a text normalizer (e.g. \"ptb\") or be absent, got {normalize!r:.80}")
    return Pretrained(model=model, vocab=vocab, tokenizer=tokenizer, info=info, normalize=normalize)


# =============================================================================================== checkpoints
def _load_checkpoint(path: Path) -> dict:
    """``torch.load(weights_only=True)``: tensors, numbers, strings and plain containers only."""
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"(?:Unsupported global|GLOBAL)[^\n]*", str(err))
        what = found.group(0).strip() if found else str(err).splitlines()[0]
        raise CheckpointError(
            f"{path}: holds Python objects that safe (weights_only) loading refuses ({what}); dsf-lightning never "
            "unpickles arbitrary objects. If you trust the file and the type is harmless, allow it with "
            "torch.serialization.add_safe_globals([...]) and retry"
        ) from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{path}: not a readable PyTorch Lightning checkpoint ({first}); is the file complete?") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "hyper_parameters" not in ckpt:
        keys = sorted(ckpt)[:10] if isinstance(ckpt, dict) else type(ckpt).__name__
        raise CheckpointError(
            f"{path}: not a LanguageModelModule checkpoint (needs 'state_dict' and 'hyper_parameters', found {keys})"
        )
    return ckpt


def _config_from_hparams(hparams: dict, path: Path) -> LMConfig:
    if not isinstance(hparams, dict):
        raise CheckpointError(f"{path}: hyper_parameters is a {type(hparams).__name__}, not a dict")
    fields = {f.name for f in dataclasses.fields(LMConfig)}
    values = {k: v for k, v in hparams.items() if k in fields}
    if "vocab_size" not in values:
        raise CheckpointError(f"{path}: hyper_parameters has no vocab_size: not a LanguageModelModule checkpoint")
    if values.get("cell_options") is None:
        values["cell_options"] = {}
    values["cell_options"] = dict(values["cell_options"])
    if isinstance(values.get("hidden_sizes"), int):
        values["hidden_sizes"] = [values["hidden_sizes"]]
    try:
        return LMConfig(**values)
    except (ModelConfigError, TypeError) as err:
        raise CheckpointError(f"{path}: hyper_parameters do not make a valid model: {err}") from None


def _cli_data_config(path: Path) -> dict:
    """The ``data`` section of a LightningCLI ``config.yaml`` beside the checkpoint (or one/two levels up)."""
    import yaml

    for folder in (path.parent, path.parent.parent, path.parent.parent.parent):
        candidate = folder / "config.yaml"
        if candidate.is_file():
            try:
                data = yaml.safe_load(candidate.read_text(encoding="utf-8")) or {}
            except (yaml.YAMLError, OSError, UnicodeDecodeError) as err:
                logger.warning("ignoring %s: %s", candidate, err)
                continue
            section = data.get("data") if isinstance(data, dict) else None
            if isinstance(section, dict):
                section = section.get("init_args", section)
                if isinstance(section, dict) and section.get("corpus"):
                    logger.info("corpus settings from %s", candidate)
                    return dict(section, _source=str(candidate))
    return {}


def _jsonable(value: Any) -> Any:
    if isinstance(value, Tokenizer):
        return value.to_dict()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value)):
        return value
    return str(value)


def pretrained_from_checkpoint(
    ckpt_path,
    corpus=None,
    *,
    data_root=None,
    corpus_options: dict | None = None,
    info: dict | None = None,
) -> Pretrained:
    """A :class:`Pretrained` from a ``LanguageModelModule`` checkpoint.

    The checkpoint is read with ``torch.load(weights_only=True)`` (never a full unpickle). The model
    config comes from ``hyper_parameters``, the weights from the ``state_dict`` keys under ``model.``
    (checked strictly). The vocabulary and tokenizer come from ``corpus``: a loaded ``Corpus``, or a
    corpus name; when ``None`` the name (and data root / options) is taken from the checkpoint's
    ``datamodule_hyper_parameters`` or from a LightningCLI ``config.yaml`` beside it. ``info`` is
    merged over what is recorded automatically (corpus, checkpoint epoch/step, training settings).
    """
    path = Path(ckpt_path).expanduser()
    ckpt = _load_checkpoint(path)
    config = _config_from_hparams(ckpt["hyper_parameters"], path)
    state = {k[len("model."):]: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    if not state:
        raise CheckpointError(f"{path}: state_dict has no 'model.' entries: not a LanguageModelModule checkpoint")
    model, expected = _expected_state(
        config, path, error=CheckpointError,
        fix="was the checkpoint written by LanguageModelModule, with a cell and options this installation provides?"
    )
    checked = match_state(
        state, {}, expected, config, f"{path} (state_dict)", described_by="its hyper_parameters", error=CheckpointError,
        fix="was the checkpoint written by LanguageModelModule with these settings?",
    )
    model.load_state_dict(checked, strict=True)
    model.eval()

    settings = {}
    dm = ckpt.get("datamodule_hyper_parameters")
    if isinstance(dm, dict) and dm.get("corpus"):
        settings = dict(dm, _source=f"{path.name} datamodule_hyper_parameters")
    elif corpus is None:
        settings = _cli_data_config(path)
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
    fields = {f.name for f in dataclasses.fields(LMConfig)}
    training = {k: v for k, v in ckpt["hyper_parameters"].items() if k not in fields and not k.startswith("_")}
    recorded = {
        "corpus": corpus_obj.name,
        "corpus_options": _jsonable({k: v for k, v in options.items() if k != "path"}),
        "tokenizer": tokenizer.name,
        "checkpoint": {
            "file": path.name,
            "epoch": ckpt.get("epoch"),
            "global_step": ckpt.get("global_step"),
            "lightning_version": ckpt.get("pytorch-lightning_version"),
        },
        "training": _jsonable(training),
    }
    recorded.update(copy.deepcopy(info or {}))
    # the text normalizer: the one the data module applied (data.normalize), else the corpus's own form
    from ..data.normalize import normalizer_for_corpus

    asked = settings.get("normalize")
    normalize = _check_normalize(asked) if asked is not None else normalizer_for_corpus(corpus_obj.name)
    return Pretrained(model=model, vocab=vocab, tokenizer=tokenizer, info=_plain_json(recorded, "info"), normalize=normalize)


def export_checkpoint(
    ckpt_path,
    folder,
    *,
    corpus_name: str | None = None,
    data_root=None,
    corpus_options: dict | None = None,
    dtype: str = "float32",
    eval_results: list[dict] | None = None,
    info: dict | None = None,
    card_extra: dict | None = None,
    evaluate: Sequence[str] = (),
    dynamic: Sequence[int] = (),
    dynamic_updates: str = "segment",
) -> Path:
    """:func:`pretrained_from_checkpoint` then :func:`save_pretrained`; returns the folder.

    ``evaluate`` (e.g. ``("valid", "test")``) scores those splits' files with the weights exactly as
    stored (rounded to ``dtype`` first) and puts the numbers in the card and ``info["metrics"]``;
    ``dynamic`` (``(1, 2)``) adds the test numbers under dynamic evaluation #1 / #2 (DSF sec 4.2), with an
    SGD update every 20 tokens (``dynamic_updates="segment"``) or after each sentence (``"sentence"``, the
    paper's); ``info["metrics"]["dynamic_updates"]`` and the card record which.
    """
    if dynamic and dynamic_updates not in ("segment", "sentence"):
        raise ValueError(f"dynamic_updates must be 'segment' (every 20 tokens) or 'sentence' (after each sentence), "
                         f"got {dynamic_updates!r}")
    pretrained = pretrained_from_checkpoint(ckpt_path, corpus_name, data_root=data_root, corpus_options=corpus_options, info=info)
    if evaluate:
        from ..evaluation import evaluate_on_corpus

        with torch.no_grad():  # evaluate the weights the folder will hold
            for p in pretrained.model.parameters():
                p.copy_(p.to(STORAGE_DTYPES[dtype]).float())
        results, metrics = evaluate_on_corpus(
            pretrained, pretrained.info["corpus"], evaluate, data_root=data_root, corpus_options=corpus_options
        )
        if dynamic:
            from ..evaluation.corpus_eval import dynamic_results_on_corpus

            more, more_metrics = dynamic_results_on_corpus(
                pretrained, pretrained.info["corpus"], dynamic, data_root=data_root, corpus_options=corpus_options,
                updates=dynamic_updates,
            )
            results, metrics = [*results, *more], {**metrics, **more_metrics}
        eval_results = [*(eval_results or []), *results]
        pretrained.info = {**pretrained.info, "metrics": {**pretrained.info.get("metrics", {}), **metrics}}
    return save_pretrained(pretrained, folder, dtype=dtype, eval_results=eval_results, card_extra=card_extra)
