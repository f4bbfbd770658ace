"""The model option ``init``: the papers' initialization schemes.

SCRN paper (sec. 5, Tables 1 and 3): "all model weights are initialized uniformly over [-r, r]"
(r = 0.3; 0.2 for (d_h, d_s) = (300, 40); 0.05 in Mikolov et al.'s code). DSF paper (sec. 4.2):
"Parameters (non-biases) were initialized from zero-mean Gaussian distributions" with sigma tuned over
{0.1, 0.01, 0.005, 0.001}. The default (no ``init``) keeps every cell's own initialization.
"""

import json
import math

import pytest
import torch

from dsf_lightning.model import LMConfig, ModelConfigError, RecurrentLM


def build(init=None, cell="scrn", seed=0, **kw):
    torch.manual_seed(seed)
    config = LMConfig(vocab_size=300, cell=cell, hidden_sizes=[64, 64], embedding_size=48, init=init, **kw)
    return RecurrentLM(config)


@pytest.mark.parametrize("r", [0.3, 0.2, 0.05])
def test_uniform_puts_every_weight_in_minus_r_r_and_fills_it(r):
    model = build({"scheme": "uniform", "scale": r})
    values = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert values.abs().max() <= r
    # U[-r, r]: mean 0, variance r^2 / 3, and it reaches the ends of the interval
    assert abs(float(values.mean())) < 0.02 * r
    assert float(values.std()) == pytest.approx(r / math.sqrt(3), rel=0.02)
    assert values.abs().max() > 0.99 * r
    for name, p in model.named_parameters():  # every tensor, biases included ("all model weights")
        assert p.abs().max() <= r and p.abs().max() > 0.5 * r if p.numel() > 20 else True, name


@pytest.mark.parametrize("std", [0.1, 0.01])
def test_normal_draws_the_non_biases_from_n0_sigma_and_keeps_the_biases(std):
    plain = build(cell="delta-rnn")
    model = build({"scheme": "normal", "std": std}, cell="delta-rnn")
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    values = torch.cat([p.detach().flatten() for p in matrices])
    assert float(values.std()) == pytest.approx(std, rel=0.02)
    assert abs(float(values.mean())) < 0.02 * std
    for (name, p), (_, q) in zip(model.named_parameters(), plain.named_parameters()):
        if p.dim() < 2:  # biases, gate biases, second-order biases: the cell's own initialization
            assert torch.equal(p, q), name


def test_default_is_unchanged():
    """No ``init``: bit for bit the model the library has always built with the same seed."""
    torch.manual_seed(0)
    before = RecurrentLM(LMConfig(vocab_size=300, cell="scrn", hidden_sizes=[64, 64], embedding_size=48))
    after = build(None)
    for (name, p), (_, q) in zip(before.state_dict().items(), after.state_dict().items()):
        assert torch.equal(p, q), name
    assert LMConfig(vocab_size=3).init is None
    assert LMConfig.from_dict({"vocab_size": 3}).init is None  # config.json written before the option


def test_init_round_trips_through_config_json_and_the_module_hparams(tmp_path):
    from dsf_lightning.training import LanguageModelModule

    init = {"scheme": "uniform", "scale": 0.3}
    config = LMConfig(vocab_size=20, cell="scrn", hidden_sizes=[8], init=init)
    again = LMConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again.init == init
    module = LanguageModelModule(vocab_size=20, cell="scrn", hidden_sizes=[8], init=init)
    assert module.hparams.init == init and module.config.init == init
    assert max(p.abs().max() for p in module.model.parameters()) <= 0.3


@pytest.mark.parametrize("bad,match", [
    ({"scheme": "xavier"}, r"init.*scheme.*'uniform'.*'normal'"),
    ({"scheme": "uniform"}, r"init.*scale"),
    ({"scheme": "uniform", "scale": -0.1}, r"init.*scale"),
    ({"scheme": "normal", "scale": 0.1}, r"init.*std"),
    ({"scheme": "normal", "std": 0.0}, r"init.*std"),
    ("uniform", r"init must be"),
])
def test_bad_init_is_a_clear_error(bad, match):
    with pytest.raises(ModelConfigError, match=match):
        LMConfig(vocab_size=5, init=bad)
