"""Iterative inference (DSF paper sec. 2.5): after the backward pass the carried state takes one step
``h_T <- h_T - lambda * dL/dh_T``. The gradient must reach the final state on every path of every cell
(the fast whole-sequence loops too), and the two paths must refine it to the same state."""

import pytest
import torch

from dsf_lightning.cells import get_cell, list_cells
from dsf_lightning.training.language_model import refine_carried_state

from ..cells.variants import VARIANTS
from .conftest import quiet_trainer, toy_modules

F64 = torch.float64
B, T, INPUT, HIDDEN = 3, 6, 5, 6
STEP = 0.5


def _cases():
    for name in list_cells():
        for vid, options, *rest in VARIANTS.get(name, []):
            yield pytest.param(name, options, rest[0] if rest else INPUT, id=f"{name}[{vid}]")


def _refined(cell, path, x, state):
    """The final state refined by one step along dL/dh_T, with L a loss of the outputs only (as in the
    LM: the final state reaches the loss only through the last step's outputs)."""
    torch.manual_seed(3)  # the same dropout / sampling draws on both paths
    state = tuple(s.clone().requires_grad_() for s in state)
    forward = cell.forward if path == "fast" else cell.forward_reference
    out, final = forward(x, state)
    for s in final:
        s.retain_grad()
    w = torch.linspace(-1, 1, out.numel(), dtype=F64).reshape(out.shape)
    ((w * out).sum() + (out**2).sum()).backward()
    unrefined = [s.detach().clone() for s in final]
    refined = []
    for i, s in enumerate(final):
        assert s.grad is not None, f"no gradient reached final state {i} on the {path} path"
        refined.append(s.detach() - STEP * s.grad)
    return unrefined, refined


