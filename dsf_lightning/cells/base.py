"""The contract every recurrent cell of dsf-lightning follows.

A cell maps one time step of input ``x_t`` ``[B, input_size]`` and its state (a tuple of
``[B, n]`` tensors) to an output ``[B, output_size]`` and the next state. The work is split in two
so that the whole-sequence path can hoist the input matrix multiplies out of the time loop:

* :meth:`RecurrentCell.project_inputs` applies every input-to-hidden product of the cell; it is called
  once on a whole ``[B, T, input_size]`` sequence (one big matmul) or on one ``[B, input_size]`` step;
* :meth:`RecurrentCell.recur` does the rest of one step from the projected input and the state.

``step`` and ``forward`` are built from these two and must agree (the central test of the suite:
step loop == sequence == chunks with carried state).

Variational (recurrent) dropout (Gal & Ghahramani 2016; SCRN paper eq. 9: Kabdolov, Assylbekov & Takhanov 2018,
"Reproducing and Regularizing the SCRN Model") reaches a cell as ``state_masks`` (one tensor or None
per state tensor, the same mask at every step). A mask multiplies its state only where the step's
recurrent weight matrices read it (``V h_{t-1}``, ``R h_{t-1}``, ``V_h (q_t * h_{t-1})``, ...), never
where the state is carried forward (the Delta-RNN's ``r * h_{t-1}``, the GRU's ``(1 - r) h_{t-1}``, the
RAN's ``f * c_{t-1}``): masking the carried path too multiplies the state by up to ``r / (1 - p) > 1``
every step. Each cell applies its masks in ``recur`` (and its fast paths) itself; only the state at
``recurrent_state_index`` may carry one (:meth:`RecurrentCell.recurrent_mask`).
"""

from __future__ import annotations

import abc
import functools
import inspect
import math
import weakref
from fractions import Fraction
from functools import partial
from itertools import repeat
from typing import ClassVar

import torch
from torch import Tensor, nn

from .._checks import check_bool
from ..ops.cuda_graph import WindowGraphs, inside_window, window_path
from ..ops.fast_linear import SequenceLinear, fast_linear
from ..ops.one_hot import one_hot, one_hot_linear

State = tuple[Tensor, ...]
#: each cell's captured CUDA graphs (weak keys: they go with the cell, and copies of a cell start without)
_WINDOW_GRAPHS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: a cell's ``implementation``: its fast whole-sequence path, or the plain step loop it is tested against
IMPLEMENTATIONS = ("fast", "reference")
MaybeMasks = "tuple[Tensor | None, ...] | None"


def _graph_reaches(root: Tensor, target: Tensor) -> bool:
    """Whether ``target`` is ``root`` or one of the nodes autograd's graph of ``root`` goes through."""
    if root is target:
        return True
    goal, start = target.grad_fn, root.grad_fn
    if goal is None or start is None:
        return False
    seen, stack = set(), [start]
    while stack:
        fn = stack.pop()
        if fn is goal:
            return True
        if fn in seen:
            continue
        seen.add(fn)
        stack.extend(f for f, _ in fn.next_functions if f is not None)
    return False


@functools.lru_cache(maxsize=256)
def _takes_state_masks(recur) -> bool:
    """Whether a ``recur`` function has a ``state_masks`` parameter; looked up once per function, not on
    every step (``inspect.signature`` costs tens of microseconds)."""
    return "state_masks" in inspect.signature(recur).parameters


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


def _identity(v: Tensor) -> Tensor:
    return v


# module-level functions only (no lambdas): a cell holds its activation, and ddp_spawn pickles the model
ACTIVATIONS = {
    "identity": _identity,
    "tanh": torch.tanh,
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
}


def activation(name: str, option: str) -> callable:
    """The element-wise function called ``name`` (identity / tanh / relu / sigmoid)."""
    check_choice(option, name, tuple(ACTIVATIONS))
    return ACTIVATIONS[name]


def activation_derivative(name: str, out: Tensor) -> Tensor:
    """``f'(x)`` from ``out = f(x)`` for the activation called ``name`` (the trick of the SCRN paper,
    sec. 7: ``sigma'(x) = sigma(x)(1 - sigma(x))`` for the logistic), differentiable."""
    if name == "sigmoid":
        return out * (1 - out)
    if name == "tanh":
        return 1 - out * out
    if name == "relu":
        return (out > 0).to(out.dtype)
    if name == "identity":
        return torch.ones_like(out)
    raise ValueError(f"no derivative for the activation {name!r}; choose one of {', '.join(ACTIVATIONS)}")


