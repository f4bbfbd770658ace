"""The pretrained-model folder: write it atomically, read it strictly, make it from a Lightning checkpoint.

A folder holds (Hugging Face convention)::

    config.json         {"format": "dsf-lightning", "format_version": 2, "task": "language-model",
                         "library_version": ..., "model": LMConfig.to_dict(), "info": {...},
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
:class:`PretrainedFormatError` naming the file, what is wrong and what to do; a folder holding a text
classifier (``task: text-classification``, :mod:`.classifier`) raises :class:`WrongTaskError` naming the
loader to use (``task`` absent: a language model, as every folder written before the field). What every kind
of folder shares (checksums, bounded reading, the atomic write, strict weights) is :mod:`dsf_lightning.hub.folder`.
Nothing is ever unpickled: JSON and safetensors only. (Checkpoints are read by :mod:`dsf_lightning.training.read_checkpoint`
with ``torch.load(weights_only=True)``; :mod:`dsf_lightning.export` makes folders of them.)
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .._json import JSONLimitError, loads_bounded
from ..cells import UnknownCellError, get_cell
from ..data.tokenizers import (
    Tokenizer,
    TokenizerError,
)
from ..data.vocab import Vocabulary, VocabularyError
from ..hub.card import kept_card
from ..hub.folder import (
    CELL_FIX,
    CONFIG_FILE,
    HF_TOKENIZER_FILE,
    LANGUAGE_MODEL,
    REDO,
    VOCAB_FILE,
    WEIGHTS_FILE,
    CardInfo,
    LanguageModelFolder,
    PretrainedFormatError,
    check_normalize,
    check_vocab_size,
    config_header,
    fingerprint,
    format_error,
    json_metadata,
    load_state,
    match_state,
    parse_tokenizer,
    plain_info,
    resolve_dtype,
    state_for_saving,
    tokenizer_record,
    unknown_cell_error,
)
from ..hub.hf_tokenizer import hf_tokenizer_json, hf_tokenizer_mismatch
from ..hub.mixin import register_folder_format
from .recurrent_lm import LMConfig, ModelConfigError, RecurrentLM

logger = logging.getLogger(__name__)

TIED = {"decoder.weight": "embedding.weight"}  # what tie_weights means in a RecurrentLM


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
    #: the folder's weight storage (``"float16"`` / ``"float32"``, config.json's ``weights.dtype``) and card
    #: (``{"license": ..., "eval_results": [...]}``): what :func:`save_pretrained` writes again by default
    storage_dtype: str | None = None
    card_data: dict | None = None

    @property
    def config(self) -> LMConfig:
        return self.model.config

    def save_pretrained(self, folder, **kwargs) -> Path:
        """Same as :func:`save_pretrained` (``self`` first)."""
        return save_pretrained(self, folder, **kwargs)


# =============================================================================================== saving
def weights_for_saving(model: RecurrentLM, dtype: str = "float32") -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and safetensors metadata :func:`save_pretrained` writes for ``model``
    (:func:`~dsf_lightning.hub.folder.state_for_saving`: shared tensors stored once, float16 storage of the parameters;
    ``decoder.weight`` recorded as tied to ``embedding.weight`` when ``tie_weights``)."""
    return state_for_saving(model, dtype, TIED if model.config.tie_weights else {})


def save_pretrained(
    pretrained: Pretrained,
    folder,
    *,
    dtype: str | None = None,
    eval_results: list[dict] | None = None,
    card_extra: dict | None = None,
) -> Path:
    """Write ``pretrained`` to ``folder`` (see the module docstring) atomically and return its path.

    The folder is built as a hidden temporary sibling and swapped into place only when complete, so a
    failure or a kill at any point leaves the previous folder (if any) untouched. An existing folder is
    replaced only if it is empty or is itself a dsf-lightning pretrained folder.

    ``dtype``: ``"float32"`` (bit-exact) or ``"float16"`` (half the size; loading casts back); default: the
    storage of the folder ``pretrained`` was loaded from (``storage_dtype``), else float32.
    ``eval_results``: the card's model-index results, e.g.
    ``[{"metric": "perplexity", "value": 93.1, "dataset": "ptb", "split": "test"}]`` (default: those of the
    card ``pretrained`` was loaded with, else from ``info["metrics"]``). ``card_extra``: card field / metadata
    overrides (see :func:`~dsf_lightning.hub.card.build_model_card`; the loaded card's ``license`` is kept).
    """
    return to_folder(pretrained, dtype=dtype, eval_results=eval_results, card_extra=card_extra).write(folder)


