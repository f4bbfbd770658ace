"""``gated_recurrence``: a whole-sequence recurrent loop with a hand-written backward.

The recurrence (all products element-wise except ``V``; every ``*_t`` is precomputed for all steps)::

    hm_t = h_{t-1} * m                      (m: the variational dropout mask, or 1)
    q_t  = hm_t V^T                         (the only matrix product inside the loop)
    z_t  = phi(c0_t + c1_t * q_t)           (c1 = 1 when absent)
    zd_t = z_t * d_t                        (d_t: the dropout noise on z, or 1)
    u_t  = zd_t + r_t * (h_{t-1} - zd_t)    (= (1 - r_t) zd_t + r_t h_{t-1}; u_t = zd_t without a gate)
    h_t  = Phi(u_t)

The mask drops ``h_{t-1}`` only where the recurrent matrix ``V`` reads it (Gal & Ghahramani; SCRN
paper eq. 9); the interpolation carries the undropped state.

It is the Delta-RNN (Ororbia II, Mikolov & Reitter 2017, "Learning Simpler Language Models with the Differential
State Framework", eqs 3-5, 8, 10-12: ``c1 = alpha Wx + beta1``,
``c0 = beta2 Wx + b`` for the general inner function, ``c1 = 1, c0 = Wx + b`` for the Elman one,
``c1 = Wx, c0 = b`` for the second-order one, ``r`` the interpolation gate) and, without a gate, the
SCRN's fast state (Kabdolov, Assylbekov & Takhanov 2018, "Reproducing and Regularizing the SCRN Model", eq. 2:
``c0 = x A + s P + b``, ``phi = sigma``).

Why it is fast
--------------
* the forward loop runs under ``no_grad`` writing into preallocated ``[T, B, H]`` buffers (no per-step
  autograd graph) and saves only ``h``, ``z`` and (when ``c1`` needs a gradient) ``q``;
* the backward is one reverse loop of a few element-wise ops and one ``[B, H] x [H, H]`` product per
  step; every other gradient (of ``c0``, ``c1``, ``r`` and of ``V``, the last as one
  ``[H, T*B] x [T*B, H]`` product) is computed after the loop, vectorized over all steps;
* fp32 products go through oneDNN's inner product (``torch.ops.mkldnn._linear_pointwise``, see
  :mod:`dsf_lightning.ops.fast_linear`), about 2x ``torch.mm`` / ``F.linear`` on this machine's CPU.

Not supported: double backward (``once_differentiable``) and forward-mode AD; callers keep their
reference step loop for those (and for anything this does not express).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from .fast_linear import _IP, _compiling, fast_linear_min_work  # _IP: oneDNN's inner product op, or None

__all__ = ["ACTIVATION_NAMES", "gated_recurrence"]

ACTIVATION_NAMES = ("identity", "tanh", "relu", "sigmoid")


def _apply_(name: str, t: Tensor) -> Tensor:
    """The activation in place."""
    if name == "tanh":
        return t.tanh_()
    if name == "sigmoid":
        return t.sigmoid_()
    if name == "relu":
        return t.relu_()
    return t


def _derivative_buffer(name: str, y: Tensor) -> Tensor | None:
    """f'(x) from y = f(x), in one new buffer (None for the identity)."""
    if name == "tanh":  # 1 - y^2
        return torch.mul(y, y).neg_().add_(1)
    if name == "sigmoid":  # y - y^2
        return torch.mul(y, y).neg_().add_(y)
    if name == "relu":
        return (y > 0).to(y.dtype)
    return None


def _matmul_tn(g: Tensor, x: Tensor, onednn: bool) -> Tensor:
    """``g^T x`` for g [N, M], x [N, K] (row-major) -> [M, K]: a weight gradient over all rows."""
    if onednn:
        return _IP(x.t(), g.t(), None, "none", [], "").t()
    return g.t().mm(x)


def _use_onednn(*tensors: Tensor) -> bool:
    return (
        _IP is not None
        and not _compiling()  # inductor cannot lower oneDNN's op on a weight it does not own: torch.mm then
        and torch._C._get_mkldnn_enabled()
        and all(t.dtype == torch.float32 and t.device.type == "cpu" for t in tensors)
    )


def _matmul_t(x: Tensor, w: Tensor, onednn: bool) -> Tensor:
    """``x w^T`` for x [N, K], w [M, K] contiguous."""
    if onednn:
        return _IP(x, w, None, "none", [], "")
    return F.linear(x, w)