class RecurrentCell(nn.Module, abc.ABC):
    """Base class of all cells: sizes, state layout, step and whole-sequence forward.

    Subclasses set ``state_sizes`` (one int per state tensor) and ``output_size`` in ``__init__``,
    and implement :meth:`project_inputs` and :meth:`recur`. ``output_size`` is what the next layer
    (or the decoder) reads, so any cell can be the input of another.
    """

    # -- what the rest of the package knows about a cell: declared here, read from the cell ----------
    #: the registry name, filled in by :func:`dsf_lightning.cells.register_cell`
    cell_name: ClassVar[str] = ""
    #: the paper that defines the cell (authors, *title*, venue, year): a model card's "Citation"
    citation: ClassVar[str] = ""
    #: where in that paper the cell's update is written (e.g. ``"DSF eqs 3-5, 8, 10-12"``)
    equations: ClassVar[str] = ""
    #: the paper family the cell belongs to (``delta-rnn``, ``scrn``, ``ran``, ``irlm``, ``sr``, or a
    #: baseline's own name): model cards and result tables group by it
    family: ClassVar[str] = ""
    #: readable names of the state tensors, one per entry of ``state_sizes`` (``("s", "h")`` for the
    #: SCRN); the analysis tools label states with them. A wrapper may make it a property.
    state_names: ClassVar[tuple[str, ...]] = ("h",)
    #: constructor options that set how big the model is, ``{option: part of hidden_size or None}``: a
    #: ``Fraction`` for a part of the hidden size (the SCRN's ``context_size``, about d_h / 6 in its
    #: paper's models), ``None`` for a size of its own (the sr-RNN's ``k`` centroids). A reduced
    #: reproduction (``dsf reproduce --scale tiny / small``) shrinks them with the hidden size.
    size_options: ClassVar[dict[str, Fraction | None]] = {}
    #: constructor options that only regularize (no parameter depends on them): fine-tuning may change
    #: them; every other option is architecture and must match the pretrained model
    regularization_options: ClassVar[frozenset[str]] = frozenset()
    #: whether :meth:`jacobian_norm` gives the Sobolev penalty's per-step term (SCRN paper sec. 7, eq. 10)
    #: in closed form: ``None`` (no: the regularizer differentiates :meth:`recur` with autograd),
    #: ``"step"`` (from each step's new state, as the SCRN's) or ``"constant"`` (the same at every step
    #: whatever the data, as the IRLM's diagonal recurrence)
    jacobian_form: ClassVar[str | None] = None
    #: which state tensor is the recurrent hidden state h (SCRN eq. 9 drops h where the recurrent weights
    #: read it, never the context s; the Sobolev penalty differentiates h_t by h_(t-1)); None: none
    recurrent_state_index: ClassVar[int | None] = 0
    #: whether recurrent weight matrices read that state, so that variational dropout has somewhere to
    #: act (False for the IRLM, whose only recurrence is diagonal and carried)
    recurrent_dropout: ClassVar[bool] = True
    #: whether the fast path (:meth:`forward_fast`) takes token ids ``[B, T]`` for one-hot input of
    #: ``input_size`` classes and gathers its input weights' columns (``ops.one_hot.one_hot_linear``)
    #: instead of multiplying one-hot vectors; other cells (and the reference path) are given the vectors
    reads_ids: ClassVar[bool] = False

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
    def recur(
        self, projected_t: Tensor, state: State, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State]:
        """One step from the projected input ``[B, projected]`` and state -> (output, new state).

        ``state_masks``: variational dropout masks, applied where the recurrent weights read the state
        (module docstring; :meth:`recurrent_mask` checks them)."""

    def recurrent_mask(self, state_masks: MaybeMasks) -> Tensor | None:
        """The one variational dropout mask of ``state_masks`` (None if none), for the operand of the
        recurrent weight matrices; a mask on any other state tensor is a :class:`ValueError`."""
        if state_masks is None:
            return None
        k = self.recurrent_state_index if self.recurrent_dropout else None
        for i, m in enumerate(state_masks):
            if m is not None and i != k:
                where = (
                    f"only state {k} enters its recurrent weight matrices" if k is not None
                    else "its recurrence has no recurrent weight matrix"
                )
                raise ValueError(
                    f"{self.cell_name or type(self).__name__}: a variational dropout mask on state {i} has nowhere "
                    f"to act: {where} (Gal & Ghahramani; SCRN eq. 9 drop h only where the recurrent weights read "
                    "it, never the state carried forward)"
                )
        return None if k is None or k >= len(state_masks) else state_masks[k]

    # -- fast and reference paths -----------------------------------------------------------------
    @property
    def implementation(self) -> str:
        """``"fast"`` (default): :meth:`forward` runs the cell's fast whole-sequence path
        (:meth:`forward_fast`: fused loops, scans, whole-sequence products; where a cell has none it is
        the reference); ``"reference"``: :meth:`forward` is :meth:`forward_reference`, the step loop of
        :meth:`recur` under autograd (double backward, forward-mode AD, checking the fast path). Both
        compute the same function. Set it on any cell, or give it as a cell option
        (``cell_options: {implementation: reference}``, accepted for every cell by
        :func:`~dsf_lightning.cells.build_cell`)."""
        return self._implementation

    @implementation.setter
    def implementation(self, value: str) -> None:
        self._implementation = check_choice("implementation", value, IMPLEMENTATIONS)

    _implementation: str = "fast"

    @property
    def cuda_graphs(self) -> bool:
        """On a CUDA device, whether a training window of the fast path runs as a captured CUDA graph
        (True, the default: :mod:`dsf_lightning.ops.cuda_graph`, captured once per input shape and replayed
        every window); False opts out (``cell_options: {cuda_graphs: false}``, accepted by every cell).
        No effect on the CPU, in evaluation, under autocast or with ``implementation="reference"``."""
        return self._cuda_graphs

    @cuda_graphs.setter
    def cuda_graphs(self, value: bool) -> None:
        self._cuda_graphs = check_bool("cuda_graphs", value, CellOptionError)

    _cuda_graphs: bool = True

    def jacobian_norm(self, new_state: State | None = None) -> Tensor:
        """``||d h_t / d h_(t-1)||_F^2`` in closed form, ``h`` the state at ``recurrent_state_index`` and
        every other state tensor held fixed (the Sobolev penalty of the SCRN paper, sec. 7, eq. 10): per
        sequence ``[B]`` from the step's ``new_state`` (``jacobian_form == "step"``) or one scalar
        (``"constant"``). Cells that declare a ``jacobian_form`` override it."""
        raise TypeError(
            f"{self.cell_name or type(self).__name__} has no closed-form Jacobian norm (jacobian_form is None): "
            "differentiate recur instead (the Sobolev penalty's method='autograd')"
        )

    @classmethod
    def closed_form_jacobian(cls) -> str | None:
        """``jacobian_form`` where :meth:`jacobian_norm` was written for this class's :meth:`recur`, else
        None: a subclass that changes ``recur`` without a new ``jacobian_norm`` falls back to autograd."""
        if cls.jacobian_form is None:
            return None
        owner = next(k for k in cls.__mro__ if "jacobian_norm" in k.__dict__)
        recur_owner = next(k for k in cls.__mro__ if "recur" in k.__dict__)
        return cls.jacobian_form if issubclass(owner, recur_owner) else None

    def output_reads_state(self, index: int) -> bool:
        """Whether a step's output reads its new state tensor ``index`` (so the last output carries
        ``dL/dh_T`` to the final state, what iterative inference, DSF sec. 2.5, steps along). Probed
        once on the reference step :meth:`recur` in evaluation mode and cached."""
        cache = self.__dict__.get("_output_reads")
        if cache is None:
            ref = next(self.parameters(), None)
            kw = {"dtype": ref.dtype, "device": ref.device} if ref is not None else {}
            state = tuple(torch.full((2, n), 0.1, **kw).requires_grad_() for n in self.state_sizes)
            modes = [(m, m.training) for m in self.modules()]
            self.eval()  # no dropout draws: the RNG stream (exact resume) is untouched
            try:
                with torch.enable_grad():
                    out, new = self.recur(self.project_inputs(torch.zeros(2, self.input_size, **kw)), state)
            finally:
                for m, mode in modes:
                    m.training = mode
            cache = self.__dict__["_output_reads"] = tuple(_graph_reaches(out, s) for s in new)
        return cache[index]

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

        ``state_masks`` (one tensor or None per state tensor): variational dropout on the recurrent
        connections (SCRN paper eq. 9, Gal & Ghahramani), applied only where the recurrent weight
        matrices read the state (module docstring). The state returned is never masked.
        """
        self._check_input(x_t, 2)
        if state is None:
            state = self.init_state(x_t.shape[0], x_t.device, x_t.dtype)
        return self._recur(self.project_inputs(x_t), state, state_masks)

    def forward(
        self, x: Tensor, state: State | None = None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State]:
        """A whole sequence: ``x`` ``[B, T, input_size]`` (or token ids ``[B, T]``: one-hot input of
        ``input_size`` classes) -> (outputs ``[B, T, output_size]``, state).

        ``state_masks`` as in :meth:`step`, the same mask at every time step. :meth:`forward_fast` or
        :meth:`forward_reference`, as :attr:`implementation` says; ids reach the fast path of a cell
        that :attr:`reads_ids`, every other path gets their one-hot vectors.
        """
        if not self.reads_ids:
            x = self.one_hot_vectors(x)
        if self._implementation == "reference":
            return self.forward_reference(x, state, state_masks)
        if x.dim() >= 2 and x.shape[1] > 0 and self.window_path(x) == "cuda-graph":
            if state is None:
                state = self.init_state(x.shape[0], x.device, x.dtype if x.is_floating_point() else None)
            graphs = _WINDOW_GRAPHS.get(self)
            if graphs is None:
                graphs = _WINDOW_GRAPHS[self] = WindowGraphs(self, type(self).forward_fast)
            return graphs(x, state, state_masks)
        return self.forward_fast(x, state, state_masks)

    def window_path(self, x: Tensor) -> str:
        """How :meth:`forward` runs a window of ``x`` on the fast path: ``"cuda-graph"`` or ``"eager"``
        (:func:`~dsf_lightning.ops.cuda_graph.window_path`, :attr:`cuda_graphs`)."""
        cuda = x.device.type == "cuda"
        # a backward to capture: without one nothing tells when the replayed output buffers are free again
        grad = cuda and torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters()))
        return window_path(x.device, cuda_graphs=self._cuda_graphs, training=self.training,
                           grad_enabled=grad, autocast=cuda and torch.is_autocast_enabled("cuda"),
                           capturing=cuda and (torch.cuda.is_current_stream_capturing() or inside_window()),
                           compiling=torch.compiler.is_compiling())

    def forward_fast(
        self, x: Tensor, state: State | None = None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State]:
        """The fast whole-sequence forward; cells with a fast path override it (falling back to
        :meth:`forward_reference` where it does not apply), and the reference stays the definition
        they are tested against."""
        return self.forward_reference(x, state, state_masks)

    def forward_reference(
        self, x: Tensor, state: State | None = None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State]:
        """The reference whole-sequence forward: one matmul for the input projections, then the step
        loop of :meth:`recur` under autograd."""
        x = self.one_hot_vectors(x)
        self._check_input(x, 3)
        if state is None:
            state = self.init_state(x.shape[0], x.device, x.dtype)
        projected = self.project_inputs(x)  # [B, T, P]: one matmul for all steps
        outputs = []
        # unbind, not projected[:, t]: each slice's backward would add a full [B, T, P] zero gradient,
        # making the backward pass quadratic in T
        for projected_t in projected.unbind(1):
            out_t, state = self._recur(projected_t, state, state_masks)
            outputs.append(out_t)
        return torch.stack(outputs, dim=1), state  # [B, T, output_size]

    def _recur(self, projected_t: Tensor, state: State, state_masks: MaybeMasks) -> tuple[Tensor, State]:
        """``recur`` with masks only when there are any, so a cell written as ``recur(projected_t, state)``
        keeps working without variational dropout (and says what it lacks with it)."""
        if state_masks is None or all(m is None for m in state_masks):
            return self.recur(projected_t, state)
        if not _takes_state_masks(getattr(self.recur, "__func__", self.recur)):
            raise ValueError(
                f"{self.cell_name or type(self).__name__}.recur(projected_t, state) takes no state_masks, so it "
                "cannot apply variational dropout (dropout_hidden): give it a state_masks=None argument and "
                "multiply by self.recurrent_mask(state_masks) where its recurrent weight matrices read the state"
            )
        return self.recur(projected_t, state, state_masks)

    def one_hot_vectors(self, x: Tensor) -> Tensor:
        """``x`` as it is, or for token ids ``[B, T]`` their one-hot vectors ``[B, T, input_size]`` in the
        parameters' dtype (for the paths that multiply them; :attr:`reads_ids`)."""
        if x.is_floating_point():
            return x
        ref = next(self.parameters(), None)
        return one_hot(x, self.input_size, ref.dtype if ref is not None else torch.float32)

    def _check_input(self, x: Tensor, ndim: int) -> None:
        if not x.is_floating_point() and self.reads_ids and ndim == 3 and x.dim() == 2:
            return  # token ids [B, T] for one-hot input (reads_ids)
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


