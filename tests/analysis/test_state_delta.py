"""State-delta score (DSF Fig. 2, footnote 15)."""

import pytest
import torch

from dsf_lightning.analysis import AnalysisError
from dsf_lightning.analysis.state_delta import min_max_normalize, state_deltas

from .conftest import VOCAB, make_pretrained


def _manual_states(pretrained, words):
    """h_0 (after <eos>) .. h_T by stepping the cell one token at a time from the zero state."""
    model = pretrained.model
    ids = [VOCAB.eos_id, *VOCAB.encode(words)]
    cell = model.layers[-1]
    state, hs = None, []
    with torch.no_grad():
        for i in ids:
            x = model.embed(torch.tensor([[i]]))[:, 0]
            _, state = cell.step(x, state)
            hs.append(state[0][0].double())
    return hs


@pytest.mark.parametrize("cell", ["delta-rnn", "lstm", "ran"])
def test_scores_are_min_max_normalized_l1_of_state_changes(cell):
    pretrained = make_pretrained(cell)
    words = "the big cat sat on the mat".split()
    result = state_deltas(pretrained, " ".join(words))
    assert result.tokens == words
    hs = _manual_states(pretrained, words)
    l1 = [float((hs[t] - hs[t - 1]).abs().sum()) for t in range(1, len(hs))]
    assert result.l1 == pytest.approx(l1, rel=1e-6, abs=1e-9)
    assert all(0.0 <= s <= 1.0 for s in result.score)
    assert min(result.score) == 0.0 and max(result.score) == 1.0
    assert result.score.index(1.0) == l1.index(max(l1))
    assert result.score.index(0.0) == l1.index(min(l1))


def test_two_layer_model_reads_the_chosen_layer():
    pretrained = make_pretrained("delta-rnn", layers=2)
    top = state_deltas(pretrained, "the cat sat")
    bottom = state_deltas(pretrained, "the cat sat", layer=0)
    assert top.layer == 1 and bottom.layer == 0
    assert top.l1 != bottom.l1
    with pytest.raises(AnalysisError, match="layer"):
        state_deltas(pretrained, "the cat", layer=2)


def test_min_max_normalize_edge_cases():
    assert min_max_normalize([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5]
    assert min_max_normalize([1.5, 1.5]) == [0.0, 0.0]  # nothing stands out
    assert min_max_normalize([]) == []


def test_oov_words_are_kept_and_reported():
    result = state_deltas(make_pretrained("delta-rnn"), "the zebra sat")
    assert result.tokens == ["the", "zebra", "sat"]
    assert result.oov == ["zebra"]


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_empty_text_is_a_clear_error(text):
    with pytest.raises(AnalysisError, match="empty text"):
        state_deltas(make_pretrained("delta-rnn"), text)
