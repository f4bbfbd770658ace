"""The Differential State Framework cells (Ororbia II, Mikolov & Reitter 2017, "Learning Simpler Language
Models with the Differential State Framework").

A DSF cell computes a fast, data-driven state proposal ``z_t = g(x_t, h_{t-1})`` (the inner function)
and interpolates it with the slowly moving previous state (the outer function, eq. 3)::

    h_t = Phi((1 - r) * z_t + r * h_{t-1})

Registered cells:

* ``delta-rnn``        the late-integration Delta-RNN (eq. 8) with an Elman (eq. 6), second-order
                       (eq. 10) or general second-order (eq. 11) inner function, the interpolation gate
                       fixed (eq. 4) or data-driven through the shared ``W x_t`` (eq. 5), and dropout
                       on the inner function (eq. 12). Its defaults are the paper's full model.
* ``delta-rnn-simple`` the simple Delta-RNN, eq. 7: ``h_t = Phi(V h_{t-1} + W x_t + b + h_{t-1})``.
* ``delta-rnn-ln``     the layer-normalized late-integration Delta-RNN of Appendix A (eqs 20-23).

(``delta-rnn-simple`` and ``delta-rnn-ln`` run the step loop of
:class:`~dsf_lightning.cells.classic.SequenceLoopCell`: oneDNN products, the recurrent weight's gradient
as one product over all steps.)

Speed: ``delta-rnn`` runs a whole sequence through :func:`dsf_lightning.ops.fused_rnn.gated_recurrence`
(``implementation="fast"``, the default): the input products, the inner function's data terms and the
gate are computed for all steps at once, the loop does one ``[B, H] x [H, H]`` product (oneDNN for fp32)
and a few in-place element-wise ops per step without building an autograd graph, and a hand-written
backward computes ``dV`` as one product over all steps. ``implementation="reference"`` (or
:meth:`DeltaRNNCell.forward_reference`) is the plain step loop of ``recur``; both give the same values
and gradients (tested in float64), including carried state, state masks and the eq. 12 dropout, which
draws the same random numbers in the same order.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..ops.fast_linear import fast_linear
from ..ops.final_state import through_final_state
from ..ops.fused_rnn import gated_recurrence
from ..ops.one_hot import one_hot_linear
from .base import MaybeMasks, RecurrentCell, SequenceLoopCell, State, activation, check_choice, check_probability
from .registry import register_cell

INNER_FORMS = ("elman", "second-order", "general")
GATE_FORMS = ("data", "fixed")
DSF_CITATION = (
    "Alexander G. Ororbia II, Tomas Mikolov, David Reitter. *Learning Simpler Language Models with the "
    "Differential State Framework.* Neural Computation, 2017."
)
#: eq. 12's dropout: "inverted" (kept units x 1/(1-p) in training, nothing at test time) or "test-time"
#: (the paper's plain 0/1 mask in training, the proposal x (1-p) in evaluation)
DROPOUT_SCALINGS = ("inverted", "test-time")



def check_eq12_options(dropout: object, dropout_scaling: object) -> tuple[float, str]:
    """Validate eq. 12's ``dropout`` and ``dropout_scaling``; ``test-time`` without dropout is logged (it
    changes nothing, and an error would break fine-tunes that turn dropout off)."""
    p = check_probability("dropout", dropout, closed_top=False)
    scaling = check_choice("dropout_scaling", dropout_scaling, DROPOUT_SCALINGS)
    if scaling == "test-time" and p == 0:
        logging.getLogger(__name__).warning(
            "dropout_scaling='test-time' has no effect with dropout=0 (eq. 12 dropout is off); set cell_options.dropout"
        )
    return p, scaling

def eq12_dropout(z: Tensor, p: float, scaling: str, training: bool) -> Tensor:
    """DSF eq. 12's ``DROP(g, p)`` on the inner function's output ``z`` (see ``dropout_scaling``).

    The paper writes ``DROP(x, p) = x * (~B(1, p))``, a plain 0/1 mask, and says nothing about test
    time; ``"test-time"`` then scales by the keep probability in evaluation, as Srivastava et al. (2014),
    the dropout the paper cites, do. ``"inverted"`` (the default) has the same expectation. Draws one
    ``bernoulli_`` of ``z``'s shape, as ``F.dropout`` does, so both paths see the same masks."""
    if p == 0:
        return z
    if scaling == "inverted":
        return F.dropout(z, p, training=True) if training else z
    if training:
        return z * torch.empty_like(z).bernoulli_(1 - p)
    return z * (1 - p)


