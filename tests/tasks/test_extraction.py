"""DFA extraction (sr-RNN paper appendix E) on a hand-built sr-RNN whose centroids and transitions
are known: an ``sr`` cell over a ReLU Elman network with set weights that implements a given DFA."""

import itertools

import pytest
import torch

from dsf_lightning.tasks import SequenceClassifier, Vocabulary
from dsf_lightning.tasks.dfa import DFA, DFAError, extract_dfa
from dsf_lightning.tasks.languages import tomita_dfa

BETA = 40.0  # pre-activation scale: transition probabilities are one-hot up to exp(-BETA / 2)


def hand_built(dfa: DFA) -> tuple[SequenceClassifier, Vocabulary]:
    """A classifier whose sr cell *is* ``dfa``: centroid j = state j, class 1 = accept.

    Hidden units: one per (state, symbol) pair, one for the start token, one per (state, end token).
    Centroid s_j marks the pair units leading to j (and the start unit if j is the start state); the
    recurrent weights of unit (q, a) detect ``h = s_q``, its input weight the symbol ``a``; a bias of
    -1.5 makes the ReLU fire (0.5 BETA) only for both, so ``u . s_j`` is 0.5 BETA for ``j = delta(q, a)``
    and 0 otherwise. The end token fires unit (q, end) without the stochastic component; the classifier
    reads it as accept iff q is accepting.
    """
    vocab = Vocabulary(dfa.alphabet)
    states, alphabet = list(dfa.states), list(dfa.alphabet)
    pairs = [(q, a) for q in states for a in alphabet]
    start_unit = len(pairs)
    end_units = {q: start_unit + 1 + i for i, q in enumerate(states)}
    H, k, V = start_unit + 1 + len(states), len(states), len(vocab)
    model = SequenceClassifier(
        vocab_size=V, input_mode="one-hot", cell="sr", hidden_size=H,
        cell_options={"base": "elman", "base_options": {"activation": "relu"}, "k": k},
    )
    cell = model.cell
    S = torch.zeros(k, H)
    for p, (q, a) in enumerate(pairs):
        S[dfa.transitions[(q, a)], p] = 1.0
    S[dfa.start, start_unit] = 1.0
    W, Vrec, b = torch.zeros(H, V), torch.zeros(H, H), torch.zeros(H)
    for p, (q, a) in enumerate(pairs):
        W[p, vocab.index[a]] = BETA
        Vrec[p] = BETA * S[q] / S[q].sum()
        b[p] = -1.5 * BETA
    W[start_unit, vocab.start_id] = 2 * BETA
    b[start_unit] = -1.5 * BETA
    for q, u in end_units.items():
        W[u, vocab.end_id] = BETA
        Vrec[u] = BETA * S[q] / S[q].sum()
        b[u] = -1.5 * BETA
    decide = torch.zeros(2, H)
    for q, u in end_units.items():
        sign = 1.0 if q in dfa.accepting else -1.0
        decide[1, u], decide[0, u] = sign, -sign
    with torch.no_grad():
        cell.centroids.copy_(S)
        cell.base.W.copy_(W)
        cell.base.V.copy_(Vrec)
        cell.base.b.copy_(b)
        model.classifier.weight.copy_(decide)
        model.classifier.bias.zero_()
    return model.eval(), vocab


STRINGS = [""] + ["".join(p) for n in range(1, 8) for p in itertools.product("01", repeat=n)]


@pytest.mark.parametrize("grammar", [3, 4, 7])
def test_the_hand_built_network_implements_its_automaton(grammar):
    dfa = tomita_dfa(grammar)
    model, vocab = hand_built(dfa)
    predicted = model.predict_strings(STRINGS, vocab).tolist()
    assert predicted == [int(dfa.accepts(s)) for s in STRINGS]
    alpha = model.centroid_transitions([vocab.index["0"], vocab.index["1"]])
    for (q, a), r in dfa.transitions.items():
        assert int(alpha[q, vocab.alphabet.index(a)].argmax()) == r


@pytest.mark.parametrize("grammar", [3, 4, 7])
@pytest.mark.parametrize("follow", ["network", "centroid"])
def test_extraction_recovers_the_exact_automaton_with_centroid_names(grammar, follow):
    dfa = tomita_dfa(grammar)
    model, vocab = hand_built(dfa)
    result = extract_dfa(model, STRINGS, vocab, follow=follow)
    assert result.dfa == dfa  # same states (centroid j = state j), transitions, start, accepting
    assert result.consistency == 1.0 and result.mean_max_probability > 0.999
    assert result.start_counts[dfa.start] == len(STRINGS)
    assert int(result.counts.sum()) == sum(len(s) for s in STRINGS)
    assert model.cell.mode == "soft"  # restored after follow="centroid"


def test_accepting_states_from_labels_and_predictions_agree_with_the_classifier():
    dfa = tomita_dfa(3)
    model, vocab = hand_built(dfa)
    labels = [int(dfa.accepts(s)) for s in STRINGS]
    for source in ("labels", "predictions"):
        assert extract_dfa(model, STRINGS, vocab, labels=labels, accepting=source).dfa == dfa
    with pytest.raises(DFAError, match="label"):
        extract_dfa(model, STRINGS, vocab, accepting="labels")


def test_unobserved_transitions_stay_missing_or_are_read_off_the_network():
    dfa = tomita_dfa(4)
    model, vocab = hand_built(dfa)
    few = ["", "0", "1", "00", "01"]  # never reaches the dead state 3 nor reads from state 2
    partial = extract_dfa(model, few, vocab).dfa
    assert not partial.trim().is_complete() and not partial.minimize().equivalent(dfa)
    filled = extract_dfa(model, few, vocab, fill_missing="network")
    assert filled.dfa == dfa and filled.filled
    assert all(dfa.transitions[(q, a)] == r for q, a, r in filled.filled)


def test_extraction_json_and_the_most_frequent_transition_wins():
    dfa = tomita_dfa(2)
    model, vocab = hand_built(dfa)
    result = extract_dfa(model, STRINGS, vocab)
    d = result.to_dict()
    assert DFA.from_dict(d["dfa"]) == dfa and len(d["counts"]) == model.cell.k
    # counts: (0, '1') -> 1 happens for every string starting with 1 or continuing (10)^n 1
    assert result.counts[0, vocab.alphabet.index("1"), 1] > 0 and result.counts[0, vocab.alphabet.index("1")].sum() == result.counts[0, 1, 1]
