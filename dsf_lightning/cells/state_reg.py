"""State-regularized RNNs (Wang & Niepert 2019, "State-Regularized Recurrent Neural Networks", ICML).

An sr-RNN cell is a standard cell (the *recurrent component*, eq. 1) followed by a *stochastic
component* that snaps the state the cell produced onto a finite set of ``k`` learnable centroids
``s_1 .. s_k`` (the columns of ``S``, stored here as the rows of :attr:`StateRegularizedCell.centroids`)::

    u_t   = f(h_{t-1}, c_{t-1}, x_t)                                   (1)  the wrapped cell
    alpha = softmax(score(u_t, s_i) / tau)  over i = 1..k              (2)
        score = u_t . s_i          (3, ``score="dot"``)
        score = -||u_t - s_i||     (4, ``score="distance"``, Euclidean norm, not squared)
    h_t   = s_j,  j ~ alpha                                            (5)  ``mode="sample"``
    h_t   = sum_i alpha_i s_i                                          (6)  ``mode="soft"``

The regularized ``h_t`` replaces the wrapped cell's state component and is what the next step reads
as ``h_{t-1}`` (sec. 3.2: "h_{t-1} is the output of the previous cell's stochastic component").

Registered cells:

* ``sr``        the generic wrapper around any registered cell (``base``, ``base_options``);
* ``sr-gru``    the paper's memory-less sr-GRU (sec. 3.1, 4.1): the GRU's hidden state is regularized;
* ``sr-lstm``   the sr-LSTM (sec. 3.2): the LSTM's *hidden* state ``h`` is regularized, the cell
                state ``c`` is left free, so memorization moves into ``c`` (sec. 1, 3.2, Fig. 7);
* ``sr-lstm-p`` the sr-LSTM-p: the same over an LSTM with peephole connections (eqs 7-9), whose
                gates read the cell state, so that it can act like a pushdown automaton (sec. 3.2).

The transition probabilities ``alpha`` of every step come out of :meth:`forward_with_probs` /
:meth:`transition_probabilities` (for DFA extraction, sec. 3.1 and appendix E, or the visualizations of
appendix G); they are computed by the very code path that :meth:`forward` runs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import CellOptionError, MaybeMasks, SequenceLoopCell, State, check_choice, check_positive_int
from .registry import build_cell, register_cell

SR_CITATION = "Cheng Wang, Mathias Niepert. *State-Regularized Recurrent Neural Networks.* ICML 2019."

SCORES = ("dot", "distance")
MODES = ("soft", "hard", "sample")
OUTPUTS = ("state", "base")

#: sec. 3.3 / appendix B: centroids initialized from U(-0.5, 0.5)
CENTROID_INIT = 0.5


def check_temperature(value: object) -> float:
    """Return the temperature ``tau`` as a float if it is a finite number > 0, else raise naming ``tau``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value <= 0:
        raise CellOptionError(f"tau must be a finite number > 0, got {value!r}")
    return float(value)


def check_base_options(value: object) -> dict:
    """Return a copy of ``base_options`` (``None`` -> ``{}``); anything but a dict raises naming it."""
    if value is not None and not (isinstance(value, dict) and all(isinstance(k, str) for k in value)):
        raise CellOptionError(f"base_options must be a dict of options (by name) or None, got {value!r}")
    return dict(value or {})


