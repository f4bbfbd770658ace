"""``fast_linear``: ``F.linear`` whose CPU fp32 products (forward *and* backward) go through oneDNN.

Why this exists
---------------
On some CPUs (measured: a 2-core AMD EPYC with the MKL that ships in the PyPI ``torch`` wheels)
``torch.mm`` / ``F.linear`` take a slow MKL path (~150-220 GFLOP/s), while the very same fp32 product
computed by oneDNN (the library behind ``torch.nn.LSTM``'s fast path) reaches ~400-480 GFLOP/s.  The
softmax decoder of a word-level LM (``[B*T, H] x [H, V]`` with ``V = 10k``) dominates the training step,
so routing its three products through oneDNN is a large end-to-end win there.

How
---
``torch.ops.mkldnn._linear_pointwise(X, W, B, "none", [], "")`` is oneDNN's inner product on *dense*
(strided) tensors: no ``to_mkldnn()`` / ``to_dense()`` conversions, and it accepts both row-major and
column-major (transposed-view) operands.  A custom ``autograd.Function`` expresses the three products of
``y = x W^T + b`` as inner products::

    forward      y   = ip(x,     W)          # [N, in]  x [out, in] -> [N, out]
    grad_input   g W = ip(g,     W^T)        # [N, out] x [in, out] -> [N, in]
    grad_weight  g^T x = ip(x^T, g^T)^T      # [in, N]  x [out, N]  -> [in, out] -> view [out, in]
    grad_bias    sum(g, 0)

(the last one is computed transposed because oneDNN is ~2x faster with the long ``V`` axis as the
"output channels" axis than as the "batch" axis on this machine; the result is returned as a transposed
view and autograd's gradient accumulation lays it out like the parameter).

Everything numerically is plain fp32 (no bf16/tf32 down-conversion): results agree with ``F.linear`` to
fp32 round-off (relative ~1e-6), not bit-for-bit, because the summation order differs.

When it is *not* used (falls back to ``F.linear`` exactly)
-------------------------------------------------------------
* the switch is off (``set_fast_linear_enabled(False)`` or env ``DSF_FAST_LINEAR=0`` at import);
* any tensor is not a plain strided fp32 CPU tensor (CUDA, float64, bf16, sparse, tensor subclasses with
  ``__torch_function__``), or shapes are not those of ``F.linear`` (``F.linear`` then raises its error);
* CPU autocast is active (bf16/fp16 autocast stays torch's business), or under ``torch.compile`` /
  ``torch.export`` tracing (inductor has its own oneDNN linear) or a TorchScript trace (what
  ``torch.onnx.export(dynamo=False)`` records: no exporter knows oneDNN's op), or a forward-mode AD level is active, or a ``torch.func``
  transform (``vjp``, ``jacrev``, ``vmap``, ...) is active: a classic ``autograd.Function`` cannot run
  under them, ``F.linear`` can;
* oneDNN is unavailable or disabled (``torch.backends.mkldnn.enabled = False``);
* the product is small: ``rows * in * out < min_work`` (see ``set_fast_linear_min_work``), where the
  per-call overhead outweighs the faster kernel.

Recurrent products of a whole sequence
--------------------------------------
:class:`SequenceLinear` is the per-step recurrent product ``x_t W^T`` of a step-loop cell's sequence
(``dsf_lightning.cells.classic.SequenceLoopCell``): each step's product takes ``fast_linear``'s path and
back-propagates into ``x_t`` only, while ``W``'s gradient is one ``[out, T*B] x [T*B, in]`` product over
all steps in the backward pass (instead of ``T`` small per-step products accumulated into one buffer).
On the development machine this, with the oneDNN step products, took the gated cells' recurrences from
~42-57% to ~83-96% of the oneDNN matmul peak at H = 512 / 1024 (``python -m benchmarks --only 2``).

Caveats
-------
* The backward is ``once_differentiable``: double backward through ``fast_linear`` raises (``F.linear``
  supports it).  Nothing in this package needs it.
* Bitwise results differ from ``F.linear`` (different but equally accurate fp32 summation order), so a
  run with the switch on is not bit-identical to one with it off.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

__all__ = [
    "DEFAULT_MIN_WORK",
    "FastLinear",
    "SequenceLinear",
    "fast_linear",
    "fast_linear_enabled",
    "fast_linear_min_work",
    "set_fast_linear_enabled",
    "set_fast_linear_min_work",
    "would_use_fast_path",
]

# Smallest rows*in*out (multiply-adds of the forward product) routed to oneDNN.  Measured fwd+bwd on the
# 2-core AMD EPYC dev machine (benchmarks/bench_fast_linear.py --grid, OMP_NUM_THREADS=2): at ~2e6 MACs
# and below oneDNN's fixed per-call cost makes it 0.3-0.7x of F.linear; around 4-6e6 it is a coin toss
# (0.9-1.2x); from ~8e6 on it won for every layout tried (1.1-1.3x at 8e6, 1.5-2.4x from ~3e7).  Products
# this small take well under a millisecond either way, so erring on the large side costs nothing.
DEFAULT_MIN_WORK = 8_000_000


def _env_enabled() -> bool:
    value = os.environ.get("DSF_FAST_LINEAR", "1").strip().lower()
    return value not in ("0", "false", "no", "off")


_ENABLED: bool = _env_enabled()
_MIN_WORK: int = DEFAULT_MIN_WORK


def set_fast_linear_enabled(enabled: bool) -> None:
    """Globally switch the oneDNN path on/off (off: ``fast_linear`` is exactly ``F.linear``)."""
    global _ENABLED
    _ENABLED = bool(enabled)


def fast_linear_enabled() -> bool:
    """Whether the oneDNN path may be used (the module-level switch; see ``would_use_fast_path``)."""
    return _ENABLED


def set_fast_linear_min_work(min_work: int) -> None:
    """Set the size threshold: products with ``rows * in * out < min_work`` use ``F.linear``."""
    global _MIN_WORK
    if int(min_work) < 0:
        raise ValueError(f"min_work must be >= 0, got {min_work}")
    _MIN_WORK = int(min_work)


def fast_linear_min_work() -> int:
    return _MIN_WORK


def _find_kernel():
    try:
        op = torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):  # torch built without oneDNN / op not registered
        return None
    if not torch.backends.mkldnn.is_available():
        return None
    return op


_IP = _find_kernel()


def _autocast_active(device_type: str = "cpu") -> bool:
    """Whether autocast is on for ``device_type`` (its products then return bf16 / fp16)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()


