"""``linear_cross_entropy``: the summed NLL of a softmax decoder whose logits buffer becomes its gradient.

A word-level LM's training step is dominated by the decoder ``logits = y W^T + b`` ([B*T, V], V = 10k) and
the softmax over it. ``F.cross_entropy(F.linear(y, W, b), t)`` materializes the fp32 logits, then the
log-softmax output (a second [B*T, V] buffer), and in the backward pass a zero-filled [B*T, V] gradient of
the NLL and a third for the log-softmax's gradient, with ``exp`` computed twice (forward and backward).

Here the logits are written once and everything after happens in that buffer:

* forward, in row chunks that stay in cache: ``m = max_v l``, ``l <- exp(l - m)`` in place,
  ``s = sum_v l``; the loss is ``sum_n (m_n + log s_n - l_{n, t_n})`` (the target logit read first);
* backward: ``dL/dl = g (softmax - onehot(t))``, and the buffer already holds ``s * softmax``: one in-place
  multiply by ``g / s`` and one subtraction at the targets make it the gradient of the logits, which the
  two decoder products (``dL/dy = G W``, ``dL/dW = G^T y``, ``dL/db = sum_n G``) read.

The arithmetic is the usual stable log-sum-exp, so the loss equals the plain path to round-off (tested in
float64 against ``F.cross_entropy(F.linear(...))``). The products take ``fast_linear``'s oneDNN path where
it applies. The backward pass consumes the buffer: a second backward through the same graph raises.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .fast_linear import _dense_2d, _ip, would_use_fast_path

__all__ = ["linear_cross_entropy"]

#: rows per chunk of the in-place softmax: 64 x 10k fp32 is 2.5 MB, inside this machine's L3 cache
CHUNK_ROWS = 64


def _mm_t(a: Tensor, b: Tensor, bias: Tensor | None = None) -> Tensor:
    """``a @ b^T (+ bias)``: through oneDNN where ``fast_linear`` would be, else ``torch.addmm`` / ``mm``."""
    if would_use_fast_path(a, b, bias):
        return _ip(_dense_2d(a), _dense_2d(b), None if bias is None else bias.contiguous())
    return torch.mm(a, b.t()) if bias is None else torch.addmm(bias, a, b.t())


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor) -> Tensor:  # type: ignore[override]
        logits = _mm_t(y, weight, bias)  # [N, V], owned here: becomes exp(l - m), then the gradient
        target_logit = logits.gather(1, targets[:, None])
        rows = logits.shape[0]
        sums = logits.new_empty(rows, 1)
        maxes = logits.new_empty(rows, 1)
        for i in range(0, rows, CHUNK_ROWS):
            chunk = logits[i: i + CHUNK_ROWS]
            torch.amax(chunk, 1, keepdim=True, out=maxes[i: i + CHUNK_ROWS])
            chunk.sub_(maxes[i: i + CHUNK_ROWS]).exp_()
            torch.sum(chunk, 1, keepdim=True, out=sums[i: i + CHUNK_ROWS])
        ctx.save_for_backward(y, weight, logits, sums, targets)
        ctx.has_bias = bias is not None
        ctx.consumed = False
        return (maxes + sums.log() - target_logit).sum()

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        if ctx.consumed:
            raise RuntimeError("linear_cross_entropy: its backward pass reuses the logits buffer and runs once; "
                               "use F.cross_entropy(F.linear(...)) to back-propagate twice")
        ctx.consumed = True
        y, weight, g, sums, targets = ctx.saved_tensors
        g.mul_(grad / sums)  # s * softmax -> grad * softmax
        g.scatter_add_(1, targets[:, None], (-grad).expand(g.shape[0], 1).to(g.dtype))  # - grad * onehot
        grad_y = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_y = _mm_t(g, weight.t())  # G W
        if ctx.needs_input_grad[1]:
            grad_w = _mm_t(y.t(), g.t()).t()  # G^T y, computed as [in, V] (oneDNN prefers the long axis out)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g.sum(0)
        return grad_y, grad_w, grad_b, None


def linear_cross_entropy(y: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor) -> Tensor:
    """``F.cross_entropy(F.linear(y, weight, bias), targets, reduction="sum")`` for ``y`` [N, D], ``weight``
    [V, D], ``bias`` [V] or None and ``targets`` [N] (class indices), computed with one [N, V] buffer.

    Without autograd (no input needs a gradient) it is the plain expression.
    """
    if y.dim() != 2 or weight.dim() != 2 or targets.dim() != 1 or targets.shape[0] != y.shape[0]:
        raise ValueError(f"linear_cross_entropy: expected y [N, D], weight [V, D], targets [N]; got "
                         f"{tuple(y.shape)}, {tuple(weight.shape)}, {tuple(targets.shape)}")
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (y, weight, bias))
    if not needs_grad:
        return F.cross_entropy(F.linear(y, weight, bias), targets, reduction="sum")
    return _LinearCrossEntropy.apply(y, weight, bias, targets)
