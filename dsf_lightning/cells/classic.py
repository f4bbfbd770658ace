"""The baseline cells the Differential State Framework is compared with.

Equations are quoted from Ororbia II, Mikolov & Reitter 2017, "Learning Simpler Language Models with the
Differential State Framework" ("DSF" below), unless another paper is named:

* ``elman``      the simple recurrent network, DSF eq. 6: ``h_t = phi(V h_{t-1} + W x_t + b)``.
* ``mi-rnn``     the second-order / multiplicative-integration RNN of Wu et al. (2016) in the general
                 form of DSF eq. 11, used on its own (no Delta interpolation)::

                     h_t = phi(alpha * V h_{t-1} * W x_t + beta1 * V h_{t-1} + beta2 * W x_t + b)

* ``lstm``       the LSTM of DSF sec. 3 (eqs 16-17 and the c_t, z_t, i_t, f_t equations that follow),
                 optionally with peepholes: diagonal (Graves 2013; Wang & Niepert 2019, "State-Regularized
                 Recurrent Neural Networks", eqs 7-9) or full matrices (``U c``, DSF eqs
                 16-17 and its Table 2 parameter counts: ``peepholes: matrix``)::

                     z_t = tanh(W_z x_t + V_z h_{t-1} + b_z)
                     i_t = sigmoid(W_i x_t + V_i h_{t-1} + U_i * c_{t-1} + b_i)
                     f_t = sigmoid(W_f x_t + V_f h_{t-1} + U_f * c_{t-1} + b_f)
                     c_t = f_t * c_{t-1} + i_t * z_t
                     r_t = sigmoid(W_r x_t + V_r h_{t-1} + U_r * c_t + b_r)          (17)
                     h_t = r_t * tanh(c_t)                                            (16)

* ``gru``        the GRU of DSF sec. 3 (eqs 18-19 and its inner function with the reset gate q_t)::

                     r_t = sigmoid(V_r h_{t-1} + W_r x_t + b_r)                       (19)
                     q_t = sigmoid(V_q h_{t-1} + W_q x_t + b_q)
                     g_t = tanh(V_h (q_t * h_{t-1}) + W_h x_t + b_h)
                     h_t = r_t * g_t + (1 - r_t) * h_{t-1}                            (18)

* ``mgu``        the Minimal Gated Unit (Zhou et al. 2016) as DSF sec. 3 describes it: the GRU outer
                 function (eq. 18-19) with one forget gate, also used as the inner function's reset.
* ``srelu-rnn``  the smoothed-rectifier RNN of Pachitariu & Sahani 2013, "Regularization and nonlinearities
                 for neural language models: when are they needed?" (sec. 2.2):
                 ``x_t = f(W y_t + R x_{t-1})`` with ``f(x) = max(0, x - a tanh(x / a))``.

All cells hoist every input product (and the biases) into :meth:`project_inputs`, so that a whole
sequence costs one input matmul; the recurrent products of a step are stacked into one matmul where
the equations allow it (Elman, MI-RNN, LSTM, GRU with ``reset_after``). The GRU's and MGU's inner
function multiplies the gated state ``q_t * h_{t-1}`` by ``V_h``, which needs the gate first: two
recurrent matmuls per step are then unavoidable.

Speed: every product goes through :func:`dsf_lightning.ops.fast_linear.fast_linear` (oneDNN for large
fp32 CPU products, about 2x ``torch.mm``'s MKL path on the development machine; ``F.linear`` otherwise),
and :class:`~dsf_lightning.cells.base.SequenceLoopCell.forward` runs the step loop of
:meth:`~dsf_lightning.cells.base.SequenceLoopCell.recur_with` with
:class:`~dsf_lightning.ops.fast_linear.SequenceLinear` products, which compute each recurrent weight's
gradient as one product over all steps instead of one small product per step. ``recur`` / ``step`` and
:meth:`~dsf_lightning.cells.base.RecurrentCell.forward_reference` compute the same function step by step.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_bool
from ..ops.fast_linear import fast_linear
from ..ops.torch_rnn import lstm_sequence
from .base import CellOptionError, MaybeMasks, SequenceLoopCell, State
from .base import activation as _activation  # the option of the same name would shadow it
from .delta import DSF_CITATION
from .registry import register_cell


# -- option checks that base.py does not provide -------------------------------------------------
def _check_finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CellOptionError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _check_positive(name: str, value: object) -> float:
    value = _check_finite(name, value)
    if value <= 0:
        raise CellOptionError(f"{name} must be a positive number, got {value!r}")
    return value


def smoothed_rectifier(x: Tensor, a: float) -> Tensor:
    """``f(x) = max(0, x - a * tanh(x / a))`` (IRLM paper, sec. 2.2).

    Zero for ``x <= 0`` (there ``a * tanh(x / a) >= x``), differentiable everywhere (it starts as
    ``x**3 / (3 a**2)``), ``~ x - a`` for large ``x``, and the plain rectifier as ``a -> 0``.
    """
    return torch.clamp_min(x - a * torch.tanh(x / a), 0.0)


IRLM_CITATION = (
    "Marius Pachitariu, Maneesh Sahani. *Regularization and nonlinearities for neural language models: "
    "when are they needed?* 2013."
)


# -- Elman ---------------------------------------------------------------------------------------
@register_cell("elman")
class ElmanCell(SequenceLoopCell):
    """The simple (Elman, 1990) recurrent network, DSF eq. 6: ``h_t = phi(V h_{t-1} + W x_t + b)``.

    Options:
        activation: phi, ``"tanh"`` (default), ``"relu"``, ``"sigmoid"`` or ``"identity"``.

    Parameters: ``W`` [H, I], ``V`` [H, H], ``b`` [H]. State: ``(h,)``.
    """

    citation, equations, family = "Jeffrey L. Elman. *Finding Structure in Time.* Cognitive Science, 1990.", "DSF eq. 6", "elman"

    def __init__(self, input_size: int, hidden_size: int, *, activation: str = "tanh") -> None:
        super().__init__(input_size, hidden_size)
        self.phi = _activation(activation, "activation")
        self.activation = activation
        H = hidden_size
        self.W = nn.Parameter(torch.empty(H, input_size))
        self.V = nn.Parameter(torch.empty(H, H))
        self.b = nn.Parameter(torch.empty(H))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights U(-1/sqrt(H), 1/sqrt(H)); bias 0."""
        super().reset_parameters()
        nn.init.zeros_(self.b)

    def project_inputs(self, x: Tensor) -> Tensor:
        return fast_linear(x, self.W, self.b)  # [..., H] = W x_t + b

    def input_weights(self) -> tuple[Tensor, Tensor | None]:
        return self.W, self.b

    def recurrent_weights(self) -> tuple[Tensor, ...]:
        return (self.V,)

    def recur_with(self, projected_t: Tensor, state: State, products: tuple) -> tuple[Tensor, State]:
        (h_prev,) = state
        h = self.phi(projected_t + products[0](h_prev))  # eq. 6, [B, H]
        return h, (h,)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation!r}"


