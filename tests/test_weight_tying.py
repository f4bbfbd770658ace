"""Weight tying (SCRN paper sec 4.4, ``softmax(s U + h E^T)``) ties the decoder to the whole hidden state
``h`` or not at all: a hidden size other than ``embedding_size`` would tie only part of ``h``, so it is an
error that says what to set."""

import pytest
import torch

from dsf_lightning.model import LMConfig, ModelConfigError, RecurrentLM


@pytest.mark.parametrize("cell,hidden,emb,options", [
    ("elman", 8, 6, {}),          # h wider than E: only its last 6 features would be tied
    ("delta-rnn", 12, 8, {}),
    ("lstm", 5, 8, {}),           # h narrower than E
    ("scrn", 10, 8, {"context_size": 3}),  # [s; h] with h != E: part of h would sit with s in U
])
def test_tying_a_hidden_size_other_than_the_embedding_is_an_error(cell, hidden, emb, options):
    with pytest.raises(ModelConfigError, match=rf"(?i)tie_weights.*{hidden}.*embedding_size.*{emb}.*set embedding_size"):
        RecurrentLM(LMConfig(vocab_size=30, cell=cell, hidden_sizes=[4, hidden], embedding_size=emb,
                             tie_weights=True, cell_options=options))


def test_equal_sizes_tie_all_of_h():
    lm = RecurrentLM(LMConfig(vocab_size=30, cell="elman", hidden_sizes=[8], embedding_size=8, tie_weights=True))
    assert lm.untied_decoder is None
    y = torch.randn(2, 3, 8)
    torch.testing.assert_close(lm.decode(y), y @ lm.embedding.weight.T + lm.decoder_bias)
    # SCRN: the context s keeps its own matrix U, h is tied whole (paper: s U + h E^T)
    scrn = RecurrentLM(LMConfig(vocab_size=30, cell="scrn", hidden_sizes=[8], embedding_size=8, tie_weights=True,
                                cell_options={"context_size": 3}))
    assert scrn.untied_decoder.weight.shape == (30, 3)
