"""CUDA graphs around a recurrent layer's per-window forward and backward (issue 37, the fast GPU path).

A training window of a recurrent layer on a GPU is hundreds of small kernels (one ``[B, H] x [H, H]``
product and a few element-wise ops per step, forward and backward); at ``B = 64, T = 35`` their launches,
not the arithmetic, set the speed (``benchmarks/cuda/RESULTS.md``: ``torch.compile(mode="reduce-overhead")``,
i.e. CUDA graphs, gave 1.20x on the Delta-RNN at H = 512). :class:`WindowGraphs` captures the window
function once per input signature with :func:`torch.cuda.make_graphed_callables` (forward and backward
graphs; the inputs, the carried state and the dropout masks become static buffers copied into before each
replay) and replays it every window.

The decision (:func:`window_path`) is separate from the graphed callable, so that it is tested with
device stand-ins on a machine without a GPU, and the callable with its capture replaced by a direct call.
"""

from __future__ import annotations

import gc
import logging
import threading
import weakref
from collections.abc import Callable

import torch
from torch import Tensor, nn

__all__ = ["WindowGraphs", "inside_window", "window_path"]

log = logging.getLogger(__name__)
_depth = threading.local()


def inside_window() -> bool:
    """Whether this thread is running a window function being warmed up or captured: a layer called from
    inside another layer's window runs eager (its work is part of the outer graph)."""
    return getattr(_depth, "n", 0) > 0


def window_path(device: torch.device | str, *, cuda_graphs: bool, training: bool, grad_enabled: bool,
                autocast: bool, capturing: bool = False, compiling: bool = False) -> str:
    """``"cuda-graph"`` where a window runs as a captured CUDA graph, else ``"eager"``.

    Graphs by default on a CUDA device (``cuda_graphs`` True) for training windows (module in training
    mode, gradients on); never on the CPU. Evaluation runs eager (no backward to capture, and scoring
    calls come in many shapes). Not under autocast: ``make_graphed_callables`` refuses autocast's weight
    cache, which Lightning's ``bf16-mixed`` / ``16-mixed`` keep on. Not inside another capture or window, nor
    under ``torch.compile`` (it traces the window itself; ``mode="reduce-overhead"`` makes its own graphs).
    """
    if not cuda_graphs or torch.device(device).type != "cuda":
        return "eager"
    if not (training and grad_enabled) or autocast or capturing or compiling:
        return "eager"
    return "cuda-graph"


class _Window(nn.Module):
    """The window function as a module of flat tensors: ``(x, *state, *masks) -> (out, *state)``; its
    parameters are the layer's, so the graphed backward returns their gradients. It holds the layer
    weakly (not as a submodule): the layer's graphs must not keep the layer alive."""

    def __init__(self, layer: nn.Module, forward: Callable, n_state: int, mask_at: tuple[int, ...]) -> None:
        super().__init__()
        self._layer, self.forward_fn, self.n_state, self.mask_at = weakref.ref(layer), forward, n_state, mask_at

    def parameters(self, recurse: bool = True):
        return self._layer().parameters(recurse)

    def forward(self, x: Tensor, *rest: Tensor) -> tuple[Tensor, ...]:
        state, given = tuple(rest[: self.n_state]), iter(rest[self.n_state:])
        masks = None if not self.mask_at else tuple(next(given) if i in self.mask_at else None
                                                    for i in range(self.n_state))
        _depth.n = getattr(_depth, "n", 0) + 1
        try:
            out, new_state = self.forward_fn(self._layer(), x, state, masks)
        finally:
            _depth.n -= 1
        return (out, *new_state)


class _gc_paused:
    """Collect now, then keep the cyclic garbage collector off until the block ends (as it was before)."""

    def __enter__(self) -> None:
        self.was_enabled = gc.isenabled()
        gc.collect()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.was_enabled:
            gc.enable()


