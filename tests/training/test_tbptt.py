"""Truncated BPTT: chunked passes with carried state are exact, and detaching stops gradients."""

import pytest
import torch
import torch.nn.functional as F

from dsf_lightning.data.streams import StreamLayoutError, StreamWindows, batchify
from dsf_lightning.model import LMConfig, RecurrentLM, detach_state


def tiny_lm(cell, seed=0):
    torch.manual_seed(seed)
    return RecurrentLM(LMConfig(vocab_size=11, cell=cell, hidden_sizes=[5, 4], embedding_size=6)).double()


def nll_sum(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum")


@pytest.mark.parametrize("cell", ["delta-rnn", "lstm", "scrn", "irlm", "gru"])
def test_windows_with_carried_state_give_the_full_sequence_gradient(cell):
    model = tiny_lm(cell)
    tokens = torch.randint(0, 11, (3, 16), generator=torch.Generator().manual_seed(1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    model.zero_grad()
    nll_sum(model(inputs)[0], targets).backward()
    full = {n: p.grad.clone() for n, p in model.named_parameters()}

    model.zero_grad()
    state, total = None, 0.0
    for lo in range(0, 15, 4):  # windows of 4, 4, 4, 3 with the state carried, not detached
        logits, state = model(inputs[:, lo : lo + 4], state)
        total = total + nll_sum(logits, targets[:, lo : lo + 4])
    total.backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, full[n], rtol=1e-10, atol=1e-12, msg=n)


def test_detaching_the_carried_state_stops_gradients_at_the_window():
    model = tiny_lm("delta-rnn")
    tokens = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(2))
    h0 = tuple(tuple(s.requires_grad_() for s in layer) for layer in model.init_state(2, dtype=torch.float64))
    logits1, state = model(tokens[:, :4], h0)
    for carried, expect_grad in ((state, True), (detach_state(state), False)):
        logits2, _ = model(tokens[:, 4:8], carried)
        grads = torch.autograd.grad(nll_sum(logits2, tokens[:, 5:9]), [s for layer in h0 for s in layer], allow_unused=True)
        reached = any(g is not None and g.abs().sum() > 0 for g in grads)
        assert reached == expect_grad


def test_streams_split_contiguously_across_ranks():
    tokens = torch.arange(103)
    whole = StreamWindows(tokens, batch_size=4, bptt=5)
    halves = [StreamWindows(tokens, batch_size=4, bptt=5, rank=r, world_size=2) for r in range(2)]
    assert whole.streams.shape == (4, 25)
    assert len(whole) == len(halves[0]) == 5  # 24 targets per stream in windows of 5
    for (x, y, _i), (x0, y0, _), (x1, y1, _) in zip(whole, *halves):
        torch.testing.assert_close(torch.cat([x0, x1]), x)
        torch.testing.assert_close(torch.cat([y0, y1]), y)
        torch.testing.assert_close(y[:, :-1], x[:, 1:])  # targets are the next tokens
    assert whole.window(4)[0].shape == (4, 4)  # the last window is shorter
    assert whole.num_tokens == 4 * 24


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: StreamWindows(torch.arange(50), batch_size=4, bptt=0), "bptt"),
        (lambda: StreamWindows(torch.arange(50), batch_size=4, bptt=-3), "bptt"),
        (lambda: StreamWindows(torch.arange(7), batch_size=4, bptt=5), "cannot fill 4 streams"),
        (lambda: StreamWindows(torch.arange(50), batch_size=3, bptt=5, world_size=2), "divisible"),
        (lambda: batchify(torch.arange(10).view(2, 5), 2), "1-D"),
        (lambda: batchify(torch.arange(10), 0), ">= 1"),
    ],
)
def test_impossible_layouts_are_clear_errors(make, message):
    with pytest.raises(StreamLayoutError, match=message):
        make()


def test_loader_resumes_after_the_window_the_module_trained_last():
    loader = StreamWindows(torch.arange(100), batch_size=2, bptt=5)
    loader.mark_trained(3)
    fresh = StreamWindows(torch.arange(100), batch_size=2, bptt=5)
    fresh.load_state_dict(loader.state_dict())
    assert [int(i) for _, _, i in fresh] == list(range(4, len(fresh)))
    assert [int(i) for _, _, i in fresh][0] == 0  # only one pass resumes
    with pytest.raises(StreamLayoutError, match="windows"):
        fresh.load_state_dict({"start": 99})