def _forward_loop(c0, c1, r, V, h0, hmask, dmask, phi, Phi, save_q):
    T, Bsz, H = c0.shape
    onednn = _use_onednn(V, h0)
    Vc = V.contiguous()
    hs = torch.empty((T, Bsz, H), dtype=h0.dtype, device=h0.device)
    zs = torch.empty((T, Bsz, H), dtype=h0.dtype, device=h0.device)
    qs = torch.empty((T, Bsz, H), dtype=h0.dtype, device=h0.device) if save_q else None
    gated = r is not None
    r_const = gated and r.dim() == 1
    tmp = torch.empty((Bsz, H), dtype=h0.dtype, device=h0.device) if gated else None
    zd = torch.empty((Bsz, H), dtype=h0.dtype, device=h0.device) if (gated and dmask is not None) else None
    h_prev = h0
    for t in range(T):
        hm = h_prev if hmask is None else h_prev * hmask
        q = _matmul_t(hm, Vc, onednn)
        if qs is not None:
            qs[t].copy_(q)
        z = zs[t]
        if c1 is None:
            torch.add(c0[t], q, out=z)
        else:
            torch.addcmul(c0[t], q, c1[t], out=z)
        _apply_(phi, z)
        h = hs[t]
        if gated:
            if dmask is not None:
                torch.mul(z, dmask[t], out=zd)
                zz = zd
            else:
                zz = z
            torch.sub(h_prev, zz, out=tmp)  # the carried state is never masked
            torch.addcmul(zz, r if r_const else r[t], tmp, out=h)
        elif dmask is not None:
            torch.mul(z, dmask[t], out=h)
        else:
            h.copy_(z)
        _apply_(Phi, h)
        h_prev = h
    return hs, zs, qs


_IN_PLACE = {"identity": None, "tanh": Tensor.tanh_, "sigmoid": Tensor.sigmoid_, "relu": Tensor.relu_}


def _inference_loop(c0, c1, r, V, h0, hmask, dmask, phi, Phi):
    """What :func:`_forward_loop` computes, without autograd (evaluation, scoring), in fewer ops a step.

    At batch one (scoring a document as one stream) a step costs mostly per-op overhead, so nothing
    the backward needs is kept (no ``z``, no ``q``), every step's operands come from one ``unbind`` each
    instead of ``T`` indexing ops per tensor, the recurrent product is written into ``h_t``'s own slot
    (``addmm`` with ``c0`` when there is no ``c1``), the pre-activation and ``phi`` run in place, and the
    interpolation ``zd_t + r_t (h_{t-1} - zd_t)`` is one ``lerp``: four ops a step for the Delta-RNN
    (DSF eqs 5, 8, 11). A product below :func:`~dsf_lightning.ops.fast_linear.fast_linear_min_work`
    goes through ``torch.mm`` (MKL), as ``fast_linear`` does: at ``[1, 512] x [512, 512]`` it took
    28 us against oneDNN's 51 us on this machine (one thread).
    """
    T, Bsz, H = c0.shape
    hs = torch.empty((T, Bsz, H), dtype=h0.dtype, device=h0.device)
    onednn = _use_onednn(V, h0) and Bsz * V.shape[0] * V.shape[1] >= fast_linear_min_work()
    W = V.contiguous() if onednn else V.t().contiguous()  # oneDNN: x V^T from V; mm: x (V^T)
    phi_, Phi_ = _IN_PLACE[phi], _IN_PLACE[Phi]
    steps, c0s = hs.unbind(0), c0.unbind(0)
    c1s = None if c1 is None else c1.unbind(0)
    rs = None if r is None else (r,) * T if r.dim() == 1 else r.unbind(0)
    ds = None if dmask is None else dmask.unbind(0)
    h_prev = h0
    for t in range(T):
        h = steps[t]
        hm = h_prev if hmask is None else h_prev * hmask
        if c1s is None:  # z_pre = c0 + q
            if onednn:
                torch.add(c0s[t], _IP(hm, W, None, "none", [], ""), out=h)
            else:
                torch.addmm(c0s[t], hm, W, out=h)
        else:  # z_pre = c0 + c1 * q
            q = _IP(hm, W, None, "none", [], "") if onednn else torch.mm(hm, W, out=h)
            torch.addcmul(c0s[t], q, c1s[t], out=h)
        if phi_ is not None:
            phi_(h)
        if ds is not None:
            h.mul_(ds[t])
        if rs is not None:  # the carried state is never masked
            torch.lerp(h, h_prev, rs[t], out=h)
        if Phi_ is not None:
            Phi_(h)
        h_prev = h
    return hs


