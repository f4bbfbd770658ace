"""What the analysis tools share: the error type, text encoding, per-layer runs and model loading.

A *pretrained* here is anything with ``model`` (a :class:`~dsf_lightning.model.RecurrentLM`),
``vocab`` and ``tokenizer`` (e.g. :class:`dsf_lightning.model.pretrained.Pretrained`). Sentences are encoded
the way :mod:`dsf_lightning.scoring` scores them: the end-of-sentence symbol is the context before
the first word (models are trained on a stream where every sentence follows ``<eos>``), so a
sentence is run as ``<eos> w_1 .. w_T`` from the zero state.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._modes import evaluating  # noqa: F401 - the analysis tools import it from here
from ..cells.base import State

__all__ = [
    "AnalysisError",
    "EncodedText",
    "encode_text",
    "layer_inputs",
    "load_model",
    "resolve_layer",
    "state_names",
]


class AnalysisError(ValueError):
    """An analysis cannot run on this input or model (the message says what is wrong and what to do)."""


@dataclass
class EncodedText:
    """A sentence ready to run: ``ids`` is ``[<eos>, w_1, .., w_T]`` (plus ``<eos>`` at the end when
    asked for); ``tokens`` are the words ``w_1 .. w_T`` as written (an out-of-vocabulary word keeps
    its spelling here and is listed in ``oov``; the model reads the unknown symbol)."""

    text: str
    tokens: list[str]
    ids: list[int]
    oov: list[str] = field(default_factory=list)
    start_symbol: str | None = None

    @property
    def input(self) -> Tensor:
        """``ids`` as a ``[1, len(ids)]`` int64 tensor."""
        return torch.tensor([self.ids], dtype=torch.long)


def _vocab_and_tokenizer(pretrained: Any):
    missing = [a for a in ("model", "vocab", "tokenizer") if getattr(pretrained, a, None) is None]
    if missing:
        raise AnalysisError(f"a pretrained language model needs model, vocab and tokenizer; missing {missing}")
    return pretrained.vocab, pretrained.tokenizer


def encode_text(pretrained: Any, text: str, *, with_eos: bool = False) -> EncodedText:
    """Tokenize and encode one sentence with the model's own tokenizer and vocabulary.

    Raises :class:`AnalysisError` for an empty text, a text of several lines, or a symbol a closed
    vocabulary does not have."""
    if not isinstance(text, str):
        raise AnalysisError(f"the text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise AnalysisError('empty text: give a sentence (e.g. --text "the market rose sharply")')
    if "\n" in text.strip():
        raise AnalysisError("the text must be one sentence on one line (it contains a newline)")
    vocab, tokenizer = _vocab_and_tokenizer(pretrained)
    tokens = list(tokenizer.tokenize_line(text.strip()))
    eos = getattr(tokenizer, "eos", None)
    if eos is not None and tokens and tokens[-1] == eos:
        tokens = tokens[:-1]
    if not tokens:
        raise AnalysisError(f"empty text: {text!r} has no token for this model's tokenizer")
    try:
        ids = vocab.encode(tokens + ([vocab.eos] if with_eos and vocab.eos is not None else []))
    except ValueError as err:  # VocabularyError: a closed vocabulary without the symbol
        raise AnalysisError(str(err)) from None
    oov = [t for t in tokens if t not in vocab]
    start = None
    if vocab.eos_id is not None:
        ids = [vocab.eos_id, *ids]
        start = vocab.eos
    return EncodedText(text=text.strip(), tokens=tokens, ids=ids, oov=oov, start_symbol=start)


def resolve_layer(model: Any, layer: int) -> int:
    """A layer index (negative counts from the top) as a non-negative one, or :class:`AnalysisError`."""
    n = len(model.layers)
    if isinstance(layer, bool) or not isinstance(layer, int) or not -n <= layer < n:
        raise AnalysisError(f"layer must be an integer in [{-n}, {n - 1}] (the model has {n} layer(s)), got {layer!r}")
    return layer % n


@torch.no_grad()
def layer_inputs(model: Any, ids: Tensor, layer: int) -> Tensor:
    """What layer ``layer`` reads for token ids ``[B, T]``: the embedding, or the output of the layer
    below run from the zero state (evaluation mode: no dropout). ``[B, T, input_size]``."""
    layer = resolve_layer(model, layer)
    y = model.embed(ids)
    for cell in model.layers[:layer]:
        y, _ = cell(y)
    return y


def run_layer_states(cell: Any, x: Tensor, state: State | None = None) -> tuple[Tensor, list[State]]:
    """Run ``cell`` over ``x [B, T, I]`` step by step; (outputs ``[B, T, O]``, the state after every step)."""
    if state is None:
        state = cell.init_state(x.shape[0], x.device, x.dtype)
    outputs, states = [], []
    for projected_t in cell.project_inputs(x).unbind(1):
        out, state = cell.recur(projected_t, state)
        outputs.append(out)
        states.append(tuple(state))
    return torch.stack(outputs, dim=1), states


def state_names(cell: Any) -> tuple[str, ...]:
    """Readable names of a cell's state tensors: what the cell declares (``RecurrentCell.state_names``:
    ``("h", "c")`` for the LSTM family, ``("s", "h")`` for the SCRN, ``("h",)`` for most others), or
    ``h`` / ``state0, state1, ...`` for a cell whose declaration does not match its state tuple."""
    names = tuple(getattr(cell, "state_names", None) or ())
    n = len(cell.state_sizes)
    if len(names) != n:
        names = ("h",) if n == 1 else tuple(f"state{i}" for i in range(n))
    return names


# ------------------------------------------------------------------------------------------- loading
def load_model(spec: str | os.PathLike, *, data_root: str | None = None, revision: str | None = None):
    """A :class:`~dsf_lightning.model.pretrained.Pretrained` from a hub model name, a hub repo id, a local
    pretrained folder or a Lightning ``LanguageModelModule`` checkpoint (``.ckpt``; its corpus is read
    again from ``data_root`` for the vocabulary)."""
    from ..hub.registry import resolve
    from ..model.pretrained import load_pretrained
    from ..training.read_checkpoint import pretrained_from_checkpoint

    text = str(spec)
    path = Path(text).expanduser()
    if path.is_file():
        if path.suffix != ".ckpt":
            raise AnalysisError(
                f"{text} is a file but not a Lightning checkpoint (.ckpt): give a checkpoint, a pretrained "
                "folder (config.json, model.safetensors, ...) or a published model name (dsf list models)"
            )
        return pretrained_from_checkpoint(path, data_root=data_root)
    return load_pretrained(resolve(text, revision=revision))


def cell_names(model: Any) -> list[str]:
    """The registry names of a model's layers, bottom to top."""
    return [getattr(cell, "cell_name", type(cell).__name__) for cell in model.layers]


