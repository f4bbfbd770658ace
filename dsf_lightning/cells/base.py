"""The contract every recurrent cell of dsf-lightning follows.

A cell maps one time step of input ``x_t`` ``[B, input_size]`` and its state (a tuple of
``[B, n]`` tensors) to an output ``[B, output_size]`` and the next state. The work is split in two
so that the whole-sequence path can hoist the input matrix multiplies out of the time loop:

* :meth:`RecurrentCell.project_inputs` applies every input-to-hidden product of the cell; it is called
  once on a whole ``[B, T, input_size]`` sequence (one big matmul) or on one ``[B, input_size]`` step;
* :meth:`RecurrentCell.recur` does the rest of one step from the projected input and the state.

``step`` and ``forward`` are built from these two and must agree (the central test of the suite:
step loop == sequence == chunks with carried state).
"""

from __future__ import annotations

import abc
import math
from typing import ClassVar

import torch
from torch import Tensor, nn

State = tuple[Tensor, ...]
MaybeMasks = "tuple[Tensor | None, ...] | None"


def _masked(state: State, masks: "tuple[Tensor | None, ...] | None") -> State:
    if masks is None:
        return state
    return tuple(s if m is None else s * m for s, m in zip(state, masks))


class CellOptionError(ValueError):
    """A cell was built with an option it cannot take (the message names the option)."""


class UnknownCellOptionError(CellOptionError, TypeError):
    """A cell was built (through :func:`~dsf_lightning.cells.build_cell`) with an option its ``__init__``
    does not take; the message names the option, the cell and the options it accepts. Also a
    ``TypeError``, which is what calling the class directly with that keyword raises."""


def check_positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is a positive integer, else raise :class:`CellOptionError` naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CellOptionError(f"{name} must be a positive integer, got {value!r}")
    return value


def check_probability(name: str, value: object, *, closed_top: bool = True) -> float:
    """Return ``value`` as a float in [0, 1] (or [0, 1) when ``closed_top`` is false)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise CellOptionError(f"{name} must be a number in [0, 1], got {value!r}")
    top_ok = value <= 1 if closed_top else value < 1
    if not (value >= 0 and top_ok):
        bracket = "]" if closed_top else ")"
        raise CellOptionError(f"{name} must lie in [0, 1{bracket}, got {value!r}")
    return float(value)


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise naming the option and the choices."""
    if value not in choices:
        raise CellOptionError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value  # type: ignore[return-value]


ACTIVATIONS = {
    "identity": lambda v: v,
    "tanh": torch.tanh,
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
}


def activation(name: str, option: str) -> "callable":
    """The element-wise function called ``name`` (identity / tanh / relu / sigmoid)."""
    check_choice(option, name, tuple(ACTIVATIONS))
    return ACTIVATIONS[name]


class RecurrentCell(nn.Module, abc.ABC):
    """Base class of all cells: sizes, state layout, step and whole-sequence forward.

    Subclasses set ``state_sizes`` (one int per state tensor) and ``output_size`` in ``__init__``,
    and implement :meth:`project_inputs` and :meth:`recur`. ``output_size`` is what the next layer
    (or the decoder) reads, so any cell can be the input of another.
    """

    #: the registry name, filled in by :func:`dsf_lightning.cells.register_cell`
    cell_name: ClassVar[str] = ""
    #: which state tensor is the recurrent hidden state h that variational dropout masks (SCRN eq. 9
    #: masks h, never the context s); None when no state should be masked
    recurrent_state_index: ClassVar[int | None] = 0

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size = check_positive_int("input_size", input_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.state_sizes: tuple[int, ...] = (hidden_size,)
        self.output_size: int = hidden_size
        #: how many leading output features are a slow context state rather than the hidden state (SCRN's
        #: ``y_t = [s_t; h_t]``, eq. 7): the LM's output dropout can leave them alone (SCRN paper sec. 6.1)
        self.output_context_size: int = 0

    # -- the two halves of a step -------------------------------------------------------------
    @abc.abstractmethod
    def project_inputs(self, x: Tensor) -> Tensor:
        """All input-to-hidden products of ``x`` ``[..., input_size]`` -> ``[..., projected]``."""

    @abc.abstractmethod
    def recur(self, projected_t: Tensor, state: State) -> tuple[Tensor, State]:
        """One step from the projected input ``[B, projected]`` and state -> (output, new state)."""

    # -- the public contract ------------------------------------------------------------------
    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> State:
        """The zero state for ``batch_size`` sequences (carried state starts here)."""
        ref = next(self.parameters(), None)
        device = device if device is not None else (ref.device if ref is not None else None)
        dtype = dtype if dtype is not None else (ref.dtype if ref is not None else torch.float32)
        return tuple(torch.zeros(batch_size, n, device=device, dtype=dtype) for n in self.state_sizes)

    def step(
        self, x_t: Tensor, state: State | None = None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State]:
        """One time step: ``x_t`` ``[B, input_size]`` -> (output ``[B, output_size]``, state).

        ``state_masks`` (one tensor or None per state tensor) multiply the state as this step reads
        it: variational dropout on the recurrent connections (SCRN paper eq. 9, Gal & Ghahramani).
        The state returned is never masked, so carried state stays clean.
        """
        self._check_input(x_t, 2)
        if state is None:
            state = self.init_state(x_t.shape[0], x_t.device, x_t.dtype)
        return self.recur(self.project_inputs(x_t), _masked(state, state_masks))

    def forward(
        self, x: Tensor, state: State | None = None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State]:
        """A whole sequence: ``x`` ``[B, T, input_size]`` -> (outputs ``[B, T, output_size]``, state).

        ``state_masks`` as in :meth:`step`, the same mask at every time step. Cells with a fast path
        override this; :meth:`forward_reference` stays the definition they are tested against.
        """
        return self.forward_reference(x, state, state_masks)

    def forward_reference(
        self, x: Tensor, state: State | None = None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State]:
        """The reference whole-sequence forward: one matmul for the input projections, then the step
        loop of :meth:`recur` under autograd."""
        self._check_input(x, 3)
        if state is None:
            state = self.init_state(x.shape[0], x.device, x.dtype)
        projected = self.project_inputs(x)  # [B, T, P]: one matmul for all steps
        outputs = []
        # unbind, not projected[:, t]: each slice's backward would add a full [B, T, P] zero gradient,
        # making the backward pass quadratic in T
        for projected_t in projected.unbind(1):
            out_t, state = self.recur(projected_t, _masked(state, state_masks))
            outputs.append(out_t)
        return torch.stack(outputs, dim=1), state  # [B, T, output_size]

    def _check_input(self, x: Tensor, ndim: int) -> None:
        if x.dim() != ndim or x.shape[-1] != self.input_size:
            want = "[B, T, input_size]" if ndim == 3 else "[B, input_size]"
            raise ValueError(
                f"{type(self).__name__} expects input shaped {want} with input_size={self.input_size}, "
                f"got shape {tuple(x.shape)}"
            )

    def reset_parameters(self) -> None:
        """Uniform(-1/sqrt(H), 1/sqrt(H)) for every parameter (the PyTorch RNN default)."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def extra_repr(self) -> str:
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}"
