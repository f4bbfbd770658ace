"""The model folder format, public: what every model folder holds, and one object per kind of folder.

:class:`LanguageModelFolder` and :class:`ClassifierFolder` (both :class:`ModelFolder`) are a folder's files:
``config`` (config.json), ``vocab_json``, ``tokenizer_json`` (a language model also ``hf_tokenizer_json``, the
``tokenizers``-library tokenizer.json), the weights (``tensors``, ``metadata``) and ``card`` (README.md).
``read(path)`` reads one strictly (:func:`read_folder`: whichever kind config.json's ``task`` says), ``write(path)``
writes one atomically. A load reads top-down: the hub reads the folder, then the model's own module builds the
model from it (:func:`dsf_lightning.model.pretrained.load_pretrained`, :func:`dsf_lightning.tasks.pretrained.load_classifier`,
which also take a path) and turns a model back into a folder (``to_folder`` / ``save_pretrained``).

What the kinds share lives here too: the file names, the ``task`` that tells the kinds apart, checksums, bounded
reading, the atomic write, weights in strict safetensors (float16 storage, shared tensors stored once) and the
strict match of stored tensors against the model config.json describes. ``config.json``'s ``task`` names what
the folder holds: ``"language-model"`` (also every folder written before the field existed) or
``"text-classification"``. Reading a folder as the other kind is a :class:`WrongTaskError`, whose message names
the loader to use. The user's page on the format is docs/hub-format.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from .._json import JSONLimitError, loads_bounded
from . import _atomic, _safetensors
from .card import MAX_CARD_BYTES, build_model_card, normalize_eval_results, read_card

logger = logging.getLogger(__name__)

FORMAT = "dsf-lightning"
FORMAT_VERSION = 2  # 2: our tokenizer in dsf_tokenizer.json, tokenizer.json a tokenizers-library file
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
VOCAB_FILE = "vocab.json"
DSF_TOKENIZER_FILE = "dsf_tokenizer.json"
CARD_FILE = "README.md"
HF_TOKENIZER_FILE = "tokenizer.json"  # a tokenizers-library file, where one is exact (language models)
#: every file a model folder may hold: what a download fetches (allow_patterns) and a push uploads
MODEL_FILES = (CONFIG_FILE, WEIGHTS_FILE, VOCAB_FILE, DSF_TOKENIZER_FILE, HF_TOKENIZER_FILE, CARD_FILE)
STORAGE_DTYPES = {"float32": torch.float32, "float16": torch.float16}
#: what loading may cast the weights to (``dtype=`` of the loaders / from_pretrained)
LOAD_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
FLOAT16_MAX = 65504.0
MAX_JSON_BYTES = 256 * 1024 * 1024
REDO = "re-export it (save_pretrained / `dsf export`) or download it again"
HEADER_ALLOWANCE = 1 << 20  # bytes allowed for model.safetensors' header on top of its tensors
MAX_LAYERS = 1024  # layers a folder's config.json may give (the papers' models have 1 to 3)

LANGUAGE_MODEL = "language-model"
TEXT_CLASSIFICATION = "text-classification"
#: task -> (config.json's model_type, its architectures' class: the dsf_lightning class the folder holds)
MODEL_TYPES = {LANGUAGE_MODEL: ("dsf-recurrent-lm", "RecurrentLM"), TEXT_CLASSIFICATION: ("dsf-sequence-classifier", "SequenceClassifier")}
TASKS = (LANGUAGE_MODEL, TEXT_CLASSIFICATION)
AUTO = "auto"  # the loaders' ``task=``: whatever the folder holds
TASK_NAMES = {LANGUAGE_MODEL: "language model", TEXT_CLASSIFICATION: "text classifier"}
#: how to load each kind (named in WrongTaskError)
LOADERS = {
    LANGUAGE_MODEL: "dsf_lightning.from_pretrained(...) (a Scorer), RecurrentLM.from_pretrained(...) or `dsf score --model ...`",
    TEXT_CLASSIFICATION: "dsf_lightning.from_pretrained(...) (a TextClassifier), "
    "dsf_lightning.tasks.SequenceClassifier.from_pretrained(...) or `dsf classify --model ...`",
}


class PretrainedFormatError(ValueError):
    """A pretrained folder (or checkpoint) cannot be loaded; the message names the file and the fix."""


class CheckpointError(PretrainedFormatError):
    """A Lightning checkpoint cannot be turned into a pretrained model."""


class WrongTaskError(PretrainedFormatError):
    """The folder holds another kind of model than the loader reads (the message names the right loader)."""


# =============================================================================================== helpers
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_file(path: Path, data: bytes) -> None:
    """Write one file of a folder being built (looked up when called: tests replace it to fail or die mid-save)."""
    with open(path, "wb") as f:
        f.write(data)


def plain_json(value: Any, what: str) -> Any:
    """A deep copy of ``value`` through strict JSON (no NaN, no objects), or a ValueError naming it."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} must be plain JSON (dicts, lists, strings, finite numbers): {err}") from None