def to_folder(
    pretrained: Pretrained,
    *,
    dtype: str | None = None,
    eval_results: list[dict] | None = None,
    card_extra: dict | None = None,
) -> LanguageModelFolder:
    """The :class:`~dsf_lightning.hub.folder.LanguageModelFolder` of ``pretrained`` (its files, not yet written:
    :meth:`~dsf_lightning.hub.folder.ModelFolder.write` writes them); the options as in :func:`save_pretrained`."""
    if not isinstance(pretrained.model, RecurrentLM):
        raise TypeError(f"pretrained.model must be a RecurrentLM, got {type(pretrained.model).__name__}")
    info = plain_info(pretrained.info, "Pretrained.info")
    check_vocab_size(pretrained.vocab, pretrained.model.config.vocab_size)
    dtype = dtype or pretrained.storage_dtype or "float32"
    eval_results, card_extra = kept_card(pretrained.card_data, eval_results, card_extra)
    tensors, metadata = weights_for_saving(pretrained.model, dtype)
    normalize = check_normalize(pretrained.normalize)
    snapshot = Pretrained(pretrained.model, pretrained.vocab, pretrained.tokenizer, info, normalize)
    hf_tokenizer = hf_tokenizer_json(pretrained.tokenizer, pretrained.vocab, normalize)

    config = {
        **config_header(LANGUAGE_MODEL),
        "model": pretrained.model.config.to_dict(),
        "info": info,
        "weights": {"dtype": dtype, "tied_weights": json.loads(metadata["tied_weights"]), "aliases": json.loads(metadata["aliases"])},
        "files": None,  # filled in by LanguageModelFolder.write: the sha256 and size of every file above
        # what the model was trained with: checked on load, so a swapped tokenizer.json / vocab.json is
        # refused even when a forger rehashed "files" (issue 13 item 6)
        **identity_records(pretrained.tokenizer, pretrained.vocab),
        **({"normalize": normalize} if normalize else {}),  # the text normalizer (absent: none)
    }
    return LanguageModelFolder(
        config=config, vocab_json=pretrained.vocab.to_json().encode("utf-8"),
        tokenizer_json=pretrained.tokenizer.to_json().encode("utf-8"),
        hf_tokenizer_json=hf_tokenizer.encode("utf-8") if hf_tokenizer is not None else None,
        tensors=tensors, metadata=metadata, card=CardInfo(snapshot, eval_results, card_extra),
    )


def identity_records(tokenizer: Tokenizer, vocab: Vocabulary) -> dict:
    """config.json's ``tokenizer`` and ``vocabulary`` records: which tokenizer (kind and fingerprint of its
    options and learned state) and which vocabulary (size and fingerprint) the model was trained with."""
    return {
        "tokenizer": tokenizer_record(tokenizer),
        "vocabulary": {"size": len(vocab), "fingerprint": fingerprint(vocab.to_dict())},
    }


# =============================================================================================== loading
def _model_config(files: LanguageModelFolder) -> LMConfig:
    """The model configuration config.json gives (``model``), with a cell this installation knows."""
    path = files.path / CONFIG_FILE
    try:
        lm_config = LMConfig.from_dict(files.config["model"])
    except (ModelConfigError, TypeError, ValueError) as err:
        raise format_error(path, f"the model configuration is invalid: {err}") from None
    try:
        get_cell(lm_config.cell)
    except UnknownCellError:
        raise unknown_cell_error(path, lm_config.cell) from None
    return lm_config


