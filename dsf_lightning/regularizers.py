"""Regularizers from the papers that act on the weights or the dynamics, outside the cells.

* :func:`sobolev_penalty` (and the cheaper :func:`sobolev_penalty_estimate`): the Sobolev-type
  penalty of Kabdolov, Assylbekov & Takhanov (2018, "Reproducing and Regularizing the SCRN Model"),
  sec. 7, eq. 10::

      L_Sobolev = beta * sum_{t=1}^{K} || d h_t / d h_{t-1} ||_F^2

  Closed forms where the cell declares one (``RecurrentCell.jacobian_norm``: the SCRN, the derivation at
  the end of sec. 7, and the IRLM, a diagonal recurrence), the exact Jacobian by ``torch.func`` for every
  other cell.
* :func:`normalize_columns`: column normalization of Pachitariu & Sahani (2013, "Regularization and
  nonlinearities for neural language models: when are they needed?"),
  sec. 4: "fixing the L2 norm of the incoming/outgoing weights to each hidden unit" of the encoding
  matrix W and the decoding matrix Z (the value 15 was cross-validated on Penn). The Lightning
  callback that applies it after every optimizer step is
  :class:`dsf_lightning.training.callbacks.ColumnNormalization`.
* :func:`l1_penalty`: the L1 weight penalty of the IRLM paper's "IRLM (L1 reg)" row (Table 2); the paper
  gives neither its strength nor the matrices it covers: here every weight matrix (biases, gains and the
  IRLM self-connections excluded).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .cells import RecurrentCell, State, get_cell, list_cells
from .model import ModelState, RecurrentLM

SOBOLEV_METHODS = ("auto", "closed", "autograd")
NORM_MODES = ("fixed", "max")
NORM_TARGETS = ("encoder", "decoder")


# ---------------------------------------------------------------------------------------------
# Sobolev penalty (SCRN paper sec. 7, eq. 10)
# ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _eval_mode(module: nn.Module) -> Iterator[None]:
    """Switch every submodule to eval mode (no dropout, no sampling) and restore each flag after."""
    flags = [(m, m.training) for m in module.modules()]
    try:
        module.train(False)
        yield
    finally:
        for m, flag in flags:
            m.training = flag


def _select_layers(model: RecurrentLM, layers: Sequence[int] | None) -> list[int]:
    n = len(model.layers)
    if layers is None:
        return list(range(n))
    if isinstance(layers, (int, str, bytes)) or not isinstance(layers, Sequence) or not layers:
        raise ValueError(f"layers must be a non-empty list of layer indices (or None for all), got {layers!r}")
    chosen = []
    for i in layers:
        if isinstance(i, bool) or not isinstance(i, int) or not -n <= i < n:
            raise ValueError(f"layers must hold layer indices in [-{n}, {n - 1}] (the model has {n} layers), got {i!r}")
        chosen.append(i % n)
    return sorted(set(chosen))


def _check_state_index(layer: RecurrentCell, index: int) -> int:
    h = layer.recurrent_state_index
    if h is None:
        raise ValueError(
            f"layer {index} ({type(layer).__name__}) declares no recurrent state (recurrent_state_index is "
            "None), so d h_t / d h_(t-1) is undefined: leave it out of `layers`"
        )
    return h


def _closed_form_kind(layer: RecurrentCell, method: str, index: int) -> str | None:
    """The layer's closed form of ``||d h_t / d h_(t-1)||_F^2`` (``RecurrentCell.jacobian_form``:
    ``"step"`` / ``"constant"``) when it applies, else None (autograd)."""
    kind = type(layer).closed_form_jacobian()
    if method == "autograd":
        return None
    if method == "closed" and kind is None:
        having = [n for n in list_cells() if get_cell(n).closed_form_jacobian() is not None]
        raise ValueError(
            f"method='closed' needs a layer whose cell has a closed-form Jacobian norm ({', '.join(having)}), but "
            f"layer {index} is {type(layer).__name__}: use method='auto' or 'autograd'"
        )
    return kind


def _step_vjp(layer: RecurrentCell, projected_t: Tensor, state: State, h_index: int):
    """The vector-Jacobian product function of one step ``h_{t-1} -> h_t`` of the whole batch (every
    other state tensor held fixed) and the output ``h_t``. The rows of a batch are independent
    sequences, so a cotangent ``[B, H]`` with rows ``u_b`` maps to the rows ``J_b^T u_b``."""

    def next_h(h_prev: Tensor) -> Tensor:
        full = list(state)
        full[h_index] = h_prev
        return layer.recur(projected_t, tuple(full))[1][h_index]

    h_new, vjp_fn = torch.func.vjp(next_h, state[h_index])
    return h_new, vjp_fn


def _autograd_step_penalty(layer: RecurrentCell, projected_t: Tensor, state: State, h_index: int) -> Tensor:
    """``||d h_t / d h_{t-1}||_F^2`` per sequence ``[B]`` from the exact Jacobians ``[B, H, H]``.

    Reverse mode, as ``torch.func.jacrev`` builds a Jacobian: ``vmap`` of the step's VJP over the H
    basis cotangents, each applied to every sequence of the batch at once (the rows are independent,
    so basis vector k in every row gives row k of every ``J_b``). One forward of the step, H VJPs
    (O(H) times a step's work), ``[H, B, H]`` floats in the graph; differentiable w.r.t. the
    parameters. Unlike ``vmap(jacrev(...))`` over single sequences it also works for cells whose
    forward has data-dependent ops (the argmax of the sr-RNN's hard / sampled modes)."""
    h_new, vjp_fn = _step_vjp(layer, projected_t, state, h_index)
    B, H = h_new.shape
    basis = torch.eye(H, device=h_new.device, dtype=h_new.dtype).unsqueeze(1).expand(H, B, H)
    (jac_t,) = torch.func.vmap(vjp_fn)(basis)  # [H, B, H]: jac_t[k, b] = row k of J_b
    return jac_t.pow(2).sum(dim=(0, 2))  # [B]


def _hutchinson_step_penalty(
    layer: RecurrentCell, projected_t: Tensor, state: State, h_index: int, samples: int, probes: str
) -> Tensor:
    """Unbiased estimate of ``||d h_t / d h_{t-1}||_F^2`` per sequence ``[B]``:
    ``E_v ||J^T v||^2 = Tr(J J^T) = ||J||_F^2`` for probes with ``E[v v^T] = I`` (Hutchinson), averaged
    over ``samples`` probes, one vector-Jacobian product each (vmapped)."""
    h_new, vjp_fn = _step_vjp(layer, projected_t, state, h_index)
    shape = (samples, *h_new.shape)
    if probes == "rademacher":
        v = torch.randint(0, 2, shape, device=h_new.device).to(h_new.dtype) * 2 - 1
    else:
        v = torch.randn(shape, device=h_new.device, dtype=h_new.dtype)
    (jtv,) = torch.func.vmap(vjp_fn)(v)  # [samples, B, H]
    return jtv.pow(2).sum(dim=-1).mean(dim=0)  # [B]


def _sobolev(
    model: RecurrentLM,
    tokens: Tensor,
    state: ModelState | None,
    layers: Sequence[int] | None,
    method: str,
    estimator: tuple[int, str] | None,
) -> Tensor:
    if not isinstance(model, RecurrentLM):
        raise TypeError(f"model must be a RecurrentLM, got {type(model).__name__}")
    if method not in SOBOLEV_METHODS:
        raise ValueError(f"method must be one of {SOBOLEV_METHODS}, got {method!r}")
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be shaped [B, T], got {tuple(tokens.shape)}")
    chosen = _select_layers(model, layers)
    if state is not None and len(state) != len(model.layers):
        raise ValueError(f"state must hold one state per layer ({len(model.layers)}), got {len(state)}")
    B, T = tokens.shape
    kinds = {}
    for i in chosen:
        _check_state_index(model.layers[i], i)
        kinds[i] = None if estimator is not None else _closed_form_kind(model.layers[i], method, i)
    # a constant penalty (the IRLM's) does not depend on the data: run the sequence only up to the last layer that needs it
    needs_data = [i for i in chosen if kinds[i] != "constant"]
    last_data_layer = max(needs_data, default=-1)

    ref = next(model.parameters())
    total = ref.new_zeros(())
    with _eval_mode(model):
        y = None
        if last_data_layer >= 0:
            if model.embedding is None:
                y = F.one_hot(tokens, model.config.vocab_size).to(ref.dtype)  # [B, T, V]
            else:
                y = F.embedding(tokens, model.embedding.weight)  # [B, T, E], no embedding dropout
        for i, layer in enumerate(model.layers[: max(chosen) + 1]):
            penalized = i in kinds
            if penalized and kinds[i] == "constant":  # the same at every step, whatever the data
                total = total + T * layer.jacobian_norm()
            if i > last_data_layer:
                continue
            layer_state = state[i] if state is not None else None
            if layer_state is None:
                layer_state = layer.init_state(B, tokens.device, y.dtype)
            if not penalized or kinds[i] == "constant":  # only its outputs are needed, by a layer above
                y, _ = layer(y, layer_state)
                continue
            h_index = layer.recurrent_state_index
            projected = layer.project_inputs(y)  # [B, T, P]
            outputs, per_seq = [], y.new_zeros(B)
            for projected_t in projected.unbind(1):  # not projected[:, t]: quadratic backward
                if estimator is not None:
                    step = _hutchinson_step_penalty(layer, projected_t, layer_state, h_index, *estimator)
                    per_seq = per_seq + step
                elif kinds[i] is None:
                    per_seq = per_seq + _autograd_step_penalty(layer, projected_t, layer_state, h_index)
                out, layer_state = layer.recur(projected_t, layer_state)
                if kinds[i] == "step":
                    per_seq = per_seq + layer.jacobian_norm(layer_state)
                outputs.append(out)
            total = total + per_seq.mean()  # average over the batch
            y = torch.stack(outputs, dim=1)
    return total


def sobolev_penalty(
    model: RecurrentLM,
    tokens: Tensor,
    state: ModelState | None = None,
    *,
    layers: Sequence[int] | None = None,
    method: Literal["auto", "closed", "autograd"] = "auto",
) -> Tensor:
    """The Sobolev penalty of the SCRN paper (sec. 7, eq. 10) without the factor beta:
    ``sum_l sum_{t=1}^{T} mean_b || d h^(l)_t / d h^(l)_{t-1} ||_F^2``.

    The sum runs over the ``T`` steps of the window ``tokens`` ``[B, T]`` (the paper's K), over the
    selected ``layers`` (all by default; the paper: "can be applied to all layers, as well as to certain
    layers only"), and the per-sequence sums are **averaged over the batch** ``B``. ``h`` is the
    state tensor the cell names with ``recurrent_state_index`` (the SCRN's fast state h, never its
    context s); the derivative is partial, other state tensors (an LSTM's cell c, the SCRN's s) held
    fixed. Multiply by beta and add the result to the loss: it is differentiable w.r.t. every
    parameter it depends on.

    The penalty is measured along the model's own trajectory from ``state`` (the carried state of the
    window; zeros when None) with the model in **evaluation mode** (no dropout of any kind, no state
    sampling): a separate pass through the recurrent layers (no decoder), so the training forward and
    its dropout masks are untouched. Its graph reaches back through the trajectory, as eq. 10's
    derivative w.r.t. the weights does.

    Per layer type (``method="auto"``): a cell that declares a closed form (``RecurrentCell.jacobian_form``)
    supplies it with its ``jacobian_norm``:

    * SCRN: the closed form derived in sec. 7, ``sum_j sigma'(pre_j)^2 ||R_j||^2`` with ``R_j`` the
      weights into hidden unit j (our ``R`` row j, the paper's column j), sigma' from sigma's output
      (``sigma (1 - sigma)`` for the logistic; tanh, relu and identity too). One step costs O(B H).
    * IRLM: the recurrence is ``diag(r)`` (sec. 3 of the IRLM paper), so each step contributes
      ``sum_j r_j^2``, whatever the data: ``T sum_j r_j^2``, no pass needed.
    * any other cell: the exact Jacobian ``[B, H, H]`` of each step by ``torch.func`` reverse mode
      (what ``jacrev`` does: ``vmap`` of the VJP of the cell's ``recur`` w.r.t. the recurrent state over
      the H basis vectors, all sequences of the batch at once since they are independent).
      **Expensive**: H vector-Jacobian products per step, O(H) times a step's work, and memory for
      ``[B, H, H]`` per step in the graph. :func:`sobolev_penalty_estimate` is the cheap alternative.

    Args:
        model: the language model.
        tokens: the window's inputs ``[B, T]``.
        state: the state the window starts from (as passed to ``model(tokens, state)``), or None.
        layers: indices of the layers to penalize (negative indices count from the top); None: all.
        method: ``"auto"`` (closed form where one exists), ``"closed"`` (require one) or
            ``"autograd"`` (the Jacobian path for every layer, e.g. to check the closed forms).

    Returns:
        a 0-d tensor in the parameters' dtype.
    """
    return _sobolev(model, tokens, state, layers, method, None)


def sobolev_penalty_estimate(
    model: RecurrentLM,
    tokens: Tensor,
    state: ModelState | None = None,
    *,
    samples: int = 1,
    layers: Sequence[int] | None = None,
    probes: Literal["rademacher", "gaussian"] = "rademacher",
) -> Tensor:
    """An unbiased random-projection (Hutchinson) estimate of :func:`sobolev_penalty` (SCRN paper
    sec. 7, eq. 10, beta omitted), for any cell.

    ``||J||_F^2 = Tr(J J^T) = E_v ||J^T v||^2`` for random probes ``v`` with ``E[v v^T] = I``
    (Rademacher +-1 by default, or standard normal). Each step costs ``samples`` vector-Jacobian
    products (batched with ``vmap``) instead of H, and the estimate, averaged over the batch like the
    exact penalty, is unbiased for every ``samples >= 1``; its gradient is an unbiased estimate of the
    exact penalty's gradient. The closed forms are not used (they are already cheap: call
    :func:`sobolev_penalty` for SCRN / IRLM models). Same evaluation-mode pass, ``state`` and
    ``layers`` as :func:`sobolev_penalty`; draws from the global torch RNG.
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be a positive integer, got {samples!r}")
    if probes not in ("rademacher", "gaussian"):
        raise ValueError(f"probes must be 'rademacher' or 'gaussian', got {probes!r}")
    return _sobolev(model, tokens, state, layers, "autograd", (samples, probes))


# ---------------------------------------------------------------------------------------------
# Column normalization (IRLM paper sec. 4)
# ---------------------------------------------------------------------------------------------
def _input_matrices(layer: RecurrentCell) -> list[tuple[str, nn.Parameter]]:
    """The cell's input-to-hidden matrices: its 2-d parameters ``[n, input_size]`` that
    ``project_inputs`` reads (found by differentiating one call, so no parameter name is assumed)."""
    candidates = [(n, p) for n, p in layer.named_parameters() if p.dim() == 2 and p.shape[-1] == layer.input_size]
    if not candidates:
        return []
    ref = candidates[0][1]
    with torch.enable_grad():
        x = torch.ones(1, layer.input_size, device=ref.device, dtype=ref.dtype)
        out = layer.project_inputs(x)
        grads = torch.autograd.grad(out.sum(), [p for _, p in candidates], allow_unused=True)
    return [(n, p) for (n, p), g in zip(candidates, grads) if g is not None]


def column_normalization_targets(
    model: RecurrentLM, which: Sequence[str] = NORM_TARGETS
) -> list[tuple[str, nn.Parameter, int]]:
    """The matrices and dimensions :func:`normalize_columns` renormalizes: ``(name, parameter, dim)``,
    the vector of each hidden unit running along ``dim`` (so the norm is taken over ``dim``).

    The IRLM paper (sec. 2.1, 4) writes ``x_t = f(W y_t + R x_{t-1})`` and
    ``P(y_{t+1}) ~ exp(y_{t+1}^T Z x_t)`` and normalizes "the incoming/outgoing weights to each hidden
    unit" of the encoding matrix W and the decoding matrix Z. Per hidden unit j here:

    * ``"encoder"``, the weights *into* each hidden unit of the first layer: every input matrix of
      the first cell (``[n, input]``: the IRLM's W, the Delta-RNN's W, the SCRN's A and B, an LSTM's
      gate matrices), one row per unit (``dim=1``), with one-hot input (``embedding_size`` 0, the
      IRLM's setting) as with an embedding. An embedding layer (the paper's models have none) is not a
      hidden unit's incoming weights and is not normalized as the encoder.
    * ``"decoder"``, the weights *out of* each top-layer feature into the softmax: the decoder
      ``[V, D]``, one column per feature (``dim=0``), Z; with tied weights the embedding (already
      listed for the encoder: shared once) and the untied part ``[V, D - E]`` if any. Biases are
      never normalized.
    """
    if isinstance(which, str):
        which = (which,)
    which = tuple(which)
    if not which or any(w not in NORM_TARGETS for w in which):
        raise ValueError(f"which must be a non-empty subset of {NORM_TARGETS}, got {which!r}")
    targets: list[tuple[str, nn.Parameter, int]] = []
    if "encoder" in which:  # the cell's own W, also behind an embedding (sec. 4: weights into each unit)
        targets.extend((f"layers.0.{n}", p, 1) for n, p in _input_matrices(model.layers[0]))
    if "decoder" in which:
        if model.decoder is not None:
            targets.append(("decoder.weight", model.decoder.weight, 0))
        else:
            targets.append(("embedding.weight", model.embedding.weight, 0))
            if model.untied_decoder is not None:
                targets.append(("untied_decoder.weight", model.untied_decoder.weight, 0))
    seen, unique = set(), []
    for name, p, dim in targets:
        if id(p) not in seen:
            seen.add(id(p))
            unique.append((name, p, dim))
    return unique


def _check_max_norm(max_norm: object) -> float:
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)) or not math.isfinite(max_norm):
        raise ValueError(f"max_norm must be a positive finite number, got {max_norm!r}")
    if max_norm <= 0:
        raise ValueError(f"max_norm must be positive, got {max_norm!r}")
    return float(max_norm)


def _check_mode(mode: object) -> str:
    if mode not in NORM_MODES:
        raise ValueError(f"mode must be one of {NORM_MODES}, got {mode!r}")
    return mode  # type: ignore[return-value]


@torch.no_grad()
def renormalize_(weight: Tensor, dim: int, max_norm: float, mode: str = "fixed") -> None:
    """In place: every vector along ``dim`` gets L2 norm ``max_norm`` (``"fixed"``) or at most
    ``max_norm`` (``"max"``). All-zero vectors stay zero."""
    norms = weight.norm(dim=dim, keepdim=True)
    if mode == "fixed":
        scale = max_norm / norms.clamp_min(torch.finfo(weight.dtype).tiny)
        scale = torch.where(norms > 0, scale, torch.ones_like(scale))
    else:
        scale = (max_norm / norms.clamp_min(torch.finfo(weight.dtype).tiny)).clamp(max=1.0)
    weight.mul_(scale)


def normalize_columns(
    model: RecurrentLM,
    max_norm: float,
    which: Sequence[str] = NORM_TARGETS,
    *,
    mode: Literal["fixed", "max"] = "fixed",
) -> list[str]:
    """Column normalization of the IRLM paper, sec. 4 ("CN consists of fixing the L2 norm of the
    incoming/outgoing weights to each hidden unit"; the columns of W and Z, norm 15 on Penn), in place.

    Args:
        model: the language model.
        max_norm: the norm (15 in the paper).
        which: ``"encoder"`` and / or ``"decoder"``; the matrices and directions are listed in
            :func:`column_normalization_targets` (W: the first layer's input matrices; Z: the decoder,
            the embedding when tied).
        mode: ``"fixed"`` rescales every unit's vector to exactly ``max_norm`` (the paper's "fixing");
            ``"max"`` only shrinks those longer than ``max_norm`` (the max-norm constraint of the
            dropout paper the IRLM paper cites as [3]). All-zero vectors are left at zero.

    Returns:
        the names (relative to the model) of the matrices it normalized.
    """
    max_norm = _check_max_norm(max_norm)
    mode = _check_mode(mode)
    targets = column_normalization_targets(model, which)
    for _, weight, dim in targets:
        renormalize_(weight, dim, max_norm, mode)
    return [name for name, _, _ in targets]


def l1_penalty(model: nn.Module) -> Tensor:
    """``sum |w|`` over every weight matrix of ``model`` (parameters with two or more dimensions: the
    embedding, the cells' input and recurrent matrices, the decoder; a tied matrix once). Vectors
    (biases, the IRLM self-connections ``rho``, SCRN's alpha) are not penalized. IRLM paper, Table 2,
    "IRLM (L1 reg)"."""
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    if not matrices:
        raise ValueError(f"{type(model).__name__} has no weight matrices to penalize")
    return torch.stack([p.abs().sum(dtype=torch.float32) for p in matrices]).sum()
