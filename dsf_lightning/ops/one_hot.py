"""One-hot word vectors in a floating dtype, written once (the DSF paper's models read one-hot input).

``F.one_hot(ids, V).to(dtype)`` builds an int64 ``[B, T, V]`` tensor and then converts it;
:func:`one_hot` writes zeros of the target dtype and one scatter. A cell that reads ids
(``RecurrentCell.reads_ids``) never builds the vectors: :func:`one_hot_linear` gathers the columns of its
input weights. Training tokens per CPU second against ``F.one_hot`` vectors (``python -m benchmarks.recipe_speed
RECIPE --checkout before=OLD --checkout after=.``, 3 rounds): SCRN-40 on PTB (``recipes/ptb/scrn_h40_s10.yaml``)
1.10x from :func:`one_hot` alone (1.05-1.12), 1.85x from :func:`one_hot_linear` (1.62-2.01); the DSF Table 2
LSTM and Delta-RNN on PTB subwords (``recipes/ptb_subword/``) 1.76x and 1.60x.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def one_hot(ids: Tensor, num_classes: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """``ids`` [...] (integers in ``[0, num_classes)``) -> ``[..., num_classes]`` of ``dtype``, 1 at each id.

    An id out of range is scatter's error on CPU ("index ... is out of bounds"), a device assert on CUDA (no
    check of its own: it would synchronize the device and stop ``torch.export`` tracing)."""
    if ids.is_floating_point() or ids.is_complex():
        raise TypeError(f"one_hot needs integer ids, got {ids.dtype}")
    out = torch.zeros(*ids.shape, num_classes, dtype=dtype, device=ids.device)
    return out.scatter_(-1, ids.unsqueeze(-1).long(), 1)


def one_hot_linear(ids: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(one_hot(ids, in), weight, bias)`` without the one-hot vectors: column ``ids`` of
    ``weight`` [out, in] (plus ``bias``) -> ``[..., out]``. A gather forward and a scatter-add backward
    instead of two ``[N, in] x [in, out]`` products. Under autocast the result has the autocast dtype, as
    ``F.linear``'s would."""
    out = F.embedding(ids, weight.t())
    if bias is not None:
        out = out + bias
    device = ids.device.type
    if torch.is_autocast_enabled(device):
        out = out.to(torch.get_autocast_dtype(device))
    return out
