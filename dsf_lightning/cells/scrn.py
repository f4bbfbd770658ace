"""The Structurally Constrained Recurrent Network (Mikolov et al., 2015) as written by Kabdolov,
Assylbekov & Takhanov (2018, "Reproducing and Regularizing the SCRN Model").

Two states: a slowly changing *context* state ``s`` (a fixed-rate leaky average of the input, no
nonlinearity) and a quickly changing *hidden* state ``h``. In the paper's row-vector notation::

    s_t = (1 - alpha) x_t B + alpha s_{t-1}                                  (1)
    h_t = sigma(x_t A + s_t P + h_{t-1} R)                                   (2)
    y_t = [s_t; h_t]            (what the next layer and the softmax read)   (7), (8)

Here weights are stored PyTorch-style (``[out, in]``, applied with ``F.linear``), so ``B`` is the
transpose of the paper's ``B`` and so on. The paper omits the bias of (2) "for the sake of
simplicity"; it is kept here (``bias=True``) and can be dropped.

Registered cells:

* ``scrn``  eqs 1-2, output ``[s; h]`` (eq. 7) or ``h`` alone (the sec. 6.1 ablation "context in
            softmax" removed).

Speed (``implementation = "fast"``, the default; the plain step loop of ``recur`` is
:meth:`SCRNCell.forward_reference`): eq. 1 does not read ``h``, so all context states come first from
one :func:`dsf_lightning.ops.scan.linear_recurrence` (a constant decay ``alpha``), then ``s_t P`` for all
steps is one matrix product, and only eq. 2's ``h`` recurrence is a loop, run by
:func:`dsf_lightning.ops.fused_rnn.gated_recurrence` (one ``[B, d_h] x [d_h, d_h]`` product per step, a
hand-written backward, ``dR`` as one product over all steps). Variational dropout (eq. 9) masks ``h``
where ``R`` reads it, inside that loop; the context ``s`` enters no recurrent weight matrix and is
never masked (a mask on it is an error). One-hot input (a language model without an embedding) comes as
token ids: ``x_t B`` and ``x_t A`` are gathered columns, not products with one-hot vectors
(``reads_ids``; 1.85x the training tokens per CPU second of ``recipes/ptb/scrn_h40_s10.yaml``).
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_bool
from ..ops.fast_linear import fast_linear
from ..ops.final_state import through_final_state
from ..ops.fused_rnn import ACTIVATION_NAMES, gated_recurrence
from ..ops.one_hot import one_hot_linear
from ..ops.scan import linear_recurrence
from .base import (
    CellOptionError,
    MaybeMasks,
    RecurrentCell,
    State,
    activation,
    activation_derivative,
    check_choice,
    check_positive_int,
    check_probability,
)
from .registry import register_cell

OUTPUTS = ("both", "hidden")


@register_cell("scrn")
class SCRNCell(RecurrentCell):
    """SCRN, eqs 1-2 (one layer of the stacked eq. 7).

    ``hidden_size`` is ``d_h``, the size of the fast state ``h``.

    Options:
        context_size: ``d_s``, size of the slow context state ``s`` (40, the paper's small models;
            its medium models use 120, about d_h / 6).
        alpha: the context decay of eq. 1, in [0, 1] (0.95, Table 1; 0.9 in the tuned stacked models
            of Table 3). Fixed by default: stored as a buffer, not a parameter.
        learn_alpha: learn alpha instead (not in the paper): ``alpha = sigmoid(alpha_logit)``, a
            single scalar parameter initialized at ``logit(alpha)`` (clamped ``eps`` inside (0, 1)),
            so alpha stays in (0, 1) and ``alpha`` must then lie strictly inside (0, 1).
        output: ``"both"`` (``[s_t; h_t]``, eq. 7: stacking and the softmax of eq. 8 read both) or
            ``"hidden"`` (``h_t`` only: the sec. 6.1 ablation without the context in the softmax).
        hidden_activation: sigma of eq. 2 (the logistic sigmoid in the paper).
        bias: add a bias ``b`` [d_h] inside sigma in eq. 2 (omitted in the paper's equations only
            for simplicity).

    State: ``(s [B, d_s], h [B, d_h])``. Output size: ``d_s + d_h`` (``"both"``) or ``d_h``.

    Parameters: ``B`` [d_s, I], ``A`` [d_h, I], ``P`` [d_h, d_s], ``R`` [d_h, d_h], ``b`` [d_h]
    (with ``bias``), ``alpha_logit`` [] (with ``learn_alpha``): ``I (d_s + d_h) + d_s d_h + d_h^2
    (+ d_h)``. With one-hot inputs (I = |W|), ``A`` and ``B`` are the input half of eq. 5.
    """

    citation = ("Olzhas Kabdolov, Zhenisbek Assylbekov, Rustem Takhanov. *Reproducing and Regularizing the SCRN "
                "Model.* 2018.")
    equations, family, state_names = "SCRN paper eqs 1-2, 7", "scrn", ("s", "h")
    #: d_s scales with the model: 40 of d_h = 300 in Table 1, 120 of 750 in the medium models (about d_h / 6)
    size_options = {"context_size": Fraction(1, 6)}
    jacobian_form = "step"  # the closed form of sec. 7 (jacobian_norm)
    recurrent_state_index = 1  # variational dropout masks h, never the context s (SCRN eq. 9)
    reads_ids = True  # one-hot input: the columns of [B; A] are gathered (forward_fast)
    #: the ``method`` passed to :func:`~dsf_lightning.ops.scan.linear_recurrence` for eq. 1
    scan_method: str = "auto"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        context_size: int = 40,
        alpha: float = 0.95,
        learn_alpha: bool = False,
        output: str = "both",
        hidden_activation: str = "sigmoid",
        bias: bool = True,
    ) -> None:
        super().__init__(input_size, hidden_size)
        self.context_size = check_positive_int("context_size", context_size)
        self.learn_alpha = check_bool("learn_alpha", learn_alpha, CellOptionError)
        alpha = check_probability("alpha", alpha)
        if self.learn_alpha and alpha in (0.0, 1.0):
            raise CellOptionError(f"alpha must lie strictly inside (0, 1) when learn_alpha=True, got {alpha!r}")
        self.alpha_init = alpha
        self.output = check_choice("output", output, OUTPUTS)
        self.sigma = activation(hidden_activation, "hidden_activation")
        self.hidden_activation = hidden_activation
        self.bias = check_bool("bias", bias, CellOptionError)

        S, H = context_size, hidden_size
        self.B = nn.Parameter(torch.empty(S, input_size))  # input -> context (eq. 1)
        self.A = nn.Parameter(torch.empty(H, input_size))  # input -> hidden (eq. 2)
        self.P = nn.Parameter(torch.empty(H, S))  # context -> hidden (eq. 2)
        self.R = nn.Parameter(torch.empty(H, H))  # hidden -> hidden (eq. 2)
        self.register_parameter("b", nn.Parameter(torch.empty(H)) if bias else None)  # eq. 2 bias
        if self.learn_alpha:
            self.alpha_logit = nn.Parameter(torch.tensor(math.log(alpha / (1 - alpha))))
        else:
            self.register_buffer("alpha_fixed", torch.tensor(alpha))
        self.state_sizes = (S, H)
        self.output_size = S + H if self.output == "both" else H
        self.output_context_size = S if self.output == "both" else 0
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights U(-1/sqrt(d_h), 1/sqrt(d_h)), bias 0, alpha back to its initial value."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for w in (self.A, self.B, self.P, self.R):
            nn.init.uniform_(w, -bound, bound)
        if self.b is not None:
            nn.init.zeros_(self.b)
        if self.learn_alpha:
            with torch.no_grad():
                self.alpha_logit.fill_(math.log(self.alpha_init / (1 - self.alpha_init)))

    @property
    def alpha(self) -> Tensor:
        """The context decay of eq. 1, a 0-d tensor. With ``learn_alpha`` it is ``sigmoid(alpha_logit)``,
        clamped ``eps`` inside (0, 1) so it stays strictly inside even when the sigmoid saturates."""
        if not self.learn_alpha:
            return self.alpha_fixed
        eps = torch.finfo(self.alpha_logit.dtype).eps
        return torch.sigmoid(self.alpha_logit).clamp(eps, 1 - eps)

    def project_inputs(self, x: Tensor) -> Tensor:
        # [..., d_s + d_h] = [x B, x A] in one matmul (hoisted over time)
        return F.linear(x, torch.cat((self.B, self.A)))

    def recur(self, projected_t: Tensor, state: State, state_masks: MaybeMasks = None) -> tuple[Tensor, State]:
        s_prev, h_prev = state  # [B, d_s], [B, d_h]
        mask = self.recurrent_mask(state_masks)  # eq. 9: h_{t-1} dropped where R reads it
        if mask is not None:
            h_prev = h_prev * mask
        xB, xA = projected_t.split((self.context_size, self.hidden_size), dim=-1)
        alpha = self.alpha
        s = (1 - alpha) * xB + alpha * s_prev  # eq. 1
        pre = xA + F.linear(s, self.P) + F.linear(h_prev, self.R)
        if self.b is not None:
            pre = pre + self.b
        h = self.sigma(pre)  # eq. 2
        out = torch.cat((s, h), dim=-1) if self.output == "both" else h  # eq. 7: y_t = [s_t; h_t]
        return out, (s, h)

    def jacobian_norm(self, new_state: State | None = None) -> Tensor:
        """``||d h_t / d h_{t-1}||_F^2`` per sequence ``[B]`` from the step's new state, sec. 7.

        The paper (row vectors) gets ``d h_t / d h_{t-1} = R diag(sigma'(a_t + h_{t-1} R))`` and
        ``||.||_F^2 = Tr(R^T R diag(sigma')^2) = (sigma')^2 v(R)`` with ``v(R)_j = ||r_j||^2`` the squared
        norm of column j of the paper's R. The context ``s_t`` does not depend on ``h_{t-1}`` (eq. 1), so
        this is the whole Jacobian. Here ``R`` is stored ``[out, in]`` (the transpose of the paper's), so
        the paper's column j is our row j: ``v = (R ** 2).sum(1)`` and the step's penalty is
        ``sum_j sigma'_j^2 v_j``, with ``sigma'`` read off ``h_t = sigma(pre)`` (the trick of sec. 7:
        ``sigma'(x) = sigma(x)(1 - sigma(x))`` for the logistic).
        """
        if new_state is None:
            raise TypeError("SCRNCell.jacobian_norm needs the step's new state (s_t, h_t): its Jacobian depends on h_t")
        h = new_state[self.recurrent_state_index]  # [B, d_h]
        v = self.R.pow(2).sum(dim=1)  # [d_h]: squared norms of the weights *into* unit j
        return activation_derivative(self.hidden_activation, h).pow(2) @ v  # [B]

    def forward_fast(
        self, x: Tensor, state: State | None = None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State]:
        ids = not x.is_floating_point()  # one-hot input as token ids [B, T] (reads_ids)
        if (
            x.dim() != (2 if ids else 3)
            or x.shape[1] == 0
            or self.hidden_activation not in ACTIVATION_NAMES
            or getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0
        ):
            return self.forward_reference(x, state, state_masks)
        self._check_input(x, 3)
        if state is None:
            state = self.init_state(x.shape[0], x.device, None if ids else x.dtype)
        s0, h0 = state
        h_mask = self.recurrent_mask(state_masks)  # eq. 9: on h where R reads it; never on s
        S = self.context_size
        # [T, B, d_s + d_h]: time first, so each step of the h loop reads contiguous rows; a one-hot x_t
        # picks column x_t of [B; A] (gathered, not multiplied)
        weight = torch.cat((self.B, self.A))
        projected = one_hot_linear(x.t(), weight) if ids else fast_linear(x.transpose(0, 1), weight)
        xB, xA = projected.split((S, self.hidden_size), dim=-1)
        alpha = self.alpha
        s_all = linear_recurrence(alpha, ((1 - alpha) * xB).transpose(0, 1), s0, method=self.scan_method)  # eq. 1
        s_all, s_last = through_final_state(s_all, 1)  # s_T, h_T on the loss graph (DSF sec. 2.5)
        pre = xA + fast_linear(s_all.transpose(0, 1), self.P)  # [T, B, d_h]: x A + s P for all steps
        if self.b is not None:
            pre = pre + self.b
        hs = gated_recurrence(pre, None, None, self.R, h0, hmask=h_mask, phi=self.hidden_activation)  # eq. 2
        hs, h_last = through_final_state(hs, 0)
        h_all = hs.transpose(0, 1)  # [B, T, d_h]
        out = torch.cat((s_all, h_all), dim=-1) if self.output == "both" else h_all  # eq. 7
        return out, (s_last, h_last)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, context_size={self.context_size}, alpha={self.alpha_init}, "
            f"learn_alpha={self.learn_alpha}, output={self.output!r}, "
            f"hidden_activation={self.hidden_activation!r}, bias={self.bias}"
        )
