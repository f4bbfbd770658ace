"""The SCRN paper's "- dropout of context" ablation (sec. 6.1): output dropout on h alone, y = [s; h * xi]."""

import pytest
import torch

from dsf_lightning.model import LMConfig, ModelConfigError, RecurrentLM


def _scrn(**config):
    torch.manual_seed(0)
    return RecurrentLM(LMConfig(vocab_size=17, cell="scrn", hidden_sizes=[12], cell_options={"context_size": 5},
                                embedding_size=12, dropout_output=0.5, **config))


def test_context_features_pass_untouched_and_hidden_ones_are_dropped():
    model = _scrn(dropout_output_context=False)
    assert model.layers[0].output_context_size == 5
    tokens = torch.randint(0, 17, (3, 9))
    model.eval()
    clean, _ = model.features(tokens)
    model.train()
    torch.manual_seed(1)
    dropped, _ = model.features(tokens)
    assert torch.equal(dropped[..., :5], clean[..., :5])  # s_t: no dropout
    h_clean, h_dropped = clean[..., 5:], dropped[..., 5:]
    zeroed = h_dropped == 0
    assert 0.3 < zeroed.float().mean() < 0.7  # about half of h is dropped ...
    assert torch.allclose(h_dropped[~zeroed], 2 * h_clean[~zeroed])  # ... and the rest scaled by 1 / (1 - p)


def test_default_drops_the_whole_output():
    model = _scrn()
    model.train()
    torch.manual_seed(1)
    y, _ = model.features(torch.randint(0, 17, (3, 9)))
    assert (y[..., :5] == 0).any()


def test_cells_without_context_are_unaffected():
    torch.manual_seed(0)
    config = dict(vocab_size=17, cell="delta-rnn", hidden_sizes=[8], embedding_size=8, dropout_output=0.5)
    a, b = RecurrentLM(LMConfig(**config)), RecurrentLM(LMConfig(**config, dropout_output_context=False))
    b.load_state_dict(a.state_dict())
    tokens = torch.randint(0, 17, (2, 6))
    torch.manual_seed(3)
    ya, _ = a.features(tokens)
    torch.manual_seed(3)
    yb, _ = b.features(tokens)
    assert torch.equal(ya, yb)


def test_option_must_be_boolean():
    with pytest.raises(ModelConfigError, match="dropout_output_context"):
        LMConfig(vocab_size=5, cell="scrn", dropout_output_context="no")
