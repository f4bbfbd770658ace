"""Tests that catch a careless refactor (issue 38): each pins a behaviour that a mutation of the code once
changed without any test noticing. The expected values are computed here from the papers' equations or the
documented contract, not through the library's own reference paths. ``tests/mutations.py`` applies the
mutations these tests must kill (``python -m tests.mutations``).

(b) evaluation draws no dropout mask anywhere (embedding, input, recurrent, output, DSF eq. 12's inner dropout):
    the logits equal those of the same weights without dropout, and the global RNG is not advanced;
(c) every mask the LM draws is inverted dropout: each entry is 0 or exactly 1/(1-p), so its mean is 1;
(d) IRLM ``r_parametrization: direct``: at the bounds the clamp passes the gradient straight through, so
    ``dL/drho`` is the ``dL/dr`` of the recurrence x_t = W y_t + r x_{t-1} (IRLM sec. 3) written here;
(f) generation reports the model's own log-probabilities (temperature 1, no top-k / top-p / ban_unk
    filtering), whatever it samples from.

The other three of the round sit beside the tests of their modules: (a) the matrix peepholes under variational
dropout in ``tests/cells/test_variational_dropout.py``, (e) a resume with another valid / test split in
``tests/training/test_resume_layout.py``, (g) ``importlib.import_module`` in ``tests/test_layering.py``.
"""

from __future__ import annotations

import copy

import pytest
import torch

from dsf_lightning.cells import get_cell
from dsf_lightning.model import LMConfig, RecurrentLM

F64 = torch.float64
P = 0.3  # a drop probability whose scale 1/(1-p) = 1.428... cannot be mistaken for 1 or 2


# -- (b) no masks in evaluation -------------------------------------------------------------------------------
DROPOUTS = dict(dropout_embedding=P, dropout_input=P, dropout_hidden=P, dropout_output=P)


@pytest.mark.parametrize(
    "cell,cell_options,variational",
    [("lstm", {"peepholes": "matrix"}, True), ("lstm", {}, False), ("delta-rnn", {"dropout": P}, True), ("gru", {}, True)],
    ids=["lstm-matrix-variational", "lstm-naive", "delta-rnn-eq12", "gru"],
)
def test_evaluation_draws_no_dropout_mask(cell, cell_options, variational):
    torch.manual_seed(0)
    dropouts = DROPOUTS if variational else {**DROPOUTS, "dropout_hidden": 0.0}  # h dropout is variational only
    config = LMConfig(vocab_size=17, cell=cell, hidden_sizes=[8, 8], embedding_size=8, cell_options=cell_options,
                      variational=variational, **dropouts)
    model = RecurrentLM(config).double()
    plain_options = {k: v for k, v in cell_options.items() if k != "dropout"}
    plain = RecurrentLM(LMConfig(vocab_size=17, cell=cell, hidden_sizes=[8, 8], embedding_size=8,
                                 cell_options=plain_options)).double()
    plain.load_state_dict(model.state_dict())
    tokens = torch.randint(0, 17, (4, 9), generator=torch.Generator().manual_seed(1))
    model.eval()
    plain.eval()
    rng = torch.get_rng_state()
    with torch.no_grad():
        got, got_state = model(tokens)
        again, _ = model(tokens)
        want, want_state = plain(tokens)
    assert torch.equal(torch.get_rng_state(), rng), "an evaluation forward drew random numbers (a dropout mask)"
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(again, want, rtol=0, atol=0)
    for a, b in zip(got_state, want_state):
        for u, v in zip(a, b):
            torch.testing.assert_close(u, v, rtol=0, atol=0)
    # and in training the same model does drop (the test above is not vacuous)
    model.train()
    with torch.no_grad():
        trained, _ = model(tokens)
    assert (trained - want).abs().max() > 1e-3


# -- (c) inverted dropout: 0 or 1/(1-p) --------------------------------------------------------------------
def _captured(model: RecurrentLM, tokens: torch.Tensor) -> dict:
    """The first layer's input and state masks, its raw output, and the features the decoder reads."""
    seen = {}

    def before(module, args, kwargs):
        seen["input"] = args[0].detach().clone()
        seen["masks"] = kwargs.get("state_masks")

    def after(module, args, output):
        seen["output"] = output[0].detach().clone()

    layer = model.layers[0]
    handles = [layer.register_forward_pre_hook(before, with_kwargs=True), layer.register_forward_hook(after)]
    try:
        with torch.no_grad():
            seen["features"], _ = model.features(tokens)
    finally:
        for h in handles:
            h.remove()
    return seen


