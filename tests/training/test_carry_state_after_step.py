"""``carry_state_after_step``: the next training window starts from the state after k steps of this one (the SCRN
paper's released TensorFlow script carries ``outputs[4]``), while the loss stays the whole window's. Checked
against SCRN eqs 1-3 written here, with the real Lightning Trainer on the toy corpus."""

import math

import pytest
import torch

from dsf_lightning.training import LanguageModelModule

from .conftest import quiet_trainer, toy_modules


class Recording(LanguageModelModule):
    """Records each training window's inputs, targets, start state, loss and the weights it ran with."""

    def _training_loss(self, inputs, targets, state):
        loss, carried = super()._training_loss(inputs, targets, state)
        weights = {name: p.detach().clone() for name, p in self.named_parameters()}
        weights.update({name: b.detach().clone() for name, b in self.named_buffers()})
        start = tuple(s.detach().clone() for s in state[0])
        self.seen.append((inputs.clone(), targets.clone(), start, float(loss.detach()), weights))
        return loss, carried


def scrn_window(weights, inputs, targets, start, steps=None):
    """SCRN eqs 1-2 (one-hot x_t, row vectors) and the softmax of eq. 3 over [s_t; h_t]: the window's mean
    NLL and the state (s, h) after ``steps`` steps (all of them when None)."""
    A, B = weights["model.layers.0.A"], weights["model.layers.0.B"]  # [H, V], [S, V]
    P, R, b = weights["model.layers.0.P"], weights["model.layers.0.R"], weights["model.layers.0.b"]
    alpha = float(weights["model.layers.0.alpha_fixed"])
    W, c = weights["model.decoder.weight"], weights["model.decoder.bias"]
    s, h = start
    nll, kept = 0.0, None
    for t in range(inputs.shape[1]):
        x = inputs[:, t]
        s = (1 - alpha) * B[:, x].T + alpha * s
        h = torch.sigmoid(A[:, x].T + s @ P.T + h @ R.T + b)
        logp = torch.log_softmax(torch.cat((s, h), 1) @ W.T + c, -1)
        nll -= logp.gather(1, targets[:, t : t + 1]).sum().item()
        if steps is not None and t + 1 == steps:
            kept = (s, h)
    return nll / targets.numel(), kept if steps is not None else (s, h)


def train(toy_corpus, k):
    module, data = toy_modules(toy_corpus, bptt=7)
    module = Recording(vocab_size=data.vocab_size, cell="scrn", cell_options={"context_size": 3},
                       hidden_sizes=[6], embedding_size=0, optimizer="sgd", lr=0.5, carry_state_after_step=k)
    module.seen = []
    quiet_trainer(max_epochs=1, limit_val_batches=0).fit(module, data)
    return module.seen


@pytest.mark.parametrize("k", [2, None])
def test_the_next_window_starts_from_the_state_after_k_steps_and_the_loss_is_the_whole_windows(toy_corpus, k):
    seen = train(toy_corpus, k)
    assert len(seen) > 50
    for (inputs, targets, start, loss, weights), following in zip(seen, seen[1:] + [None]):
        want_loss, want_carry = scrn_window(weights, inputs, targets, start, steps=k)
        assert math.isclose(loss, want_loss, rel_tol=1e-5), (loss, want_loss)
        if following is not None:
            for got, want in zip(following[2], want_carry):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    if k is not None:  # the option changes training: the start is not the previous window's last state
        inputs, targets, start, _, weights = seen[0]
        _, last = scrn_window(weights, inputs, targets, start)
        assert not torch.allclose(seen[1][2][1], last[1], atol=1e-3)


def test_a_window_no_longer_than_k_carries_its_last_state(toy_corpus):
    seen = train(toy_corpus, 7)  # bptt 7: every window is at most 7 steps
    for (inputs, targets, start, _, weights), following in zip(seen, seen[1:]):
        _, last = scrn_window(weights, inputs, targets, start)
        for got, want in zip(following[2], last):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "5"])
def test_a_bad_step_count_is_refused(bad):
    with pytest.raises(ValueError, match="carry_state_after_step must be a number of steps >= 1"):
        LanguageModelModule(vocab_size=13, hidden_sizes=[8], carry_state_after_step=bad)


def test_it_cannot_be_combined_with_iterative_inference():
    with pytest.raises(ValueError, match="carry_state_after_step and iterative_inference_step cannot be combined"):
        LanguageModelModule(vocab_size=13, hidden_sizes=[8], carry_state_after_step=5, iterative_inference_step=0.1)
