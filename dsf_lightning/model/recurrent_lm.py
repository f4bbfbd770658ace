"""The stacked recurrent language model: embedding -> recurrent layers -> decoder.

Any registered cell (``dsf_lightning.cells``) can make up the layers, each with its own hidden size.
The model keeps no state of its own: ``forward(tokens, state) -> (logits, state)`` with ``state`` a
tuple holding one cell state (itself a tuple of ``[B, n]`` tensors) per layer, so truncated BPTT,
scoring and dynamic evaluation carry it explicitly.

Dropout follows the SCRN paper (Kabdolov, Assylbekov & Takhanov 2018, "Reproducing and Regularizing the SCRN
Model"): naive dropout (sec 4.2, Zaremba et al.: fresh masks per time step on the non-recurrent connections —
the embedding output ``y^(0)`` with ``dropout_input`` and each layer output ``y^(l)`` with ``dropout_output``) or
variational dropout (sec 4.3, eq. 9, Gal & Ghahramani: one mask per sequence window for inputs,
outputs and the recurrent state h with ``dropout_hidden``, which drops h only where the recurrent
weight matrices read it, never the state a cell carries forward nor the SCRN context s; the IRLM,
with no recurrent matrix, refuses it). Embedding
dropout drops whole word types. ``dropout_output_context: false`` keeps output dropout off a cell's
context features (the SCRN paper's "- dropout of context" ablation, sec. 6.1: ``y_t = [s_t; h_t * xi_t]``).
The Delta-RNN's own inner-function dropout (DSF eq. 12) is a cell option (``cell_options: {dropout: p}``).

Weight tying (SCRN sec 4.4): the decoder reuses the embedding ``E`` for the top layer's hidden output
``h``, which must then have ``embedding_size`` features (a wider or narrower ``h`` would be tied only in
part: an error); a context the cell puts before ``h`` (SCRN's ``[s; h]``) keeps an untied matrix, which
is the paper's ``softmax(s U + h E^T)``.

Initialization (``init``, default None: each cell's own): ``{"scheme": "uniform", "scale": r}`` draws
every parameter from U[-r, r] (SCRN paper sec. 5, Tables 1 and 3: "all model weights are initialized
uniformly over [-r, r]"); ``{"scheme": "normal", "std": sigma}`` draws every non-bias (matrix) parameter
from N(0, sigma) and keeps the biases' own initialization (DSF paper sec. 4.2).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_bool
from ..cells import RecurrentCell, State, build_cell
from ..cells.base import CellOptionError, check_positive_int, check_probability
from ..hub.mixin import PretrainedModelMixin
from ..ops.fast_linear import fast_linear
from ..ops.one_hot import one_hot
from .initialization import check_init, initialize

ModelState = tuple[State, ...]


class ModelConfigError(ValueError):
    """The language model's configuration is impossible (the message names the field)."""


MAX_PARAMETERS_ENV = "DSF_MAX_PARAMETERS"