def fingerprint(document: Any) -> str:
    """sha256 of a canonical JSON rendering of ``document`` (a tokenizer's or vocabulary's ``to_dict()``):
    the same content gives the same fingerprint however its file is formatted."""
    text = json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tokenizer_record(tokenizer) -> dict:
    """config.json's ``tokenizer`` record: the tokenizer's kind and the fingerprint of its options and learned
    state (loading refuses a swapped or edited tokenizer file)."""
    return {"name": tokenizer.name, "fingerprint": fingerprint(tokenizer.to_dict())}


def check_normalize(name, what: str = "Pretrained.normalize") -> str | None:
    """A normalizer name to record (None for ``"none"`` or None); an unknown one is a ValueError."""
    from ..data.normalize import NormalizerError, get_normalizer

    try:
        normalizer = get_normalizer(name)
    except NormalizerError as err:
        raise ValueError(f"{what}: {err}") from None
    return normalizer.name if normalizer is not None else None


def _is_pretrained_folder(folder: Path) -> bool:
    """True when ``folder`` looks like a (possibly broken) dsf-lightning folder that may be replaced."""
    try:
        head = (folder / CONFIG_FILE).read_bytes()[:4096]
    except OSError:
        return False
    return b'"dsf-lightning"' in head and b'"format"' in head


CELL_FIX = ("install the package that provides that cell (entry point group 'dsf_lightning.cells'), upgrade "
            "dsf-lightning (pip install -U dsf-lightning), or correct the cell name")


def unknown_cell_error(source: Path, name: object) -> PretrainedFormatError:
    from ..cells import list_cells

    return format_error(source, f"model.cell {name!r} is not a cell this installation knows (known cells: {', '.join(list_cells())})",
                 CELL_FIX)


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON: objects with ``to_dict()`` (tokenizers) as their dict, others as their str."""
    if hasattr(value, "to_dict") and callable(value.to_dict) and not isinstance(value, type):
        return value.to_dict()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value)):
        return value
    return str(value)


# =============================================================================================== saving
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


def state_for_saving(
    model: torch.nn.Module, dtype: str = "float32", tied: dict[str, str] | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and safetensors metadata a folder stores for ``model``.

    Tensors that share memory are stored once (``aliases`` metadata; ``tied``: what the model's config calls
    tied, recorded as ``tied_weights``); with ``dtype="float16"`` every floating-point *parameter* is stored in
    half precision (buffers keep their dtype), refusing values beyond float16's range rather than writing
    infinities.
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
        "tied_weights": json.dumps(tied or {}, sort_keys=True),
    }
    return tensors, metadata


def round_to_storage(model: torch.nn.Module, dtype: str) -> None:
    """Round ``model``'s parameters to the storage ``dtype`` in place (``--evaluate`` measures the weights
    exactly as the folder will hold them)."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(STORAGE_DTYPES[dtype]).to(p.dtype))


def plain_info(info: Any, what: str) -> dict:
    """``info`` (None: ``{}``) as a plain-JSON dict (:func:`plain_json`), or a ValueError naming ``what``."""
    info = plain_json(info if info is not None else {}, what)
    if not isinstance(info, dict):
        raise ValueError(f"{what} must be a dict, got {type(info).__name__}")
    return info


def check_vocab_size(vocab, vocab_size: int) -> None:
    """The vocabulary to save has as many symbols as the model's ``vocab_size``."""
    if len(vocab) != vocab_size:
        raise ValueError(f"the vocabulary has {len(vocab):,} symbols but the model's vocab_size is "
                         f"{vocab_size:,}: they do not belong together")