# -- multiplicative integration ------------------------------------------------------------------
@register_cell("mi-rnn")
class MIRNNCell(SequenceLoopCell):
    """Second-order / multiplicative-integration RNN (Wu et al. 2016), DSF eq. 11 as a standalone RNN::

        d1  = alpha * V h_{t-1} * W x_t
        d2  = beta1 * V h_{t-1} + beta2 * W x_t
        h_t = phi(d1 + d2 + b)                                                   (11)

    The input side is hoisted: :meth:`project_inputs` returns ``A = alpha * W x_t + beta1`` and
    ``B = beta2 * W x_t + b`` (stacked, ``[..., 2H]``), so a step is ``phi(V h_{t-1} * A + B)``,
    which is eq. 11 regrouped.

    Options:
        activation: phi, ``"tanh"`` (default), ``"relu"``, ``"sigmoid"`` or ``"identity"``.

    Parameters: ``W`` [H, I], ``V`` [H, H], ``b``, ``alpha``, ``beta1``, ``beta2`` [H] each
    (``H*H + H*I + 4H``). State: ``(h,)``.
    """

    citation, equations, family = DSF_CITATION, "DSF eq. 11 (Wu et al. 2016)", "delta-rnn"

    def __init__(self, input_size: int, hidden_size: int, *, activation: str = "tanh") -> None:
        super().__init__(input_size, hidden_size)
        self.phi = _activation(activation, "activation")
        self.activation = activation
        H = hidden_size
        self.W = nn.Parameter(torch.empty(H, input_size))
        self.V = nn.Parameter(torch.empty(H, H))
        self.b = nn.Parameter(torch.empty(H))
        self.alpha = nn.Parameter(torch.empty(H))
        self.beta1 = nn.Parameter(torch.empty(H))
        self.beta2 = nn.Parameter(torch.empty(H))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights U(-1/sqrt(H), 1/sqrt(H)); ``b`` = 0; ``alpha``, ``beta1``, ``beta2`` = 1."""
        super().reset_parameters()
        nn.init.zeros_(self.b)
        for p in (self.alpha, self.beta1, self.beta2):
            nn.init.ones_(p)

    def project_inputs(self, x: Tensor) -> Tensor:
        Wx = fast_linear(x, self.W)  # [..., H]
        A = torch.addcmul(self.beta1, self.alpha, Wx)  # alpha * Wx + beta1: multiplies V h_{t-1}
        B = torch.addcmul(self.b, self.beta2, Wx)  # beta2 * Wx + b
        return torch.cat((A, B), dim=-1)  # [..., 2H]

    def recurrent_weights(self) -> tuple[Tensor, ...]:
        return (self.V,)

    def recur_with(self, projected_t: Tensor, state: State, products: tuple) -> tuple[Tensor, State]:
        (h_prev,) = state
        A, B = projected_t.chunk(2, dim=-1)  # [B, H] each
        Vh = products[0](h_prev)  # [B, H]
        h = self.phi(torch.addcmul(B, Vh, A))  # eq. 11: Vh*(alpha*Wx + beta1) + beta2*Wx + b
        return h, (h,)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation!r}"


# -- LSTM ----------------------------------------------------------------------------------------
@register_cell("lstm")
class LSTMCell(SequenceLoopCell):
    """Long Short-Term Memory, DSF sec. 3 (eqs 16-17 and the cell-state equations before them)::

        z_t = tanh(W_z x_t + V_z h_{t-1} + b_z)                  candidate
        i_t = sigmoid(W_i x_t + V_i h_{t-1} [+ U_i * c_{t-1}] + b_i)   input gate
        f_t = sigmoid(W_f x_t + V_f h_{t-1} [+ U_f * c_{t-1}] + b_f)   forget gate
        c_t = f_t * c_{t-1} + i_t * z_t
        r_t = sigmoid(W_r x_t + V_r h_{t-1} [+ U_r * c_t] + b_r)        output gate (17)
        h_t = r_t * tanh(c_t)                                                   (16)

    The bracketed peephole terms are present with ``peepholes`` ``True`` / ``"diagonal"`` or
    ``"matrix"``. ``"diagonal"`` (what ``True`` means): vectors, element-wise products, as in Graves
    (2013) and as the sr-RNN paper writes them (``p ⊙ c``, its eqs 7-9; the sr-LSTM-p). ``"matrix"``:
    full ``[H, H]`` matrices ``U_i c_{t-1}``, ``U_f c_{t-1}``, ``U_r c_t``, as DSF eqs 16-17 write them
    and as its Table 2 counts them (the PTB-SW LSTM's 1,274,804 parameters at H = 100, V = 2,404 are
    exactly ``7H^2 + 5HV + 4H + V``; diagonal peepholes would give ``4H^2 + 5HV + 7H + V``). The output
    gate peeks at the *new* cell state ``c_t`` (DSF eq. 17, sr-RNN eq. 9); the input and forget gates
    at ``c_{t-1}``. Matrix peepholes are recurrent products like ``V h``: the whole-sequence path
    runs them as sequence products too.

    Gate blocks are stacked in the order (i, f, z, r), the same order as ``torch.nn.LSTMCell``'s
    (i, f, g, o), so its weights copy over block for block (its two biases add up to ``b``). Without
    peepholes the equations are torch's, so the fast path is torch's fused LSTM on these parameters
    (cuDNN on CUDA; :meth:`torch_kernel_applies`).

    Options:
        peepholes: ``False`` (default), ``True`` / ``"diagonal"`` (vectors ``U_i``, ``U_f``, ``U_r``)
            or ``"matrix"`` (``[H, H]`` matrices, the DSF paper's eqs 16-17).
        forget_bias: the value the forget-gate bias ``b_f`` is *initialised* to (default 1.0; the
            DSF paper searched {1, 2, 3} for its LSTM baselines, footnote 12, and 1 is the usual
            recommendation of Jozefowicz et al. 2015). ``b_f`` is learned like every other bias.

    Parameters: ``W`` [4H, I], ``V`` [4H, H], ``b`` [4H] and, with peepholes, ``U_i``, ``U_f``,
    ``U_r`` [H] each (diagonal) or [H, H] each (matrix). State: ``(h, c)``; output ``h``.
    """

    citation = "Sepp Hochreiter, Juergen Schmidhuber. *Long Short-Term Memory.* Neural Computation, 1997."
    equations, family, state_names = "DSF sec. 3, eqs 16-17", "lstm", ("h", "c")

    PEEPHOLES = ("diagonal", "matrix")

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        peepholes: bool | str = False,
        forget_bias: float = 1.0,
    ) -> None:
        super().__init__(input_size, hidden_size)
        if peepholes is not False and peepholes is not True and peepholes not in self.PEEPHOLES:
            raise CellOptionError(
                f"peepholes must be false (none), true or 'diagonal' (Graves 2013 / sr-RNN eqs 7-9) or "
                f"'matrix' (DSF eqs 16-17); got {peepholes!r}"
            )
        #: False, True (diagonal: what True has always meant, sr-LSTM-p and existing checkpoints) or "matrix"
        self.peepholes: bool | str = True if peepholes == "diagonal" else peepholes
        self.forget_bias = _check_finite("forget_bias", forget_bias)
        self.state_sizes = (hidden_size, hidden_size)  # (h, c)
        H = hidden_size
        self.W = nn.Parameter(torch.empty(4 * H, input_size))  # [W_i; W_f; W_z; W_r]
        self.V = nn.Parameter(torch.empty(4 * H, H))  # [V_i; V_f; V_z; V_r]
        self.b = nn.Parameter(torch.empty(4 * H))  # [b_i; b_f; b_z; b_r]
        if self.peepholes:
            shape = (H, H) if self.peepholes == "matrix" else (H,)
            self.U_i = nn.Parameter(torch.empty(shape))
            self.U_f = nn.Parameter(torch.empty(shape))
            self.U_r = nn.Parameter(torch.empty(shape))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights and peepholes U(-1/sqrt(H), 1/sqrt(H)); biases 0 except ``b_f`` = forget_bias."""
        super().reset_parameters()
        H = self.hidden_size
        with torch.no_grad():
            self.b.zero_()
            self.b[H : 2 * H].fill_(self.forget_bias)

    def project_inputs(self, x: Tensor) -> Tensor:
        return fast_linear(x, self.W, self.b)  # [..., 4H] = W x_t + b for all four blocks

    def input_weights(self) -> tuple[Tensor, Tensor | None]:
        return self.W, self.b

    def recurrent_weights(self) -> tuple[Tensor, ...]:
        if self.peepholes == "matrix":  # U_i and U_f both read c_{t-1}: one stacked product
            return (self.V, torch.cat((self.U_i, self.U_f)), self.U_r)
        return (self.V,)

    def dropout_reads(self) -> tuple[bool, ...]:
        # variational dropout drops h in V h_{t-1} only, never the cell state c the peepholes read
        return (True, False, False) if self.peepholes == "matrix" else (True,)

    def recur_with(self, projected_t: Tensor, state: State, products: tuple) -> tuple[Tensor, State]:
        h_prev, c_prev = state
        gates = projected_t + products[0](h_prev)  # [B, 4H]: one recurrent matmul
        a_i, a_f, a_z, a_r = gates.chunk(4, dim=-1)  # [B, H] each
        if self.peepholes == "matrix":
            U_ic, U_fc = products[1](c_prev).chunk(2, dim=-1)  # U_i c_{t-1}, U_f c_{t-1}: [B, H] each
            a_i = a_i + U_ic
            a_f = a_f + U_fc
        elif self.peepholes:
            a_i = torch.addcmul(a_i, self.U_i, c_prev)
            a_f = torch.addcmul(a_f, self.U_f, c_prev)
        i = torch.sigmoid(a_i)
        f = torch.sigmoid(a_f)
        z = torch.tanh(a_z)
        c = torch.addcmul(f * c_prev, i, z)  # c_t = f_t * c_{t-1} + i_t * z_t
        if self.peepholes == "matrix":
            a_r = a_r + products[2](c)  # U_r c_t: the output gate reads c_t (eq. 17)
        elif self.peepholes:
            a_r = torch.addcmul(a_r, self.U_r, c)  # the output gate reads c_t (eq. 17)
        r = torch.sigmoid(a_r)  # eq. 17
        h = r * torch.tanh(c)  # eq. 16
        return h, (h, c)

    def torch_kernel_applies(self, x: Tensor, state_masks: MaybeMasks) -> bool:
        """Whether :meth:`forward_fast` runs torch's fused LSTM (:func:`~dsf_lightning.ops.torch_rnn.lstm_sequence`:
        cuDNN on CUDA, about 1.5x our loop on the CPU too): no peepholes (torch's LSTM has none), vectors
        ``[B, T, I]`` (token ids take the gathered-column path) and no variational dropout mask (torch's kernel
        cannot mask ``V h_{t-1}`` alone). Where it applies it is the fast path; ``implementation="reference"``
        keeps the step loop, the definition it is tested against."""
        return (not self.peepholes and x.is_floating_point() and x.dim() == 3 and x.shape[1] > 0
                and self.recurrent_mask(state_masks) is None
                and getattr(torch.autograd.forward_ad, "_current_level", -1) < 0)  # no jvp through _VF here

    def forward_fast(self, x: Tensor, state: State | None = None, state_masks: MaybeMasks = None) -> tuple[Tensor, State]:
        if not self.torch_kernel_applies(x, state_masks):
            return super().forward_fast(x, state, state_masks)
        self._check_input(x, 3)
        h0, c0 = state if state is not None else self.init_state(x.shape[0], x.device, x.dtype)
        if not torch.is_grad_enabled() or x.shape[1] < 2:
            out, h, c = lstm_sequence(x, h0, c0, self.W, self.V, self.b)
            return out, (h, c)
        # the last step on our own ops: torch's kernel returns h_T and c_T as outputs of their own that a loss of
        # the outputs never reads, so dL/dh_T and dL/dc_T (iterative inference, DSF sec. 2.5) would not reach them
        out, h, c = lstm_sequence(x[:, :-1], h0, c0, self.W, self.V, self.b)
        last, (h, c) = self.recur_with(fast_linear(x[:, -1], self.W, self.b), (h, c), (lambda s: F.linear(s, self.V),))
        return torch.cat((out, last.unsqueeze(1).to(out.dtype)), dim=1), (h.to(h0.dtype), c.to(c0.dtype))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, peepholes={self.peepholes}, forget_bias={self.forget_bias}"


# -- GRU -----------------------------------------------------------------------------------------
@register_cell("gru")
class GRUCell(SequenceLoopCell):
    """Gated Recurrent Unit exactly as DSF sec. 3 writes it (eqs 18-19 and the inner function)::

        q_t = sigmoid(V_q h_{t-1} + W_q x_t + b_q)                     reset gate
        r_t = sigmoid(V_r h_{t-1} + W_r x_t + b_r)                     state gate (19)
        g_t = tanh(V_h (q_t * h_{t-1}) + W_h x_t + b_h)                inner function
        h_t = r_t * g_t + (1 - r_t) * h_{t-1}                          outer function (18)

    Eq. 18 is ``Phi(gamma[g + beta h_{t-1}])`` with ``gamma = r_t``, ``beta = 1 - r_t``, read (as eq.
    2 becomes eq. 3) as ``gamma * g + beta * h_{t-1}``, and ``Phi`` the identity. So ``r_t`` weights
    the *new* proposal, as Chung et al. (2014)'s update gate does; ``torch.nn.GRUCell`` (after Cho et
    al. 2014) writes ``(1 - z) * n + z * h``, i.e. its ``z`` is ``1 - r_t``: the same function family,
    reached by negating the update gate's weights and bias.

    A second, real difference with PyTorch / cuDNN is where the reset gate acts: the paper resets the
    state *before* the recurrent product, ``V_h (q_t * h_{t-1})`` (two recurrent matmuls per step);
    PyTorch resets it *after*, ``q_t * (V_h h_{t-1})``. No weight mapping turns one into the other, so
    the option ``reset_after=True`` gives the PyTorch placement (one stacked recurrent matmul)::

        g_t = tanh(q_t * (V_h h_{t-1}) + W_h x_t + b_h)

    which equals ``torch.nn.GRUCell`` when its recurrent candidate bias ``b_hn`` is 0 (this cell
    keeps one bias per block, like the paper).

    Gate blocks are stacked (q, r, h), the positions of torch's (reset, update, new).

    Options:
        reset_after: apply the reset gate after the recurrent product (default False: the paper).

    Parameters: ``W`` [3H, I], ``V`` [3H, H], ``b`` [3H] (``3(H*H) + 3(H*I) + 3H``). State: ``(h,)``.
    """

    citation = ("Kyunghyun Cho, Bart van Merrienboer, Caglar Gulcehre, Dzmitry Bahdanau, Fethi Bougares, Holger Schwenk, "
                "Yoshua Bengio. *Learning Phrase Representations using RNN Encoder-Decoder for Statistical Machine "
                "Translation.* EMNLP 2014.")
    equations, family = "DSF sec. 3, eqs 18-19", "gru"

    def __init__(self, input_size: int, hidden_size: int, *, reset_after: bool = False) -> None:
        super().__init__(input_size, hidden_size)
        self.reset_after = check_bool("reset_after", reset_after, CellOptionError)
        H = hidden_size
        self.W = nn.Parameter(torch.empty(3 * H, input_size))  # [W_q; W_r; W_h]
        self.V = nn.Parameter(torch.empty(3 * H, H))  # [V_q; V_r; V_h]
        self.b = nn.Parameter(torch.empty(3 * H))  # [b_q; b_r; b_h]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights U(-1/sqrt(H), 1/sqrt(H)); biases 0."""
        super().reset_parameters()
        nn.init.zeros_(self.b)

    def project_inputs(self, x: Tensor) -> Tensor:
        return fast_linear(x, self.W, self.b)  # [..., 3H] = W x_t + b for q, r and g

    def input_weights(self) -> tuple[Tensor, Tensor | None]:
        return self.W, self.b

    def recurrent_weights(self) -> tuple[Tensor, ...]:
        if self.reset_after:
            return (self.V,)
        H = self.hidden_size
        return (self.V[: 2 * H], self.V[2 * H :])  # [V_q; V_r] read h_{t-1}, V_h reads q_t * h_{t-1}

    def recur_with(self, projected_t: Tensor, state: State, products: tuple) -> tuple[Tensor, State]:
        (h_prev,) = state
        p_q, p_r, p_h = projected_t.chunk(3, dim=-1)  # [B, H] each
        if self.reset_after:
            Vq, Vr, Vh = products[0](h_prev).chunk(3, dim=-1)  # one matmul, [B, H] each
            q = torch.sigmoid(p_q + Vq)
            r = torch.sigmoid(p_r + Vr)
            g = torch.tanh(torch.addcmul(p_h, q, Vh))  # q_t * (V_h h_{t-1}) + W_h x_t + b_h
        else:
            Vq, Vr = products[0](h_prev).chunk(2, dim=-1)  # the two gates at once
            q = torch.sigmoid(p_q + Vq)
            r = torch.sigmoid(p_r + Vr)  # eq. 19
            g = torch.tanh(p_h + products[1](q * h_prev))  # V_h (q_t * h_{t-1})
        h = _outer(h_prev, g, r)
        return h, (h,)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, reset_after={self.reset_after}"


def _outer(h_prev: Tensor, g: Tensor, r: Tensor) -> Tensor:
    """DSF eq. 18, the GRU / MGU outer function: ``r_t * g_t + (1 - r_t) * h_{t-1}``. ``lerp`` does not
    promote: under autocast ``g_t`` and ``r_t`` come out of bf16 / fp16 products while the carried state
    stays float32, so they take the state's dtype."""
    return torch.lerp(h_prev, g.to(h_prev.dtype), r.to(h_prev.dtype))


# -- MGU -----------------------------------------------------------------------------------------
@register_cell("mgu")
class MGUCell(SequenceLoopCell):
    """Minimal Gated Unit (Zhou et al. 2016) as DSF sec. 3 describes it: the GRU's outer function
    (eqs 18-19) with a single forget gate ``r_t`` that also resets the inner function::

        r_t = sigmoid(V_r h_{t-1} + W_r x_t + b_r)                     forget gate (19)
        g_t = tanh(V_h (r_t * h_{t-1}) + W_h x_t + b_h)                inner function
        h_t = r_t * g_t + (1 - r_t) * h_{t-1}                          outer function (18)

    (Zhou et al. write the same update as ``(1 - f_t) * h_{t-1} + f_t * h~_t``.) The gate must be
    known before ``V_h`` is applied, so a step takes two recurrent matmuls.

    Parameters: ``W`` [2H, I], ``V`` [2H, H], ``b`` [2H], blocks stacked (r, h). State: ``(h,)``.
    """

    citation = ("Guo-Bing Zhou, Jianxin Wu, Chen-Lin Zhang, Zhi-Hua Zhou. *Minimal Gated Unit for Recurrent Neural "
                "Networks.* International Journal of Automation and Computing, 2016.")
    equations, family = "DSF sec. 3, eqs 18-19 with one gate", "mgu"

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__(input_size, hidden_size)
        H = hidden_size
        self.W = nn.Parameter(torch.empty(2 * H, input_size))  # [W_r; W_h]
        self.V = nn.Parameter(torch.empty(2 * H, H))  # [V_r; V_h]
        self.b = nn.Parameter(torch.empty(2 * H))  # [b_r; b_h]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights U(-1/sqrt(H), 1/sqrt(H)); biases 0."""
        super().reset_parameters()
        nn.init.zeros_(self.b)

    def project_inputs(self, x: Tensor) -> Tensor:
        return fast_linear(x, self.W, self.b)  # [..., 2H] = W x_t + b for r and g

    def input_weights(self) -> tuple[Tensor, Tensor | None]:
        return self.W, self.b

    def recurrent_weights(self) -> tuple[Tensor, ...]:
        H = self.hidden_size
        return (self.V[:H], self.V[H:])  # V_r reads h_{t-1}, V_h reads r_t * h_{t-1}

    def recur_with(self, projected_t: Tensor, state: State, products: tuple) -> tuple[Tensor, State]:
        (h_prev,) = state
        p_r, p_h = projected_t.chunk(2, dim=-1)  # [B, H] each
        r = torch.sigmoid(p_r + products[0](h_prev))  # eq. 19
        g = torch.tanh(p_h + products[1](r * h_prev))  # V_h (r_t * h_{t-1})
        h = _outer(h_prev, g, r)
        return h, (h,)


# -- smoothed rectifier RNN ----------------------------------------------------------------------
@register_cell("srelu-rnn")
class SmoothedReLURNNCell(SequenceLoopCell):
    """The RNN of the IRLM paper (sec. 2.1-2.2) with its smoothed rectifier::

        x_t = f(W y_t + R x_{t-1} [+ b]),     f(v) = max(0, v - a * tanh(v / a))

    (the paper's ``x`` is our state ``h``, its ``y`` our input, its ``R`` our ``V``). The paper prints
    ``a tanh x/a``; it is read as ``a * tanh(x / a)``, the only reading in which ``a`` matters and
    "when a is made small this function approaches the standard rectifier" holds.

    Options:
        a: the smoothing scale, a positive number. The paper gives no value; the default 1.0 is ours.
        bias: add a bias ``b`` as in the Elman form of DSF eq. 6 (default False: the paper's
            equation has none).

    Parameters: ``W`` [H, I], ``V`` [H, H] and, with ``bias``, ``b`` [H]. State: ``(h,)``.
    """

    citation, equations, family = IRLM_CITATION, "IRLM paper sec. 2.1-2.2", "irlm"

    def __init__(self, input_size: int, hidden_size: int, *, a: float = 1.0, bias: bool = False) -> None:
        super().__init__(input_size, hidden_size)
        self.a = _check_positive("a", a)
        self.bias = check_bool("bias", bias, CellOptionError)
        H = hidden_size
        self.W = nn.Parameter(torch.empty(H, input_size))  # encoding matrix
        self.V = nn.Parameter(torch.empty(H, H))  # recurrent (transformation) matrix R
        self.b = nn.Parameter(torch.empty(H)) if self.bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights U(-1/sqrt(H), 1/sqrt(H)); bias (if any) 0."""
        super().reset_parameters()
        if self.b is not None:
            nn.init.zeros_(self.b)

    def project_inputs(self, x: Tensor) -> Tensor:
        return fast_linear(x, self.W, self.b)  # [..., H] = W y_t (+ b)

    def input_weights(self) -> tuple[Tensor, Tensor | None]:
        return self.W, self.b

    def recurrent_weights(self) -> tuple[Tensor, ...]:
        return (self.V,)

    def recur_with(self, projected_t: Tensor, state: State, products: tuple) -> tuple[Tensor, State]:
        (h_prev,) = state
        h = smoothed_rectifier(projected_t + products[0](h_prev), self.a)  # [B, H]
        return h, (h,)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, a={self.a}, bias={self.bias}"
