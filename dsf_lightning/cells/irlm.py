"""The impulse-response language model (IRLM) of Pachitariu & Sahani (2013, "Regularization and
nonlinearities for neural language models: when are they needed?").

The RNN of sec. 2.1, ``x_t = f(W y_t + R x_{t-1})``, with the nonlinearity f replaced by the identity
and the recurrent matrix R made diagonal (sec. 3)::

    x_t = W y_t + r * x_{t-1}        (r = diag(R), one self-connection per unit, in (-1, 1))

The softmax reads ``x_t`` directly (``P(y_{t+1}) ~ exp(y_{t+1}^T Z x_t)``, eq. 1), so the output is
``x_t`` with no output nonlinearity. A unit's contribution from ``tau`` steps back decays like
``r^tau = exp(tau log r)``: its timescale is ``-1 / log|r|`` (sec. 5.1).

Sec. 5.3 adds *long-context units* (LCUs) whose self-connections are "constrained to lie between 0.7
and 1" (initialized at 0.9; the remaining short-context units start at 0).

How r is kept in range (the paper does not say), the option ``r_parametrization``:

* ``"sigmoid"`` (the default, and what every existing checkpoint holds): each unit has a free parameter
  ``rho`` and ``r = lo + (hi - lo) * sigmoid(rho)`` with per-unit bounds ``(lo, hi)`` = ``(-1, 1)`` (so
  ``r = tanh(rho / 2)``) or the LCU range, clamped ``eps`` inside the bounds.
* ``"direct"``: ``rho`` *is* r, clamped ``eps`` inside its bounds with a straight-through gradient
  (the clamp passes the gradient unchanged), so an optimizer step on ``rho`` is the same step on r.

The paper trains the self-connections with a 1000-fold smaller learning rate than ``W`` (sec. 3): put
``rho`` in its own optimizer parameter group (``param_group_lr: {rho: lr / 1000}``) *with*
``r_parametrization: direct``. Under ``"sigmoid"`` the step on r is ``(dr/drho)^2`` times smaller again
(SGD; about 0.009 at r = 0.9), not the paper's rule.

Not part of the cell (the paper applies them outside the recurrence): dropout on ``x_t`` before the
decoder (sec. 4) and column normalization of ``W`` and ``Z``. The paper's smoothed-rectifier RNN
(sec. 2.2) is in :mod:`.classic`.

Registered cells:

* ``irlm``  the diagonal linear recurrence above, optionally with LCUs.

Speed: a whole sequence is one matrix product (``W y_t`` for all t) and one call of
:func:`dsf_lightning.ops.scan.linear_recurrence` (``implementation = "fast"``, the default; the plain
step loop of ``recur`` is :meth:`IRLMCell.forward_reference`).

No variational (recurrent) dropout: it drops the state where recurrent weight *matrices* read it (Gal &
Ghahramani; SCRN paper eq. 9), and the IRLM has none, only the diagonal recurrence that carries the
state (masking that multiplied the state by up to ``r / (1 - p)`` every step). The paper regularizes
with dropout before the decoder (sec. 4), the LM's ``dropout_output``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..ops.final_state import through_final_state
from ..ops.scan import linear_recurrence
from .base import CellOptionError, MaybeMasks, RecurrentCell, State
from .classic import IRLM_CITATION
from .registry import register_cell


def _check_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise CellOptionError(f"{name} must be a number, got {value!r}")
    return float(value)


def _check_range(name: str, value: object) -> tuple[float, float]:
    """A pair (lo, hi) with -1 <= lo < hi <= 1."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise CellOptionError(f"{name} must be a pair (low, high), got {value!r}")
    lo, hi = (_check_number(name, v) for v in value)
    if not -1.0 <= lo < hi <= 1.0:
        raise CellOptionError(f"{name} must satisfy -1 <= low < high <= 1, got {value!r}")
    return lo, hi


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