def config_header(task: str) -> dict:
    """config.json's first fields, the same for every kind: the format, its version, the ``task`` and the
    versions of dsf-lightning and torch that wrote it."""
    from .._version import __version__

    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "task": task,
        # the Hub's conventions (transformers' config.json): which kind of model and which class reads it;
        # informational (the loader goes by "task"), so a folder without them (older) loads the same
        "model_type": MODEL_TYPES[task][0],
        "architectures": [MODEL_TYPES[task][1]],
        "library_version": __version__,
        "torch_version": torch.__version__.split("+")[0],
    }


# =============================================================================================== loading
def format_error(path: Path, problem: str, fix: str = REDO) -> PretrainedFormatError:
    return PretrainedFormatError(f"{path}: {problem}; {fix}")


def _read_bytes(path: Path, limit: int | None = None) -> bytes:
    if not path.is_file():
        raise format_error(path, "missing file" if not path.exists() else "not a regular file",
                    f"a dsf-lightning model folder holds {CONFIG_FILE}, {WEIGHTS_FILE}, {VOCAB_FILE} and {DSF_TOKENIZER_FILE}; {REDO}")
    size = path.stat().st_size
    if limit is not None and size > limit:
        raise format_error(path, f"{size:,} bytes is far larger than such a file can be (limit {limit:,})")
    try:
        with open(path, "rb") as f:  # never more than the limit, even if the file grows meanwhile
            data = f.read() if limit is None else f.read(min(os.fstat(f.fileno()).st_size, limit) + 1)
    except OSError as err:
        raise format_error(path, f"cannot be read ({err.strerror or err})", "check its permissions") from None
    if limit is not None and len(data) > limit:
        raise format_error(path, f"grew past {limit:,} bytes while it was being read")
    return data


def read_json(path: Path) -> Any:
    """A JSON file, bounded (depth, integer sizes, no NaN: :func:`loads_bounded`); errors name the file
    and the place in it (e.g. ``model.vocab_size``), never a RecursionError."""
    data = _read_bytes(path, MAX_JSON_BYTES)
    try:
        return loads_bounded(data.decode("utf-8"))
    except (UnicodeDecodeError, JSONLimitError) as err:
        if _safetensors._sniff_pickle(data):
            raise format_error(path, "is a binary pickle / zip file, not JSON (refused: nothing was unpickled)") from None
        if isinstance(err, JSONLimitError):
            raise format_error(path, str(err).removeprefix("it ")) from None
        raise format_error(path, f"is not UTF-8 text ({err.reason} at byte {err.start})") from None


def _read_format_config(path: Path) -> dict:
    """config.json at ``path`` (bounded): a JSON object of this library's format, else an error saying so."""
    config = read_json(path)
    if not isinstance(config, dict):
        raise format_error(path, f"holds a JSON {type(config).__name__}, not an object")
    if config.get("format") != FORMAT:
        raise format_error(path, f"format is {config.get('format')!r}, not {FORMAT!r}: this is not a dsf-lightning model folder",
                    "load it with the library that wrote it")
    return config


def parse_tokenizer(path: Path, data: bytes):
    """The tokenizer a folder's ``data`` (read from ``path``, already checked) holds, or an error naming the file."""
    from ..data.tokenizers import TokenizerError, tokenizer_from_json
    from ..data.vocab import VocabularyError

    try:
        return tokenizer_from_json(data.decode("utf-8"))
    except (TokenizerError, VocabularyError, UnicodeDecodeError) as err:
        raise format_error(path, f"is not a valid tokenizer ({err})") from None
    except (KeyError, TypeError, AttributeError, ValueError) as err:  # e.g. a user-registered tokenizer's own checks
        raise format_error(path, f"is not a valid tokenizer ({type(err).__name__}: {err})") from None


def _task_of(config: dict, path: Path) -> str:
    task = config.get("task", LANGUAGE_MODEL)  # folders written before the field held language models
    if task not in TASKS:
        raise format_error(path, f"task {task!r:.80} is not a kind of model this installation reads (known: {', '.join(TASKS)})",
                    "upgrade dsf-lightning (pip install -U dsf-lightning) or load it with the library that wrote it")
    return task