@register_cell("sr")
class StateRegularizedCell(SequenceLoopCell):
    """The stochastic component of an sr-RNN (eqs 2-6) wrapped around any registered cell (eq. 1).

    Options:
        base: the registry name of the wrapped cell (the recurrent component, eq. 1). Defaults to
            ``"delta-rnn"``, this library's flagship; the paper's own bases are ``sr-gru`` /
            ``sr-lstm`` / ``sr-lstm-p``.
        base_options: keyword options of the wrapped cell (``None``: its defaults).
        k: the number of centroids (learnable states), >= 1. The paper uses 2 to 1000 (Table 2);
            default 10 (its IMDB / MNIST / Fig. 3 setting).
        tau: the softmax temperature (> 0, default 1, the paper's setting throughout, sec. 3.3).
            A plain attribute, so it can be annealed during training ("can be used to anneal").
        score: ``"dot"`` (eq. 3, the paper's experiments) or ``"distance"`` (eq. 4, minus the
            Euclidean distance between ``u_t`` and each centroid).
        mode: how the new state is drawn from ``alpha``:

            * ``"soft"`` (default, eq. 6, every experiment of the paper): the mixture ``alpha @ S``;
            * ``"sample"`` (eq. 5): in training ``j ~ alpha`` and ``h_t = s_j``; in evaluation the most
              probable centroid (the argmax; deterministic, as in the DFA extraction of sec. 3.1);
            * ``"hard"``: always the most probable centroid, ``h_t = s_argmax`` (the ``tau -> 0`` limit
              of eqs 5 and 6, Theorem 3.2), in training and evaluation alike.

            The paper notes eq. 5 is not differentiable (it points to EM or reinforcement learning);
            here ``"sample"`` and ``"hard"`` train with the straight-through estimator: the forward
            value is exactly the chosen centroid, the backward pass treats the one-hot choice as if
            it were ``alpha`` (so the scores, hence the wrapped cell, get the gradient of eq. 6). This
            estimator is this library's choice, not the paper's.
        state_index: which tensor of the wrapped cell's state tuple is regularized. Default (None):
            the wrapped cell's hidden state h, the state the paper regularizes (sec. 3: the hidden
            state through which the unrolled cells are connected), i.e. its ``recurrent_state_index``:
            index 0 for the LSTM's ``(h, c)``, the GRU's and the Delta-RNN's ``(h,)``, index 1 for the
            SCRN's ``(s, h)`` (never the context s), and RAN's only carried state ``c`` (its output
            ``g(c)`` is not carried).
        output: ``"state"`` (default): the cell's output is the regularized state ``h_t`` (what the
            paper feeds to the next layer / classifier); ``"base"``: the wrapped cell's own output,
            unchanged (for cells whose output is not their state).

    Parameters: the wrapped cell's (in the submodule ``base``) plus the centroids ``[k, d]``, where
    ``d = base.state_sizes[state_index]``: ``k * d`` more than the wrapped cell.

    The paper's "end token" (sec. 3.3: one last cell application *without* the stochastic component
    before the classifier) is :meth:`unregularized_step`.
    """

    citation, equations, family = SR_CITATION, "sr-RNN paper eqs 1-6", "sr"
    size_options = {"k": None}  # k centroids of d units each: a size of its own (2 to 1000 in Table 2)

    @property
    def state_names(self) -> tuple[str, ...]:  # the wrapper keeps the wrapped cell's state tuple
        return self.base.state_names

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        base: str = "delta-rnn",
        base_options: dict | None = None,
        k: int = 10,
        tau: float = 1.0,
        score: str = "dot",
        mode: str = "soft",
        state_index: int | None = None,
        output: str = "state",
    ) -> None:
        super().__init__(input_size, hidden_size)
        self.k = check_positive_int("k", k)
        self.tau = tau  # validated by the property setter
        self.score = check_choice("score", score, SCORES)
        self.mode = check_choice("mode", mode, MODES)
        self.output = check_choice("output", output, OUTPUTS)
        self.base_options = check_base_options(base_options)
        self.base_name = base
        # the recurrent component (eq. 1); UnknownCellError for an unknown name
        # (build_cell: an option the base cell does not take is a CellOptionError naming it)
        self.base = build_cell(base, input_size, hidden_size, **self.base_options)

        n_states = len(self.base.state_sizes)
        if state_index is None:  # the hidden state h (sec. 3), wherever the base cell keeps it
            state_index = self.base.recurrent_state_index or 0
        index_ok = isinstance(state_index, int) and not isinstance(state_index, bool)
        if not index_ok or not 0 <= state_index < n_states:
            raise CellOptionError(
                f"state_index must be an integer in [0, {n_states - 1}] (the base cell {base!r} has "
                f"{n_states} state tensor(s) of sizes {self.base.state_sizes}), got {state_index!r}"
            )
        self.state_index = state_index
        self.state_size = self.base.state_sizes[state_index]  # d, the size of each centroid
        self.state_sizes = tuple(self.base.state_sizes)
        self.output_size = self.state_size if self.output == "state" else self.base.output_size
        # the state layout is the wrapped cell's, so recurrent dropout masks the same tensor
        self.recurrent_state_index = self.base.recurrent_state_index
        self.recurrent_dropout = self.base.recurrent_dropout
        self._probs_sink: list[Tensor] | None = None  # collects alpha while forward_with_probs runs

        self.centroids = nn.Parameter(torch.empty(self.k, self.state_size))  # row i = s_i (S transposed)
        nn.init.uniform_(self.centroids, -CENTROID_INIT, CENTROID_INIT)

    # -- options ---------------------------------------------------------------------------------
    @property
    def tau(self) -> float:
        """The temperature of eqs 3-4 (lower: alpha closer to one-hot; higher: closer to uniform)."""
        return self._tau

    @tau.setter
    def tau(self, value: float) -> None:
        self._tau = check_temperature(value)

    def reset_parameters(self) -> None:
        """The wrapped cell's own initialization; centroids U(-0.5, 0.5) (sec. 3.3, appendix B)."""
        self.base.reset_parameters()
        nn.init.uniform_(self.centroids, -CENTROID_INIT, CENTROID_INIT)

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> State:
        """The wrapped cell's initial state (the paper's start token then moves it to a centroid)."""
        return self.base.init_state(batch_size, device, dtype)

    # -- the stochastic component (eqs 2-6) ------------------------------------------------------
    def scores(self, u: Tensor) -> Tensor:
        """The scores of eq. 3 (``u . s_i``) or eq. 4 (``-||u - s_i||``), ``[B, d] -> [B, k]``."""
        if self.score == "dot":
            return F.linear(u, self.centroids)  # [B, k]
        # [B, 1, d] - [k, d] -> [B, k, d] -> [B, k]; exact, unlike cdist's matmul shortcut
        return -(u.unsqueeze(-2) - self.centroids).norm(dim=-1)

    def probabilities(self, u: Tensor) -> Tensor:
        """alpha = g(S, u_t) in the simplex (eq. 2): the softmax of the scores at temperature tau."""
        return torch.softmax(self.scores(u) / self.tau, dim=-1)

    def transition(self, alpha: Tensor) -> Tensor:
        """The new state ``h_t = h(alpha, S)``: the mixture of eq. 6 or one centroid (eq. 5 / argmax)."""
        if self.mode == "soft":
            weights = alpha  # eq. 6
        else:
            if self.mode == "sample" and self.training:
                choice = torch.multinomial(alpha, 1).squeeze(-1)  # eq. 5: j ~ p_u
            else:
                choice = alpha.argmax(dim=-1)  # hard, or sample in evaluation: the most probable state
            one_hot = F.one_hot(choice, self.k).to(alpha.dtype)
            # straight-through: the value is exactly one_hot (alpha - alpha == 0), the gradient alpha's
            weights = one_hot + (alpha - alpha.detach())
        return weights @ self.centroids  # [B, k] @ [k, d] -> [B, d]

    def regularized_recur(
        self, projected_t: Tensor, state: State, products: tuple | None = None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State, Tensor]:
        """One sr-RNN step: the wrapped cell (eq. 1), then eqs 2-6 on its ``state_index`` tensor.

        ``products``: the wrapped cell's recurrent products (see
        :class:`~dsf_lightning.cells.classic.SequenceLoopCell`, variational dropout masks already in
        them), or None for its own ``recur`` with ``state_masks``.
        Returns (output ``[B, output_size]``, new state, transition probabilities alpha ``[B, k]``).
        """
        if products is None:
            # eq. 1; _recur, not recur: a plug-in base cell whose recur takes no state_masks works too
            base_out, base_state = self.base._recur(projected_t, state, state_masks)
        else:
            base_out, base_state = self.base.recur_with(projected_t, state, products)  # eq. 1
        base_state = tuple(base_state)
        u = base_state[self.state_index]
        alpha = self.probabilities(u)  # eqs 2-4
        h = self.transition(alpha)  # eq. 5 or 6
        new_state = base_state[: self.state_index] + (h,) + base_state[self.state_index + 1 :]
        out = h if self.output == "state" else base_out
        return out, new_state, alpha

    # -- the RecurrentCell contract ----------------------------------------------------------------
    def project_inputs(self, x: Tensor) -> Tensor:
        return self.base.project_inputs(x)  # the stochastic component reads no input

    def recur(self, projected_t: Tensor, state: State, state_masks: MaybeMasks = None) -> tuple[Tensor, State]:
        return self._recur_collecting(projected_t, state, None, state_masks)

    def recur_with(self, projected_t: Tensor, state: State, products: tuple) -> tuple[Tensor, State]:
        return self._recur_collecting(projected_t, state, products)

    def _recur_collecting(
        self, projected_t: Tensor, state: State, products: tuple | None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State]:
        out, new_state, alpha = self.regularized_recur(projected_t, state, products, state_masks)
        if self._probs_sink is not None:
            self._probs_sink.append(alpha)
        return out, new_state

    # the whole-sequence loop of SequenceLoopCell, with the wrapped cell's products when it has them
    def sequence_loop_supported(self) -> bool:
        return isinstance(self.base, SequenceLoopCell) and self.base.sequence_loop_supported()

    def recurrent_weights(self) -> tuple[Tensor, ...]:
        return self.base.recurrent_weights()

    def dropout_reads(self) -> tuple[bool, ...]:
        return self.base.dropout_reads()

    # -- transition probabilities for callers ------------------------------------------------------
    # These run the inherited step / forward unchanged (same code path, same state masking) and
    # collect the alpha that every recur call computed on the way.
    def _collecting_probs(self, run, *args, **kwargs) -> tuple[tuple, list[Tensor]]:
        sink, outer = [], self._probs_sink
        self._probs_sink = sink
        try:
            return run(*args, **kwargs), sink
        finally:
            self._probs_sink = outer

    def forward_with_probs(
        self, x: Tensor, state: State | None = None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State, Tensor]:
        """:meth:`forward` plus the transition probabilities: ``(outputs [B, T, output_size], state,
        alpha [B, T, k])``; ``alpha[b, t, i]`` is the probability of moving to centroid ``i`` at step t."""
        (outputs, state), probs = self._collecting_probs(self.forward, x, state, state_masks=state_masks)
        return outputs, state, torch.stack(probs, dim=1)

    def step_with_probs(
        self, x_t: Tensor, state: State | None = None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State, Tensor]:
        """:meth:`step` plus the transition probabilities alpha ``[B, k]`` of this step."""
        (out, state), (alpha,) = self._collecting_probs(self.step, x_t, state, state_masks=state_masks)
        return out, state, alpha

    def transition_probabilities(
        self, x: Tensor, state: State | None = None, state_masks: MaybeMasks = None
    ) -> Tensor:
        """The transition probabilities ``[B, T, k]`` of a sequence (eq. 2 at every step)."""
        return self.forward_with_probs(x, state, state_masks)[2]

    def unregularized_step(
        self, x_t: Tensor, state: State | None = None, state_masks: MaybeMasks = None
    ) -> tuple[Tensor, State]:
        """One application of the wrapped cell without the stochastic component (sec. 3.3's end token)."""
        return self.base.step(x_t, state, state_masks=state_masks)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, base={self.base_name!r}, k={self.k}, tau={self.tau}, "
            f"score={self.score!r}, mode={self.mode!r}, state_index={self.state_index}, "
            f"output={self.output!r}"
        )


