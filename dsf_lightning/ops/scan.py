"""``linear_recurrence``: the diagonal linear recurrence ``h_t = a_t * h_{t-1} + b_t`` over time.

Where it is used
----------------
* the IRLM (Pachitariu & Sahani 2013, "Regularization and nonlinearities for neural language models: when
  are they needed?", sec. 3): the whole state
  ``x_t = W y_t + r * x_{t-1}`` is this recurrence with a constant ``a = r``;
* the SCRN (Mikolov et al. 2015, as in Kabdolov, Assylbekov & Takhanov 2018, "Reproducing and Regularizing
  the SCRN Model", eq. 1): the context state
  ``s_t = (1 - alpha) B x_t + alpha s_{t-1}`` is this recurrence with a constant ``a = alpha``;
* the RAN (Lee, Levy & Zettlemoyer 2017, "Recurrent Additive Networks", eqs 1-3): ``c_t = i_t * c~_t + f_t * c_{t-1}``
  is this recurrence with ``a_t = f_t``, ``b_t = i_t * c~_t`` *once the gates are known* (they depend on
  ``h_{t-1}``, so the cell itself still needs a step loop; see :mod:`dsf_lightning.cells.ran`).

API
---
``linear_recurrence(a, b, h0, method="auto") -> h``

* ``b``  ``[B, T, H]``;
* ``a``  ``[H]`` (constant over batch and time), ``[B, 1, H]`` (constant over time, e.g. a decay times a
  per-sequence dropout mask) or ``[B, T, H]``; anything that broadcasts to one of these;
* ``h0`` ``[B, H]`` (the carried state ``h_{-1}``);
* returns every state ``h`` ``[B, T, H]`` (``h[:, -1]`` is the state to carry on).

Methods
-------
``"loop"``  the reference: a plain step loop of autograd ops (one graph node per step).

``"scan"``  a blocked (chunked) scan inside one :class:`torch.autograd.Function`. Time is cut into
    ``n`` chunks of ``C ~ sqrt(T)`` steps; (1) a step loop of ``C`` steps runs inside all chunks at
    once (each step an op on ``[B, n, H]``) from a zero start, (2) a loop of ``n`` steps carries the
    chunks' end states across chunks, (3) one vectorized pass adds each chunk's carried-in state times
    the cumulative product of ``a`` inside the chunk. That is ``C + n ~ 2 sqrt(T)`` Python-level steps
    instead of ``T``, for about three passes over the data (work-efficient, unlike the log-depth
    Hillis-Steele doubling, whose ``log2 T`` full passes lose on a CPU). Numerically it only ever
    *multiplies* by products of ``a`` (no division by cumulative products, which underflow for
    ``|a| < 1``): an underflowed product is a contribution that is truly negligible.
    The backward is itself a linear recurrence run by the same scan, in reverse time::

        g_b[t]  = grad_h[t] + a[t+1] * g_b[t+1]        (g_b[T-1] = grad_h[T-1])
        grad_a[t] = g_b[t] * h[t-1]                      (h[-1] = h0; summed over broadcast dims)
        grad_h0 = a[0] * g_b[0]

    so only ``a``, ``h`` and ``h0`` are saved: memory stays ``O(B T H)`` and there is no per-step graph.
    Double backward is not supported (``once_differentiable``).

``"auto"``  ``"scan"`` when ``T >= AUTO_SCAN_MIN_T`` or when nothing needs a gradient, else ``"loop"``
    (see the measurements next to :data:`AUTO_SCAN_MIN_T`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = ["AUTO_SCAN_MIN_T", "linear_recurrence", "linear_recurrence_loop", "linear_recurrence_scan"]

#: ``method="auto"`` uses the scan from this sequence length on (and always when no gradient is needed).
#: Measured with OMP_NUM_THREADS=1 (2-core AMD EPYC, busy machine, fp32, forward+backward, medians of 9
#: interleaved repeats), speed of "scan" over "loop", constant a / time-varying a:
#:   B=64 H=512:  T=1 0.83/0.55x, T=2 0.95x, T=4 1.1/1.5x, T=8 2.2/1.6x, T=35 1.2x
#:   B=20 H=256:  T=1 0.6x, T=4 0.93x, T=8 1.2/1.1x, T=35 1.7/1.4x
#:   B=8  H=64:   T=4 0.9x, T=8 1.1/1.0x, T=35 1.6/1.2x, T=256 13/8.5x, T=1024 7.4/2.8x
#: so the crossover is T ~ 4-8. (The old claim "a scan loses at T=35" is true of a log-depth doubling
#: scan; the Function here does its short sequences as an in-place loop without a per-step graph.)
#: Wide steps are memory-bound: at B=64 H=512 T=1024 the gain stays ~1.2-1.7x, since one elementwise
#: pass over [64, 1024, 512] takes ~125-165 ms here and the loop already does the minimum of passes.
AUTO_SCAN_MIN_T = 8

METHODS = ("auto", "loop", "scan")


def _normalize(a: Tensor, b: Tensor, h0: Tensor) -> tuple[Tensor, str]:
    """Check shapes; return ``a`` as ``[H]``, ``[B, 1, H]`` or ``[B, T, H]`` and its kind."""
    if b.dim() != 3:
        raise ValueError(f"b must be [B, T, H], got shape {tuple(b.shape)}")
    Bsz, T, H = b.shape
    if h0.shape != (Bsz, H):
        raise ValueError(f"h0 must be [B, H] = {(Bsz, H)}, got shape {tuple(h0.shape)}")
    if a.dim() <= 1:
        return a.expand(H), "const"
    if a.dim() == 2:  # [B, H]: one coefficient per sequence and unit, constant over time
        a = a.unsqueeze(1)
    if a.dim() != 3:
        raise ValueError(f"a must be [H], [B, H], [B, 1, H] or [B, T, H], got shape {tuple(a.shape)}")
    if a.shape[1] == 1:
        return a.expand(Bsz, 1, H), "batch"
    return a.expand(Bsz, T, H), "full"


def linear_recurrence_loop(a: Tensor, b: Tensor, h0: Tensor) -> Tensor:
    """The reference step loop ``h_t = a_t * h_{t-1} + b_t`` (plain autograd ops)."""
    a, kind = _normalize(a, b, h0)
    h, outs = h0, []
    # unbind, not b[:, t]: each slice's backward would add a full [B, T, H] zero gradient (quadratic in T)
    a_steps = a.unbind(1) if kind == "full" else None
    a_const = a if kind == "const" else (a[:, 0] if kind == "batch" else None)
    for t, b_t in enumerate(b.unbind(1)):
        h = torch.addcmul(b_t, a_const if a_steps is None else a_steps[t], h)  # b_t + a_t * h_{t-1}
        outs.append(h)
    if not outs:
        return b.new_zeros(b.shape)
    return torch.stack(outs, 1)


#: Chunk size override (None: automatic); for benchmarks and tests only.
_CHUNK_OVERRIDE: int | None = None

#: The blocked scan pays only while a step's work is small next to Python's per-op cost (~10 us per step
#: measured here): above this many elements per step (``B * H``, doubled for a time-varying ``a``) one
#: chunk, an in-place step loop inside the Function, is faster, because on this machine the extra passes
#: over memory of the blocked scan (~3-4 ns per element and pass out of cache) cost more than the Python
#: steps it saves. Measured fwd+bwd, 1 thread, T=256/1024: blocked/one-chunk 1.0-4x at B*H=1-2k (constant
#: a), 0.5-1.1x at 4k, 0.3-0.7x at 8k and above.
CHUNKED_MAX_WIDTH = 2048
#: ... and below this length the blocked scan's fixed costs do not pay either.
CHUNKED_MIN_T = 64


def _chunk_size(T: int, width: int, kind: str) -> int:
    if _CHUNK_OVERRIDE is not None:
        return max(1, min(T, _CHUNK_OVERRIDE))
    # a time-varying a costs the blocked scan two more passes (its cumprod) than a constant one
    if width * (2 if kind == "full" else 1) > CHUNKED_MAX_WIDTH or T < CHUNKED_MIN_T:
        return T
    return max(1, int(math.ceil(math.sqrt(T))))


def _a_at(a: Tensor, kind: str, t: int) -> Tensor:
    return a if kind == "const" else (a[:, 0] if kind == "batch" else a[:, t])


def _loop_no_grad(a: Tensor, kind: str, b: Tensor, h0: Tensor | None, reverse: bool) -> Tensor:
    """The step loop written in place (one chunk). ``reverse``: run from ``t = T-1`` down to 0 with the
    coefficient of step ``t`` being ``a[t+1]`` (the adjoint recurrence of the backward pass).

    The per-step views of ``b``, ``a`` and the output come from one ``unbind`` each: at small ``B * H``
    the loop's cost is its per-step dispatch, and slicing three views a step made it ~0.5x a plain loop."""
    T = b.shape[1]
    h = torch.empty(b.shape, dtype=b.dtype, device=b.device)
    outs, b_steps = h.unbind(1), b.unbind(1)
    a_steps = a.unbind(1) if kind == "full" else None
    a_fixed = a if kind == "const" else (a[:, 0] if kind == "batch" else None)
    prev = h0
    order = range(T - 1, -1, -1) if reverse else range(T)
    for t in order:
        out_t = outs[t]
        if prev is None:
            out_t.copy_(b_steps[t])
        else:
            a_t = a_fixed if a_steps is None else a_steps[t + 1 if reverse else t]
            torch.addcmul(b_steps[t], a_t, prev, out=out_t)
        prev = out_t
    return h