def _fresh(grad: Tensor) -> Tensor:
    """A parameter's gradient in memory of its own: the graphed backward hands out its static buffer,
    which ``.grad`` would keep and the next replay overwrite (gradient accumulation over windows;
    pytorch/pytorch#181723)."""
    return grad.clone()


def _signature(t: Tensor) -> tuple:
    return (tuple(t.shape), t.stride(), t.dtype, t.device, t.requires_grad)


class WindowGraphs:
    """One layer's captured windows, one graph per input signature (shapes, dtypes, which masks,
    training mode, the parameters' storage).

    ``forward(layer, x, state, masks) -> (out, state)`` is the layer's eager window function; ``capture(module,
    sample_args)`` makes the graphed callable (``torch.cuda.make_graphed_callables``; a test passes a
    direct call). The graph replays into the same output buffers every window, so a second call of the same
    graph before the first one's backward has run (a layer used twice in one step) runs eager instead, and a
    capture that fails (an op that cannot be captured) is logged once and the layer stays eager.
    Settings read inside the window (dropout rates, options) are those at capture.
    """

    def __init__(self, layer: nn.Module, forward: Callable, capture: Callable | None = None) -> None:
        self._layer, self.forward = weakref.ref(layer), forward  # weak: kept per layer in a WeakKeyDictionary
        self.capture = capture if capture is not None else self._make_graphed
        self.graphs: dict[tuple, Callable] = {}
        self.failed = False
        self.replays = 0  # windows run through a graph (the others ran eager)
        self._hooked: set[int] = set()  # the parameters whose gradients _fresh copies
        self._pending: dict[tuple, weakref.ref] = {}  # graph -> the output of a replay whose backward is due

    @staticmethod
    def _make_graphed(module: nn.Module, args: tuple[Tensor, ...]) -> Callable:
        # Python's cyclic GC must not run during the capture: collecting an earlier graph (its autograd
        # Function holds a cycle) frees CUDA memory, which a capturing stream refuses ("operation not
        # permitted when stream is capturing"); seen on an H200 for irlm and sr-lstm-p after other captures
        with _gc_paused():
            return torch.cuda.make_graphed_callables(module, args, allow_unused_input=True)

    def __call__(self, x: Tensor, state: tuple[Tensor, ...], masks) -> tuple[Tensor, tuple[Tensor, ...]]:
        layer = self._layer()
        if self.failed:
            return self.forward(layer, x, state, masks)
        mask_at = tuple(i for i, m in enumerate(masks or ()) if m is not None)
        args = (x, *state, *(masks[i] for i in mask_at))
        params = tuple(layer.parameters())
        key = (tuple(map(_signature, args)), mask_at, layer.training,
               tuple((p.data_ptr(), p.requires_grad) for p in params))
        pending = self._pending.get(key)
        if pending is not None and pending() is not None:  # its backward has not run: the buffers are in use
            return self.forward(layer, x, state, masks)
        graphed = self.graphs.get(key)
        if graphed is None:
            module = _Window(layer, self.forward, len(state), mask_at)
            sample = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)  # the static inputs
            try:
                graphed = self.capture(module, sample)
            except RuntimeError as error:  # e.g. a host synchronization inside the window
                log.warning("CUDA graph capture of %s failed (%s); it runs without graphs",
                            type(layer).__name__, str(error).splitlines()[0] if str(error) else error)
                self.failed = True
                return self.forward(layer, x, state, masks)
            self.graphs[key] = graphed
            for p in params:
                if p.requires_grad and id(p) not in self._hooked:
                    p.register_hook(_fresh)
                    self._hooked.add(id(p))
        outs = graphed(*args)
        self.replays += 1
        if outs[0].grad_fn is not None:
            self._pending[key] = weakref.ref(outs[0])
            outs[0].grad_fn.register_hook(lambda *_: self._done(key))
        return outs[0], tuple(outs[1:])

    def _done(self, key: tuple) -> None:
        """The backward of the graph ``key`` has run: its buffers may be replayed into again."""
        self._pending.pop(key, None)
