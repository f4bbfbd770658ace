"""Recurrent Additive Networks (Lee, Levy & Zettlemoyer 2017, "Recurrent Additive Networks").

The state is updated by a purely additive, gated, component-wise sum of the (linearly projected)
input and the previous state; the only nonlinearities are in the gates (and the output function g)::

    c~_t = W_cx x_t                                                          (1)
    i_t  = sigma(W_ih h_{t-1} + W_ix x_t + b_i)
    f_t  = sigma(W_fh h_{t-1} + W_fx x_t + b_f)
    c_t  = i_t * c~_t + f_t * c_{t-1}
    h_t  = g(c_t)

and, when the content and output layers are trivial (c~_t = x_t, g = identity)::

    i_t  = sigma(W_ic c_{t-1} + W_ix x_t + b_i)                              (2)
    f_t  = sigma(W_fc c_{t-1} + W_fx x_t + b_f)
    c_t  = i_t * x_t + f_t * c_{t-1}

so that ``c_t = sum_j w_j^t * x_j`` with ``w_j^t = i_j * prod_{k>j} f_k`` (eq. 3, from c_0 = 0).

Registered cells:

* ``ran``         eq. 1, with ``g`` = tanh ("tanh RAN") or identity ("identity RAN").
* ``ran-simple``  eq. 2 (needs ``input_size == hidden_size``: the content is x_t itself).

Both carry only ``c``: in eq. 1, ``h_{t-1} = g(c_{t-1})`` is recomputed from it exactly.

Where a parallel scan applies, and where it does not: ``c_t = i_t * c~_t + f_t * c_{t-1}`` is a diagonal
*linear* recurrence in ``c`` once the gates are known, but the gates read ``h_{t-1} = g(c_{t-1})``
(eq. 1) or ``c_{t-1}`` (eq. 2), so training and scoring (:meth:`forward`) must still step through time:
a scan cannot compute the gates. It does apply to everything downstream of recorded gates: given
``(content, i, f)`` for all steps, :meth:`RANCell.states_from_gates` rebuilds every ``c_t`` with one call
of :func:`dsf_lightning.ops.scan.linear_recurrence` (``a_t = f_t``, ``b_t = i_t * c~_t``), differentiable
in the gates; this is the decomposition of eq. 3 that the influence analysis (eq. 7) reads.

Speed: both gates' recurrent products are one ``[B, H] x [H, 2H]`` product per step (the two weights
concatenated once per sequence) through oneDNN, with the weight gradient as one product over all steps
(:class:`~dsf_lightning.cells.classic.SequenceLoopCell`); a single step (``recur``) keeps two products.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..ops.fast_linear import fast_linear
from ..ops.scan import linear_recurrence
from .base import CellOptionError, SequenceLoopCell, State, activation, check_choice
from .registry import register_cell

RAN_CITATION = "Kenton Lee, Omer Levy, Luke Zettlemoyer. *Recurrent Additive Networks.* 2017."

OUTPUT_FUNCTIONS = ("tanh", "identity")


def states_from_gates(
    content: Tensor, i: Tensor, f: Tensor, c0: Tensor | None = None, method: str = "auto"
) -> Tensor:
    """Every cell state ``c_t = i_t * c~_t + f_t * c_{t-1}`` (eqs 1-3) from recorded gates.

    ``content``, ``i``, ``f`` ``[B, T, H]`` (the content ``c~_t``, or ``x_t`` for eq. 2), ``c0`` ``[B, H]``
    (zeros when None). One :func:`~dsf_lightning.ops.scan.linear_recurrence` instead of a loop; gradients
    flow to all inputs. It does not replace :meth:`RANCell.forward`: there the gates depend on the state.
    """
    if c0 is None:
        c0 = content.new_zeros(content.shape[0], content.shape[2])
    return linear_recurrence(f, i * content, c0, method=method)


@register_cell("ran")
class RANCell(SequenceLoopCell):
    """The RAN of eq. 1: gated additive update of a linear content layer, output ``h_t = g(c_t)``.

    Options:
        g: the output function, ``"tanh"`` (default; the paper's main model, the only one stable
            on Text8) or ``"identity"`` (then ``h_t = c_t``).

    State: ``(c [B, H],)``; the gates read ``h_{t-1} = g(c_{t-1})``, recomputed from ``c_{t-1}``.
    Output: ``h_t`` [B, H].

    Parameters: ``W_cx``, ``W_ix``, ``W_fx`` [H, I], ``W_ih``, ``W_fh`` [H, H], ``b_i``, ``b_f`` [H]:
    ``2 H^2 + 3 H I`` weights (the paper's count, sec. 2.1) plus ``2 H`` biases.
    """

    citation, equations, family, state_names = RAN_CITATION, "RAN paper eq. 1", "ran", ("c",)

    def __init__(self, input_size: int, hidden_size: int, *, g: str = "tanh") -> None:
        super().__init__(input_size, hidden_size)
        self.g_name = check_choice("g", g, OUTPUT_FUNCTIONS)
        self.g = activation(g, "g")
        H, I = hidden_size, input_size
        self.W_cx = nn.Parameter(torch.empty(H, I))  # content layer
        self.W_ix = nn.Parameter(torch.empty(H, I))  # input gate, data part
        self.W_fx = nn.Parameter(torch.empty(H, I))  # forget gate, data part
        self.W_ih = nn.Parameter(torch.empty(H, H))  # input gate, recurrent part
        self.W_fh = nn.Parameter(torch.empty(H, H))  # forget gate, recurrent part
        self.b_i = nn.Parameter(torch.empty(H))
        self.b_f = nn.Parameter(torch.empty(H))
        self.reset_parameters()

    def project_inputs(self, x: Tensor) -> Tensor:
        return fast_linear(x, *self.input_weights())  # [..., 3H] = [W_cx x, W_ix x + b_i, W_fx x + b_f] in one matmul

    def input_weights(self) -> tuple[Tensor, Tensor | None]:
        weight = torch.cat((self.W_cx, self.W_ix, self.W_fx))
        return weight, torch.cat((torch.zeros_like(self.b_i), self.b_i, self.b_f))

    def recurrent_weights(self) -> tuple[Tensor, ...]:
        return (torch.cat((self.W_ih, self.W_fh)),)  # [2H, H]: both gates read h_{t-1}

    def step_products(self, mask: Tensor | None = None) -> tuple:
        # one step: two products, not a fresh [2H, H] copy of the weights per step; the variational
        # dropout mask drops h_{t-1} = g(c_{t-1}) where the gates' weights read it, never c_{t-1}
        def product(h: Tensor) -> Tensor:
            h = h if mask is None else h * mask
            return torch.cat((fast_linear(h, self.W_ih), fast_linear(h, self.W_fh)), dim=-1)

        return (product,)

    def gates_with(self, projected_t: Tensor, c_prev: Tensor, products: tuple) -> tuple[Tensor, Tensor, Tensor]:
        content, x_i, x_f = projected_t.chunk(3, dim=-1)
        h_prev = self.g(c_prev)  # h_{t-1} = g(c_{t-1})
        a_i, a_f = products[0](h_prev).chunk(2, dim=-1)  # W_ih h_{t-1}, W_fh h_{t-1}
        return content, torch.sigmoid(x_i + a_i), torch.sigmoid(x_f + a_f)

    def gates(self, projected_t: Tensor, c_prev: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(content c~_t, input gate i_t, forget gate f_t) of eq. 1, each [B, H]."""
        return self.gates_with(projected_t, c_prev, self.step_products())

    def recur_with(self, projected_t: Tensor, state: State, products: tuple) -> tuple[Tensor, State]:
        (c_prev,) = state
        content, i, f = self.gates_with(projected_t, c_prev, products)
        c = i * content + f * c_prev  # eq. 1: purely additive state update
        return self.g(c), (c,)

    def states_from_gates(
        self, content: Tensor, i: Tensor, f: Tensor, c0: Tensor | None = None, method: str = "auto"
    ) -> Tensor:
        """All cell states ``[B, T, H]`` from recorded ``(content, i, f)`` by one scan (see the module
        docstring: the gates themselves still need the step loop)."""
        return states_from_gates(content, i, f, c0, method)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, g={self.g_name!r}"


@register_cell("ran-simple")
class SimpleRANCell(SequenceLoopCell):
    """The simplified RAN of eq. 2: the content is ``x_t`` itself and the output is ``c_t``.

    No options. ``input_size`` must equal ``hidden_size``.

    State: ``(c [B, H],)``, which is also the output (the gates read ``c_{t-1}``).

    Parameters: ``W_ix``, ``W_fx`` [H, I], ``W_ic``, ``W_fc`` [H, H], ``b_i``, ``b_f`` [H]:
    ``2 H^2 + 2 H I + 2 H`` (= ``4 H^2 + 2 H``).
    """

    citation, equations, family, state_names = RAN_CITATION, "RAN paper eq. 2", "ran", ("c",)

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__(input_size, hidden_size)
        if input_size != hidden_size:
            raise CellOptionError(
                f"ran-simple adds x_t to the state itself (eq. 2), so input_size must equal hidden_size; "
                f"got input_size={input_size}, hidden_size={hidden_size} (use 'ran' for a content layer)"
            )
        H = hidden_size
        self.W_ix = nn.Parameter(torch.empty(H, H))
        self.W_fx = nn.Parameter(torch.empty(H, H))
        self.W_ic = nn.Parameter(torch.empty(H, H))
        self.W_fc = nn.Parameter(torch.empty(H, H))
        self.b_i = nn.Parameter(torch.empty(H))
        self.b_f = nn.Parameter(torch.empty(H))
        self.reset_parameters()

    def project_inputs(self, x: Tensor) -> Tensor:
        # [..., 3H] = [x, W_ix x + b_i, W_fx x + b_f]: the content is x itself
        gates_x = fast_linear(x, torch.cat((self.W_ix, self.W_fx)), torch.cat((self.b_i, self.b_f)))
        return torch.cat((x, gates_x), dim=-1)

    def recurrent_weights(self) -> tuple[Tensor, ...]:
        return (torch.cat((self.W_ic, self.W_fc)),)  # [2H, H]: both gates read c_{t-1}

    def step_products(self, mask: Tensor | None = None) -> tuple:
        def product(c: Tensor) -> Tensor:  # the mask drops c_{t-1} in the gates only (eq. 2's f * c_{t-1} keeps it)
            c = c if mask is None else c * mask
            return torch.cat((fast_linear(c, self.W_ic), fast_linear(c, self.W_fc)), dim=-1)

        return (product,)

    def gates_with(self, projected_t: Tensor, c_prev: Tensor, products: tuple) -> tuple[Tensor, Tensor, Tensor]:
        x, x_i, x_f = projected_t.chunk(3, dim=-1)
        a_i, a_f = products[0](c_prev).chunk(2, dim=-1)  # W_ic c_{t-1}, W_fc c_{t-1}
        return x, torch.sigmoid(x_i + a_i), torch.sigmoid(x_f + a_f)

    def gates(self, projected_t: Tensor, c_prev: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(content x_t, input gate i_t, forget gate f_t) of eq. 2, each [B, H]."""
        return self.gates_with(projected_t, c_prev, self.step_products())

    def recur_with(self, projected_t: Tensor, state: State, products: tuple) -> tuple[Tensor, State]:
        (c_prev,) = state
        x, i, f = self.gates_with(projected_t, c_prev, products)
        c = i * x + f * c_prev  # eq. 2
        return c, (c,)

    def states_from_gates(
        self, content: Tensor, i: Tensor, f: Tensor, c0: Tensor | None = None, method: str = "auto"
    ) -> Tensor:
        """All cell states ``[B, T, H]`` from recorded ``(content, i, f)`` by one scan (see the module
        docstring: the gates themselves still need the step loop)."""
        return states_from_gates(content, i, f, c0, method)
