"""The stacked LM: parameter counts against the DSF paper's formulas, tying, dropout modes, errors."""

import pytest
import torch
import torch.nn.functional as F

from dsf_lightning.model import LMConfig, ModelConfigError, RecurrentLM, count_parameters

H, V = 20, 50


def one_layer(cell, **options):
    """The DSF paper's LM: one-hot words straight into the cell, then the softmax (eq. 14)."""
    return RecurrentLM(LMConfig(vocab_size=V, cell=cell, hidden_sizes=[H], embedding_size=0, cell_options=options))


@pytest.mark.parametrize(
    "cell,options,formula",
    [
        ("elman", {}, H * H + 2 * H * V + H + V),  # "a classical RNN"
        ("delta-rnn", {}, H * H + 2 * H * V + 5 * H + V),  # full late-integration Delta-RNN, eq. 11 + eq. 5
        ("gru", {}, 3 * H * H + 4 * H * V + 3 * H + V),
    ],
)
def test_one_layer_lm_parameter_counts_match_the_dsf_paper(cell, options, formula):
    assert count_parameters(one_layer(cell, **options)) == formula


def test_one_layer_lstm_count_and_the_papers_formula():
    """The paper prints 4HH + 8HV + 4H + V for the peephole LSTM; its equations give 4 input matrices
    (4HV), 4 recurrent ones, 4 biases, 3 diagonal peepholes and the decoder: 4HH + 5HV + 7H + V.
    (tests/cells/test_classic.py documents the discrepancy.)"""
    count = count_parameters(one_layer("lstm", peepholes=True))
    assert count == 4 * H * H + 5 * H * V + 7 * H + V
    assert count != 4 * H * H + 8 * H * V + 4 * H + V


def test_one_hot_input_equals_an_embedding_of_the_input_matrix():
    torch.manual_seed(0)
    lm = one_layer("delta-rnn").double()
    tokens = torch.randint(0, V, (2, 6))
    logits, _ = lm(tokens)
    cell = lm.layers[0]
    projected = cell.W.T[tokens]  # [B, T, H]: W x for a one-hot x is a column of W
    state, outs = cell.init_state(2), []
    for t in range(6):
        out, state = cell.recur(projected[:, t], state)
        outs.append(out)
    torch.testing.assert_close(logits, lm.decoder(torch.stack(outs, 1)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_one_hot_writes_what_torch_one_hot_writes(dtype):
    from dsf_lightning.ops.one_hot import one_hot

    ids = torch.tensor([[0, 3, 9], [9, 9, 1]])
    torch.testing.assert_close(one_hot(ids, 10, dtype), F.one_hot(ids, 10).to(dtype), rtol=0, atol=0)
    assert one_hot(ids, 10, dtype).dtype == dtype and one_hot(ids[:0], 10).shape == (0, 3, 10)
    with pytest.raises(RuntimeError, match="out of bounds"):
        one_hot(ids, 9)
    with pytest.raises(TypeError, match="integer ids"):
        one_hot(ids.float(), 10)


def test_tied_scrn_softmax_is_s_U_plus_h_E_transposed():
    """SCRN paper sec 4.4: softmax(s U + h E^T) with the embedding E of size d_h."""
    torch.manual_seed(0)
    lm = RecurrentLM(LMConfig(vocab_size=V, cell="scrn", hidden_sizes=[8], embedding_size=8, tie_weights=True,
                              cell_options={"context_size": 3})).double()
    assert lm.untied_decoder.weight.shape == (V, 3)
    y = torch.randn(2, 4, 11, dtype=torch.float64)  # [s; h] with d_s=3, d_h=8
    expected = y[..., :3] @ lm.untied_decoder.weight.T + y[..., 3:] @ lm.embedding.weight.T + lm.decoder_bias
    torch.testing.assert_close(lm.decode(y), expected)
    untied = RecurrentLM(LMConfig(vocab_size=V, cell="scrn", hidden_sizes=[8], embedding_size=8,
                                  cell_options={"context_size": 3}))
    assert count_parameters(untied) - count_parameters(lm) == 8 * V  # E^T replaces V


def test_variational_masks_are_constant_over_time_naive_ones_are_not():
    torch.manual_seed(0)
    for variational, expect_constant in ((True, True), (False, False)):
        lm = RecurrentLM(LMConfig(vocab_size=V, hidden_sizes=[64], dropout_input=0.5, variational=variational))
        lm.train()
        y = lm._drop(torch.ones(3, 10, 64), 0.5)
        constant = bool((y == y[:, :1]).all())
        assert constant == expect_constant


def test_recurrent_dropout_masks_the_scrn_hidden_state_not_its_context():
    torch.manual_seed(0)
    lm = RecurrentLM(LMConfig(vocab_size=V, cell="scrn", hidden_sizes=[8], dropout_hidden=0.5, variational=True))
    lm.train()
    state = lm.init_state(2)
    masks = lm._state_masks(lm.layers[0], state[0])
    assert masks[0] is None and masks[1].shape == (2, 8)


@pytest.mark.parametrize(
    "options,field",
    [
        ({"vocab_size": 0}, "vocab_size"),
        ({"vocab_size": V, "hidden_sizes": []}, "hidden_sizes"),
        ({"vocab_size": V, "hidden_sizes": [8, 0]}, r"hidden_sizes\[1\]"),
        ({"vocab_size": V, "dropout_input": 1.0}, "dropout_input"),
        ({"vocab_size": V, "dropout_hidden": 0.3}, "variational"),
        ({"vocab_size": V, "embedding_size": 0, "tie_weights": True}, "tie_weights"),
    ],
)
def test_impossible_configs_name_the_field(options, field):
    with pytest.raises(ModelConfigError, match=field):
        RecurrentLM(LMConfig(**options))


def test_config_round_trips_through_a_plain_dict():
    config = LMConfig(vocab_size=V, cell="scrn", hidden_sizes=[8, 8], cell_options={"alpha": 0.9})
    assert LMConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ModelConfigError, match="hiden_sizes"):
        LMConfig.from_dict({"vocab_size": V, "hiden_sizes": [8]})
