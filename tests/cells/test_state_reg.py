"""The state-regularized wrappers (sr-RNN, Wang & Niepert 2019, eqs 1-6): hand computations of one
step, the temperature limits, the transition probabilities, the options and the parameter counts."""

import math

import pytest
import torch
from torch import nn

from dsf_lightning.cells import CellOptionError, UnknownCellError, get_cell
from dsf_lightning.cells.state_reg import StateRegularizedCell

B, T, I, H = 4, 6, 3, 5


def build(name="sr", input_size=I, hidden_size=H, seed=0, **options):
    torch.manual_seed(seed)
    return get_cell(name)(input_size, hidden_size, **options).double().eval()


def seq(batch=B, steps=T, input_size=I, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, steps, input_size, generator=g, dtype=torch.float64)


def rand(*shape, seed=2, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(*shape, generator=g, dtype=torch.float64)


def elman_delta_sr(**options):
    """``sr`` over delta-rnn with the Elman inner function and explicit float64 parameters."""
    cell = build(base="delta-rnn", base_options={"inner": "elman"}, **options)
    k = cell.k
    with torch.no_grad():
        cell.base.W.copy_(rand(H, I, seed=10, scale=0.7))
        cell.base.V.copy_(rand(H, H, seed=11, scale=0.7))
        cell.base.b.copy_(rand(H, seed=12, scale=0.3))
        cell.base.b_r.copy_(rand(H, seed=13, scale=0.3))
        cell.centroids.copy_(rand(k, H, seed=14, scale=0.6))
    return cell


def hand_delta_elman(cell, x, h_prev):
    """Eq. 1 for the late-integration Delta-RNN with an Elman inner function, written out."""
    W, V, b, b_r = cell.base.W, cell.base.V, cell.base.b, cell.base.b_r
    Wx = x @ W.T
    z = torch.tanh(h_prev @ V.T + Wx + b)
    r = torch.sigmoid(Wx + b_r)
    return (1 - r) * z + r * h_prev  # identity outer activation


def hand_alpha(u, S, tau, score):
    """Eqs 3 / 4 written out per centroid, normalized by an explicit sum."""
    k = S.shape[0]
    cols = []
    for i in range(k):
        if score == "dot":
            cols.append((u * S[i]).sum(-1))
        else:
            cols.append(-((u - S[i]) ** 2).sum(-1).sqrt())
    scores = torch.stack(cols, -1)
    e = torch.exp(scores / tau)
    return e / e.sum(-1, keepdim=True)


# -- (a) one step equals the hand computation of eqs 1-6 -----------------------------------------------
@pytest.mark.parametrize("score", ["dot", "distance"])
@pytest.mark.parametrize("tau", [1.0, 0.37])
def test_soft_step_is_eqs_1_to_6_by_hand(score, tau):
    cell = elman_delta_sr(k=4, tau=tau, score=score, mode="soft")
    x, h_prev = rand(B, I, seed=20), rand(B, H, seed=21, scale=0.5)
    with torch.no_grad():
        out, (h,), alpha = cell.step_with_probs(x, (h_prev,))
        u = hand_delta_elman(cell, x, h_prev)  # eq. 1
        want_alpha = hand_alpha(u, cell.centroids, tau, score)  # eqs 2-4
        want_h = sum(want_alpha[:, i : i + 1] * cell.centroids[i] for i in range(4))  # eq. 6
    torch.testing.assert_close(alpha, want_alpha, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(h, want_h, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(out, want_h, rtol=1e-12, atol=1e-14)
    assert not torch.allclose(h, u)  # the state really was replaced


@pytest.mark.parametrize("mode", ["hard", "sample"])
def test_hard_and_eval_sample_step_is_the_argmax_centroid(mode):
    cell = elman_delta_sr(k=4, mode=mode)  # eval mode: "sample" takes the most probable centroid
    x, h_prev = rand(B, I, seed=22), rand(B, H, seed=23, scale=0.5)
    with torch.no_grad():
        _, (h,), alpha = cell.step_with_probs(x, (h_prev,))
        u = hand_delta_elman(cell, x, h_prev)
        want_alpha = hand_alpha(u, cell.centroids, 1.0, "dot")
    torch.testing.assert_close(alpha, want_alpha, rtol=1e-12, atol=1e-14)
    assert torch.equal(h, cell.centroids[want_alpha.argmax(-1)])  # exactly a centroid (eq. 5's value)


def test_sr_gru_step_is_the_gru_step_then_the_stochastic_component():
    cell = build("sr-gru", k=3, tau=0.8)
    x, h_prev = rand(B, I, seed=24), rand(B, H, seed=25, scale=0.5)
    with torch.no_grad():
        out, (h,), alpha = cell.step_with_probs(x, (h_prev,))
        _, (u,) = cell.base.step(x, (h_prev,))  # eq. 1 from the wrapped GRU itself
        want_alpha = hand_alpha(u, cell.centroids, 0.8, "dot")
        want_h = want_alpha @ cell.centroids
    torch.testing.assert_close(alpha, want_alpha, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(h, want_h, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(out, want_h, rtol=1e-12, atol=1e-14)


def test_next_step_reads_the_regularized_state():
    """Two steps by hand: step 2's eq. 1 takes the mixture of step 1, not u_1 (sec. 3.2)."""
    cell = elman_delta_sr(k=3, tau=0.5)
    x = seq(steps=2)
    h0 = rand(B, H, seed=26, scale=0.5)
    with torch.no_grad():
        out, _ = cell(x, (h0,))
        h = h0
        for t in range(2):
            u = hand_delta_elman(cell, x[:, t], h)
            h = hand_alpha(u, cell.centroids, 0.5, "dot") @ cell.centroids
            torch.testing.assert_close(out[:, t], h, rtol=1e-12, atol=1e-14)


def test_sr_lstm_regularizes_h_and_leaves_the_cell_state_free():
    cell = build("sr-lstm", k=3, mode="hard")
    h_prev, c_prev = rand(B, H, seed=27, scale=0.5), rand(B, H, seed=28, scale=0.5)
    x = rand(B, I, seed=29)
    with torch.no_grad():
        out, (h, c), alpha = cell.step_with_probs(x, (h_prev, c_prev))
        _, (u, c_base) = cell.base.step(x, (h_prev, c_prev))
    assert torch.equal(c, c_base)  # c is the LSTM's own cell state
    assert torch.equal(h, cell.centroids[alpha.argmax(-1)])  # h is a centroid
    torch.testing.assert_close(alpha, hand_alpha(u, cell.centroids, 1.0, "dot"), rtol=1e-12, atol=1e-14)
    assert torch.equal(out, h)


def test_generic_wrapper_can_regularize_the_lstm_cell_state():
    cell = build(base="lstm", state_index=1, k=3, mode="hard", output="base")
    h_prev, c_prev = rand(B, H, seed=30, scale=0.5), rand(B, H, seed=31, scale=0.5)
    x = rand(B, I, seed=32)
    with torch.no_grad():
        out, (h, c), alpha = cell.step_with_probs(x, (h_prev, c_prev))
        base_out, (h_base, c_base) = cell.base.step(x, (h_prev, c_prev))
    assert torch.equal(h, h_base) and torch.equal(out, base_out)
    torch.testing.assert_close(alpha, hand_alpha(c_base, cell.centroids, 1.0, "dot"), rtol=1e-12, atol=1e-14)
    assert torch.equal(c, cell.centroids[alpha.argmax(-1)])


def test_paper_models_wrap_the_right_lstm():
    assert build("sr-lstm").base.peepholes is False
    assert build("sr-lstm-p").base.peepholes is True
    assert build("sr-gru").base.cell_name == "gru"
    plain, peep = build("sr-lstm", seed=3), build("sr-lstm-p", seed=3)
    assert sum(p.numel() for p in peep.parameters()) > sum(p.numel() for p in plain.parameters())


# -- eq. 5 (sampling) in training, and the straight-through gradient -----------------------------
def test_training_sample_draws_centroids_with_the_transition_probabilities():
    cell = elman_delta_sr(k=3, tau=2.0, mode="sample").train()
    n = 20000
    x = rand(1, I, seed=33).expand(n, I)
    h_prev = rand(1, H, seed=34, scale=0.5).expand(n, H)
    torch.manual_seed(5)
    with torch.no_grad():
        _, (h,), alpha = cell.step_with_probs(x, (h_prev,))
    hits = (h.unsqueeze(1) == cell.centroids.detach()).all(-1)  # [n, k]
    assert torch.all(hits.sum(-1) == 1)  # each row is exactly one centroid (eq. 5)
    freq = hits.double().mean(0)
    assert alpha[0].min() > 0.05  # a case where sampling differs from the argmax
    torch.testing.assert_close(freq, alpha[0], atol=0.015, rtol=0)


def test_sampling_is_deterministic_in_eval_mode():
    cell = build(k=4, mode="sample", tau=3.0)
    x = seq()
    with torch.no_grad():
        torch.manual_seed(1)
        a, _ = cell(x)
        torch.manual_seed(2)
        b, _ = cell(x)
    assert torch.equal(a, b)


@pytest.mark.parametrize("mode", ["hard", "sample"])
def test_straight_through_gives_the_wrapped_cell_the_soft_gradient(mode):
    """Given the same choice, the wrapped cell's gradient through alpha is eq. 6's (straight-through)."""
    grads = {}
    w = rand(B, H, seed=35)
    for m in ("soft", mode):
        cell = elman_delta_sr(k=4, mode=m, tau=0.7).train()
        x, h_prev = rand(B, I, seed=36), rand(B, H, seed=37, scale=0.5)
        torch.manual_seed(9)
        out, _ = cell.step(x, (h_prev,))
        (out * w).sum().backward()
        grads[m] = {n: p.grad.clone() for n, p in cell.base.named_parameters()}
        grads[m + "-centroids"] = cell.centroids.grad.clone()
    for name, g in grads["soft"].items():
        torch.testing.assert_close(grads[mode][name], g, rtol=1e-10, atol=1e-12)
        assert g.abs().sum() > 0
    # the centroids' gradient differs: the chosen centroid's value gets it directly
    assert not torch.allclose(grads[mode + "-centroids"], grads["soft-centroids"])


# -- (b) temperature limits and k = 1 --------------------------------------------------------------
@pytest.mark.parametrize("score", ["dot", "distance"])
def test_soft_mixture_tends_to_the_best_centroid_as_tau_shrinks(score):
    x, h_prev = rand(B, I, seed=40), rand(B, H, seed=41, scale=0.5)
    errors = []
    for tau in (1.0, 0.1, 0.01, 1e-4):
        cell = elman_delta_sr(k=5, tau=tau, score=score)
        with torch.no_grad():
            _, (h,) = cell.step(x, (h_prev,))
            u = hand_delta_elman(cell, x, h_prev)
            if score == "dot":
                best = (u @ cell.centroids.T).argmax(-1)
            else:  # the nearest centroid
                best = torch.cdist(u, cell.centroids).argmin(-1)
            errors.append((h - cell.centroids[best]).abs().max().item())
    assert errors[0] > 1e-2  # at tau = 1 the mixture is a real mixture
    assert all(a > b for a, b in zip(errors, errors[1:]))  # decreasing with tau
    assert errors[-1] < 1e-8


def test_tau_can_be_annealed_and_is_validated():
    cell = build(k=3)
    x = seq()
    with torch.no_grad():
        p_hot = cell.transition_probabilities(x)
        cell.tau = 100.0
        p_cool = cell.transition_probabilities(x)
    assert cell.tau == 100.0
    # a higher temperature is closer to uniform: larger entropy everywhere
    entropy = lambda p: -(p * p.log()).sum(-1)  # noqa: E731
    assert torch.all(entropy(p_cool) > entropy(p_hot))
    torch.testing.assert_close(p_cool, torch.full_like(p_cool, 1 / 3), atol=0.05, rtol=0)
    with pytest.raises(CellOptionError, match="tau"):
        cell.tau = 0
    assert cell.tau == 100.0


@pytest.mark.parametrize("mode", ["soft", "hard", "sample"])
@pytest.mark.parametrize("score", ["dot", "distance"])
@pytest.mark.parametrize("name,options", [("sr", {}), ("sr-gru", {}), ("sr-lstm", {}), ("sr-lstm-p", {})])
def test_with_one_centroid_the_state_is_always_that_centroid(name, options, mode, score):
    cell = build(name, k=1, mode=mode, score=score, **options)
    if mode == "sample":
        cell.train()
    x = seq()
    state0 = tuple(rand(B, n, seed=42 + i) for i, n in enumerate(cell.state_sizes))
    with torch.no_grad():
        out, state, probs = cell.forward_with_probs(x, state0)
    s = cell.centroids[0]
    assert torch.equal(out, s.expand(B, T, H))
    assert torch.equal(state[0], s.expand(B, H))
    assert torch.equal(probs, torch.ones(B, T, 1, dtype=torch.float64))


# -- (c) the transition probabilities ------------------------------------------------------------
@pytest.mark.parametrize(
    "name,options",
    [
        ("sr", {}),
        ("sr", {"score": "distance", "mode": "hard", "k": 7}),
        ("sr", {"mode": "sample", "tau": 0.3}),
        ("sr-gru", {"k": 2}),
        ("sr-lstm", {}),
        ("sr-lstm-p", {"k": 5}),
    ],
)
def test_transition_probabilities_shape_simplex_and_same_path_as_forward(name, options):
    cell = build(name, **options)
    x = seq()
    state0 = tuple(rand(B, n, seed=50 + i, scale=0.5) for i, n in enumerate(cell.state_sizes))
    with torch.no_grad():
        out, state = cell(x, state0)
        out_p, state_p, probs = cell.forward_with_probs(x, state0)
        probs_only = cell.transition_probabilities(x, state0)
        st, step_probs = state0, []
        for t in range(T):
            _, st, p = cell.step_with_probs(x[:, t], st)
            step_probs.append(p)
    assert probs.shape == (B, T, cell.k)
    assert torch.all(probs >= 0)
    torch.testing.assert_close(probs.sum(-1), torch.ones(B, T, dtype=torch.float64), rtol=0, atol=1e-12)
    assert torch.equal(out, out_p) and all(torch.equal(a, b) for a, b in zip(state, state_p))
    assert torch.equal(probs, probs_only)
    torch.testing.assert_close(torch.stack(step_probs, 1), probs, rtol=1e-10, atol=1e-12)
    assert probs.std() > 0  # not constant: they depend on the input


def test_state_masks_pass_through_forward_step_and_probabilities():
    """Recurrent (variational) dropout masks from the model reach the wrapped step unchanged."""
    cell = build("sr-lstm", k=4)
    assert cell.recurrent_state_index == cell.base.recurrent_state_index
    x = seq()
    masks = ((rand(B, H, seed=60) > 0).double() * 2.0, None)
    with torch.no_grad():
        out, state = cell(x, state_masks=masks)
        out_p, state_p, probs = cell.forward_with_probs(x, state_masks=masks)
        st, outs, step_probs = None, [], []
        for t in range(T):
            o, st, p = cell.step_with_probs(x[:, t], st, state_masks=masks)
            outs.append(o)
            step_probs.append(p)
        unmasked = cell.transition_probabilities(x)
    assert torch.equal(out, out_p) and all(torch.equal(a, b) for a, b in zip(state, state_p))
    torch.testing.assert_close(torch.stack(outs, 1), out, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(torch.stack(step_probs, 1), probs, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(probs[:, 1:], unmasked[:, 1:])  # the masks were applied


def test_probabilities_are_not_collected_outside_forward_with_probs():
    cell = build(k=3)
    with torch.no_grad():
        cell.transition_probabilities(seq())
        assert cell._probs_sink is None
        cell(seq())  # a plain forward keeps nothing
    assert cell._probs_sink is None


def test_centroids_are_exposed_and_initialized_as_in_the_paper():
    cell = get_cell("sr")(I, 40, k=200)
    assert isinstance(cell.centroids, nn.Parameter) and cell.centroids.shape == (200, 40)
    assert cell.centroids.abs().max() <= 0.5  # U(-0.5, 0.5), sec. 3.3
    assert cell.centroids.min() < -0.45 and cell.centroids.max() > 0.45


def test_unregularized_step_is_the_base_cell_alone():
    cell = build(k=3)
    x, h_prev = rand(B, I, seed=55), rand(B, H, seed=56, scale=0.5)
    with torch.no_grad():
        out, (h,) = cell.unregularized_step(x, (h_prev,))
        want, _ = cell.base.step(x, (h_prev,))
        reg, _ = cell.step(x, (h_prev,))
    torch.testing.assert_close(out, want)
    assert not torch.allclose(out, reg)


def test_output_base_keeps_the_base_output_and_size():
    cell = build(base="lstm", state_index=1, output="base")
    assert cell.output_size == cell.base.output_size
    plain = build(k=4, output="base")
    x, h_prev = rand(B, I, seed=57), rand(B, H, seed=58, scale=0.5)
    with torch.no_grad():
        out, (h,) = plain.step(x, (h_prev,))
        base_out, _ = plain.base.step(x, (h_prev,))
    assert torch.equal(out, base_out) and not torch.allclose(out, h)


# -- (d) options -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "options,match",
    [
        ({"k": 0}, "k must be"),
        ({"k": -3}, "k must be"),
        ({"k": 2.5}, "k must be"),
        ({"k": True}, "k must be"),
        ({"tau": 0}, "tau"),
        ({"tau": 0.0}, "tau"),
        ({"tau": -1.0}, "tau"),
        ({"tau": float("nan")}, "tau"),
        ({"tau": float("inf")}, "tau"),
        ({"tau": "1"}, "tau"),
        ({"score": "cosine"}, "score"),
        ({"mode": "gumbel"}, "mode"),
        ({"output": "both"}, "output"),
        ({"state_index": 1}, "state_index"),  # delta-rnn has one state tensor
        ({"state_index": -1}, "state_index"),
        ({"state_index": True}, "state_index"),
        ({"base_options": ["inner", "elman"]}, "base_options"),
        ({"base": "lstm", "state_index": 2}, "state_index"),
    ],
)
def test_bad_options_raise_naming_the_option(options, match):
    with pytest.raises(CellOptionError, match=match):
        get_cell("sr")(I, H, **options)


def test_unknown_base_raises_unknown_cell_error():
    with pytest.raises(UnknownCellError, match="no-such-cell"):
        get_cell("sr")(I, H, base="no-such-cell")
    with pytest.raises(UnknownCellError, match="Did you mean 'gru'"):
        get_cell("sr")(I, H, base="gruu")


def test_base_options_reach_the_base_cell_and_are_validated_by_it():
    cell = get_cell("sr")(I, H, base_options={"inner": "second-order"})
    assert cell.base.inner == "second-order"
    with pytest.raises(CellOptionError, match="inner"):
        get_cell("sr")(I, H, base_options={"inner": "nope"})
    with pytest.raises(TypeError):
        get_cell("sr")(I, H, base_options={"no_such_option": 1})


@pytest.mark.parametrize("name", ["sr-gru", "sr-lstm", "sr-lstm-p"])
def test_paper_models_validate_their_options(name):
    bad_options = (
        ({"k": 0}, "k must be"),
        ({"tau": 0}, "tau"),
        ({"score": "l1"}, "score"),
        ({"mode": "x"}, "mode"),
    )
    for bad, match in bad_options:
        with pytest.raises(CellOptionError, match=match):
            get_cell(name)(I, H, **bad)
    with pytest.raises(TypeError):  # the base and the regularized state are fixed by the model
        get_cell(name)(I, H, base="delta-rnn")
    with pytest.raises(TypeError):
        get_cell(name)(I, H, state_index=1)


@pytest.mark.parametrize("name", ["sr-lstm", "sr-lstm-p"])
def test_lstm_models_fix_peepholes(name):
    with pytest.raises(CellOptionError, match="peepholes"):
        get_cell(name)(I, H, base_options={"peepholes": True})


# -- (e) parameter counts -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,options,base,base_options",
    [
        ("sr", {"k": 7}, "delta-rnn", {}),
        ("sr", {"k": 2, "base": "delta-rnn-ln"}, "delta-rnn-ln", {}),
        ("sr", {"k": 3, "base_options": {"inner": "elman"}}, "delta-rnn", {"inner": "elman"}),
        ("sr", {"k": 4, "base": "lstm", "state_index": 1}, "lstm", {}),
        ("sr-gru", {"k": 50}, "gru", {}),
        ("sr-lstm", {"k": 5}, "lstm", {"peepholes": False}),
        ("sr-lstm-p", {"k": 1000}, "lstm", {"peepholes": True}),
    ],
)
def test_parameter_count_is_base_plus_k_times_d(name, options, base, base_options):
    cell = get_cell(name)(I, H, **options)
    reference = get_cell(base)(I, H, **base_options)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    d = reference.state_sizes[options.get("state_index", 0)]
    assert count(cell) == count(reference) + cell.k * d
    assert cell.k == options["k"] and cell.centroids.shape == (cell.k, d)
    names = {n for n, _ in cell.named_parameters()}
    assert names == {"centroids"} | {f"base.{n}" for n, _ in reference.named_parameters()}


def test_sizes_follow_the_base_cell():
    cell = get_cell("sr")(I, H, base="lstm")
    assert cell.state_sizes == cell.base.state_sizes == (H, H)
    assert cell.output_size == H and cell.state_size == H
    assert isinstance(cell, StateRegularizedCell)
    assert [tuple(s.shape) for s in cell.init_state(2)] == [(2, H), (2, H)]


def test_sr_rnn_learns_a_two_state_task():
    """A smoke test of end-to-end training (eq. 6): the parity of the ones seen so far, k = 2."""
    torch.manual_seed(0)
    cell = get_cell("sr-gru")(1, 8, k=2)
    head = nn.Linear(8, 2)
    opt = torch.optim.Adam([*cell.parameters(), *head.parameters()], lr=0.05)
    x = torch.randint(0, 2, (64, 8, 1)).float()
    y = (x.squeeze(-1).cumsum(1) % 2).long()
    for _ in range(150):
        out, _ = cell(x)
        loss = nn.functional.cross_entropy(head(out).reshape(-1, 2), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    cell.eval()
    with torch.no_grad():
        acc = (head(cell(x)[0]).argmax(-1) == y).double().mean().item()
        probs = cell.transition_probabilities(x)
    assert acc > 0.95 and not math.isnan(loss.item())
    # sec. 3.1: the most probable centroid is the automaton's state; here it must encode the parity
    state = probs.argmax(-1)
    agree = max((state == y).double().mean().item(), (state != y).double().mean().item())
    assert agree > 0.95