def _scan_no_grad(a: Tensor, kind: str, b: Tensor, h0: Tensor | None, reverse: bool = False) -> Tensor:
    """The blocked scan (no autograd): ``a`` as from :func:`_normalize`, ``h0`` None means zeros.

    ``reverse``: the adjoint recurrence ``h[t] = a[t+1] * h[t+1] + b[t]`` from ``h[T] = h0``."""
    Bsz, T, H = b.shape
    if T == 0:
        return b.new_zeros(b.shape)
    C = _chunk_size(T, Bsz * H, kind)
    if C >= T:
        return _loop_no_grad(a, kind, b, h0, reverse)
    if reverse:
        a_rev = a if kind != "full" else torch.cat((a.new_zeros(Bsz, 1, H), a[:, 1:].flip(1)), 1)
        return _scan_no_grad(a_rev, kind, b.flip(1), h0).flip(1)
    n = -(-T // C)
    pad = n * C - T

    # layout [B, n, C, H]: the in-chunk loop runs over C with all n chunks at once
    if pad:
        b = torch.cat((b, b.new_zeros(Bsz, pad, H)), 1)
    bc = b.reshape(Bsz, n, C, H)
    local = torch.empty((Bsz, n, C, H), dtype=b.dtype, device=b.device)
    local[:, :, 0].copy_(bc[:, :, 0])
    if kind == "full":
        a_full = a if not pad else torch.cat((a, a.new_ones(Bsz, pad, H)), 1)
        ac = a_full.reshape(Bsz, n, C, H)
        for j in range(1, C):
            torch.addcmul(bc[:, :, j], ac[:, :, j], local[:, :, j - 1], out=local[:, :, j])
        cum = torch.cumprod(ac, dim=2)  # [B, n, C, H]: prod of a inside the chunk up to j
        last = cum[:, :, -1]  # [B, n, H]
    else:
        for j in range(1, C):  # a [H] or [B, 1, H] broadcasts over [B, n, H]
            torch.addcmul(bc[:, :, j], a, local[:, :, j - 1], out=local[:, :, j])
        # powers a^(j+1), j < C: [C, H] or [B, 1, C, H]; a cumprod, never a division
        if kind == "const":
            cum = torch.cumprod(a.unsqueeze(0).expand(C, H), dim=0)  # [C, H]
            last = cum[-1]  # [H]
        else:
            cum = torch.cumprod(a.expand(Bsz, C, H), dim=1).unsqueeze(1)  # [B, 1, C, H]
            last = cum[:, :, -1]  # [B, 1, H]
    # carry_in[k] = the state entering chunk k
    carry_in = torch.empty((Bsz, n, H), dtype=b.dtype, device=b.device)
    if h0 is None:
        carry_in[:, 0].zero_()
    else:
        carry_in[:, 0].copy_(h0)
    for k in range(1, n):
        last_k = last if kind == "const" else (last[:, 0] if kind == "batch" else last[:, k - 1])
        torch.addcmul(local[:, k - 1, -1], last_k, carry_in[:, k - 1], out=carry_in[:, k])
    # h[k, j] = local[k, j] + cum[k, j] * carry_in[k]
    local.addcmul_(cum, carry_in.unsqueeze(2))
    h = local.reshape(Bsz, n * C, H)
    return h[:, :T] if pad else h


class _LinearRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, h0: Tensor, kind: str) -> Tensor:  # type: ignore[override]
        h = _scan_no_grad(a, kind, b, h0)
        ctx.kind = kind
        ctx.save_for_backward(a, h, h0)
        return h

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h: Tensor):  # type: ignore[override]
        a, h, h0 = ctx.saved_tensors
        kind = ctx.kind
        # adjoint, in reverse time: g_b[t] = grad_h[t] + a[t+1] g_b[t+1]
        g_b = _scan_no_grad(a, kind, grad_h, None, reverse=True)
        grad_a = grad_h0 = None
        if ctx.needs_input_grad[0]:  # grad_a[t] = g_b[t] * h[t-1], h[-1] = h0
            if kind == "full":
                grad_a = torch.empty_like(g_b)
                torch.mul(g_b[:, 1:], h[:, :-1], out=grad_a[:, 1:])
                torch.mul(g_b[:, 0], h0, out=grad_a[:, 0])
            else:
                first = g_b[:, 0] * h0  # [B, H]
                if kind == "const":
                    grad_a = (g_b[:, 1:] * h[:, :-1]).sum((0, 1)) + first.sum(0)
                else:
                    grad_a = ((g_b[:, 1:] * h[:, :-1]).sum(1) + first).unsqueeze(1)
        if ctx.needs_input_grad[2]:
            grad_h0 = _a_at(a, kind, 0) * g_b[:, 0]
        return grad_a, g_b, grad_h0, None