@register_cell("delta-rnn")
class DeltaRNNCell(RecurrentCell):
    """Late-integration Delta-RNN (DSF eqs 3-5, 8, 10-12).

    Options:
        inner: ``"general"`` (eq. 11, the paper's model: ``alpha*Vh*Wx + beta1*Vh + beta2*Wx + b``),
            ``"second-order"`` (eq. 10: ``Vh*Wx + b``) or ``"elman"`` (eq. 6/8: ``Vh + Wx + b``).
        gate: ``"data"`` (eq. 5: ``r = sigmoid(W x_t + b_r)``, sharing ``W``) or ``"fixed"``
            (eq. 4: ``r = sigmoid(b_r)``, one learned rate per unit).
        inner_activation: phi of the inner function (tanh in all the paper's experiments).
        outer_activation: Phi of the outer function (identity for word / character models, tanh for
            subwords in the paper; relu also available).
        dropout: drop probability on the inner function's output z_t in training (eq. 12).
        dropout_scaling: how eq. 12's dropout keeps the expectation: ``"inverted"`` (default; kept units
            scaled by 1/(1-p) in training, nothing at test time; the bundled models were trained so) or
            ``"test-time"`` (the paper's plain 0/1 mask ``DROP(x, p) = x * (~B(1, p))`` in training; the
            paper does not say what happens at test time, so z is multiplied by the keep probability
            1-p in evaluation, the rule of Srivastava et al. 2014). Fine-tuning with another ``dropout``
            changes what evaluation multiplies by under ``"test-time"``.
        implementation: ``"fast"`` (default: the whole-sequence loop with a hand-written backward, see
            the module docstring) or ``"reference"`` (the step loop of ``recur`` under autograd; use it
            for double backward or forward-mode AD, which the fast path does not support). Both compute
            the same function; ``step`` and ``recur`` are shared.

    Parameters: ``V`` [H, H], ``W`` [H, I], ``b``, ``b_r`` and, for eq. 11, ``alpha``, ``beta1``,
    ``beta2`` [H] each: ``H*H + H*I + 5H`` for the full model (the paper's count, footnote 4).
    """

    citation, equations, family = DSF_CITATION, "DSF eqs 3-5, 8, 10-12", "delta-rnn"
    regularization_options = frozenset({"dropout"})  # eq. 12's rate: no parameter depends on it
    reads_ids = True  # one-hot input: W x_t is a gathered column of W (forward_fast)

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        inner: str = "general",
        gate: str = "data",
        inner_activation: str = "tanh",
        outer_activation: str = "identity",
        dropout: float = 0.0,
        dropout_scaling: str = "inverted",
        implementation: str = "fast",
    ) -> None:
        super().__init__(input_size, hidden_size)
        self.implementation = implementation  # checked by RecurrentCell.implementation
        self.dropout, self.dropout_scaling = check_eq12_options(dropout, dropout_scaling)
        self.inner = check_choice("inner", inner, INNER_FORMS)
        self.gate = check_choice("gate", gate, GATE_FORMS)
        self.phi = activation(inner_activation, "inner_activation")
        self.Phi = activation(outer_activation, "outer_activation")
        self.inner_activation, self.outer_activation = inner_activation, outer_activation
        H = hidden_size
        self.W = nn.Parameter(torch.empty(H, input_size))  # data projection, shared with the gate (eq. 5)
        self.V = nn.Parameter(torch.empty(H, H))  # recurrent projection V (V_d in eq. 11)
        self.b = nn.Parameter(torch.empty(H))
        self.b_r = nn.Parameter(torch.empty(H))
        if self.inner == "general":
            self.alpha = nn.Parameter(torch.empty(H))
            self.beta1 = nn.Parameter(torch.empty(H))
            self.beta2 = nn.Parameter(torch.empty(H))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights U(-1/sqrt(H), 1/sqrt(H)); biases 0 (so r starts at 0.5); alpha, beta1, beta2 = 1."""
        super().reset_parameters()
        nn.init.zeros_(self.b)
        nn.init.zeros_(self.b_r)
        if self.inner == "general":
            for p in (self.alpha, self.beta1, self.beta2):
                nn.init.ones_(p)

    def project_inputs(self, x: Tensor) -> Tensor:
        return fast_linear(x, self.W)  # [..., H] = W x_t

    def inner_function(self, Wx: Tensor, h_prev: Tensor) -> Tensor:
        """z_t = g(x_t, h_{t-1}) before dropout (eq. 6, 10 or 11); ``h_prev`` as ``V`` reads it (under
        variational dropout, the masked state)."""
        Vh = fast_linear(h_prev, self.V)  # [B, H] (oneDNN; F.linear under torch.func and for float64)
        if self.inner == "elman":
            pre = Vh + Wx + self.b
        elif self.inner == "second-order":
            pre = Vh * Wx + self.b
        else:  # eq. 11: d1 = alpha*Vh*Wx, d2 = beta1*Vh + beta2*Wx
            pre = self.alpha * Vh * Wx + self.beta1 * Vh + self.beta2 * Wx + self.b
        return self.phi(pre)

    def interpolation_gate(self, Wx: Tensor) -> Tensor:
        """r (eq. 5 when data-driven, eq. 4 when fixed)."""
        return torch.sigmoid(Wx + self.b_r) if self.gate == "data" else torch.sigmoid(self.b_r)

    def recur(self, projected_t: Tensor, state: State, state_masks: MaybeMasks = None) -> tuple[Tensor, State]:
        (h_prev,) = state
        mask = self.recurrent_mask(state_masks)  # variational dropout: V reads the dropped h_{t-1} ...
        z = self.inner_function(projected_t, h_prev if mask is None else h_prev * mask)
        z = eq12_dropout(z, self.dropout, self.dropout_scaling, self.training)  # eq. 12: the inner function only
        r = self.interpolation_gate(projected_t)
        h = self.Phi((1 - r) * z + r * h_prev)  # eq. 3 / 8: ... the interpolation carries it undropped
        return h, (h,)

    # -- whole sequences ------------------------------------------------------------------------
    def forward_fast(
        self, x: Tensor, state: State | None = None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State]:
        ids = not x.is_floating_point()  # one-hot input as token ids [B, T] (reads_ids)
        if (x.dim() != (2 if ids else 3) or x.shape[1] == 0
                or getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0):  # no jvp rule in the fast path
            return self.forward_reference(x, state, state_masks)
        self._check_input(x, 3)
        if state is None:
            state = self.init_state(x.shape[0], x.device, None if ids else x.dtype)
        (h0,) = state
        hmask = self.recurrent_mask(state_masks)
        T, (Bsz, H) = x.shape[1], h0.shape
        # [T, B, H]: time first, each step contiguous; a one-hot x_t picks column x_t of W (gathered)
        Wx = one_hot_linear(x.t(), self.W) if ids else fast_linear(x.transpose(0, 1), self.W)
        if self.inner == "elman":  # eq. 6/8: Vh + Wx + b
            c1, c0 = None, Wx + self.b
        elif self.inner == "second-order":  # eq. 10: Vh * Wx + b
            c1, c0 = Wx, self.b.expand(T, Bsz, H)
        else:  # eq. 11: alpha*Vh*Wx + beta1*Vh + beta2*Wx + b = Vh * (alpha*Wx + beta1) + (beta2*Wx + b)
            c1, c0 = torch.addcmul(self.beta1, self.alpha, Wx), torch.addcmul(self.b, self.beta2, Wx)
        r = torch.sigmoid(Wx + self.b_r) if self.gate == "data" else torch.sigmoid(self.b_r)  # eq. 5 / 4
        dmask, keep = None, 1 - self.dropout
        if self.training and self.dropout > 0:  # eq. 12; drawn step by step like eq12_dropout in recur
            dmask = torch.empty((T, Bsz, H), dtype=h0.dtype, device=h0.device)
            for t in range(T):
                dmask[t].bernoulli_(keep)
            if self.dropout_scaling == "inverted":
                dmask.div_(keep)
        elif self.dropout > 0 and self.dropout_scaling == "test-time":  # evaluation: z * (1 - p)
            dmask = h0.new_full((1, 1, 1), keep).expand(T, Bsz, H)  # a broadcast view, not T*B*H copies
        hs = gated_recurrence(
            c0, c1, r, self.V, h0, hmask=hmask, dmask=dmask, phi=self.inner_activation, Phi=self.outer_activation
        )
        hs, h_last = through_final_state(hs, 0)  # h_T on the loss graph: dL/dh_T reaches it (DSF sec. 2.5)
        return hs.transpose(0, 1), (h_last,)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, inner={self.inner!r}, gate={self.gate!r}, "
            f"inner_activation={self.inner_activation!r}, outer_activation={self.outer_activation!r}, "
            f"dropout={self.dropout}, dropout_scaling={self.dropout_scaling!r}"
        )


@register_cell("delta-rnn-simple")
class SimpleDeltaRNNCell(SequenceLoopCell):
    """The simple Delta-RNN, DSF eq. 7: ``h_t = Phi(V h_{t-1} + W x_t + b + h_{t-1})``.

    Options:
        outer_activation: Phi (tanh by default: with the identity the state is unbounded).

    Parameters: ``V`` [H, H], ``W`` [H, I], ``b`` [H].
    """

    citation, equations, family = DSF_CITATION, "DSF eq. 7", "delta-rnn"

    def __init__(self, input_size: int, hidden_size: int, *, outer_activation: str = "tanh") -> None:
        super().__init__(input_size, hidden_size)
        self.Phi = activation(outer_activation, "outer_activation")
        self.outer_activation = outer_activation
        self.W = nn.Parameter(torch.empty(hidden_size, input_size))
        self.V = nn.Parameter(torch.empty(hidden_size, hidden_size))
        self.b = nn.Parameter(torch.empty(hidden_size))
        self.reset_parameters()

    def project_inputs(self, x: Tensor) -> Tensor:
        return fast_linear(x, self.W, self.b)  # [..., H] = W x_t + b

    def input_weights(self) -> tuple[Tensor, Tensor | None]:
        return self.W, self.b

    def recurrent_weights(self) -> tuple[Tensor, ...]:
        return (self.V,)

    def recur_with(self, projected_t: Tensor, state: State, products: tuple) -> tuple[Tensor, State]:
        (h_prev,) = state
        h = self.Phi(products[0](h_prev) + projected_t + h_prev)  # eq. 7
        return h, (h,)


@register_cell("delta-rnn-ln")
class LayerNormDeltaRNNCell(SequenceLoopCell):
    """Layer-normalized late-integration Delta-RNN, DSF Appendix A (eqs 20-23)::

        d_rec = LN(V h_{t-1}),  d_dat = LN(W x_t)                          (20)
        z_t   = phi(d_rec * d_dat + d_rec + d_dat)                          (21)
        r     = sigmoid(d_dat + b_r)                                        (23)
        h_t   = Phi((1 - r) * z_t + r * h_{t-1})                            (22)

    The second-order biases are dropped (the layer norms' gains and shifts take their place).

    Options: ``inner_activation``, ``outer_activation``, ``dropout`` (eq. 12) and ``dropout_scaling``
    (as for ``delta-rnn``), ``eps`` of the norms.
    Parameters: ``V`` [H, H], ``W`` [H, I], two layer norms (gain and shift, 2H each), ``b_r`` [H].
    """

    citation, equations, family = DSF_CITATION, "DSF Appendix A, eqs 20-23", "delta-rnn"
    regularization_options = frozenset({"dropout"})  # eq. 12's rate: no parameter depends on it

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        inner_activation: str = "tanh",
        outer_activation: str = "identity",
        dropout: float = 0.0,
        dropout_scaling: str = "inverted",
        eps: float = 1e-5,
    ) -> None:
        super().__init__(input_size, hidden_size)
        self.dropout, self.dropout_scaling = check_eq12_options(dropout, dropout_scaling)
        self.phi = activation(inner_activation, "inner_activation")
        self.Phi = activation(outer_activation, "outer_activation")
        self.inner_activation, self.outer_activation = inner_activation, outer_activation
        H = hidden_size
        self.W = nn.Parameter(torch.empty(H, input_size))
        self.V = nn.Parameter(torch.empty(H, H))
        self.b_r = nn.Parameter(torch.empty(H))
        self.norm_data = nn.LayerNorm(H, eps=eps)
        self.norm_rec = nn.LayerNorm(H, eps=eps)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights U(-1/sqrt(H), 1/sqrt(H)); layer norms gain 1, shift 0; b_r = 0."""
        super().reset_parameters()
        nn.init.zeros_(self.b_r)
        self.norm_data.reset_parameters()
        self.norm_rec.reset_parameters()

    def project_inputs(self, x: Tensor) -> Tensor:
        return self.norm_data(fast_linear(x, self.W))  # [..., H] = d_dat (eq. 20), hoisted over time

    def recurrent_weights(self) -> tuple[Tensor, ...]:
        return (self.V,)

    def recur_with(self, projected_t: Tensor, state: State, products: tuple) -> tuple[Tensor, State]:
        (h_prev,) = state
        d_dat = projected_t
        d_rec = self.norm_rec(products[0](h_prev))  # eq. 20
        z = self.phi(d_rec * d_dat + d_rec + d_dat)  # eq. 21
        z = eq12_dropout(z, self.dropout, self.dropout_scaling, self.training)
        r = torch.sigmoid(d_dat + self.b_r)  # eq. 23
        h = self.Phi((1 - r) * z + r * h_prev)  # eq. 22
        return h, (h,)