def read_config_header(folder: Path, task: str, readable_versions: Iterable[int] = (FORMAT_VERSION,)) -> dict:
    """config.json of ``folder`` with what every kind shares checked: a JSON object of this format, holding a
    ``task`` model (else :class:`WrongTaskError` naming the loader to use), of a readable version, with the
    ``model`` / ``info`` / ``weights`` / ``files`` objects and a known storage dtype."""
    from .._version import __version__

    path = folder / CONFIG_FILE
    config = _read_format_config(path)
    found = _task_of(config, path)
    if found != task:
        raise WrongTaskError(
            f"{folder}: holds a {TASK_NAMES[found]} ({CONFIG_FILE} task {found!r}), not a {TASK_NAMES[task]}: "
            f"load it with {LOADERS[found]}"
        )
    version = config.get("format_version")
    readable = tuple(readable_versions)
    if type(version) is not int:
        raise format_error(path, f"format_version must be an integer, got {version!r}")
    if version not in readable:
        written = config.get("library_version", "an unknown version")
        if version > FORMAT_VERSION:
            raise format_error(path, f"format_version {version} is newer than this dsf-lightning {__version__} reads "
                        f"(version {FORMAT_VERSION}); it was written by dsf-lightning {written}",
                        "upgrade: pip install -U dsf-lightning")
        raise format_error(path, f"format_version {version} is no longer supported (this library reads {readable})",
                    f"load it with dsf-lightning {written} and save it again with this version")
    for key in ("model", "info", "weights", "files"):
        if not isinstance(config.get(key), dict):
            raise format_error(path, f"{key!r} is missing or not a JSON object")
    dtype = config["weights"].get("dtype")
    if dtype not in STORAGE_DTYPES:
        raise format_error(path, f"weights.dtype is {dtype!r}, not one of {sorted(STORAGE_DTYPES)}")
    return config


def folder_task(folder: Path) -> str:
    """The ``task`` of the model folder ``folder`` (read from its config.json, bounded; a folder without
    the field holds a language model)."""
    path = Path(folder) / CONFIG_FILE
    return _task_of(_read_format_config(path), path)


def check_file_records(path: Path, config: dict, names: Iterable[str]) -> None:
    """Every file of ``names`` has a sha256 and size record in config.json's ``files``."""
    for name in names:
        record = config["files"].get(name)
        if not (isinstance(record, dict) and isinstance(record.get("sha256"), str) and type(record.get("size")) is int):
            raise format_error(path, f"files[{name!r}] must record the file's sha256 and size")


