"""Fine-tuning: start training from a pretrained model, on a new corpus encoded with its vocabulary.

Through the CLI one argument does it: ``--model.init_from NAME_OR_PATH`` (a published name such as
``delta-rnn-ptb``, a Hub repo id ``owner/name`` or a pretrained folder written by ``save_pretrained`` /
``dsf export``). The CLI links it to ``data.vocab_from``, so the corpus is encoded with the pretrained
vocabulary and tokenizer (a ``text-folder`` corpus takes the pretrained tokenizer, learned subword
dictionary included; words outside the vocabulary become its ``<unk>``)::

    dsf fit --model.init_from delta-rnn-ptb \\
        --data.corpus text-folder --data.corpus_options '{path: /data/my_text}' \\
        --model.lr 0.0005 --trainer.max_epochs 3

The architecture comes from the pretrained ``config.json`` (:func:`merge_architecture`): every
architecture argument left at its default takes the pretrained value, an explicit different value is an
error naming both; regularization (``dropout_*``, ``variational``, the Delta-RNN's
``cell_options.dropout``) is the fine-tuning run's own choice. The weights are loaded strictly.

From Python, the same: ``LanguageModelModule(init_from=..., vocab_size=...)`` with
``LanguageModelDataModule(..., vocab_from=...)``.
"""

from __future__ import annotations

import dataclasses
import inspect
from functools import lru_cache
from typing import Any

from ..cells import get_cell
from ..cells.registry import COMMON_OPTIONS
from ..hub.registry import load_with
from ..model import LMConfig
from ..model.pretrained import load_pretrained

#: the LanguageModelModule arguments that shape the weights, checked against the pretrained config
ARCHITECTURE = ("cell", "hidden_sizes", "cell_options", "embedding_size", "tie_weights")


class FinetuneConfigError(ValueError):
    """The fine-tuning run's settings do not fit the pretrained model (the message names them)."""


@lru_cache(maxsize=4)
def _load(name_or_path: str):
    return load_with(load_pretrained, name_or_path)


def load_for_finetuning(name_or_path: str):
    """The :class:`~dsf_lightning.hub.Pretrained` behind ``name_or_path`` (cached per process, so the
    DataModule and the module read the folder once)."""
    return _load(str(name_or_path))


def _defaults() -> dict[str, Any]:
    """The architecture arguments' defaults: the model's (:class:`LMConfig`'s fields), which
    ``LanguageModelModule``'s arguments repeat (tests/test_finetune.py checks that they agree)."""
    fields = {f.name: f for f in dataclasses.fields(LMConfig)}
    return {name: fields[name].default_factory() if fields[name].default is dataclasses.MISSING else fields[name].default
            for name in ARCHITECTURE}


def _cell_defaults(cell: str) -> dict[str, Any]:
    params = inspect.signature(get_cell(cell).__init__).parameters
    return {n: p.default for n, p in params.items() if p.kind is p.KEYWORD_ONLY and p.default is not p.empty}


def _as_list(value) -> list[int]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def merge_architecture(
    pretrained: LMConfig,
    given: dict[str, Any],
    *,
    vocab_size: int,
    parameter_budget=None,
    source: str = "the pretrained model",
) -> dict[str, Any]:
    """``{cell, hidden_sizes, cell_options, embedding_size, tie_weights}`` for fine-tuning ``pretrained``.

    ``given`` holds the module's architecture arguments as passed: one equal to its default is replaced
    by the pretrained value; one that differs from both raises :class:`FinetuneConfigError`. The
    vocabulary size must equal the pretrained one (encode the data with ``vocab_from``), and a
    ``parameter_budget`` cannot be combined with a pretrained architecture.
    """
    defaults = _defaults()
    conflicts = []
    if parameter_budget is not None:
        conflicts.append(f"parameter_budget={parameter_budget!r} (the size comes from the pretrained model)")
    if vocab_size and vocab_size != pretrained.vocab_size:
        raise FinetuneConfigError(
            f"init_from {source}: the data has a vocabulary of {vocab_size:,} symbols but the pretrained model has "
            f"{pretrained.vocab_size:,}: encode the corpus with the pretrained vocabulary (data.vocab_from, which the "
            "CLI links from model.init_from)"
        )
    merged: dict[str, Any] = {}
    for name in ARCHITECTURE:
        value, default, theirs = given.get(name, defaults[name]), defaults[name], getattr(pretrained, name)
        if name == "hidden_sizes":
            value, default = _as_list(value), _as_list(default)
        if name == "cell_options":
            value, default, theirs = dict(value or {}), dict(default or {}), dict(theirs or {})
            # free to change when fine-tuning: the cell's regularizers and the fast / reference code path
            free = {*get_cell(pretrained.cell).regularization_options, *COMMON_OPTIONS}
            architectural = {k: v for k, v in value.items() if k not in free}
            full = {**_cell_defaults(pretrained.cell), **theirs}  # options the pretrained cell ran with
            mismatched = {k: v for k, v in architectural.items() if k not in full or full[k] != v}
            if mismatched:
                conflicts.append(f"cell_options {mismatched} (pretrained: {theirs})")
            merged[name] = {**theirs, **{k: v for k, v in value.items() if k in free}}
            continue
        if name == "embedding_size" and value is None:
            value = default = None
        if value != default and value != theirs:
            conflicts.append(f"{name}={value!r} (pretrained: {theirs!r})")
        merged[name] = theirs
    if conflicts:
        raise FinetuneConfigError(
            f"init_from {source}: the architecture comes from the pretrained config, but these arguments "
            f"contradict it: {'; '.join(conflicts)}. Leave them out (or at their defaults), or match the pretrained values"
        )
    return {**merged, "hidden_sizes": list(merged["hidden_sizes"])}


def corpus_options_for(corpus_name: str, options: dict[str, Any], pretrained) -> dict[str, Any]:
    """``load_corpus`` options that encode ``corpus_name`` like the pretrained model's training data: a
    ``text-folder`` gets the pretrained tokenizer (a named tokenizer must be the same kind)."""
    options = dict(options)
    if corpus_name == "text-folder":
        asked = options.get("tokenizer")
        if isinstance(asked, str) and asked != pretrained.tokenizer.name:
            raise FinetuneConfigError(
                f"text-folder tokenizer {asked!r} differs from the pretrained model's {pretrained.tokenizer.name!r}: "
                "drop the tokenizer option (the pretrained one is used)"
            )
        options["tokenizer"] = pretrained.tokenizer
        for key in ("unk", "min_count", "max_size"):  # the vocabulary is the pretrained one
            options.pop(key, None)
    return options


def check_corpus_tokenizer(corpus, pretrained, source: str) -> None:
    """Raise when a named corpus is tokenized differently from the pretrained model's data."""
    theirs = pretrained.tokenizer.name
    if corpus.tokenizer_name != theirs:
        raise FinetuneConfigError(
            f"vocab_from {source}: corpus {corpus.name!r} is tokenized by {corpus.tokenizer_name!r} but the pretrained "
            f"model reads {theirs!r} symbols; use a corpus of the same kind (or text-folder)"
        )