class _PaperStateRegularizedCell(StateRegularizedCell):
    """A named model of the paper: the wrapper over a fixed base cell and regularized state."""

    BASE: str = ""
    FIXED_BASE_OPTIONS: dict = {}

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        k: int = 10,
        tau: float = 1.0,
        score: str = "dot",
        mode: str = "soft",
        base_options: dict | None = None,
    ) -> None:
        base_options = check_base_options(base_options)
        clash = sorted(set(base_options) & set(self.FIXED_BASE_OPTIONS))
        if clash:
            raise CellOptionError(
                f"base_options: {', '.join(map(repr, clash))} is fixed by {self.cell_name!r} "
                f"({self.FIXED_BASE_OPTIONS}); use the generic 'sr' cell to change it"
            )
        super().__init__(
            input_size,
            hidden_size,
            base=self.BASE,
            base_options={**base_options, **self.FIXED_BASE_OPTIONS},
            k=k,
            tau=tau,
            score=score,
            mode=mode,
            state_index=0,  # the hidden state h, for the GRU (h,) and the LSTM (h, c) alike
            output="state",
        )


@register_cell("sr-gru")
class SRGRUCell(_PaperStateRegularizedCell):
    """sr-GRU (sec. 3.1, 4.1): a GRU whose hidden state is regularized (eqs 1-6).

    The GRU is memory-less (its cells are connected only through ``h``), so with eq. 5 the sr-GRU is a
    probabilistic finite automaton and for ``tau -> 0`` a DFA (Theorems 3.1, 3.2). Options: ``k``,
    ``tau``, ``score``, ``mode`` as for ``sr``; ``base_options`` for the GRU. The paper's Tomita
    setting is ``k=50, tau=1``.
    """

    BASE = "gru"


@register_cell("sr-lstm")
class SRLSTMCell(_PaperStateRegularizedCell):
    """sr-LSTM (sec. 3.2): an LSTM (no peepholes) whose hidden state ``h`` is regularized (eqs 1-6).

    The cell state ``c`` is not regularized: it is the memory that the regularization pushes the
    model to use instead of ``h`` (sec. 1, 3.2, Fig. 7); the state tuple stays ``(h, c)``.
    """

    BASE = "lstm"
    FIXED_BASE_OPTIONS = {"peepholes": False}


@register_cell("sr-lstm-p")
class SRLSTMPeepholeCell(_PaperStateRegularizedCell):
    """sr-LSTM-p (sec. 3.2, eqs 7-9): the sr-LSTM over an LSTM with peephole connections.

    The forget and input gates read ``p * c_{t-1}`` and the output gate ``p * c_t`` (Gers &
    Schmidhuber 2000), while ``h_{t-1}`` in the gates is the previous step's stochastic component's
    output. Deciding memory updates from state, top-of-memory and input is what lets it behave like
    a pushdown automaton.
    """

    equations = "sr-RNN paper eqs 1-9"

    BASE = "lstm"
    FIXED_BASE_OPTIONS = {"peepholes": True}