def checked_bytes(folder: Path, name: str, config: dict, limit: int | None = None) -> bytes:
    path = folder / name
    data = _read_bytes(path, limit)
    record = config["files"][name]
    if len(data) != record["size"]:
        hint = " (truncated: an interrupted download or copy?)" if len(data) < record["size"] else ""
        raise format_error(path, f"has {len(data):,} bytes but {CONFIG_FILE} records {record['size']:,}{hint}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != record["sha256"]:
        raise format_error(path, f"sha256 {digest[:16]}... does not match {CONFIG_FILE}'s {record['sha256'][:16]}...: "
                    "the file is corrupted or was replaced")
    return data


def _check_recorded_size(path: Path, config: dict) -> int:
    """model.safetensors' size on disk, which must be the size config.json records."""
    size = path.stat().st_size
    recorded = config["files"][WEIGHTS_FILE]["size"]
    if size != recorded:
        hint = " (truncated: an interrupted download or copy?)" if size < recorded else ""
        raise format_error(path, f"has {size:,} bytes but {CONFIG_FILE} records {recorded:,}{hint}")
    return size


def read_weights_header(folder: Path, config: dict) -> tuple[dict, dict[str, str]]:
    """``(tensor entries, metadata)`` of model.safetensors from its header alone (its size checked against
    config.json's record first; the data is not read): what the sizes config.json gives are checked against
    (:func:`check_config_sizes`, :func:`check_weights_header`) before any model is built."""
    path = folder / WEIGHTS_FILE
    if not path.is_file():
        _read_bytes(path)  # raises: missing, or not a regular file
    _check_recorded_size(path, config)
    try:
        return _safetensors.read_header(path)
    except _safetensors.SafetensorsFormatError as err:
        raise format_error(path, f"is not a valid safetensors file: {err}") from None
    except OSError as err:
        raise format_error(path, f"cannot be read ({err.strerror or err})", "check its permissions") from None


def check_config_sizes(path: Path, entries: dict, sizes: dict[str, int], layers: tuple[str, int]) -> None:
    """Sizes config.json (at ``path``) gives, checked against model.safetensors' header ``entries`` before the
    model they describe is built, even on the meta device (200k layers take minutes to build): at most
    :data:`MAX_LAYERS` layers (``layers``: the field and its count) and no more than the stored tensors, and
    no size (``sizes``: field -> value) beyond the largest dimension of any stored tensor (every size is one)."""
    field, count = layers
    if count > MAX_LAYERS:
        raise format_error(path, f"{field} lists {count:,} layers, more than the {MAX_LAYERS:,} a model folder may hold",
                    f"the file was tampered with or is corrupted; {REDO}")
    if count > len(entries):
        raise format_error(path, f"{field} lists {count:,} layers but {WEIGHTS_FILE} holds only {len(entries):,} tensors: "
                    "they do not belong together")
    largest = max((d for entry in entries.values() for d in entry["shape"]), default=0)
    for name, size in sizes.items():
        if size > largest:
            raise format_error(path, f"{name}={size:,} but no tensor of {WEIGHTS_FILE} has a dimension that large (the "
                        f"largest is {largest:,}): they do not belong together (tampered?)")


def check_weights_header(folder: Path, config: dict, header: tuple[dict, dict[str, str]],
                         expected: dict[str, torch.Tensor], described: str) -> None:
    """model.safetensors' ``header`` (:func:`read_weights_header`) against the model config.json describes
    (``expected``: its state dict, built on the meta device): the file's size bound, then every tensor's
    name, shape and dtype, so that a config.json that does not fit the weights is refused before the model
    is allocated."""
    path = folder / WEIGHTS_FILE
    weights_bound(folder, config, expected, described)
    entries, metadata = header
    aliases = json_metadata(metadata, "aliases", path)
    match_state(_safetensors.meta_tensors(entries), aliases, expected, described, str(path))


def weights_bound(folder: Path, config: dict, expected: dict[str, torch.Tensor], described: str) -> int:
    """The most bytes model.safetensors can hold for the model config.json describes (every tensor of
    its state dict in its own dtype, none shared, plus :data:`HEADER_ALLOWANCE`), checked against the
    file's size on disk before anything is read: a forged (e.g. sparse multi-GB) file is refused
    without allocating its size."""
    path = folder / WEIGHTS_FILE
    bound = HEADER_ALLOWANCE + sum(t.numel() * t.element_size() for t in expected.values())
    if path.is_file():
        size = _check_recorded_size(path, config)
        if size > bound:
            raise format_error(path, f"has {size:,} bytes, but the model {CONFIG_FILE} describes ({described}) "
                        f"stores at most {bound:,}: these are not its weights (forged or corrupted)")
    return bound


def read_weights(folder: Path, config: dict, expected: dict[str, torch.Tensor], described: str) -> tuple[dict, dict, dict]:
    """``(tensors, metadata, aliases)`` of model.safetensors: its size bounded by the model config.json
    describes, its checksum checked, its layout validated before any tensor is made, written by this
    library in the dtype config.json records."""
    path = folder / WEIGHTS_FILE
    data = checked_bytes(folder, WEIGHTS_FILE, config, weights_bound(folder, config, expected, described))
    try:
        tensors, meta = _safetensors.parse(data)
    except _safetensors.SafetensorsFormatError as err:
        raise format_error(path, f"is not a valid safetensors file: {err}") from None
    if meta.get("format") != FORMAT:
        raise format_error(path, f"metadata format is {meta.get('format')!r}, not {FORMAT!r}: not written by save_pretrained")
    if meta.get("dtype") != config["weights"]["dtype"]:
        raise format_error(path, f"metadata dtype {meta.get('dtype')!r} differs from {CONFIG_FILE}'s {config['weights']['dtype']!r}")
    return tensors, meta, json_metadata(meta, "aliases", path)


def match_state(
    tensors: dict[str, torch.Tensor],
    aliases: dict[str, str],
    expected: dict[str, torch.Tensor],
    described: str,
    source: str,
    *,
    described_by: str = CONFIG_FILE,
    error: type[PretrainedFormatError] = PretrainedFormatError,
    fix: str = REDO,
) -> dict[str, torch.Tensor]:
    """Check ``tensors`` (+ ``aliases``) against the state dict of the model ``described`` and return the
    state dict to load (floating tensors cast to the model's dtypes). Raises ``error`` naming ``source`` for
    a missing, extra, misshapen, wrongly typed or non-finite tensor."""
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
            f"{source}: {' and '.join(problems)} for the model {described_by} describes ({described}); "
            f"the weights and {described_by} do not belong together; {fix}"
        )
    state = {}
    for name, want in expected.items():
        got = available[name]
        if tuple(got.shape) != tuple(want.shape):
            raise error(
                f"{source}: tensor {name!r} has shape {list(got.shape)} but {described_by} ({described}) "
                f"implies {list(want.shape)}; the weights and {described_by} do not belong together; {fix}"
            )
        if want.is_floating_point():
            if not got.is_floating_point():
                raise error(f"{source}: tensor {name!r} is stored as {got.dtype}, expected a floating type; {fix}")
            if got.device.type != "meta" and not torch.isfinite(got).all():  # meta: a header's shapes only
                raise error(f"{source}: tensor {name!r} holds NaN or infinite values: the weights are corrupted; {fix}")
            got = got.to(want.dtype)
        elif got.dtype != want.dtype:
            raise error(f"{source}: tensor {name!r} is stored as {got.dtype}, expected {want.dtype}; {fix}")
        state[name] = got
    return state


