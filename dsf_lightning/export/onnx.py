"""Export a :class:`~dsf_lightning.model.RecurrentLM` to ONNX for deployment (onnxruntime and friends).

The exported graph is the model's ``forward(tokens, state) -> (logits, state)`` with the state flattened
into named tensors, so a stream can be scored window by window, the final state of one run fed to the
next::

    inputs   tokens [batch, time] (int64), state_<layer>_<k> [batch, state_sizes[k]] (float32)
    outputs  logits [batch, time, vocab], final_state_<layer>_<k> [batch, state_sizes[k]]

``batch`` and ``time`` are dynamic axes: the time loop is exported as one ONNX ``Scan`` over each layer's
step (:meth:`~dsf_lightning.cells.base.RecurrentCell.recur`, the reference step every fast path is tested
against), through torch's ``scan`` operator and the ``torch.export``-based ONNX exporter
(``torch.onnx.export(dynamo=True)``, which needs the ``onnx`` and ``onnxscript`` packages: ``pip install
'dsf-lightning[onnx]'``). The default fast paths cannot be exported: their custom autograd Functions and
oneDNN ops (``dsf_lightning.ops``) have no ONNX form, and a Python time loop would fix ``time`` to the
example's length. The graph is the model in evaluation mode (no dropout); zeros are the initial state.

The ONNX file's metadata (``metadata_props``) records what a caller needs: ``dsf.state_inputs`` and
``dsf.state_outputs`` (the names, in order), ``dsf.state_sizes`` (``[[n, ...] per layer]``),
``dsf.vocab_size`` and ``dsf.model_config`` (the :class:`~dsf_lightning.model.LMConfig` as JSON).
"""

from __future__ import annotations

import copy
import json
import logging
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .._fs import write_atomic
from .._modes import evaluating
from ..hub.folder import LanguageModelFolder
from ..model import RecurrentLM

log = logging.getLogger(__name__)

__all__ = ["ExportError", "OnnxGraph", "check_onnx", "check_output_outside", "state_names", "to_onnx"]

#: what ``pip install`` brings the exporter (the ``onnx`` extra of the package)
ONNX_EXTRA = "pip install 'dsf-lightning[onnx]' (onnx, onnxscript; onnxruntime to run or check the graph)"


class ExportError(ValueError):
    """The model cannot be exported as asked (the message says why and what to do)."""


def state_names(model: RecurrentLM, prefix: str = "state") -> list[str]:
    """``<prefix>_<layer>_<k>`` for each state tensor ``k`` of each layer, in the flattened order."""
    return [f"{prefix}_{i}_{k}" for i, layer in enumerate(model.layers) for k in range(len(layer.state_sizes))]


def _as_model(model_or_folder: Any, output: Path) -> RecurrentLM:
    """A RecurrentLM from a model, a :class:`~dsf_lightning.model.pretrained.Pretrained`, a Scorer or Lightning
    module holding one, a published name / pretrained folder (loaded with the hub's loader) or a folder already read
    (:class:`~dsf_lightning.hub.folder.LanguageModelFolder`); an ``output`` inside that folder (it would replace the
    model's own files) is an :class:`ExportError`."""
    if isinstance(model_or_folder, LanguageModelFolder):
        from ..model.pretrained import load_pretrained

        check_output_outside(output, model_or_folder.path)
        return load_pretrained(model_or_folder).model
    if isinstance(model_or_folder, (str, Path)):
        from ..hub.registry import resolve

        folder = resolve(model_or_folder)
        check_output_outside(output, folder)
        return RecurrentLM.from_pretrained(folder)
    for candidate in (model_or_folder, getattr(model_or_folder, "model", None)):
        if isinstance(candidate, RecurrentLM):
            return candidate
    raise ExportError(
        f"to_onnx exports a RecurrentLM, a pretrained model (from load_pretrained / from_pretrained), the name "
        f"or folder of one, or its LanguageModelFolder; got {type(model_or_folder).__name__}"
    )