# -- the shared whole-sequence loop ----------------------------------------------------------------
class SequenceLoopCell(RecurrentCell):
    """A cell whose step reads its recurrent matrix products through callables, so that a whole sequence
    can give it :class:`~dsf_lightning.ops.fast_linear.SequenceLinear` products (each weight's gradient
    as one product over all steps) and a single step plain :func:`fast_linear` ones.

    Subclasses implement :meth:`recurrent_weights` (the weights, in the order ``recur_with`` reads the
    products) and :meth:`recur_with`; ``recur`` is ``recur_with`` with per-step products.
    """

    @abc.abstractmethod
    def recurrent_weights(self) -> tuple[Tensor, ...]:
        """The weights ``W`` of the recurrent products ``x W^T`` that ``recur_with`` reads, in order."""

    @abc.abstractmethod
    def recur_with(self, projected_t: Tensor, state: State, products: tuple) -> tuple[Tensor, State]:
        """One step, as :meth:`recur`, with ``products[i](x) = x W_i^T`` for ``W_i = recurrent_weights()[i]``."""

    def dropout_reads(self) -> tuple[bool, ...]:
        """For each of :meth:`recurrent_weights`, whether its product reads the state that variational
        dropout masks (``recurrent_state_index``): those products get the mask on their operand
        (Gal & Ghahramani). All of them by default."""
        return (True,) * len(self.recurrent_weights())

    def _product_masks(self, mask: Tensor | None):
        if mask is None:
            return repeat(None)
        return tuple(mask if reads else None for reads in self.dropout_reads())

    def step_products(self, mask: Tensor | None = None) -> tuple:
        """The products of a single step (outside a whole-sequence forward); ``mask``: the variational
        dropout mask on the operand of the products that read the dropped state."""
        return tuple(
            partial(fast_linear, weight=w) if m is None else (lambda x, w=w, m=m: fast_linear(x * m, w))
            for w, m in zip(self.recurrent_weights(), self._product_masks(mask))
        )

    def recur(self, projected_t: Tensor, state: State, state_masks: MaybeMasks = None) -> tuple[Tensor, State]:
        return self.recur_with(projected_t, state, self.step_products(self.recurrent_mask(state_masks)))

    def sequence_loop_supported(self) -> bool:
        """Whether :meth:`forward` may run the loop with sequence products (wrappers ask their base)."""
        return True

    def input_weights(self) -> tuple[Tensor, Tensor | None] | None:
        """``(W, b)`` when :meth:`project_inputs` is exactly ``x W^T + b``: one-hot input then reaches the loop
        as token ids and each step's projection is a gathered column of ``W`` (:attr:`reads_ids`). None (the
        default, not overridden) when the input side is more than that product."""
        return None

    @property
    def reads_ids(self) -> bool:  # RecurrentCell.reads_ids: the class declares input_weights (none built here)
        return type(self).input_weights is not SequenceLoopCell.input_weights and self.sequence_loop_supported()

    def forward_fast(
        self, x: Tensor, state: State | None = None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State]:
        """:meth:`forward_reference`'s loop, with the recurrent products of the whole sequence."""
        ids = not x.is_floating_point()  # one-hot input as token ids [B, T] (reads_ids)
        if x.dim() != (2 if ids else 3) or x.shape[1] == 0 or not self.sequence_loop_supported():
            return self.forward_reference(x, state, state_masks)
        self._check_input(x, 3)
        if state is None:
            state = self.init_state(x.shape[0], x.device, None if ids else x.dtype)
        # [B, T, P]: one matmul for all steps, or for ids the gathered columns of W
        projected = one_hot_linear(x, *self.input_weights()) if ids else self.project_inputs(x)
        masks = self._product_masks(self.recurrent_mask(state_masks))
        products = tuple(
            SequenceLinear(w, x.shape[1], x.shape[0], input_mask=m) for w, m in zip(self.recurrent_weights(), masks)
        )
        outputs = []
        for projected_t in projected.unbind(1):  # unbind: see forward_reference
            out_t, state = self.recur_with(projected_t, state, products)
            outputs.append(out_t)
        return torch.stack(outputs, dim=1), state  # [B, T, output_size]