def load_state(model: torch.nn.Module, state: dict[str, torch.Tensor], dtype: torch.dtype | None = None):
    """Load the checked ``state`` (:func:`match_state`) into ``model`` strictly and return it in eval mode,
    cast to ``dtype`` when given (after the checked load)."""
    model.load_state_dict(state, strict=True)
    model.eval()
    if dtype is not None:
        model.to(dtype)
    return model


def json_metadata(meta: dict[str, str], key: str, path: Path) -> dict:
    try:
        value = loads_bounded(meta.get(key, "{}"))
    except JSONLimitError as err:
        raise format_error(path, f"metadata {key!r} is not a JSON map of tensor names ({err})") from None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise format_error(path, f"metadata {key!r} is not a JSON map of tensor names")
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


def check_folder(folder) -> Path:
    """``folder`` as a Path to an existing folder, or :class:`PretrainedFormatError` saying what to give (and
    where an interrupted save left the previous version, if it did)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        leftovers = [p for p in _atomic.interrupted_leftovers(folder) if p.name.startswith(f".{folder.name}.old-")]
        hint = (f"an interrupted save left the previous version at {leftovers[0]}; rename it to {folder.name}"
                if leftovers else "give the folder that holds config.json and model.safetensors")
        raise PretrainedFormatError(f"{folder}: {'no such folder' if not folder.exists() else 'not a folder'}; {hint}")
    return folder


# =============================================================================================== the folder kinds
@dataclass
class CardInfo:
    """README.md, the model card. To write: ``source``, the in-memory model it describes (what
    :func:`~.card.build_model_card` reads), with ``eval_results`` (the model-index results) and ``card_extra``
    (field overrides). Read: ``data``, what a save keeps of it (:func:`~.card.read_card`: license and results), and
    ``readme``, the file's bytes (None: absent or larger than a card can be), written as they are when there is no
    ``source``. The card is documentation: it is not checksummed, and loading never fails for it."""

    source: Any = None
    eval_results: list[dict] | None = None
    card_extra: dict | None = None
    data: dict | None = None
    readme: bytes | None = None


def _readme(folder: Path) -> bytes | None:
    path = folder / CARD_FILE
    try:
        if path.stat().st_size > MAX_CARD_BYTES:
            return None
        return path.read_bytes()
    except OSError:
        return None


@dataclass
class ModelFolder:
    """The files of one model folder, whatever model it holds (the kinds: :class:`LanguageModelFolder`,
    :class:`ClassifierFolder`).

    :meth:`read` checks config.json's header (format, version, ``task``: a folder of another kind is a
    :class:`WrongTaskError`) and file records, and reads every JSON file against its checksum; the weights are
    read by :meth:`read_weights` once the model config.json describes is known, since that model bounds them.
    :meth:`write` writes the folder atomically. The models turn a folder into a model and back
    (:mod:`dsf_lightning.model.pretrained`, :mod:`dsf_lightning.tasks.pretrained`).
    """

    #: config.json (read: checked; to write: ``files`` is filled in with every file's sha256 and size)
    config: dict
    #: vocab.json's bytes: the vocabulary
    vocab_json: bytes
    #: dsf_tokenizer.json's bytes: this library's tokenizer (options and learned state)
    tokenizer_json: bytes
    #: model.safetensors' tensors and metadata (:func:`state_for_saving`); read: set by :meth:`read_weights`
    tensors: dict[str, torch.Tensor] | None = None
    metadata: dict[str, str] | None = None
    #: README.md
    card: CardInfo = field(default_factory=CardInfo)
    #: where the folder was read from or written to
    path: Path | None = None
    _header: tuple | None = field(default=None, init=False, repr=False, compare=False)

    task: ClassVar[str] = ""
    #: the format versions :meth:`read` accepts
    readable_versions: ClassVar[tuple[int, ...]] = (FORMAT_VERSION,)

    @property
    def tokenizer_file(self) -> str:
        """The file :attr:`tokenizer_json` is read from."""
        return DSF_TOKENIZER_FILE

    def json_files(self) -> dict[str, bytes]:
        """The JSON files besides config.json, by name, in the order config.json's ``files`` lists them."""
        return {VOCAB_FILE: self.vocab_json, DSF_TOKENIZER_FILE: self.tokenizer_json}

    @classmethod
    def _optional_files(cls, config: dict) -> tuple[str, ...]:
        return ()

    @classmethod
    def read(cls, path) -> ModelFolder:
        """Read the folder at ``path`` strictly (see the class docstring); raises :class:`PretrainedFormatError`."""
        folder = check_folder(path)
        config = read_config_header(folder, cls.task, cls.readable_versions)
        self = cls(config=config, vocab_json=b"", tokenizer_json=b"", path=folder)
        optional = tuple(name for name in cls._optional_files(config) if name in config["files"])
        check_file_records(folder / CONFIG_FILE, config, (WEIGHTS_FILE, VOCAB_FILE, self.tokenizer_file, *optional))
        self.vocab_json = checked_bytes(folder, VOCAB_FILE, config, MAX_JSON_BYTES)
        self.tokenizer_json = checked_bytes(folder, self.tokenizer_file, config, MAX_JSON_BYTES)
        self._read_optional(folder, optional)
        self.card = CardInfo(data=read_card(folder), readme=_readme(folder))
        return self

    def _read_optional(self, folder: Path, names: tuple[str, ...]) -> None:
        pass

    @classmethod
    def of(cls, folder) -> ModelFolder:
        """``folder`` as this kind: itself when it is one, else read from its path (a folder object of the other
        kind is read again, so it is the same :class:`WrongTaskError` as its path)."""
        if isinstance(folder, cls):
            return folder
        return cls.read(folder.path if isinstance(folder, ModelFolder) else folder)

    def weights_header(self) -> tuple[dict, dict[str, str]]:
        """``(tensor entries, metadata)`` of model.safetensors' header (:func:`read_weights_header`; read once)."""
        if self._header is None:
            self._header = read_weights_header(self.path, self.config)
        return self._header

    def check_sizes(self, sizes: dict[str, int], layers: tuple[str, int]) -> None:
        """The sizes config.json gives against the weights' header, before any model is built (:func:`check_config_sizes`)."""
        check_config_sizes(self.path / CONFIG_FILE, self.weights_header()[0], sizes, layers)

    def check_shapes(self, expected: dict[str, torch.Tensor], described: str) -> None:
        """The weights' header against the state dict of the model config.json describes (built on the meta
        device: :func:`check_weights_header`)."""
        check_weights_header(self.path, self.config, self.weights_header(), expected, described)

    def read_weights(self, expected: dict[str, torch.Tensor], described: str) -> tuple[dict, dict, dict]:
        """``(tensors, metadata, aliases)`` of model.safetensors, bounded by the model ``expected`` (its state dict)
        and checked (:func:`read_weights`); kept as :attr:`tensors` and :attr:`metadata`."""
        self.tensors, self.metadata, aliases = read_weights(self.path, self.config, expected, described)
        return self.tensors, self.metadata, aliases

    def write(self, path) -> Path:
        """Write the folder to ``path`` atomically (:mod:`._atomic`: built as a hidden sibling, swapped into place
        when complete; an existing folder is replaced only if empty or a model folder) and return its path:
        ``model.safetensors``, the JSON files, ``config.json`` (with ``files``: every file above with its sha256 and
        size) and ``README.md`` (built from :attr:`card`'s ``source``, once before the disk is touched so bad results
        fail early, and again with the sizes of the written files; without a source, the ``readme`` read)."""
        folder = Path(path).expanduser()
        if self.tensors is None or self.metadata is None:
            raise ValueError("the folder has no weights to write: give tensors and metadata (state_for_saving), or "
                             "read them first (read_weights, which load_pretrained / load_classifier call)")
        if self.card.source is None and self.card.readme is None:
            raise ValueError("the folder has no model card to write: give card=CardInfo(source=...) (the in-memory model)")
        eval_results = self.card.eval_results
        if eval_results is not None:
            eval_results = normalize_eval_results(eval_results)

        def card(sizes: dict[str, int] | None = None) -> bytes:
            if self.card.source is None:
                return self.card.readme
            return str(build_model_card(self.card.source, eval_results=eval_results, card_extra=self.card.card_extra,
                                        files=sizes, name=folder.name)).encode("utf-8")

        card()  # fail early
        files = self.json_files()

        def write(tmp: Path) -> None:
            write_file(tmp / WEIGHTS_FILE, _safetensors.serialize(self.tensors, self.metadata))
            for name, data in files.items():
                write_file(tmp / name, data)
            written = [WEIGHTS_FILE, *files]
            full = dict(self.config)
            full["files"] = {name: {"sha256": _sha256(tmp / name), "size": (tmp / name).stat().st_size} for name in written}
            write_file(tmp / CONFIG_FILE, (json.dumps(full, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
            sizes = {name: (tmp / name).stat().st_size for name in (CONFIG_FILE, *written)}
            write_file(tmp / CARD_FILE, card(sizes))

        self.path = _atomic.write_folder_atomically(folder, write, may_replace=_is_pretrained_folder)
        logger.info("saved %s (%s weights)", self.path, self.metadata.get("dtype"))
        return self.path


@dataclass
class LanguageModelFolder(ModelFolder):
    """A language-model folder (``task: language-model``; :mod:`dsf_lightning.model.pretrained` builds its
    model). Format version 1 folders are read too: they held this library's tokenizer in tokenizer.json."""

    #: tokenizer.json's bytes: a ``tokenizers``-library file, where one gives exactly the model's ids (None: absent)
    hf_tokenizer_json: bytes | None = None

    task: ClassVar[str] = LANGUAGE_MODEL
    readable_versions: ClassVar[tuple[int, ...]] = (1, 2)

    @property
    def tokenizer_file(self) -> str:
        return DSF_TOKENIZER_FILE if self.config.get("format_version", FORMAT_VERSION) >= 2 else HF_TOKENIZER_FILE

    def json_files(self) -> dict[str, bytes]:
        files = super().json_files()
        if self.hf_tokenizer_json is not None:
            files[HF_TOKENIZER_FILE] = self.hf_tokenizer_json
        return files

    @classmethod
    def _optional_files(cls, config: dict) -> tuple[str, ...]:
        return (HF_TOKENIZER_FILE,) if config["format_version"] >= 2 else ()

    def _read_optional(self, folder: Path, names: tuple[str, ...]) -> None:
        # not read by this library, but served to tokenizers users: checked to be intact (and by the model's
        # loader to give its ids)
        if HF_TOKENIZER_FILE in names:
            self.hf_tokenizer_json = checked_bytes(folder, HF_TOKENIZER_FILE, self.config, MAX_JSON_BYTES)


@dataclass
class ClassifierFolder(ModelFolder):
    """A text-classifier folder (``task: text-classification``; :mod:`dsf_lightning.tasks.pretrained` builds its
    classifier). Its config.json also holds ``labels``, ``max_length`` and ``keep``."""

    task: ClassVar[str] = TEXT_CLASSIFICATION


#: the folder kind of each task
FOLDER_KINDS: dict[str, type[ModelFolder]] = {LANGUAGE_MODEL: LanguageModelFolder, TEXT_CLASSIFICATION: ClassifierFolder}


def read_folder(path, task: str = AUTO) -> ModelFolder:
    """The model folder at ``path`` read strictly as the kind ``task`` names (:data:`AUTO`: the kind config.json's
    ``task`` says)."""
    if task == AUTO:
        task = folder_task(check_folder(path))
    if task not in FOLDER_KINDS:
        raise ValueError(f"task must be one of {[*TASKS, AUTO]}, got {task!r}")
    return FOLDER_KINDS[task].read(path)
