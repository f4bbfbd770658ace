"""ONNX export (issue 15 item 6): ``dsf_lightning.export.to_onnx`` and ``dsf export --format onnx``.

The exported graph is checked against onnxruntime: its logits and final state equal PyTorch's (the
library's own default, fast forward) within 1e-4, a stream scored window by window with the state
carried out of one run into the next equals PyTorch on the whole stream, and every registered cell
variant (``tests/cells/variants.py``) either exports and matches or is refused with a clear error.
"""

from __future__ import annotations

import json
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


# -- the exported graph against onnxruntime ---------------------------------------------------------
onnxruntime = pytest.importorskip("onnxruntime")  # the test extra installs it
pytest.importorskip("onnxscript")

from dsf_lightning.cli import main  # noqa: E402
from dsf_lightning.export import ExportError, OnnxGraph, run_onnx, state_names, to_onnx  # noqa: E402
from dsf_lightning.model import LMConfig, RecurrentLM  # noqa: E402

from .test_bundled_models import DATA_ROOT  # noqa: E402

ATOL = 1e-4  # issue 15: logits within 1e-4 of PyTorch


def _session(path):
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _flat(state):
    return [t for layer in state for t in layer]


def _windows_match(model, path, stream, cut):
    """ONNX on ``stream[:, :cut]``, its final state fed to ONNX on ``stream[:, cut:]``, against PyTorch's
    default (fast) forward on the whole stream from a zero state: the largest difference of logits and
    final state."""
    session = _session(path)
    state = _flat(model.init_state(stream.shape[0]))
    first, state = run_onnx(session, stream[:, :cut], state)
    second, state = run_onnx(session, stream[:, cut:], state)
    with torch.no_grad():
        want_logits, want_state = model.eval()(stream)
    got = torch.cat([first, second], dim=1)
    assert got.shape == want_logits.shape
    return max(float((got - want_logits).abs().max()),
               *(float((a - b).abs().max()) for a, b in zip(state, _flat(want_state))))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A two-layer Delta-RNN LM (the default fast path in PyTorch) and its ONNX export."""
    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=40, cell="delta-rnn", hidden_sizes=[12, 10], embedding_size=8))
    model.train()  # to_onnx exports evaluation mode and leaves the model as it was
    path = to_onnx(model, tmp_path_factory.mktemp("onnx") / "tiny.onnx")
    return model, path


@pytest.mark.slow
def test_tiny_model_streams_window_by_window_with_dynamic_batch_and_time(tiny):
    model, path = tiny
    assert model.training and all(p.requires_grad for p in model.parameters())  # untouched
    torch.manual_seed(1)
    for batch, (cut, total) in [(1, (6, 11)), (4, (3, 20)), (3, (1, 2))]:  # other sizes than the traced 2 x 5
        stream = torch.randint(0, 40, (batch, total))
        assert _windows_match(model, path, stream, cut) < ATOL


@pytest.mark.slow
def test_the_graph_names_its_state_and_records_it(tiny):
    model, path = tiny
    import onnx

    proto = onnx.load(str(path))
    inputs = [i.name for i in proto.graph.input]
    outputs = [o.name for o in proto.graph.output]
    assert inputs == ["tokens", "state_0_0", "state_1_0"] == ["tokens", *state_names(model)]
    assert outputs == ["logits", "final_state_0_0", "final_state_1_0"]
    meta = {p.key: p.value for p in proto.metadata_props}
    assert json.loads(meta["dsf.state_sizes"]) == [[12], [10]]
    assert json.loads(meta["dsf.state_inputs"]) == inputs[1:]
    assert LMConfig.from_dict(json.loads(meta["dsf.model_config"])) == model.config
    dims = [d.dim_param or d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert all(isinstance(d, str) for d in dims), f"tokens' axes must be dynamic, got {dims}"


def test_what_cannot_be_exported_is_refused_clearly():
    with pytest.raises(ExportError, match="RecurrentLM"):
        to_onnx(torch.nn.Linear(2, 2), "unused.onnx")
    half = RecurrentLM(LMConfig(vocab_size=10, hidden_sizes=[4])).half()
    with pytest.raises(ExportError, match="float32"):
        to_onnx(half, "unused.onnx")


def test_a_missing_exporter_package_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # import fails as if not installed
    with pytest.raises(ExportError, match=r"onnxscript.*dsf-lightning\[onnx\]"):
        to_onnx(RecurrentLM(LMConfig(vocab_size=10, hidden_sizes=[4])), tmp_path / "x.onnx")


def test_cli_refuses_folder_options_with_onnx(tmp_path, capsys):
    assert main(["export", "--format", "onnx", "delta-rnn-ptb", str(tmp_path / "m.onnx"), "--dtype", "float16"]) == 2
    err = capsys.readouterr().err
    assert "--dtype" in err and "--format onnx" in err
    assert not (tmp_path / "m.onnx").exists()


@pytest.fixture(scope="module")
def bundled_onnx(tmp_path_factory):
    """``dsf export --format onnx delta-rnn-ptb`` (the bundled model, checked against onnxruntime)."""
    path = tmp_path_factory.mktemp("bundled") / "delta-rnn-ptb.onnx"
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["export", "--format", "onnx", "delta-rnn-ptb", str(path)])
    return code, out.getvalue(), path


@pytest.mark.slow
def test_cli_exports_the_bundled_model(bundled_onnx):
    code, out, path = bundled_onnx
    assert code == 0, out
    assert "checked against onnxruntime" in out and path.is_file()
    assert path.stat().st_size > 20e6  # 5.66M float32 weights, inline


@pytest.mark.corpus
@pytest.mark.slow
def test_bundled_model_on_two_ptb_windows(bundled_onnx):
    """A PTB test window scored by onnxruntime in two halves with the state carried equals PyTorch on
    the whole window (logits within 1e-4)."""
    test_file = DATA_ROOT / "ptb" / "ptb.test.txt"
    if not test_file.exists():
        pytest.skip(f"{test_file} not present")
    import dsf_lightning

    pretrained = dsf_lightning.load_pretrained(dsf_lightning.hub.registry.resolve("delta-rnn-ptb"))
    model = pretrained.model.float()
    lines = test_file.read_text().splitlines()[:12]
    ids = pretrained.vocab.encode([t for line in lines for t in pretrained.tokenizer.tokenize_line(line)])
    stream = torch.tensor(ids[:2 * 70]).reshape(2, 70)  # two streams, as a batch
    code, _, path = bundled_onnx
    assert code == 0
    assert _windows_match(model, path, stream, 35) < ATOL


# -- every registered cell -------------------------------------------------------------------------
from dsf_lightning.cells import RecurrentCell, list_cells  # noqa: E402

from .cells.variants import VARIANTS  # noqa: E402


class _AllVariants(torch.nn.Module):
    """Every variant's :class:`OnnxGraph` side by side on the same tokens (one export for all: an export
    costs ~10 s of fixed overhead, so one per variant would take minutes)."""

    def __init__(self, models):
        super().__init__()
        self.graphs = torch.nn.ModuleList(OnnxGraph(m) for m in models)

    def forward(self, tokens, *state):
        out, i = [], 0
        for graph in self.graphs:
            n = len(state_names(graph.model))
            out.extend(graph(tokens, *state[i : i + n]))
            i += n
        return tuple(out)


@pytest.mark.slow
def test_every_registered_cell_variant_exports_and_matches(tmp_path):
    """Each registered cell's defaults (every variant of tests/cells/variants.py with
    DSF_EXPORT_ALL_VARIANTS=1: all 56 passed on the development machine, in ~11 min of one export)."""
    import os

    every = os.environ.get("DSF_EXPORT_ALL_VARIANTS", "0") not in ("", "0")
    assert sorted(VARIANTS) == sorted(list_cells())
    models, ids = [], []
    for name, variants in VARIANTS.items():
        for variant_id, options, *_ in variants if every else variants[:1]:
            torch.manual_seed(len(models))
            config = LMConfig(vocab_size=11, cell=name, hidden_sizes=[6], embedding_size=6, cell_options=options)
            models.append(RecurrentLM(config).eval().requires_grad_(False))
            ids.append(f"{name}/{variant_id}")
    # the model's other input and decoder forms: one-hot input (the DSF paper's), a tied SCRN decoder ([s; h])
    for extra, config in (("delta-rnn/one-hot", dict(cell="delta-rnn", embedding_size=0)),
                          ("scrn/tied", dict(cell="scrn", embedding_size=6, tie_weights=True))):
        models.append(RecurrentLM(LMConfig(vocab_size=11, hidden_sizes=[6], **config)).eval().requires_grad_(False))
        ids.append(extra)
    graph = _AllVariants(models).eval()
    state = [t for m in models for t in _flat(m.init_state(2))]
    tokens = torch.randint(0, 11, (2, 4))
    batch, time = torch.export.Dim("batch"), torch.export.Dim("time")
    program = torch.onnx.export(graph, (tokens, *state), None, dynamo=True, verbose=False,
                                dynamic_shapes=({0: batch, 1: time}, tuple({0: batch} for _ in state)))
    path = tmp_path / "all.onnx"
    program.save(str(path))
    session = _session(path)
    g = torch.Generator().manual_seed(3)
    for cut, total in [(3, 9), (1, 2)]:
        stream = torch.randint(0, 11, (3, total), generator=g)
        carried = [0.5 * torch.randn(3, t.shape[1], generator=g) for t in state]
        feed = {i.name: t.numpy() for i, t in zip(session.get_inputs(), [stream[:, :cut], *carried])}
        first = [torch.from_numpy(o) for o in session.run(None, feed)]
        i = j = 0
        mid = []
        for m in models:  # each model's final state of window 1 becomes its input of window 2
            n = len(state_names(m))
            mid.extend(first[j + 1 : j + 1 + n])
            i, j = i + n, j + 1 + n
        feed = {i.name: t.numpy() for i, t in zip(session.get_inputs(), [stream[:, cut:], *mid])}
        second = [torch.from_numpy(o) for o in session.run(None, feed)]
        i = j = 0
        bad = []
        for m, name in zip(models, ids):
            n = len(state_names(m))
            start = tuple(carried[i : i + n])
            with torch.no_grad():
                logits, final = m(stream, (start,))
            got = torch.cat([first[j], second[j]], dim=1)
            diff = max(float((got - logits).abs().max()),
                       *(float((a - b).abs().max()) for a, b in zip(second[j + 1 : j + 1 + n], final[0])))
            if not diff < ATOL:
                bad.append(f"{name}: {diff:.3g}")
            i, j = i + n, j + 1 + n
        assert not bad, f"ONNX differs from PyTorch for {bad}"


class _BranchingCell(RecurrentCell):
    """A cell whose step branches in Python on tensor values: no graph holds that."""

    def project_inputs(self, x):
        return x[..., : self.hidden_size]

    def recur(self, projected_t, state, state_masks=None):
        (h,) = state
        h = h + projected_t if bool((projected_t > 0).any()) else h - projected_t
        return h, (h,)


@pytest.mark.slow
def test_a_cell_the_export_cannot_hold_gets_a_clear_error(tmp_path):
    model = RecurrentLM(LMConfig(vocab_size=9, hidden_sizes=[4], embedding_size=4))
    model.layers[0] = _BranchingCell(4, 4)
    with pytest.raises(ExportError, match=r"_BranchingCell.*not supported by the ONNX export.*recur"):
        to_onnx(model, tmp_path / "x.onnx")
    assert not (tmp_path / "x.onnx").exists()


# -- from a training checkpoint ----------------------------------------------------------------------
from .hub.test_checkpoint_export import trained  # noqa: E402,F401  (the fixture: a real Lightning checkpoint)


@pytest.mark.slow
def test_cli_exports_a_training_checkpoint(trained, tmp_path, capsys):  # noqa: F811
    from dsf_lightning.export import check_onnx

    out = tmp_path / "ckpt.onnx"
    code = main(["export", "--format", "onnx", str(trained["ckpt"]), str(out), "--corpus", "text-folder",
                 "--data-root", str(trained["root"])])
    assert code == 0, capsys.readouterr().err
    assert "checked against onnxruntime" in capsys.readouterr().out
    module = trained["module"]
    assert check_onnx(module.model, out, batch_size=2, time_steps=9) < ATOL  # the checkpoint's own weights
