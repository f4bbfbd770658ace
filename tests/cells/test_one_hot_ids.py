"""One-hot input given as token ids: a cell that ``reads_ids`` (the SCRN) gathers its input weights' columns
instead of multiplying one-hot vectors (SCRN paper eq. 1-2 with ``x_t`` one-hot: ``x_t B`` is row ``x_t`` of
the paper's ``B``); every other path gets the vectors. Checked against the equations and the dense path."""

import pytest
import torch
import torch.nn.functional as F

import dsf_lightning.cells.base as cells_base
from dsf_lightning.cells import get_cell
from dsf_lightning.model import LMConfig, RecurrentLM
from dsf_lightning.ops.one_hot import one_hot_linear

V, H, S, B, T = 11, 6, 3, 2, 6


def scrn(**options):
    torch.manual_seed(0)
    cell = get_cell("scrn")(V, H, context_size=S, **options).double()
    with torch.no_grad():
        for p in cell.parameters():
            p.copy_(torch.randn_like(p))
    return cell


def ids(seed=1, shape=(B, T)):
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


def eqs_1_2(cell, tokens, s, h):
    """The SCRN equations step by step, one-hot x_t written as the column x_t of each input matrix."""
    alpha, outs = float(cell.alpha), []
    for t in range(tokens.shape[1]):
        x = tokens[:, t]
        s = (1 - alpha) * cell.B[:, x].T + alpha * s  # eq. 1: x_t B
        h = torch.sigmoid(cell.A[:, x].T + s @ cell.P.T + h @ cell.R.T + cell.b)  # eq. 2
        outs.append(torch.cat((s, h), dim=1))  # eq. 7
    return torch.stack(outs, 1), (s, h)


def test_scrn_from_ids_is_eqs_1_and_2_with_the_state_carried_across_chunks():
    cell, tokens = scrn(), ids()
    want, want_state = eqs_1_2(cell, tokens, torch.zeros(B, S, dtype=torch.float64), torch.zeros(B, H, dtype=torch.float64))
    first, state = cell(tokens[:, :4])
    second, state = cell(tokens[:, 4:], state)
    torch.testing.assert_close(torch.cat((first, second), 1), want)
    torch.testing.assert_close(state, want_state)


def test_scrn_from_ids_has_the_gradients_of_the_one_hot_vectors():
    cell, tokens = scrn(), ids()
    g = torch.randn(B, T, S + H, dtype=torch.float64)
    grads = []
    for x in (tokens, F.one_hot(tokens, V).double()):
        cell.zero_grad()
        out, (s, h) = cell(x)
        ((out * g).sum() + s.sum() + h.sum()).backward()
        grads.append({n: p.grad.clone() for n, p in cell.named_parameters()})
    assert set(grads[0]) == {"A", "B", "P", "R", "b"}
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], msg=name)


@pytest.mark.parametrize("cell_name", ["scrn", "delta-rnn", "delta-rnn-simple", "lstm"])
def test_ids_and_one_hot_vectors_give_one_function_on_every_path(cell_name):
    """Cells without ``reads_ids`` and the reference path are given the vectors (RecurrentCell.forward)."""
    torch.manual_seed(0)
    cell, tokens = get_cell(cell_name)(V, H).double(), ids()
    for implementation in ("fast", "reference"):
        cell.implementation = implementation
        out_ids, state_ids = cell(tokens)
        out_vec, state_vec = cell(F.one_hot(tokens, V).double())
        torch.testing.assert_close(out_ids, out_vec)
        torch.testing.assert_close(state_ids, state_vec)


def test_the_language_model_never_builds_one_hot_vectors_for_a_cell_that_reads_ids(monkeypatch):
    torch.manual_seed(0)
    lm = RecurrentLM(LMConfig(vocab_size=V, cell="scrn", hidden_sizes=[H], embedding_size=0, tie_weights=False,
                              cell_options={"context_size": S})).double()
    tokens = ids()
    dense = lm.decode(lm.layers[0](lm.embed(tokens))[0])

    def refuse(*_args, **_kwargs):
        raise AssertionError("one-hot vectors were built")

    for module, name in ((lm, "embed"), (cells_base, "one_hot")):
        monkeypatch.setattr(module, name, refuse)
    lm.train()
    logits, _ = lm(tokens)
    torch.testing.assert_close(logits, dense)
    monkeypatch.undo()
    # input dropout drops the vectors' entries: then the model builds them
    lm.config.dropout_input = 0.5
    monkeypatch.setattr(cells_base, "one_hot", refuse)
    built = []
    monkeypatch.setattr(lm, "embed", lambda t: built.append(t) or F.one_hot(t, V).double())
    lm(tokens)
    assert len(built) == 1


