"""RAN influence (eq. 7) against a brute-force computation from the paper's equations."""

import math

import pytest
import torch

from dsf_lightning.analysis import AnalysisError
from dsf_lightning.analysis.influence import ran_influence, ran_weights

from .conftest import VOCAB, make_pretrained

SENTENCE = "the big dog saw a small bird on the tree and ran"


def _sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v))


def _brute_force(pretrained, words):
    """Gates, content and states from eq. 1 / eq. 2 written out element by element (plain Python floats),
    then w_j^t = i_j prod_{k=j+1}^t f_k and v_t = argmax_{j<t} max_m w_j^t(m) (eq. 3, eq. 7)."""
    model = pretrained.model
    cell = model.layers[0]
    simple = cell.cell_name == "ran-simple"
    ids = [VOCAB.eos_id, *VOCAB.encode(words)]
    xs = model.embedding.weight.detach().double()[ids].tolist()
    H = cell.hidden_size
    P = {k: v.detach().double().tolist() for k, v in cell.named_parameters()}
    g = (lambda v: v) if simple or cell.g_name == "identity" else math.tanh
    c = [0.0] * H
    gates_i, gates_f, contents, states = [], [], [], []
    for x in xs:
        h = c if simple else [g(v) for v in c]
        Wi, Wf = (P["W_ic"], P["W_fc"]) if simple else (P["W_ih"], P["W_fh"])
        i = [_sigmoid(sum(P["W_ix"][m][n] * x[n] for n in range(len(x))) + sum(Wi[m][n] * h[n] for n in range(H)) + P["b_i"][m])
             for m in range(H)]
        f = [_sigmoid(sum(P["W_fx"][m][n] * x[n] for n in range(len(x))) + sum(Wf[m][n] * h[n] for n in range(H)) + P["b_f"][m])
             for m in range(H)]
        content = x if simple else [sum(P["W_cx"][m][n] * x[n] for n in range(len(x))) for m in range(H)]
        c = [i[m] * content[m] + f[m] * c[m] for m in range(H)]
        gates_i.append(i)
        gates_f.append(f)
        contents.append(content)
        states.append(c)
    S = len(xs)

    def w(t, j, m):
        value = gates_i[j][m]
        for k in range(j + 1, t + 1):
            value *= gates_f[k][m]
        return value

    # eq. 3: the state is the weighted sum of the contents
    for t in range(S):
        for m in range(H):
            assert states[t][m] == pytest.approx(sum(w(t, j, m) * contents[j][m] for j in range(t + 1)), abs=1e-10)
    predecessor, strength = [None], [None]
    for t in range(2, S):  # run positions: 0 = <eos>, word n at position n + 1
        scores = [max(w(t, j, m) for m in range(H)) for j in range(1, t)]
        best = max(range(len(scores)), key=lambda n: scores[n])
        predecessor.append(best)
        strength.append(scores[best])
    return predecessor, strength


@pytest.mark.parametrize("cell, options", [("ran", {}), ("ran", {"g": "identity"}), ("ran-simple", {})])
def test_influence_matches_brute_force_eq7(cell, options):
    pretrained = make_pretrained(cell, hidden=5, cell_options=options, seed=3)
    with torch.no_grad():  # sharper gates and forget gates near 1, so that arrows skip words
        ran = pretrained.model.layers[0]
        for p in ran.parameters():
            p.mul_(4.0)
        ran.b_f.add_(4.0)
        ran.W_ix.mul_(3.0)
        pretrained.model.embedding.weight.mul_(10.0)
    words = SENTENCE.split()
    result = ran_influence(pretrained, SENTENCE)
    predecessor, strength = _brute_force(pretrained, words)
    assert result.tokens == words
    assert result.predecessor == predecessor
    assert result.strength[0] is None
    assert result.strength[1:] == pytest.approx(strength[1:], rel=1e-5)  # float32 gates
    assert all(p is None or p < t for t, p in enumerate(result.predecessor))
    assert any(p is not None and p < t - 1 for t, p in enumerate(result.predecessor))  # not just the previous word
    assert result.arrows() == [(t, p) for t, p in enumerate(predecessor) if p is not None]


def test_an_engineered_ran_points_at_the_remembered_word():
    """One unit opens its input gate only for 'dog' and never forgets; everything else forgets at once:
    every later word's most influential predecessor is 'dog'."""
    pretrained = make_pretrained("ran", hidden=3, cell_options={"g": "identity"})
    cell = pretrained.model.layers[0]
    emb = pretrained.model.embedding.weight
    with torch.no_grad():
        for p in cell.parameters():
            p.zero_()
        emb.zero_()
        emb[:, 0] = 1.0  # a constant feature
        emb[VOCAB.stoi["dog"], 1] = 1.0  # the 'dog' detector
        cell.b_i.fill_(-20.0)  # input gates closed ...
        cell.W_ix[0, 1] = 40.0  # ... except unit 0 on 'dog'
        cell.b_f.fill_(-20.0)  # forget at once ...
        cell.b_f[0] = 20.0  # ... except unit 0, which keeps everything
    words = "the big dog sat on the mat".split()
    result = ran_influence(pretrained, " ".join(words))
    dog = words.index("dog")
    assert result.predecessor[dog + 1 :] == [dog] * (len(words) - dog - 1)
    assert all(u == 0 for u in result.unit[dog + 1 :])


def test_ran_weights_are_gate_products():
    i = torch.tensor([[0.5], [0.25], [1.0]], dtype=torch.float64)
    f = torch.tensor([[0.9], [0.5], [0.1]], dtype=torch.float64)
    w = ran_weights(i, f)[..., 0]
    assert w[2].tolist() == pytest.approx([0.5 * 0.5 * 0.1, 0.25 * 0.1, 1.0])
    assert w[0, 1] == 0 and w[0, 2] == 0


def test_influence_needs_a_ran():
    with pytest.raises(AnalysisError, match="RAN"):
        ran_influence(make_pretrained("delta-rnn"), "the cat sat")


def test_first_word_has_no_predecessor():
    result = ran_influence(make_pretrained("ran"), "cat")
    assert result.predecessor == [None] and result.arrows() == []