def _scan_layer(layer: nn.Module, y: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, tuple[Tensor, ...]]:
    """One layer over a whole sequence as torch's ``scan`` of its reference step ``recur`` (one ONNX Scan
    with a dynamic trip count): ``y`` [B, T, I] -> ([B, T, output_size], final state)."""
    from torch._higher_order_ops.scan import scan

    def step(carry: list[Tensor], projected_t: Tensor) -> tuple[list[Tensor], Tensor]:
        out, new = layer.recur(projected_t, tuple(carry))
        # scan's body may not return its inputs or two views of one tensor (h is often both)
        return [s.clone() for s in new], out.clone()

    projected = layer.project_inputs(y).transpose(0, 1)  # [T, B, P]: time first for the scan
    final, outputs = scan(step, list(state), projected, dim=0)
    return outputs.transpose(0, 1), tuple(final)  # [B, T, output_size]


class OnnxGraph(nn.Module):
    """What is exported: ``forward(tokens, *state) -> (logits, *final_state)`` in plain torch, the state
    flattened in :func:`state_names` order. Evaluation mode only (dropout would need random ops)."""

    def __init__(self, model: RecurrentLM) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor, *state: Tensor) -> tuple[Tensor, ...]:
        y = self.model.embed(tokens)  # [B, T, E]
        final: list[Tensor] = []
        i = 0
        for layer in self.model.layers:
            n = len(layer.state_sizes)
            y, layer_final = _scan_layer(layer, y, tuple(state[i : i + n]))
            final.extend(layer_final)
            i += n
        return (self.model.decode(y), *final)  # logits [B, T, V] (decode is F.linear under export)


def check_output_outside(output: Path, source: Path) -> None:
    """Refuse (:class:`ExportError`) an ``output`` that is the ``source`` (a checkpoint, a model folder), lies inside
    the source folder, or holds the source (a folder output replaced whole): the export would replace what it reads."""
    out, src = Path(output).expanduser().resolve(), Path(source).expanduser().resolve()
    if out == src or (src.is_dir() and out.is_relative_to(src)) or src.is_relative_to(out):
        where = ("is the source" if out == src else f"is inside the source model folder {src}"
                 if out.is_relative_to(src) else f"holds the source {src}")
        raise ExportError(f"the output {output} {where}: the export would replace what it reads; write it elsewhere")