def test_under_autocast_ids_give_the_dtype_and_values_of_the_vectors():
    torch.manual_seed(0)
    cell, tokens = get_cell("scrn")(V, H, context_size=S), ids()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out_ids, _ = cell(tokens)
        out_vec, _ = cell(F.one_hot(tokens, V).float())
    assert out_ids.dtype == out_vec.dtype
    torch.testing.assert_close(out_ids.float(), out_vec.float(), atol=2e-2, rtol=2e-2)


def test_one_hot_linear_is_the_product_with_one_hot_vectors():
    torch.manual_seed(0)
    w = torch.randn(5, V, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, requires_grad=True)
    tokens, g = ids(shape=(3, 4)), torch.randn(3, 4, 5, dtype=torch.float64)
    got = one_hot_linear(tokens, w, b)
    want = F.linear(F.one_hot(tokens, V).double(), w, b)
    torch.testing.assert_close(got, want)
    dw, db = torch.autograd.grad((got * g).sum(), (w, b))
    dw_want, db_want = torch.autograd.grad((want * g).sum(), (w, b))
    torch.testing.assert_close(dw, dw_want)
    torch.testing.assert_close(db, db_want)


@pytest.mark.parametrize("options", [{}, {"inner": "second-order", "gate": "fixed"}, {"inner": "elman"}])
def test_delta_rnn_from_ids_has_the_outputs_and_gradients_of_the_one_hot_vectors(options):
    """DSF eqs 8, 10-11 and 5 read the input only through ``W x_t``: column ``x_t`` of ``W`` for one-hot input."""
    torch.manual_seed(0)
    cell, tokens = get_cell("delta-rnn")(V, H, **options).double(), ids()
    assert cell.reads_ids
    g = torch.randn(B, T, H, dtype=torch.float64)
    results = []
    for x in (tokens, F.one_hot(tokens, V).double()):
        cell.zero_grad()
        first, state = cell(x[:, :4])
        second, (h,) = cell(x[:, 4:], state)
        out = torch.cat((first, second), 1)
        ((out * g).sum() + h.sum()).backward()
        results.append((out, {n: p.grad.clone() for n, p in cell.named_parameters()}))
    torch.testing.assert_close(results[0][0], results[1][0])
    for name, grad in results[0][1].items():
        torch.testing.assert_close(grad, results[1][1][name], msg=name)


def _variants():
    from dsf_lightning.cells import list_cells

    from .variants import VARIANTS

    for name in list_cells():
        for vid, options, *rest in VARIANTS.get(name, []):
            if not rest:  # cells that need a particular input size read features, not one-hot words
                yield pytest.param(name, options, id=f"{name}[{vid}]")


@pytest.mark.parametrize("name, options", list(_variants()))
def test_every_cell_gives_ids_the_outputs_and_gradients_of_their_one_hot_vectors(name, options):
    """Every registered cell and variant, carried state over two chunks, float64: forward(ids) ==
    forward(one_hot(ids)); a cell that reads ids gathers exactly what project_inputs multiplies."""
    torch.manual_seed(0)
    cell = get_cell(name)(V, H, **options).double().eval()
    tokens, vectors = ids(), F.one_hot(ids(), V).double()
    if cell.reads_ids and hasattr(cell, "input_weights") and cell.input_weights() is not None:
        torch.testing.assert_close(one_hot_linear(tokens, *cell.input_weights()), cell.project_inputs(vectors))
    results = []
    for x in (tokens, vectors):
        cell.zero_grad()
        first, state = cell(x[:, :4])
        second, state = cell(x[:, 4:], state)
        out = torch.cat((first, second), 1)
        (out.square().sum() + sum(s.sum() for s in state)).backward()
        results.append((out, state, {n: p.grad.clone() for n, p in cell.named_parameters() if p.grad is not None}))
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])
    assert results[0][2].keys() == results[1][2].keys()
    for param, grad in results[0][2].items():
        torch.testing.assert_close(grad, results[1][2][param], msg=param)


def test_the_cells_that_read_ids():
    from dsf_lightning.cells import list_cells

    reading = {name for name in list_cells() if name != "ran-simple" and get_cell(name)(V, H).reads_ids}
    assert reading == {"scrn", "delta-rnn", "delta-rnn-simple", "elman", "lstm", "gru", "mgu", "srelu-rnn", "ran"}
