"""Torch's fused whole-sequence LSTM (cuDNN on CUDA, ATen / oneDNN on the CPU) on a cell's own parameters.

Torch's LSTM (``torch.nn.LSTM``'s equations, gate blocks stacked ``(i, f, g, o)``)::

    i = sigmoid(W_ii x + b_ii + W_hi h + b_hi)      f = sigmoid(W_if x + b_if + W_hf h + b_hf)
    g = tanh(W_ig x + b_ig + W_hg h + b_hg)         o = sigmoid(W_io x + b_io + W_ho h + b_ho)
    c' = f * c + i * g                              h' = o * tanh(c')

is the peephole-free LSTM of DSF sec. 3 (eqs 16-17) with blocks ``(i, f, z, r)`` = ``(i, f, g, o)``,
``W_ih = W``, ``W_hh = V`` and the two biases summing to our one ``b`` (``b_hh = 0``). The weights are passed
as they are (no copies of parameters), so autograd takes the gradients to the cell's own ``W``, ``V``, ``b``.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

__all__ = ["lstm_sequence"]


def lstm_sequence(x: Tensor, h0: Tensor, c0: Tensor, W: Tensor, V: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``x`` ``[B, T, I]`` from ``(h0, c0)`` ``[B, H]`` -> (every ``h_t`` ``[B, T, H]``, ``h_T``, ``c_T``).

    Under autocast the kernel runs in autocast's dtype (as ``nn.LSTM`` does) and the state comes back in
    ``h0``'s dtype, as the cell's own path carries it.
    """
    device = x.device.type
    weights = [W, V, b, torch.zeros_like(b)]  # b_hh = 0: our one bias is b_ih + b_hh
    state = (h0.unsqueeze(0).contiguous(), c0.unsqueeze(0).contiguous())
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        x, weights, state = x.to(dtype), [w.to(dtype) for w in weights], tuple(s.to(dtype) for s in state)
    with warnings.catch_warnings(), torch.autocast(device, enabled=False):
        # cuDNN copies weights that are not one flat buffer (ours are separate parameters): expected here
        warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous")
        out, h, c = torch._VF.lstm(x, state, weights, True, 1, 0.0, torch.is_grad_enabled(), False, True)
    return out, h[0].to(h0.dtype), c[0].to(c0.dtype)