def _check_exporter() -> None:
    missing = []
    for module in ("onnx", "onnxscript"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ExportError(f"ONNX export needs the package(s) {', '.join(missing)}: {ONNX_EXTRA}")


def to_onnx(
    model_or_folder: Any,
    path,
    *,
    batch_size: int = 2,
    time_steps: int = 5,
    opset: int | None = None,
    check: bool = True,
    atol: float = 1e-4,
) -> Path:
    """Write ``model_or_folder`` as an ONNX graph to ``path`` (see the module docstring for its inputs and
    outputs; batch and time are dynamic) and return the path.

    ``model_or_folder``: a :class:`RecurrentLM`, a pretrained model, a published name / folder, or a folder read
    (:class:`~dsf_lightning.hub.folder.LanguageModelFolder`).
    ``batch_size`` / ``time_steps``: the example the exporter traces (any size runs afterwards).
    ``opset``: the ONNX opset (default: the exporter's). ``check``: run the file with onnxruntime (when
    installed) on a fresh example with a random state and raise :class:`ExportError` unless its logits and
    final state equal PyTorch's within ``atol``.
    Unexported (the model is left as it was): it is copied, in evaluation mode, without gradients.
    The graph is written to a temporary sibling of ``path``, checked there and renamed into place: a kill, a full
    disk or a failed check leaves the previous file. A ``path`` inside the source folder (a name or folder given)
    is refused: it would replace the model's files.
    """
    _check_exporter()
    path = Path(path)
    if path.is_dir():
        raise ExportError(f"the output {path} is a folder: give the .onnx file to write, e.g. {path / 'model.onnx'}")
    source = _as_model(model_or_folder, path)
    if next(source.parameters()).dtype != torch.float32:
        raise ExportError(
            f"ONNX export takes float32 weights, this model has {next(source.parameters()).dtype}: "
            "load it with dtype=torch.float32 (or call .float() on it)"
        )
    model = copy.deepcopy(source).cpu().eval().requires_grad_(False)  # no grad: scan then skips its backward
    graph = OnnxGraph(model).eval()
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, model.config.vocab_size, (batch_size, time_steps), generator=generator)
    state = [t for layer in model.init_state(batch_size) for t in layer]
    inputs, outputs = state_names(model), state_names(model, "final_state")
    batch, time = torch.export.Dim("batch"), torch.export.Dim("time")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's deprecation and tracing chatter
            program = torch.onnx.export(
                graph,
                (tokens, *state),
                None,
                dynamo=True,
                input_names=["tokens", *inputs],
                output_names=["logits", *outputs],
                dynamic_shapes=({0: batch, 1: time}, tuple({0: batch} for _ in state)),
                opset_version=opset,
                verbose=False,
            )
    except Exception as err:  # the exporter's own errors are many and deep: say which cell and why
        kinds = sorted({type(layer).__name__ for layer in model.layers})
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ExportError(
            f"cell {model.config.cell!r} ({', '.join(kinds)}, options {model.config.cell_options}) is not supported "
            f"by the ONNX export: {type(err).__name__}: {first}. The export runs each layer's step `recur` inside "
            "torch's scan: a step that branches in Python on tensor values, updates its inputs in place, or uses "
            "an op without an ONNX form cannot be exported (torch.export of the model's own forward may still work)"
        ) from err
    meta = program.model.metadata_props
    meta["dsf.state_inputs"] = json.dumps(inputs)
    meta["dsf.state_outputs"] = json.dumps(outputs)
    meta["dsf.state_sizes"] = json.dumps([list(layer.state_sizes) for layer in model.layers])
    meta["dsf.vocab_size"] = str(model.config.vocab_size)
    meta["dsf.model_config"] = json.dumps(model.config.to_dict())
    check_now = False
    if check:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            log.warning("onnxruntime is not installed: %s was not checked (%s)", path, ONNX_EXTRA)
        else:
            check_now = True

    def write(f) -> None:  # the graph to a temporary sibling, checked there: a failed check leaves `path` as it was
        f.write(program.model_proto.SerializeToString())
        f.flush()
        if check_now:
            diff = check_onnx(model, f.name, batch_size=batch_size + 1, time_steps=time_steps + 2)
            if diff > atol:
                raise ExportError(f"{path}: onnxruntime differs from PyTorch by {diff:.3g} > {atol} (cell {model.config.cell!r})")
            log.info("%s: onnxruntime equals PyTorch within %.2g", path, diff)

    # a kill, a full disk or a failed check leaves the previous file (or none), never half of one
    write_atomic(path, write)
    return path


def run_onnx(session, tokens: Tensor, state: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
    """Run an exported graph in an ``onnxruntime.InferenceSession``: (logits, final state as a flat list)."""
    names = [i.name for i in session.get_inputs()]
    feed = {name: t.detach().cpu().numpy() for name, t in zip(names, [tokens, *state])}
    out = session.run(None, feed)
    return torch.from_numpy(out[0]), [torch.from_numpy(o) for o in out[1:]]


@torch.no_grad()
def check_onnx(model: RecurrentLM, path, *, batch_size: int = 3, time_steps: int = 7, seed: int = 1) -> float:
    """The largest absolute difference between onnxruntime on ``path`` and ``model`` (its default forward,
    in evaluation mode) over the logits and the final state, on random tokens and a random initial state."""
    import onnxruntime

    with evaluating(model):
        g = torch.Generator().manual_seed(seed)
        tokens = torch.randint(0, model.config.vocab_size, (batch_size, time_steps), generator=g)
        state = tuple(
            tuple(0.5 * torch.randn(batch_size, n, generator=g) for n in layer.state_sizes) for layer in model.layers
        )
        logits, final = model(tokens, state)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got_logits, got_final = run_onnx(session, tokens, [t for layer in state for t in layer])
    want = [logits, *(t for layer in final for t in layer)]
    return max(float((a - b).abs().max()) for a, b in zip([got_logits, *got_final], want))
