"""``torch.compile`` of the language model (issue 15 item 6): the default fast paths compile, and the
training module's ``compile`` option really compiles (dynamo sees the model) and gives the loss and
gradients of the uncompiled model."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dsf_lightning.model import LMConfig, RecurrentLM
from dsf_lightning.training import LanguageModelModule

# sizes above fast_linear's threshold, so that eager mode takes the oneDNN paths that compile must avoid
V, H, B, T = 300, 64, 16, 4


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


def _loss_and_grads(model, call, inputs, targets):
    model.zero_grad()
    logits, _ = call(inputs)
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.slow
@pytest.mark.parametrize("cell", ["delta-rnn", "lstm"])  # the fused Delta-RNN loop; a SequenceLinear step loop
def test_compiled_model_equals_eager(cell):
    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=V, cell=cell, hidden_sizes=[H]))
    inputs, targets = _batch()
    want_loss, want_grads = _loss_and_grads(model, model, inputs, targets)
    torch._dynamo.reset()
    compiled = torch.compile(model)
    got_loss, got_grads = _loss_and_grads(model, compiled, inputs, targets)
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-5)
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def _module(compile_):
    torch.manual_seed(0)
    return LanguageModelModule(vocab_size=V, cell="delta-rnn", hidden_sizes=H, compile=compile_)


@pytest.mark.slow
def test_the_compile_option_compiles_and_gives_the_same_loss():
    from torch._dynamo.eval_frame import OptimizedModule
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    inputs, targets = _batch(1)
    plain, compiled = _module(False), _module(True)
    assert compiled.hparams.compile is True and plain.hparams.compile is False
    state = plain.model.init_state(B)
    want, _ = plain._training_loss(inputs, targets, state)
    want.backward()
    got, _ = compiled._training_loss(inputs, targets, state)
    got.backward()
    assert counters["stats"]["unique_graphs"] > 0  # dynamo captured the model
    assert set(compiled._compiled_fns) == {"features", "_decoded_nll"}
    assert not getattr(plain, "_compiled_fns", None)  # off by default: nothing compiled
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for a, b in zip(compiled.model.parameters(), plain.model.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    with torch.no_grad():  # evaluation compiles the whole forward
        compiled._evaluation_step("test", (inputs, targets, torch.tensor(0)))
        plain._evaluation_step("test", (inputs, targets, torch.tensor(0)))
    assert isinstance(compiled._compiled_fns["RecurrentLM"], OptimizedModule)
    torch.testing.assert_close(compiled._sums["test"], plain._sums["test"], rtol=1e-6, atol=1e-4)
    assert "_compiled_fns" not in compiled.__getstate__()  # compiled code is not pickled (ddp_spawn)


def test_compile_must_be_a_bool():
    with pytest.raises(ValueError, match="compile must be true or false"):
        LanguageModelModule(vocab_size=V, compile="yes")