def _compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    is_compiling = getattr(compiler, "is_compiling", None)
    return bool(is_compiling()) if is_compiling is not None else False


def _functorch_active() -> bool:
    """True inside a ``torch.func`` transform (``vjp`` / ``grad`` / ``jacrev`` / ``vmap`` / ``jvp``)."""
    return _PEEK_INTERPRETER is not None and _PEEK_INTERPRETER() is not None


try:
    _PEEK_INTERPRETER = torch._C._functorch.peek_interpreter_stack
except AttributeError:  # pragma: no cover - very old torch
    _PEEK_INTERPRETER = None


def _plain_cpu_fp32(t: Tensor) -> bool:
    return t.device.type == "cpu" and t.dtype == torch.float32 and t.layout == torch.strided


def would_use_fast_path(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> bool:
    """True when ``fast_linear(x, weight, bias)`` would take the oneDNN path (else it calls ``F.linear``)."""
    # first, before anything dynamo cannot put in a graph (the oneDNN switch query returns a bool): under
    # torch.compile / torch.export and under a TorchScript trace (torch.onnx.export(dynamo=False))
    # F.linear is what a compiler or an exporter knows
    if _compiling() or torch.jit.is_tracing():
        return False
    if not _ENABLED or _IP is None or not torch._C._get_mkldnn_enabled():
        return False
    if not (isinstance(x, Tensor) and isinstance(weight, Tensor)):
        return False
    if not (_plain_cpu_fp32(x) and _plain_cpu_fp32(weight)):
        return False
    if bias is not None and not (isinstance(bias, Tensor) and _plain_cpu_fp32(bias)):
        return False
    if weight.dim() != 2 or x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        return False
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != weight.shape[0]):
        return False
    rows = x.numel() // max(x.shape[-1], 1)
    if rows == 0 or x.shape[-1] == 0 or weight.shape[0] == 0:
        return False
    if rows * weight.shape[0] * weight.shape[1] < _MIN_WORK:
        return False
    tensors = (x, weight) if bias is None else (x, weight, bias)
    if torch.overrides.has_torch_function(tensors):
        return False
    if _autocast_active("cpu"):
        return False
    if getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0:  # no jvp rule: F.linear handles duals
        return False
    if _functorch_active():  # torch.func transforms cannot trace a classic autograd.Function
        return False
    return True