def describe_model(pretrained: Any, source: str | None) -> dict:
    """A small JSON record of which model an analysis looked at (and whether it was freshly trained)."""
    info = dict(getattr(pretrained, "info", None) or {})
    model = pretrained.model
    record = {
        "source": source,
        "cell": model.config.cell if hasattr(model, "config") else cell_names(model)[0],
        "hidden_sizes": list(model.config.hidden_sizes) if hasattr(model, "config") else None,
        "corpus": info.get("corpus"),
        "freshly_trained": bool(info.get("freshly_trained", False)),
    }
    if info.get("freshly_trained"):
        record["training"] = info.get("fresh_training")
    return record


def parse_units(spec: str | Sequence[int], size: int) -> list[int]:
    """``"0-9,20,30-31"`` (or a list of ints) -> sorted unit indices, each in ``[0, size)``."""
    if isinstance(spec, str):
        units: set[int] = set()
        for part in spec.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                if "-" in part:
                    lo_text, hi_text = part.split("-", 1)
                    lo, hi = int(lo_text), int(hi_text)
                    if hi < lo:
                        raise AnalysisError(f"unit range {part!r} runs backwards")
                    units.update(range(lo, hi + 1))
                else:
                    units.add(int(part))
            except ValueError:
                raise AnalysisError(
                    f"cannot read units {spec!r}: use indices and ranges like '0-99,120' or 'lcu'"
                ) from None
        chosen = sorted(units)
    else:
        chosen = sorted({int(u) for u in spec})
    if not chosen:
        raise AnalysisError(f"no unit chosen by {spec!r}")
    bad = [u for u in chosen if not 0 <= u < size]
    if bad:
        raise AnalysisError(f"unit(s) {bad[:5]} outside [0, {size - 1}] (the layer has {size} units)")
    return chosen