def linear_recurrence_scan(a: Tensor, b: Tensor, h0: Tensor) -> Tensor:
    """The blocked scan with its reverse-scan backward (see the module docstring)."""
    a_n, kind = _normalize(a, b, h0)
    dtype = torch.promote_types(torch.promote_types(a_n.dtype, b.dtype), h0.dtype)
    a_n, b, h0 = a_n.to(dtype), b.to(dtype), h0.to(dtype)
    if b.shape[1] == 0:
        return b.new_zeros(b.shape) + 0 * h0.sum() + 0 * a_n.sum()
    if torch.is_grad_enabled() and (a_n.requires_grad or b.requires_grad or h0.requires_grad):
        # a [H] / [B, 1, H] views of an expanded tensor: autograd sums the gradient back to a's shape
        return _LinearRecurrence.apply(a_n, b, h0, kind)
    with torch.no_grad():
        return _scan_no_grad(a_n, kind, b, h0)


def linear_recurrence(a: Tensor, b: Tensor, h0: Tensor, method: str = "auto") -> Tensor:
    """``h_t = a_t * h_{t-1} + b_t`` for ``t = 0..T-1`` from ``h_{-1} = h0``; returns ``h`` ``[B, T, H]``.

    ``a``: ``[H]``, ``[B, H]`` / ``[B, 1, H]`` (constant over time) or ``[B, T, H]``; ``b``: ``[B, T, H]``;
    ``h0``: ``[B, H]``. ``method``: ``"loop"`` (reference), ``"scan"`` (blocked scan with a reverse-scan
    backward) or ``"auto"`` (see :data:`AUTO_SCAN_MIN_T`). Gradients flow to ``a``, ``b`` and ``h0``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}; got {method!r}")
    if method == "auto":
        needs_grad = torch.is_grad_enabled() and any(
            isinstance(t, Tensor) and t.requires_grad for t in (a, b, h0)
        )
        method = "scan" if (not needs_grad or b.shape[1] >= AUTO_SCAN_MIN_T) else "loop"
    if method == "loop":
        return linear_recurrence_loop(a, b, h0)
    return linear_recurrence_scan(a, b, h0)