def _check_identity(files: LanguageModelFolder, tokenizer: Tokenizer, vocab: Vocabulary) -> None:
    """tokenizer.json and vocab.json are the ones the model was trained with (config.json's ``tokenizer``
    and ``vocabulary`` records). A folder written before those records existed is checked by what can
    be inferred: ``info.tokenizer`` (written by the checkpoint export) names the kind, and the tokenizer
    must be able to produce the vocabulary's symbols."""
    folder, config = files.path, files.config
    config_path, tok_path, vocab_path = folder / CONFIG_FILE, folder / files.tokenizer_file, folder / VOCAB_FILE
    records = {key: config.get(key) for key in ("tokenizer", "vocabulary")}
    for key, rec in records.items():
        fields = ("name", "fingerprint") if key == "tokenizer" else ("size", "fingerprint")
        if rec is not None and not (isinstance(rec, dict) and isinstance(rec.get("fingerprint"), str)
                                    and type(rec.get(fields[0])) is (str if key == "tokenizer" else int)):
            raise format_error(config_path, f"{key!r} must record the {' and '.join(fields)} of the model's {key}")
    rec = records["tokenizer"]
    if rec is not None:
        if tokenizer.name != rec["name"]:
            raise format_error(tok_path, f"holds a {tokenizer.name!r} tokenizer but {CONFIG_FILE} says the model was trained "
                        f"with a {rec['name']!r} tokenizer: the file was swapped")
        if fingerprint(tokenizer.to_dict()) != rec["fingerprint"]:
            raise format_error(tok_path, f"is not the {rec['name']!r} tokenizer the model was trained with: its options or "
                        f"learned state differ from {CONFIG_FILE}'s fingerprint (the file was swapped or edited)")
    else:
        named = config["info"].get("tokenizer")
        if isinstance(named, str) and named != tokenizer.name:
            raise format_error(tok_path, f"holds a {tokenizer.name!r} tokenizer but {CONFIG_FILE}'s info.tokenizer says the "
                        f"model was trained with a {named!r} tokenizer: the file was swapped")
        made, sampled = _producible(tokenizer, vocab)
        if sampled and made * 2 < sampled:
            raise format_error(tok_path, f"a {tokenizer.name!r} tokenizer produces only {made:,} of {sampled:,} sampled "
                        f"symbols of {VOCAB_FILE}: it is not the tokenizer the model was trained with (swapped?)")
    rec = records["vocabulary"]
    if rec is not None and (len(vocab) != rec["size"] or fingerprint(vocab.to_dict()) != rec["fingerprint"]):
        raise format_error(vocab_path, f"is not the vocabulary the model was trained with: its symbols (or their order) "
                    f"differ from {CONFIG_FILE}'s fingerprint (the file was swapped or edited)")


def _check_hf_tokenizer(path: Path, data: bytes, tok_path: Path, tokenizer: Tokenizer, vocab: Vocabulary, normalize=None) -> None:
    """tokenizer.json (``data``, checksum already checked) gives the ids of our tokenizer (``tok_path``) and the
    vocabulary: its checksum proves only that config.json was rehashed with it (a permuted vocabulary)."""
    try:
        document = loads_bounded(data.decode("utf-8"))
    except (UnicodeDecodeError, JSONLimitError) as err:
        raise format_error(path, f"is not valid UTF-8 JSON ({err})") from None
    problem = hf_tokenizer_mismatch(document, tokenizer, vocab, normalize if isinstance(normalize, str) else None)
    if problem is not None:
        raise format_error(path, f"does not give the ids of {tok_path.name} and {VOCAB_FILE}: {problem} (the file was edited "
                    "or swapped)")


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


