"""The L1 weight penalty (IRLM paper Table 2, "IRLM (L1 reg)") and its place in the training loss."""

import pytest
import torch

from dsf_lightning.model import LMConfig, RecurrentLM
from dsf_lightning.regularizers import l1_penalty

from .conftest import toy_modules


def test_penalty_sums_absolute_weight_matrices_only():
    model = RecurrentLM(LMConfig(vocab_size=11, cell="irlm", hidden_sizes=[6], embedding_size=4, tie_weights=False))
    expected = sum(p.abs().sum() for p in model.parameters() if p.dim() >= 2)
    assert torch.allclose(l1_penalty(model), expected)
    rho = model.layers[0].rho
    with torch.no_grad():
        rho.add_(5.0)  # the self-connections are vectors: not penalized
    assert torch.allclose(l1_penalty(model), expected)
    l1_penalty(model).backward()
    assert rho.grad is None
    assert torch.equal(model.layers[0].W.grad, torch.sign(model.layers[0].W.detach()))


def test_training_loss_adds_weighted_penalty(toy_corpus):
    module, data = toy_modules(toy_corpus, cell="irlm", l1_weight=0.01)
    plain, _ = toy_modules(toy_corpus, cell="irlm")
    plain.model.load_state_dict(module.model.state_dict())
    inputs, targets = torch.randint(0, 13, (4, 7)), torch.randint(0, 13, (4, 7))
    state = module.model.init_state(4)
    module.eval(), plain.eval()  # no dropout here anyway; same forward
    with_l1, _ = module._training_loss(inputs, targets, state)
    without, _ = plain._training_loss(inputs, targets, state)
    assert torch.allclose(with_l1 - without, 0.01 * l1_penalty(module.model))


@pytest.mark.parametrize("bad", [-1e-3, True, "1e-3"])
def test_bad_l1_weight_is_refused(toy_corpus, bad):
    with pytest.raises(ValueError, match="l1_weight"):
        toy_modules(toy_corpus, l1_weight=bad)