@register_cell("irlm")
class IRLMCell(RecurrentCell):
    """IRLM, sec. 3: ``x_t = W y_t + r * x_{t-1}``, output ``x_t`` (no nonlinearity).

    Options:
        r_init: initial self-connection of the ordinary units, in (-1, 1) (0: "short-context units
            initialized at 0", sec. 5.3).
        long_context_units: how many of the ``hidden_size`` units are long-context units (sec. 5.3;
            the paper uses 384 LCUs out of 512 units); they are the *first* units. 0 by default.
        long_context_range: ``(low, high)``, the open interval the LCUs' self-connections are kept in
            (``(0.7, 1.0)``, sec. 5.3); ``-1 <= low < high <= 1``.
        long_context_init: initial self-connection of the LCUs, inside ``long_context_range``
            (0.9, sec. 5.3).
        r_parametrization: ``"sigmoid"`` (default: ``rho`` is a logit) or ``"direct"`` (``rho`` is r
            itself, so ``param_group_lr`` on ``rho`` is the learning rate of r: the paper's 1000-fold
            smaller rate); see the module docstring.

    State: ``(x [B, H],)``, which is also the output.

    Parameters: ``W`` [H, I] (the encoding matrix), ``rho`` [H] (self-connections before squashing):
    ``H I + H``.

    ``implementation`` (every cell's, :attr:`RecurrentCell.implementation`): ``"fast"`` runs :meth:`forward` as
    one product and one :func:`~dsf_lightning.ops.scan.linear_recurrence`; ``"reference"`` as the step loop.
    """

    citation, equations, family, state_names = IRLM_CITATION, "IRLM paper sec. 3", "irlm", ("x",)

    R_PARAMETRIZATIONS = ("sigmoid", "direct")
    #: long-context units scale with the model: 384 of 512 units in sec. 5.3
    size_options = {"long_context_units": Fraction(3, 4)}
    jacobian_form = "constant"  # diag(r): jacobian_norm
    #: no recurrent weight matrix, so no variational dropout (module docstring)
    recurrent_dropout = False
    #: the ``method`` passed to :func:`~dsf_lightning.ops.scan.linear_recurrence`
    scan_method: str = "auto"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        r_init: float = 0.0,
        long_context_units: int = 0,
        long_context_range: tuple[float, float] = (0.7, 1.0),
        long_context_init: float = 0.9,
        r_parametrization: str = "sigmoid",
    ) -> None:
        super().__init__(input_size, hidden_size)
        self.r_init = _check_number("r_init", r_init)
        if not -1.0 < self.r_init < 1.0:
            raise CellOptionError(f"r_init must lie in (-1, 1), got {r_init!r}")
        if (
            isinstance(long_context_units, bool)
            or not isinstance(long_context_units, int)
            or not 0 <= long_context_units <= hidden_size
        ):
            raise CellOptionError(
                f"long_context_units must be an integer in [0, hidden_size={hidden_size}], got {long_context_units!r}"
            )
        self.long_context_units = long_context_units
        self.long_context_range = _check_range("long_context_range", long_context_range)
        lo, hi = self.long_context_range
        self.long_context_init = _check_number("long_context_init", long_context_init)
        if not lo < self.long_context_init < hi:
            raise CellOptionError(
                f"long_context_init must lie inside long_context_range ({lo}, {hi}), got {long_context_init!r}"
            )

        if r_parametrization not in self.R_PARAMETRIZATIONS:
            raise CellOptionError(
                f"r_parametrization must be one of {', '.join(map(repr, self.R_PARAMETRIZATIONS))} (rho is a logit, "
                f"or r itself), got {r_parametrization!r}"
            )
        self.r_parametrization = r_parametrization
        self.W = nn.Parameter(torch.empty(hidden_size, input_size))  # the encoding matrix
        self.rho = nn.Parameter(torch.empty(hidden_size))  # diag(R) before squashing into its bounds
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``W`` U(-1/sqrt(H), 1/sqrt(H)); r at ``long_context_init`` (LCUs) and ``r_init`` (others)."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        nn.init.uniform_(self.W, -bound, bound)
        lo, hi = self.long_context_range
        L = self.long_context_units
        with torch.no_grad():
            if self.r_parametrization == "direct":
                self.rho[:L] = self.long_context_init
                self.rho[L:] = self.r_init
                return
            self.rho[:L] = _logit((self.long_context_init - lo) / (hi - lo))
            self.rho[L:] = _logit((self.r_init + 1.0) / 2.0)

    def r_bounds(self) -> tuple[Tensor, Tensor]:
        """Per-unit (low, high) [H] each: the LCUs' ``long_context_range``, (-1, 1) for the others.

        Built from the Python floats in the parameters' dtype (exact after ``.double()``)."""
        lo, hi = self.long_context_range
        lcu = self.long_context_mask
        low = self.rho.new_full((self.hidden_size,), -1.0).masked_fill(lcu, lo)
        high = self.rho.new_full((self.hidden_size,), 1.0).masked_fill(lcu, hi)
        return low, high

    @property
    def r(self) -> Tensor:
        """The self-connections diag(R) [H], each strictly inside its unit's bounds."""
        low, high = self.r_bounds()
        eps = torch.finfo(self.rho.dtype).eps
        if self.r_parametrization == "direct":  # straight through: d r / d rho = 1, also at the bounds
            return torch.clamp(self.rho, low + eps, high - eps).detach() + (self.rho - self.rho.detach())
        r = low + (high - low) * torch.sigmoid(self.rho)
        return torch.clamp(r, low + eps, high - eps)

    @property
    def long_context_mask(self) -> Tensor:
        """Boolean [H], true for the long-context units (zero the others to score with LCUs alone)."""
        return torch.arange(self.hidden_size, device=self.rho.device) < self.long_context_units

    def jacobian_norm(self, new_state: State | None = None) -> Tensor:
        """``||d x_t / d x_{t-1}||_F^2 = sum_j r_j^2``: the recurrence is ``diag(r)`` (sec. 3), the same at
        every step whatever the data (the Sobolev penalty's per-step term, SCRN paper eq. 10)."""
        return self.r.pow(2).sum()

    def timescales(self) -> Tensor:
        """``-1 / log|r|`` per unit [H] (sec. 5.1): how many steps back a unit remembers (0 for r = 0)."""
        with torch.no_grad():
            return -1.0 / torch.log(self.r.abs())

    def project_inputs(self, x: Tensor) -> Tensor:
        return F.linear(x, self.W)  # [..., H] = W y_t

    def recur(self, projected_t: Tensor, state: State, state_masks: MaybeMasks = None) -> tuple[Tensor, State]:
        self.recurrent_mask(state_masks)  # refuses a mask: nothing here reads the state through a matrix
        (x_prev,) = state
        x = projected_t + self.r * x_prev  # sec. 3: x_t = W y_t + R x_{t-1}, R diagonal, f = identity
        return x, (x,)

    def forward_fast(
        self, x: Tensor, state: State | None = None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State]:
        self._check_input(x, 3)
        if state is None:
            state = self.init_state(x.shape[0], x.device, x.dtype)
        (x0,) = state
        self.recurrent_mask(state_masks)  # refuses a mask (module docstring)
        states = linear_recurrence(self.r, self.project_inputs(x), x0, method=self.scan_method)  # [B, T, H]
        if states.shape[1] == 0:
            return states, (x0,)
        states, last = through_final_state(states, 1)  # x_T on the loss graph (DSF sec. 2.5)
        return states, (last,)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, r_init={self.r_init}, long_context_units={self.long_context_units}, "
            f"long_context_range={self.long_context_range}, long_context_init={self.long_context_init}, "
            f"r_parametrization={self.r_parametrization!r}"
        )