def _dense_2d(t: Tensor) -> Tensor:
    """``t`` (2-D) unchanged if row-major or column-major dense, else a row-major copy.

    oneDNN takes plain row-major / column-major matrices (a transposed view costs nothing); anything else
    (row slices of a wider matrix, broadcast zero strides, odd strides on size-1 dims) is copied, which is
    O(rows*cols) and negligible next to the O(rows*cols*out) product.
    """
    rows, cols = t.shape
    strides = t.stride()
    if strides == (cols, 1) or strides == (1, rows):
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _ip(a: Tensor, b: Tensor, bias: Tensor | None = None) -> Tensor:
    """oneDNN inner product ``a @ b^T (+ bias)``: a [M, K], b [N, K] -> [M, N] (row-major, fp32)."""
    return _IP(a, b, bias, "none", [], "")


class _FastLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x2, weight)
        ctx.has_bias = bias is not None
        return _ip(x2, weight, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        x2, weight = ctx.saved_tensors
        g = _dense_2d(grad_out)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _ip(g, weight.t())  # g [N, out] @ (W^T [in, out])^T = g W -> [N, in]
        if ctx.needs_input_grad[1]:
            grad_w = _ip(x2.t(), g.t()).t()  # (x^T g)^T = g^T x, computed as [in, out] then viewed [out, in]
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g.sum(0)
        return grad_x, grad_w, grad_b


def fast_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """Drop-in for ``F.linear(x, weight, bias)`` (x [..., in], weight [out, in], bias [out] or None).

    Large fp32 CPU products run forward and backward through oneDNN; everything else is ``F.linear``.
    """
    if not would_use_fast_path(x, weight, bias):
        return F.linear(x, weight, bias)
    out_features, in_features = weight.shape
    lead = x.shape[:-1]
    x2 = _dense_2d(x.reshape(-1, in_features))
    w2 = _dense_2d(weight)
    b = None if bias is None else bias.contiguous()
    if torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (b is not None and b.requires_grad)
    ):
        y = _FastLinearFunction.apply(x2, w2, b)
    else:
        y = _ip(x2, w2, b)
    return y.reshape(*lead, out_features)


