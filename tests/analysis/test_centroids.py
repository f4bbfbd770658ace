"""sr-RNN centroid statistics: visits, transitions, prototypes."""

import pytest
import torch

from dsf_lightning.analysis import AnalysisError
from dsf_lightning.analysis.centroids import (
    CentroidTrace,
    centroid_statistics,
    classifier_transition_traces,
    lm_transition_traces,
)
from dsf_lightning.analysis.fresh import train_tomita_sr

from .conftest import make_pretrained


def _one_hot(indices, k, p=0.9):
    alpha = torch.full((len(indices), k), (1 - p) / (k - 1))
    alpha[torch.arange(len(indices)), torch.tensor(indices)] = p
    return alpha


def test_counts_and_prototypes_of_engineered_traces():
    # symbol 'a' always leads to centroid 0, 'b' to 1, 'c' to 2
    where = {"a": 0, "b": 1, "c": 2}
    seqs = ["abca", "bb", "cab", "a"]
    traces = [CentroidTrace(list(s), _one_hot([where[x] for x in s], 4)) for s in seqs]
    stats = centroid_statistics(traces, top=2)
    steps = sum(len(s) for s in seqs)
    assert stats.num_steps == steps and int(stats.visits.sum()) == steps
    assert stats.visits.tolist() == [4, 4, 2, 0]
    assert int(stats.transitions.sum()) == steps - len(seqs)
    assert (stats.symbol_transitions.sum(0) == stats.transitions).all()
    assert stats.transitions[0, 1] == 2 and stats.transitions[1, 2] == 1 and stats.transitions[2, 0] == 2
    assert stats.transitions[1, 1] == 1 and stats.symbol_transitions[stats.symbols.index("b"), 0, 1] == 2
    assert stats.start_counts.tolist() == [2, 1, 1, 0]
    assert [p[0][0] for p in stats.prototypes[:3]] == ["a", "b", "c"]
    assert stats.prototypes[0][0][1] == pytest.approx(0.9)
    assert stats.used == [0, 1, 2]
    d = stats.to_dict()
    assert d["prototypes"][1]["top"][0]["symbol"] == "b"


def test_min_count_drops_rare_symbols():
    traces = [CentroidTrace(["a", "a", "z"], _one_hot([0, 0, 0], 2, p=0.6))]
    traces[0].alpha[2] = torch.tensor([1.0, 0.0])
    stats = centroid_statistics(traces, min_count=2)
    assert [s for s, _, _ in stats.prototypes[0]] == ["a"]


def test_lm_traces_of_an_sr_lstm_language_model():
    pretrained = make_pretrained("sr-lstm", cell_options={"k": 5})
    texts = ["the big cat sat", "a dog ran on the rug", "the zebra sat"]
    traces = lm_transition_traces(pretrained, texts)
    assert [len(t.symbols) for t in traces] == [5, 7, 4]  # <eos> + the words
    assert traces[2].symbols == ["<eos>", "the", "<unk>", "sat"]
    for tr in traces:
        assert tr.alpha.shape[1] == 5
        assert torch.allclose(tr.alpha.sum(-1), torch.ones(len(tr.symbols)))
    stats = centroid_statistics(traces)
    assert int(stats.visits.sum()) == 16 and int(stats.transitions.sum()) == 16 - 3


def test_classifier_traces_of_a_tomita_sr_gru():
    fresh = train_tomita_sr(2, steps=5, hidden_size=8, k=4)
    strings = fresh.strings[:40]
    traces = classifier_transition_traces(fresh.module, strings, fresh.vocab)
    assert [len(t.symbols) for t in traces] == [len(s) + 1 for s in strings]
    assert all(t.symbols[0] == "<s>" for t in traces)
    # the trace is the very alpha the DFA extraction reads
    direct = fresh.module.transition_trace(
        torch.tensor([fresh.vocab.encode(strings[-1])]), torch.tensor([len(strings[-1]) + 2])
    )[0]
    assert torch.allclose(traces[-1].alpha, direct.float(), atol=1e-6)
    stats = centroid_statistics(traces)
    assert int(stats.visits.sum()) == sum(len(s) + 1 for s in strings)
    assert fresh.info["freshly_trained"] is True


def test_centroids_need_a_state_regularized_model():
    with pytest.raises(AnalysisError, match="centroids"):
        lm_transition_traces(make_pretrained("lstm"), ["the cat"])
    with pytest.raises(AnalysisError, match="no sequence"):
        centroid_statistics([])