def max_parameters() -> int:
    """The largest model :class:`RecurrentLM` agrees to build: ``$DSF_MAX_PARAMETERS`` if set, else
    as many float32 parameters as this machine has physical memory (a bigger model could never be
    trained here; refusing it up front beats an out-of-memory kill half-way through allocating)."""
    given = os.environ.get(MAX_PARAMETERS_ENV)
    if given:
        try:
            value = int(float(given))
        except ValueError:
            raise ModelConfigError(f"{MAX_PARAMETERS_ENV}={given!r} is not a number of parameters") from None
        if value < 1:
            raise ModelConfigError(f"{MAX_PARAMETERS_ENV}={given!r} must be a positive number of parameters")
        return value
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        memory = 64 << 30
    return max(1, memory // 4)


@dataclass
class LMConfig:
    """A plain, JSON-serializable description of a :class:`RecurrentLM` (names and numbers only).

    ``embedding_size`` 0 feeds one-hot words straight into the first cell (the DSF paper's models:
    the cell's input matrix is the embedding); ``None`` means the top layer's hidden size.
    """

    vocab_size: int
    cell: str = "delta-rnn"
    hidden_sizes: list[int] = field(default_factory=lambda: [256])
    cell_options: dict[str, Any] = field(default_factory=dict)
    embedding_size: int | None = None
    tie_weights: bool = False
    dropout_embedding: float = 0.0
    dropout_input: float = 0.0
    dropout_hidden: float = 0.0
    dropout_output: float = 0.0
    dropout_output_context: bool = True
    variational: bool = False
    init: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """Check every field's type and range; :class:`ModelConfigError` names the field at fault."""
        try:
            check_positive_int("vocab_size", self.vocab_size)
            if not isinstance(self.cell, str) or not self.cell:
                raise ModelConfigError(f"cell must be the name of a registered cell (e.g. 'delta-rnn'), got {self.cell!r:.80}")
            if isinstance(self.hidden_sizes, int) and not isinstance(self.hidden_sizes, bool):
                self.hidden_sizes = [self.hidden_sizes]
            if not isinstance(self.hidden_sizes, (list, tuple)):
                raise ModelConfigError(
                    f"hidden_sizes must be a list of positive integers (one size per layer), got {self.hidden_sizes!r:.80}"
                )
            self.hidden_sizes = list(self.hidden_sizes)
            if not self.hidden_sizes:
                raise ModelConfigError("hidden_sizes must list at least one layer size")
            for i, size in enumerate(self.hidden_sizes):
                check_positive_int(f"hidden_sizes[{i}]", size)
            if not isinstance(self.cell_options, dict):
                raise ModelConfigError(
                    f"cell_options must be a dict of the cell's keyword options (e.g. {{'dropout': 0.1}}), "
                    f"got {self.cell_options!r:.80}"
                )
            bad_keys = [k for k in self.cell_options if not isinstance(k, str)]
            if bad_keys:
                raise ModelConfigError(f"cell_options keys must be option names (strings), got {bad_keys[:5]!r:.80}")
            self.cell_options = dict(self.cell_options)
            if self.embedding_size is None:
                self.embedding_size = self.hidden_sizes[-1]
            elif isinstance(self.embedding_size, bool) or not isinstance(self.embedding_size, int):
                raise ModelConfigError(
                    f"embedding_size must be a non-negative integer (0: one-hot input) or None (the top layer's "
                    f"size), got {self.embedding_size!r:.80}"
                )
            elif self.embedding_size != 0:
                check_positive_int("embedding_size", self.embedding_size)
            for name in ("tie_weights", "variational", "dropout_output_context"):
                check_bool(name, getattr(self, name), ModelConfigError)
            for name in ("dropout_embedding", "dropout_input", "dropout_hidden", "dropout_output"):
                check_probability(name, getattr(self, name), closed_top=False)
            self.init = check_init(self.init)
        except CellOptionError as err:
            raise ModelConfigError(str(err)) from None
        if self.tie_weights and self.embedding_size == 0:
            raise ModelConfigError("tie_weights needs an embedding (embedding_size > 0), not one-hot input")
        if self.dropout_hidden > 0 and not self.variational:
            raise ModelConfigError(
                "dropout_hidden (recurrent-state dropout) exists only as variational dropout: "
                "set variational: true, or use dropout_input / dropout_output for naive dropout"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def num_parameters(self) -> int:
        """The parameter count of the :class:`RecurrentLM` this config describes, computed on the meta
        device (nothing is allocated, so it is instant even for absurd sizes).

        Raises :class:`ModelConfigError` when the sizes overflow what a tensor can hold."""
        try:
            with torch.device("meta"):
                model = RecurrentLM(self, check_size=False)
        except RuntimeError as err:
            if "overflow" in str(err).lower():
                raise ModelConfigError(
                    f"this model cannot exist: its tensor sizes overflow ({err}); "
                    f"hidden_sizes={self.hidden_sizes}, vocab_size={self.vocab_size}, embedding_size={self.embedding_size}"
                ) from None
            raise
        return count_parameters(model)

    def check_size(self, limit: int | None = None) -> int:
        """The parameter count, or :class:`ModelConfigError` if it exceeds ``limit`` (default
        :func:`max_parameters`) — before any memory is allocated."""
        limit = max_parameters() if limit is None else limit
        n = self.num_parameters()
        if n > limit:
            raise ModelConfigError(
                f"this model would have {n:,} parameters ({n * 4 / 2**30:,.1f} GiB in float32), more than the "
                f"{limit:,} this machine can hold (hidden_sizes={self.hidden_sizes}, vocab_size={self.vocab_size:,}, "
                f"embedding_size={self.embedding_size}); use smaller sizes, or set {MAX_PARAMETERS_ENV} to raise "
                "the limit if you know better"
            )
        return n

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LMConfig:
        """The config :meth:`to_dict` gave; a missing, unknown or wrongly typed field raises
        :class:`ModelConfigError` naming it."""
        if not isinstance(data, dict):
            raise ModelConfigError(f"a model config must be a dict of fields, got {type(data).__name__} {data!r:.80}")
        fields = dataclasses.fields(cls)
        known = {f.name for f in fields}
        unknown = sorted(set(data) - known, key=str)
        if unknown:
            raise ModelConfigError(f"unknown model config field(s) {unknown}; known: {sorted(known)}")
        required = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [name for name in required if name not in data]
        if missing:
            raise ModelConfigError(
                f"the model config lacks the required field(s) {', '.join(missing)} "
                "(vocab_size: the number of symbols in the vocabulary); add it"
            )
        return cls(**data)

    @classmethod
    def from_hparams(cls, hparams: dict[str, Any]) -> LMConfig:
        """The config inside a flat mapping of training settings (a ``LanguageModelModule``'s arguments or a
        checkpoint's ``hyper_parameters``; recipes keep flat ``model:`` keys): the fields of this class are
        taken, the rest ignored; a single ``hidden_sizes`` int means one layer, ``cell_options: null`` none.
        The one place where the flat keys become a model config."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in hparams.items() if k in known}
        values["cell_options"] = dict(values.get("cell_options") or {})
        if isinstance(values.get("hidden_sizes"), int):
            values["hidden_sizes"] = [values["hidden_sizes"]]
        return cls(**values)


def _dropout_mask(like: Tensor, shape: tuple[int, ...], p: float) -> Tensor:
    """A Bernoulli(1-p) mask scaled by 1/(1-p) (inverted dropout)."""
    return like.new_empty(shape).bernoulli_(1 - p) / (1 - p)


class RecurrentLM(PretrainedModelMixin, nn.Module):
    """Embedding -> ``len(hidden_sizes)`` recurrent layers of ``config.cell`` -> decoder (eq. 14 of the
    DSF paper, eq. 8 of the SCRN paper). ``RecurrentLM.from_pretrained(name)`` / ``save_pretrained`` /
    ``push_to_hub``: see :class:`~dsf_lightning.hub.mixin.PretrainedModelMixin` (the folder:
    :mod:`dsf_lightning.model.pretrained`, registered for ``language-model``)."""

    def __init__(self, config: LMConfig, *, check_size: bool = True) -> None:
        """``check_size``: refuse (:class:`ModelConfigError`) a model larger than
        :func:`max_parameters` before allocating anything (counted on the meta device)."""
        if check_size and torch.get_default_device().type != "meta":
            config.check_size()
        super().__init__()
        self.config = config
        V, E = config.vocab_size, config.embedding_size
        self.embedding = nn.Embedding(V, E) if E else None
        layers: list[RecurrentCell] = []
        input_size = E or V
        for i, size in enumerate(config.hidden_sizes):
            try:
                layer = build_cell(config.cell, input_size, size, **config.cell_options)
            except CellOptionError as err:
                raise ModelConfigError(
                    f"cannot build layer {i} (cell {config.cell!r}, input_size={input_size}, hidden_size={size}, "
                    f"cell_options={config.cell_options!r:.200}): {err}"
                ) from None
            layers.append(layer)
            input_size = layer.output_size
        if config.dropout_hidden > 0 and not layers[0].recurrent_dropout:
            raise ModelConfigError(
                f"dropout_hidden (variational dropout of h where the recurrent weight matrices read it, Gal & "
                f"Ghahramani / SCRN eq. 9) is not defined for cell {config.cell!r}: it has no recurrent weight "
                f"matrix. Use dropout_output / dropout_input, or a cell it is accepted by: "
                f"{', '.join(recurrent_dropout_cells())}"
            )
        self.layers = nn.ModuleList(layers)
        top = input_size
        if config.tie_weights:
            hidden = top - layers[-1].output_context_size  # h: what E^T decodes (SCRN: [s; h] -> h)
            if hidden != E:
                raise ModelConfigError(
                    f"tie_weights ties the decoder to the top layer's hidden output h, which has {hidden} features, "
                    f"but embedding_size is {E}: only part of h would be tied. Set embedding_size to {hidden} (or "
                    f"the last of hidden_sizes to {E}), or set tie_weights to false"
                )
            self.untied_decoder = nn.Linear(top - E, V, bias=False) if top > E else None
            self.decoder_bias = nn.Parameter(torch.zeros(V))
            self.decoder = None
        else:
            self.decoder = nn.Linear(top, V)
        if self.embedding is not None:
            nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        if config.init is not None:
            initialize(self, config.init)

    # -- state -------------------------------------------------------------------------------
    def init_state(self, batch_size: int, device=None, dtype=None) -> ModelState:
        """Zero state for every layer."""
        return tuple(layer.init_state(batch_size, device, dtype) for layer in self.layers)

    # -- forward -----------------------------------------------------------------------------
    def embed(self, tokens: Tensor) -> Tensor:
        """``tokens`` [B, T] -> ``y^(0)`` [B, T, E] (or one-hot [B, T, V] when embedding_size is 0)."""
        if self.embedding is None:
            dtype = next(self.layers[0].parameters()).dtype
            return one_hot(tokens, self.config.vocab_size, dtype)  # [B, T, V]
        weight = self.embedding.weight
        p = self.config.dropout_embedding
        if self.training and p > 0:  # drop whole word types (Gal & Ghahramani)
            weight = weight * _dropout_mask(weight, (weight.shape[0], 1), p)
        return F.embedding(tokens, weight)

    def _drop(self, y: Tensor, p: float) -> Tensor:
        """Naive (fresh mask per step) or variational (one mask over time) dropout of [B, T, D]."""
        if not self.training or p == 0:
            return y
        if self.config.variational:
            return y * _dropout_mask(y, (y.shape[0], 1, y.shape[2]), p)
        return F.dropout(y, p, training=True)

    def _drop_output(self, layer: RecurrentCell, y: Tensor) -> Tensor:
        """Output dropout of one layer; with ``dropout_output_context`` false the cell's leading context
        features pass untouched (SCRN paper sec. 6.1: ``y_t = [s_t; h_t * xi_t(p_o)]``)."""
        context = 0 if self.config.dropout_output_context else layer.output_context_size
        if context == 0:
            return self._drop(y, self.config.dropout_output)
        return torch.cat((y[..., :context], self._drop(y[..., context:], self.config.dropout_output)), dim=-1)

    def features(self, tokens: Tensor, state: ModelState | None = None) -> tuple[Tensor, ModelState]:
        """Top-layer outputs ``[B, T, output_size]`` before the decoder, and the new state."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be shaped [B, T], got {tuple(tokens.shape)}")
        if self.embedding is None and self.layers[0].reads_ids and not (self.training and self.config.dropout_input):
            y = tokens  # one-hot input the first cell projects from the ids (RecurrentCell.reads_ids)
        else:
            y = self._drop(self.embed(tokens), self.config.dropout_input)  # [B, T, E]
        if state is None:
            state = self.init_state(tokens.shape[0], tokens.device, y.dtype if y.is_floating_point() else None)
        new_state = []
        for layer, layer_state in zip(self.layers, state):
            y, layer_state = layer(y, layer_state, state_masks=self._state_masks(layer, layer_state))
            y = self._drop_output(layer, y)  # [B, T, output_size]
            new_state.append(layer_state)
        return y, tuple(new_state)

    def _state_masks(self, layer: RecurrentCell, layer_state: State):
        p, index = self.config.dropout_hidden, layer.recurrent_state_index
        if not self.training or p == 0 or index is None:
            return None
        h = layer_state[index]
        return tuple(_dropout_mask(h, h.shape, p) if i == index else None for i in range(len(layer_state)))

    def decode(self, y: Tensor) -> Tensor:
        """``y`` [..., output_size] -> logits [..., V] (through oneDNN on CPU: the decoder dominates)."""
        if self.decoder is not None:
            return fast_linear(y, self.decoder.weight, self.decoder.bias)
        E = self.config.embedding_size
        logits = fast_linear(y[..., -E:], self.embedding.weight, self.decoder_bias)
        if self.untied_decoder is not None:
            logits = logits + self.untied_decoder(y[..., :-E])
        return logits

    def forward(self, tokens: Tensor, state: ModelState | None = None) -> tuple[Tensor, ModelState]:
        """``tokens`` [B, T] -> (logits [B, T, V], state)."""
        y, state = self.features(tokens, state)
        return self.decode(y), state


def recurrent_dropout_cells() -> list[str]:
    """The registered cells that take ``dropout_hidden`` (those with recurrent weight matrices)."""
    from ..cells import get_cell, list_cells

    return [name for name in list_cells() if get_cell(name).recurrent_dropout]


def detach_state(state: ModelState) -> ModelState:
    """Cut the graph at a window boundary (truncated BPTT) keeping the values."""
    return tuple(tuple(s.detach() for s in layer) for layer in state)


def count_parameters(module: nn.Module) -> int:
    """Number of distinct trainable scalars (a tied matrix counts once)."""
    return sum(p.numel() for p in module.parameters())