# -- recurrent products over a whole sequence -------------------------------------------------------
class _WeightGradSink(torch.autograd.Function):
    """Returns zeros ``[T, B, out]`` whose gradient is the gradient of every step's product ``x_t W^T``;
    its backward turns that into ``dW = sum_t g_t^T x_t``, one ``[out, T*B] x [T*B, in]`` product."""

    @staticmethod
    def forward(ctx, weight: Tensor, inputs: list, steps: int, batch: int) -> Tensor:  # type: ignore[override]
        ctx.inputs = inputs  # filled by SequenceLinear as the steps run (detached operands)
        return weight.new_zeros(steps, batch, weight.shape[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        inputs, ctx.inputs = ctx.inputs, None
        T, B, out = grad.shape
        if len(inputs) != T:
            raise RuntimeError(f"SequenceLinear was called {len(inputs)} times for a sequence of {T} steps")
        X = torch.stack(inputs).reshape(T * B, -1)  # [T*B, in]
        G = grad.reshape(T * B, out)
        if would_use_fast_path(X.t(), G.t()):  # one big product: oneDNN's [in, T*B] x [out, T*B]^T, viewed
            grad_w = _ip(X.t(), _dense_2d(G.t())).t()
        else:
            grad_w = G.t().mm(X)
        return grad_w, None, None, None


class _RecurrentStep(torch.autograd.Function):
    """``y = x W^T`` with gradient into ``x`` only; ``slot`` (a zero step of a ``_WeightGradSink``) receives
    the output's gradient, from which the sink computes ``W``'s gradient once for all steps."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, slot: Tensor, onednn: bool) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(weight)
        ctx.onednn = onednn
        return _ip(x, weight) if onednn else x.mm(weight.t())

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        (weight,) = ctx.saved_tensors
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = _ip(_dense_2d(grad_out), weight.t()) if ctx.onednn else grad_out.mm(weight)
        return grad_x, None, grad_out, None


class SequenceLinear:
    """The recurrent product ``x_t -> x_t W^T`` of the ``steps`` steps of one sequence, called once per step
    in order, with ``x_t`` ``[batch, in]``.

    Each step's product goes through :func:`fast_linear`'s choice of path (oneDNN for large fp32 products,
    else ``F.linear``). When ``W`` needs a gradient, the per-step weight gradients (``T`` small
    ``[out, B] x [B, in]`` products accumulated into one ``[out, in]`` buffer) are replaced by one product
    over all steps in the backward pass, as a fused loop with a hand-written backward computes it: each
    step only back-propagates into ``x_t``. Values and gradients equal the per-step ``fast_linear``'s up to
    floating-point summation order. Not twice differentiable (``once_differentiable``); inside
    ``torch.func`` transforms, under forward-mode AD or without gradients it is plain :func:`fast_linear`.

    ``input_mask`` (``[batch, in]`` or None): a variational dropout mask multiplying every step's
    ``x_t`` before the product, ``(x_t * m) W^T`` (Gal & Ghahramani: the recurrent weights read the
    dropped state; the mask is a constant, no gradient).
    """

    def __init__(self, weight: Tensor, steps: int, batch: int, input_mask: Tensor | None = None) -> None:
        self.weight = weight
        self.input_mask = None if input_mask is None else input_mask.detach()
        self.deferred = (
            torch.is_grad_enabled()
            and weight.requires_grad
            and weight.dim() == 2
            and steps > 0
            and not _functorch_active()
            and getattr(torch.autograd.forward_ad, "_current_level", -1) < 0
            and not _compiling()
            and not _autocast_active(weight.device.type)  # the steps' x_t come out of bf16 / fp16 products
            and not torch.overrides.has_torch_function((weight,))
        )
        if self.deferred:
            self._inputs: list[Tensor] = []
            self._slots = _WeightGradSink.apply(weight, self._inputs, steps, batch).unbind(0)
            self._detached = _dense_2d(weight.detach())
            self._step = 0

    def __call__(self, x: Tensor) -> Tensor:
        if self.input_mask is not None:
            x = x * self.input_mask
        if not self.deferred:
            return fast_linear(x, self.weight)
        w = self._detached
        if x.dim() != 2 or x.shape[1] != w.shape[1] or x.dtype != w.dtype or self._step >= len(self._slots):
            raise ValueError(
                f"SequenceLinear expects {len(self._slots)} steps of [batch, {w.shape[1]}] {w.dtype} inputs, "
                f"got shape {tuple(x.shape)} {x.dtype} at step {self._step}"
            )
        slot = self._slots[self._step]
        self._step += 1
        onednn = would_use_fast_path(x, w)
        x2 = _dense_2d(x) if onednn else x
        self._inputs.append(x2.detach())
        return _RecurrentStep.apply(x2, w, slot, onednn)


class FastLinear(nn.Linear):
    """``nn.Linear`` whose forward is ``fast_linear`` (same parameters, same state dict)."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002 - matches nn.Linear
        return fast_linear(input, self.weight, self.bias)