def _check_inverted(ratio: torch.Tensor, what: str) -> None:
    """Every entry 0 or 1/(1-p) (a Bernoulli(1-p) mask scaled by 1/(1-p)), about a fraction p of zeros, mean 1."""
    scale = 1 / (1 - P)
    dropped = ratio.abs() < 1e-9
    kept = (ratio - scale).abs() < 1e-9 * scale
    assert bool((dropped | kept).all()), f"{what}: mask values {sorted(set(ratio.flatten().tolist()))[:6]} are not 0 or 1/(1-p)"
    assert abs(float(dropped.double().mean()) - P) < 0.06, f"{what}: {float(dropped.double().mean()):.3f} dropped, p = {P}"
    assert abs(float(ratio.double().mean()) - 1.0) < 0.1, f"{what}: mask mean {float(ratio.double().mean()):.3f}, not 1"


@pytest.mark.parametrize("which", ["dropout_embedding", "dropout_input", "dropout_hidden", "dropout_output"])
def test_every_lm_mask_is_scaled_by_one_over_keep_probability(which):
    V, E, Bsz, T = 320, 32, 64, 5
    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=V, cell="lstm", hidden_sizes=[E], embedding_size=E, variational=True,
                                 **{which: P})).double().train()
    tokens = torch.arange(V).view(Bsz, T)  # every word type once: the embedding mask is one draw per type
    seen = _captured(model, tokens)
    if which == "dropout_hidden":
        (mask, c_mask) = seen["masks"]
        assert c_mask is None  # only h, where V h_{t-1} reads it
        _check_inverted(mask, which)
        return
    if which == "dropout_output":
        _check_inverted(seen["features"] / seen["output"], which)
        return
    ratio = seen["input"] / model.embedding.weight.detach()[tokens]  # [B, T, E]
    if which == "dropout_input":  # variational: one mask per sequence, the same at every step
        torch.testing.assert_close(ratio, ratio[:, :1].expand_as(ratio), rtol=1e-12, atol=1e-12)
        ratio = ratio[:, 0]
    _check_inverted(ratio, which)


# -- (d) IRLM direct r: straight-through at the bounds --------------------------------------------------------
@pytest.mark.parametrize("implementation", ["fast", "reference"])
def test_irlm_direct_r_passes_the_gradient_straight_through_at_its_bounds(implementation):
    """x_t = W y_t + r * x_{t-1} (IRLM sec. 3), L = sum_t w_t . x_t: backwards G_T = w_T, G_t = w_t + r G_{t+1},
    dL/dr_j = sum_t G_t,j x_{t-1},j, evaluated at the clamped r. The direct parametrization promises
    d r / d rho = 1 also at the bounds, so dL/drho is that dL/dr for every unit, clamped or not."""
    I, H, Bsz, T = 3, 5, 2, 6
    cell = get_cell("irlm")(I, H, r_parametrization="direct", long_context_units=2).double()
    cell.implementation = implementation
    eps = torch.finfo(F64).eps
    with torch.no_grad():
        # an LCU above its range, one at its floor, a unit below -1, one exactly at +1, one inside
        cell.rho.copy_(torch.tensor([1.3, 0.7, -1.5, 1.0, 0.4], dtype=F64))
    r = torch.tensor([1.0 - eps, 0.7 + eps, -1.0 + eps, 1.0 - eps, 0.4], dtype=F64)  # eps inside the bounds
    torch.testing.assert_close(cell.r.detach(), r, rtol=0, atol=0)
    g = torch.Generator().manual_seed(2)
    y = torch.randn(Bsz, T, I, generator=g, dtype=F64)
    x0 = torch.randn(Bsz, H, generator=g, dtype=F64)
    w = torch.randn(Bsz, T, H, generator=g, dtype=F64)
    out, _ = cell(y, (x0,))
    (out * w).sum().backward()
    with torch.no_grad():
        Wy = y @ cell.W.t()
        xs = [x0]
        for t in range(T):
            xs.append(Wy[:, t] + r * xs[-1])
        G, dL_dr = torch.zeros(Bsz, H, dtype=F64), torch.zeros(H, dtype=F64)
        for t in reversed(range(T)):
            G = w[:, t] + r * G
            dL_dr += (G * xs[t]).sum(0)
    assert dL_dr.abs().min() > 1e-3
    torch.testing.assert_close(cell.rho.grad, dL_dr, rtol=1e-10, atol=1e-12)