@pytest.mark.parametrize("name,options,input_size", list(_cases()))
def test_iterative_inference_refines_the_final_state_on_both_paths(name, options, input_size):
    torch.manual_seed(0)
    cell = get_cell(name)(input_size, HIDDEN, **options).double().train()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, T, input_size, generator=g, dtype=F64)
    state = tuple(0.5 * torch.randn(B, n, generator=g, dtype=F64) for n in cell.state_sizes)
    results = {}
    for path in ("fast", "reference"):
        if not all(cell.output_reads_state(i) for i in range(len(cell.state_sizes))):
            pytest.skip("a state the outputs never read (e.g. sr output='base'): dL/dh_T = 0 there")
        unrefined, refined = _refined(cell, path, x, state)
        for i, (u, r) in enumerate(zip(unrefined, refined)):
            assert not torch.equal(u, r), f"{path} path: state {i} was not refined"
        results[path] = refined
    for a, b in zip(results["fast"], results["reference"]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_states_the_output_never_reads_are_declared():
    """sr with output='base' regularizes a state that no output of the window reads: dL/dh_T is exactly
    0 there, so the refinement leaves it (every other cell's outputs read all of its final state)."""
    cell = get_cell("sr")(INPUT, HIDDEN, base="lstm", state_index=1, output="base")
    assert [cell.output_reads_state(i) for i in range(2)] == [True, False]
    cell = get_cell("sr")(INPUT, HIDDEN, base="lstm", state_index=1, output="state")
    assert [cell.output_reads_state(i) for i in range(2)] == [False, True]
    for name in ("delta-rnn", "lstm", "scrn", "irlm", "ran", "gru"):
        cell = get_cell(name)(INPUT, HIDDEN)
        assert all(cell.output_reads_state(i) for i in range(len(cell.state_sizes))), name


def test_refinement_refuses_a_state_the_gradient_did_not_reach():
    """A final state that the outputs read but that got no gradient is a bug of the path that made it,
    not something to skip silently."""
    from dsf_lightning.model import LMConfig, RecurrentLM

    model = RecurrentLM(LMConfig(vocab_size=7, cell="lstm", hidden_sizes=[4], embedding_size=3))
    tokens = torch.randint(0, 7, (2, 5))
    logits, final = model(tokens)
    h, c = final[0]
    h.retain_grad(), c.retain_grad()
    detached_c = c.detach().requires_grad_()  # a final state cut off the loss graph
    logits.sum().backward()
    carried = ((h.detach(), c.detach()),)
    refined = refine_carried_state(model, ((h, c),), carried, STEP)
    assert not torch.equal(refined[0][0], h.detach())
    with pytest.raises(RuntimeError, match="no gradient reached.*state 1 of layer 0"):
        refine_carried_state(model, ((h, detached_c),), carried, STEP)


class _Losses:
    def __init__(self):
        import lightning as L

        class Record(L.Callback):
            def on_train_batch_end(inner, trainer, module, outputs, batch, batch_idx):
                self.values.append(float(outputs["loss"]))

        self.values, self.callback = [], Record()


@pytest.mark.parametrize("cell", ["delta-rnn", "scrn", "irlm"])
def test_lm_train_losses_change_with_iterative_inference_on_the_default_path(toy_corpus, cell):
    """The user-level symptom: with lambda > 0 the carried state moves, so from the second window on
    the training losses differ from lambda = 0 (they were identical on the fast paths)."""
    import lightning as L

    runs = {}
    # the IRLM's default r = 0 would carry nothing into the next window: give it memory (r = 0.5)
    options = {"r_init": 0.5} if cell == "irlm" else {}
    for step in (0.0, 0.5):
        L.seed_everything(0, verbose=False)
        module, data = toy_modules(toy_corpus, cell=cell, cell_options=options, iterative_inference_step=step)
        assert getattr(module.model.layers[0], "implementation", "fast") == "fast"
        losses = _Losses()
        quiet_trainer(max_steps=4, callbacks=[losses.callback], limit_val_batches=0).fit(module, data)
        runs[step] = losses.values
    assert len(runs[0.0]) == len(runs[0.5]) == 4
    assert runs[0.0][0] == runs[0.5][0]  # window 0 starts from zeros either way
    assert all(a != b for a, b in zip(runs[0.0][1:], runs[0.5][1:])), runs


@pytest.mark.parametrize("cell", ["delta-rnn", "lstm"])
def test_lm_refinement_is_lambda_times_the_gradient_of_the_summed_nll(toy_corpus, cell):
    """DSF eq. 15 sums the NLL over tokens; the refinement steps each stream's state along the gradient of
    that sum (not of the optimizer's mean per token, 1 / (B T) of it), also under gradient accumulation.
    Expected values: the window's summed cross-entropy differentiated here, in float64."""
    import copy

    import lightning as L
    import torch.nn.functional as F

    step = 0.3
    seen = []

    class Watch(L.Callback):
        def on_train_batch_start(inner, trainer, module, batch, batch_idx):
            carried = module._carried["train"]
            seen.append({"model": copy.deepcopy(module.model), "batch": [b.clone() for b in batch[:2]],
                         "start": None if batch_idx == 0 else tuple(tuple(s.clone() for s in l) for l in carried)})

        def on_train_batch_end(inner, trainer, module, outputs, batch, batch_idx):
            seen[-1]["end"] = tuple(tuple(s.clone() for s in l) for l in module._carried["train"])

    L.seed_everything(0, verbose=False)
    module, data = toy_modules(toy_corpus, cell=cell, iterative_inference_step=step)
    quiet_trainer(max_steps=1, accumulate_grad_batches=2, callbacks=[Watch()], limit_val_batches=0).fit(module, data)
    assert len(seen) == 2  # two windows, one optimizer step: both windows ran with the same weights
    for record in seen:
        model = record["model"].double().train()
        inputs, targets = record["batch"]
        start = None if record["start"] is None else tuple(tuple(s.double() for s in l) for l in record["start"])
        y, final = model.features(inputs, start)
        nll_sum = F.cross_entropy(model.decode(y).reshape(-1, model.config.vocab_size),
                                  targets.reshape(-1), reduction="sum")  # eq. 15
        flat = [s for layer in final for s in layer]
        grads = torch.autograd.grad(nll_sum, flat)
        want = [s.detach() - step * g for s, g in zip(flat, grads)]
        got = [s for layer in record["end"] for s in layer]
        assert any(float(g.abs().max()) > 1e-3 for g in grads)
        for w, g in zip(want, got):
            torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=2e-5)
