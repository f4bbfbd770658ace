"""The fused decoder loss (linear_cross_entropy, LanguageModelModule's ``fused_loss``) equals the plain
F.cross_entropy(F.linear(...)) in float64: loss and every gradient; the option really switches the path."""

import pytest
import torch
import torch.nn.functional as F

from dsf_lightning.ops import linear_cross_entropy as lce_module
from dsf_lightning.ops.linear_cross_entropy import CHUNK_ROWS, linear_cross_entropy
from dsf_lightning.training import LanguageModelModule


def _plain(y, w, b, t):
    """Written from the definition: -sum_n log softmax(y_n W^T + b)_{t_n}."""
    logits = y @ w.t() + (0 if b is None else b)
    return -(logits - torch.logsumexp(logits, 1, keepdim=True)).gather(1, t[:, None]).sum()


@pytest.mark.parametrize("rows", [1, CHUNK_ROWS, 2 * CHUNK_ROWS + 7])
@pytest.mark.parametrize("with_bias", [True, False])
def test_loss_and_gradients_equal_the_plain_softmax_in_float64(rows, with_bias):
    g = torch.Generator().manual_seed(rows)
    y = torch.randn(rows, 12, dtype=torch.float64, generator=g, requires_grad=True)
    w = (3 * torch.randn(50, 12, dtype=torch.float64, generator=g)).requires_grad_()  # large logits: the max shift matters
    b = torch.randn(50, dtype=torch.float64, generator=g).requires_grad_() if with_bias else None
    t = torch.randint(0, 50, (rows,), generator=g)
    inputs = (y, w) if b is None else (y, w, b)
    fused = linear_cross_entropy(y, w, b, t)
    plain = _plain(y, w, b, t)
    torch.testing.assert_close(fused, plain, rtol=1e-13, atol=0)
    for a, c in zip(torch.autograd.grad(2.5 * fused, inputs), torch.autograd.grad(2.5 * plain, inputs)):
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-13)


def test_float32_through_onednn_agrees_with_f_cross_entropy():
    g = torch.Generator().manual_seed(0)
    y = torch.randn(300, 64, generator=g, requires_grad=True)
    w = (0.1 * torch.randn(2000, 64, generator=g)).requires_grad_()
    b = torch.randn(2000, generator=g).requires_grad_()
    t = torch.randint(0, 2000, (300,), generator=g)
    fused = linear_cross_entropy(y, w, b, t)
    plain = F.cross_entropy(F.linear(y, w, b), t, reduction="sum")
    torch.testing.assert_close(fused, plain, rtol=1e-6, atol=0)
    for a, c in zip(torch.autograd.grad(fused, (y, w, b)), torch.autograd.grad(plain, (y, w, b))):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-6)


def test_a_second_backward_is_refused_and_bad_shapes_named():
    y = torch.randn(4, 3, requires_grad=True)
    loss = linear_cross_entropy(y, torch.randn(5, 3), None, torch.tensor([0, 1, 2, 3]))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="runs once"):
        loss.backward()
    with pytest.raises(ValueError, match=r"expected y \[N, D\], weight \[V, D\], targets \[N\]"):
        linear_cross_entropy(y, torch.randn(5, 3), None, torch.tensor([0, 1]))


def _module(**kwargs):
    torch.manual_seed(0)
    return LanguageModelModule(vocab_size=40, **{"hidden_sizes": [16], "embedding_size": 16, **kwargs}).double()


@pytest.mark.parametrize("tied,options", [
    (False, {}), (True, {}),
    # SCRN Table 2's configuration: one-hot input (no embedding), the decoder reads [h_t; s_t]
    (False, {"cell": "scrn", "cell_options": {"context_size": 4}, "embedding_size": 0}),
], ids=["untied", "tied", "scrn-one-hot"])
def test_the_training_loss_and_gradients_equal_the_plain_path_in_float64(tied, options, monkeypatch):
    calls = []
    real = lce_module.linear_cross_entropy
    monkeypatch.setattr("dsf_lightning.training.language_model.linear_cross_entropy",
                        lambda *a: calls.append(1) or real(*a))
    g = torch.Generator().manual_seed(1)
    inputs, targets = torch.randint(0, 40, (3, 9), generator=g), torch.randint(0, 40, (3, 9), generator=g)
    results = {}
    for fused in (True, False):
        module = _module(fused_loss=fused, tie_weights=tied, **options)
        module.train()
        loss, _ = module._training_loss(inputs, targets, None)
        loss.backward()
        results[fused] = (loss.detach(), {n: p.grad.clone() for n, p in module.named_parameters()})
    assert len(calls) == 1  # the fused path ran for fused_loss=True only
    torch.testing.assert_close(results[True][0], results[False][0], rtol=1e-13, atol=0)
    for name, grad in results[True][1].items():
        torch.testing.assert_close(grad, results[False][1][name], rtol=1e-11, atol=1e-14, msg=name)


def test_the_option_is_checked_and_skipped_where_it_cannot_apply():
    with pytest.raises((TypeError, ValueError), match="fused_loss"):
        LanguageModelModule(vocab_size=40, fused_loss="yes")
    module = _module()
    y = torch.randn(2, 3, 16, dtype=torch.float64)
    assert module._fused_loss_applies(y)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not module._fused_loss_applies(y)
    assert not _module(compile=True)._fused_loss_applies(y)
    assert not _module(fused_loss=False)._fused_loss_applies(y)
