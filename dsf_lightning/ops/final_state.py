"""``through_final_state``: put a whole-sequence result's last step on the loss graph as its own tensor.

A reference step loop returns its final state ``h_T`` as the very tensor the last output was computed
from, so ``dL/dh_T`` lands in ``h_T.grad`` (``retain_grad``): iterative inference (DSF paper sec. 2.5:
Ororbia II, Mikolov & Reitter 2017, "Learning Simpler Language Models with the Differential State Framework")
steps the carried state along it. A fast path
computes all steps at once (``[T, B, H]`` from one autograd Function); slicing ``hs[-1]`` off it gives a
tensor that no loss reads, whose ``.grad`` stays None. :func:`through_final_state` returns
``(seq_out, last)``: ``seq_out`` has ``seq``'s values (no copy) and its last step's gradient flows back
through ``last``, so ``last.grad`` is ``dL/dh_T`` exactly as on the reference path, and every gradient
into ``seq`` is unchanged.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["through_final_state"]


class _ThroughFinalState(torch.autograd.Function):
    @staticmethod
    def forward(ctx, seq: Tensor, last: Tensor, dim: int) -> Tensor:  # type: ignore[override]
        ctx.dim = dim
        return seq.view_as(seq)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        # the last step's gradient goes to `last` (a view of seq: it reaches seq from there), the rest
        # straight to seq; together they are `grad`, each part once
        rest = grad.clone()
        rest.select(ctx.dim, -1).zero_()
        return rest, grad.select(ctx.dim, -1), None


def through_final_state(seq: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """``(seq_out, last)`` with ``last = seq``'s final step along ``dim`` on the loss graph of ``seq_out``
    (module docstring). ``seq`` must have at least one step; without autograd it is ``(seq, last)``."""
    last = seq.select(dim, -1)
    if not (torch.is_grad_enabled() and seq.requires_grad):
        return seq, last
    return _ThroughFinalState.apply(seq, last, dim), last