class _GatedRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, c0, c1, r, V, h0, hmask, dmask, phi, Phi):  # type: ignore[override]
        save_q = c1 is not None and ctx.needs_input_grad[1]
        hs, zs, qs = _forward_loop(c0, c1, r, V, h0, hmask, dmask, phi, Phi, save_q)
        ctx.phi, ctx.Phi = phi, Phi
        ctx.has_c1, ctx.has_r = c1 is not None, r is not None
        ctx.save_for_backward(hs, zs, qs, c1, r, V, h0, hmask, dmask)
        return hs

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs: Tensor):  # type: ignore[override]
        hs, zs, qs, c1, r, V, h0, hmask, dmask = ctx.saved_tensors
        T, Bsz, H = hs.shape
        onednn = _use_onednn(V, hs)
        Vt = V.t().contiguous()  # g_hm += g_q V  ==  g_q (V^T)^T
        gated = r is not None
        r_const = gated and r.dim() == 1

        # everything that does not depend on the backward recursion, for all steps at once (written in
        # place into as few fresh [T, B, H] buffers as possible: each fresh one costs page faults here)
        k = _derivative_buffer(ctx.phi, zs)  # phi'(pre), a new buffer, or None for the identity
        if dmask is not None:
            k = dmask.clone() if k is None else k.mul_(dmask)
        if gated:
            k = (1 - r).expand(T, Bsz, H).contiguous() if k is None else k.addcmul_(k, r, value=-1)  # k (1 - r)
        # g_pre = g_u * k;  g_q = g_pre * c1 = g_u * k1
        k1 = k if c1 is None else (c1 if k is None else k * c1)
        Phi_d = _derivative_buffer(ctx.Phi, hs)

        gu_all = torch.empty_like(hs)
        gq_all = torch.empty_like(hs) if k1 is not None else None
        dh = None
        for t in range(T - 1, -1, -1):
            gu = gu_all[t]
            if dh is None:
                gu.copy_(grad_hs[t])
            else:
                torch.add(grad_hs[t], dh, out=gu)
            if Phi_d is not None:
                gu.mul_(Phi_d[t])
            if gq_all is not None:
                gq = gq_all[t]
                torch.mul(gu, k1[t], out=gq)
            else:
                gq = gu
            dh = _matmul_t(gq, Vt, onednn)  # through V's operand hm = h * m ...
            if hmask is not None:
                dh.mul_(hmask)
            if gated:  # ... and through the carried h (unmasked)
                dh.addcmul_(gu, r if r_const else r[t])
        grad_h0 = dh

        gq_all = gu_all if gq_all is None else gq_all
        need = ctx.needs_input_grad
        grad_c0 = grad_c1 = grad_r = grad_V = None
        if need[3]:  # dV = sum_t g_q_t^T hm_t: one product over all steps
            if hmask is None:  # hm_{t-1} = h_{t-1}: read hs in place, h0 apart
                G, X = gq_all[1:].reshape((T - 1) * Bsz, H), hs[:-1].reshape((T - 1) * Bsz, H)
                grad_V = _matmul_tn(G, X, onednn) if T > 1 else None
                first = _matmul_tn(gq_all[0], h0, onednn)
                grad_V = first if grad_V is None else grad_V.add_(first)
            else:
                hm_prev = torch.empty_like(hs)
                hm_prev[0].copy_(h0)
                hm_prev[1:].copy_(hs[:-1])
                hm_prev.mul_(hmask)
                grad_V = _matmul_tn(gq_all.reshape(T * Bsz, H), hm_prev.reshape(T * Bsz, H), onednn)
        if gated and need[2]:  # g_r = g_u * (h_{t-1} - zd_t)
            g_r = zs * dmask if dmask is not None else zs.clone()
            g_r.neg_()
            g_r[0].add_(h0)
            g_r[1:].add_(hs[:-1])
            g_r.mul_(gu_all)
            grad_r = g_r.sum((0, 1)) if r_const else g_r
        if need[0] or need[1]:
            g_pre = gu_all if k is None else k.mul_(gu_all)  # k is not needed any more
            grad_c0 = g_pre
            if need[1] and c1 is not None:
                grad_c1 = g_pre * qs
        return grad_c0, grad_c1, grad_r, grad_V, grad_h0, None, None, None, None


def gated_recurrence(
    c0: Tensor,
    c1: Tensor | None,
    r: Tensor | None,
    V: Tensor,
    h0: Tensor,
    *,
    hmask: Tensor | None = None,
    dmask: Tensor | None = None,
    phi: str = "tanh",
    Phi: str = "identity",
) -> Tensor:
    """Run the recurrence of the module docstring; returns every ``h_t`` as ``[T, B, H]`` (time first).

    ``c0`` ``[T, B, H]`` (may be an expanded view), ``c1`` ``[T, B, H]`` or None, ``r`` ``[T, B, H]``,
    ``[H]`` or None (no gate), ``V`` ``[H, H]``, ``h0`` ``[B, H]``, ``hmask`` ``[B, H]`` or None,
    ``dmask`` ``[T, B, H]`` or None (constants: no gradient). Gradients flow to c0, c1, r, V and h0.
    """
    if phi not in ACTIVATION_NAMES or Phi not in ACTIVATION_NAMES:
        raise ValueError(f"activations must be among {ACTIVATION_NAMES}, got {phi!r}, {Phi!r}")
    if hmask is not None:
        hmask = hmask.detach().expand_as(h0).contiguous()
    if dmask is not None:
        dmask = dmask.detach()
    tensors = [t for t in (c0, c1, r, V, h0) if t is not None]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return _GatedRecurrence.apply(c0, c1, r, V, h0, hmask, dmask, phi, Phi)
    with torch.no_grad():
        return _inference_loop(c0, c1, r, V, h0, hmask, dmask, phi, Phi)
