"""ONNX export (issue 15 item 6): ``dsf_lightning.export.to_onnx`` and ``dsf export --format onnx``.

The exported graph is checked against onnxruntime: its logits and final state equal PyTorch's (the
library's own default, fast forward) within 1e-4, a stream scored window by window with the state
carried out of one run into the next equals PyTorch on the whole stream, and every registered cell
variant (``tests/cells/variants.py``) either exports and matches or is refused with a clear error.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from dsf_lightning.ops.fast_linear import fast_linear, fast_linear_min_work


# -- fast_linear under exporters and the compiler --------------------------------------------------
def _big_operands():
    """Operands above fast_linear's size threshold (so eager mode takes the oneDNN path)."""
    n = int(fast_linear_min_work() ** (1 / 3)) + 2
    torch.manual_seed(0)
    return torch.randn(n, n), torch.randn(n, n), torch.randn(n)


def test_fast_linear_traces_to_plain_linear():
    """A TorchScript trace (what ``torch.onnx.export(dynamo=False)`` records) must not capture oneDNN's
    ``mkldnn::_linear_pointwise``, which no exporter knows."""
    x, w, b = _big_operands()
    traced = torch.jit.trace(lambda x, w, b: fast_linear(x, w, b), (x, w, b))
    assert "mkldnn" not in str(traced.graph)
    torch.testing.assert_close(traced(x, w, b), F.linear(x, w, b))


def test_fast_linear_compiles_in_one_graph():
    """Under ``torch.compile``/``torch.export`` fast_linear is ``F.linear`` without a graph break (the
    oneDNN switch query returns a bool, which dynamo cannot put in a graph)."""
    x, w, b = _big_operands()
    compiled = torch.compile(fast_linear, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x, w, b), F.linear(x, w, b))