# -- (f) generation reports the model's log-probabilities ----------------------------------------------------
@pytest.fixture(scope="module")
def scorer():
    from dsf_lightning import from_pretrained

    return from_pretrained("delta-rnn-ptb")


@pytest.mark.parametrize(
    "options",
    [dict(temperature=0.5), dict(temperature=1.7, top_k=4), dict(top_p=0.3, ban_unk=True)],
    ids=["temperature", "temperature+top_k", "top_p+ban_unk"],
)
def test_generation_logprobs_are_the_models_at_temperature_one_without_filtering(scorer, options):
    """Each reported logprob is log softmax(logits)[token] of the model reading <eos>, the prompt and the tokens
    so far from the zero state (float64), never the tempered or filtered distribution it sampled from."""
    model = copy.deepcopy(scorer.model).double().eval()
    samples = scorer.generate("the market", max_new_tokens=5, seed=3, num_samples=3, **options)
    prompt = [scorer.vocab.eos_id, *scorer.vocab.encode("the market".split())]
    for sample in samples:
        prefix = list(prompt)
        for token, reported in zip(sample.ids, sample.logprobs):
            with torch.no_grad():
                y, _ = model.features(torch.tensor([prefix]))
                want = torch.log_softmax(model.decode(y[0, -1]), dim=-1)[token]
            assert reported == pytest.approx(float(want), abs=1e-4), (options, prefix, token)
            prefix.append(token)


# -- the harness (tests/mutations.py) stays applicable -----------------------------------------------------
def test_every_mutation_of_the_harness_still_applies_and_names_existing_tests():
    """A refactor that moves a mutated line must move its mutation too (docs/contributing.md, "The mutation
    habit"): each text is in its file exactly once, and each test it names exists."""
    import ast
    from pathlib import Path

    from tests.mutations import MUTATIONS, ROOT, check

    assert len({m.name for m in MUTATIONS}) == len(MUTATIONS) >= 17
    for m in MUTATIONS:
        assert check(m) is None, f"{m.name}: {check(m)}"
        assert m.old != m.new and m.tests, m.name
        for node in m.tests:
            file, _, test = node.partition("::")
            path = Path(ROOT, file)
            assert path.is_file(), f"{m.name}: no test file {file}"
            if test:
                names = {f.name for f in ast.walk(ast.parse(path.read_text())) if isinstance(f, ast.FunctionDef)}
                assert test in names, f"{m.name}: no test {test} in {file}"


def test_the_harness_restores_a_file_and_keeps_an_edit_made_meanwhile(tmp_path):
    """The three states a mutated file can be found in when its tests end: as mutated (restored byte-identical),
    edited elsewhere by someone else (their edit kept, the mutation undone), or edited at the mutation (left
    as it is, with an error that names the kept original)."""
    from tests.mutations import Mutation, _restore

    filler = b"".join(b"# line %d of text the mutation's context does not reach\n" % i for i in range(6))
    original = b"def f(p):\n    return m / (1 - p)\n\n\n" + filler + b"# a comment\nx = 1\n"
    m = Mutation("t", "f.py", "return m / (1 - p)", "return m", ("tests",))
    mutated = original.replace(b"return m / (1 - p)", b"return m")
    path = tmp_path / "f.py"
    path.write_bytes(mutated)
    assert _restore(path, original, mutated, m) is None and path.read_bytes() == original
    path.write_bytes(mutated.replace(b"x = 1", b"x = 2"))  # an edit elsewhere, made while the tests ran
    assert "only the mutation undone" in _restore(path, original, mutated, m)
    assert path.read_bytes() == original.replace(b"x = 1", b"x = 2")
    path.write_bytes(original.replace(b"# a comment", b"# edited"))  # they undid it themselves (new is in old)
    assert "already undone" in _restore(path, original, mutated, m)
    assert path.read_bytes() == original.replace(b"# a comment", b"# edited")
    path.write_bytes(mutated.replace(b"return m", b"return m * 2"))  # an edit at the mutation: not guessed at
    with pytest.raises(RuntimeError, match="left as it is"):
        _restore(path, original, mutated, m)
    assert path.read_bytes() == mutated.replace(b"return m", b"return m * 2")