def expected_state(
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


def describe_config(config: LMConfig) -> str:
    return (f"cell={config.cell!r}, hidden_sizes={config.hidden_sizes}, embedding_size={config.embedding_size}, "
            f"vocab_size={config.vocab_size}, tie_weights={config.tie_weights}")


def _check_sizes(files: LanguageModelFolder, lm_config: LMConfig) -> None:
    """The sizes config.json gives against model.safetensors' header (read alone), before the model is built:
    each size and the layer count bounded by the stored tensors (:func:`~dsf_lightning.hub.folder.check_config_sizes`), then
    the model's shapes on the meta device (nothing allocated) against every stored tensor."""
    sizes = {"model.vocab_size": lm_config.vocab_size, "model.embedding_size": lm_config.embedding_size}
    sizes.update({f"model.hidden_sizes[{i}]": h for i, h in enumerate(lm_config.hidden_sizes)})
    files.check_sizes(sizes, ("model.hidden_sizes", len(lm_config.hidden_sizes)))
    with torch.device("meta"):
        _, shapes = expected_state(lm_config, files.path / CONFIG_FILE)
    files.check_shapes(shapes, describe_config(lm_config))


def load_pretrained(folder, *, dtype=None) -> Pretrained:
    """Read a folder written by :func:`save_pretrained` strictly (see the module docstring), then build its model.

    ``folder``: its path, or its :class:`~dsf_lightning.hub.folder.LanguageModelFolder` already read. Returns the
    model in eval mode on the CPU, float32 unless ``dtype`` (see :func:`resolve_dtype`) asks for float16 /
    bfloat16: the weights are cast after the strict, checked load. Raises :class:`PretrainedFormatError`.
    """
    dtype = resolve_dtype(dtype)
    files = LanguageModelFolder.of(folder)
    folder, config = files.path, files.config
    lm_config = _model_config(files)

    vocab_path, tok_path, weights_path = folder / VOCAB_FILE, folder / files.tokenizer_file, folder / WEIGHTS_FILE
    try:
        vocab = Vocabulary.from_json(files.vocab_json.decode("utf-8"))
    except (VocabularyError, TokenizerError, UnicodeDecodeError) as err:
        raise format_error(vocab_path, f"is not a valid vocabulary ({err})") from None
    except (KeyError, TypeError, AttributeError, ValueError) as err:  # should not happen: from_json checks its input
        raise format_error(vocab_path, f"is not a valid vocabulary ({type(err).__name__}: {err})") from None
    tokenizer = parse_tokenizer(tok_path, files.tokenizer_json)
    if len(vocab) != lm_config.vocab_size:
        raise format_error(vocab_path, f"holds {len(vocab):,} symbols but {CONFIG_FILE} says vocab_size={lm_config.vocab_size:,}")
    if tokenizer.eos != vocab.eos:
        raise format_error(tok_path, f"ends lines with {tokenizer.eos!r} but the vocabulary's end symbol is {vocab.eos!r}")
    _check_identity(files, tokenizer, vocab)
    if files.hf_tokenizer_json is not None:  # not read by this library, but served to tokenizers users: must give our ids
        _check_hf_tokenizer(folder / HF_TOKENIZER_FILE, files.hf_tokenizer_json, tok_path, tokenizer, vocab, config.get("normalize"))

    # the model config.json describes, built once its shapes match the weights' header: nothing config.json
    # alone says is allocated
    _check_sizes(files, lm_config)
    model, expected = expected_state(lm_config, folder / CONFIG_FILE)
    tensors, meta, aliases = files.read_weights(expected, describe_config(lm_config))
    tied = json_metadata(meta, "tied_weights", weights_path)
    if bool(tied) != lm_config.tie_weights or (tied and tied != TIED):
        raise format_error(weights_path, f"records tied weights {tied} but {CONFIG_FILE} says tie_weights={lm_config.tie_weights}")
    load_state(model, match_state(tensors, aliases, expected, describe_config(lm_config), str(weights_path)), dtype)
    info = config["info"]
    normalize = config.get("normalize")  # a name this installation may not know: the Scorer says so
    if normalize is not None and not (isinstance(normalize, str) and normalize.strip()):
        raise format_error(folder / CONFIG_FILE, f"'normalize' must name a text normalizer (e.g. \"ptb\") or be absent, got {normalize!r:.80}")
    return Pretrained(model=model, vocab=vocab, tokenizer=tokenizer, info=info, normalize=normalize,
                      storage_dtype=(config.get("weights") or {}).get("dtype"), card_data=files.card.data)


# RecurrentLM.from_pretrained / save_pretrained / push_to_hub (the hub mixin) read and write this folder
register_folder_format(RecurrentLM._hub_task, Pretrained, save_pretrained, load_pretrained)
