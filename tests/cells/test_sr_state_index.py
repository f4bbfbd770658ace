"""Which state the sr-RNN's stochastic component regularizes (sr-RNN paper sec. 3, eqs 1-6): the hidden
state h through which the unrolled cells are connected ("the hidden state h_t ... computed from alpha and
S"), never a cell / context memory. The base cells lay their states out differently: the LSTM's (h, c),
SCRN's (s, h), RAN's (c,) whose only carried state is c (its output g(c) is not carried)."""

import pytest
import torch

from dsf_lightning.cells import CellOptionError, get_cell

I, H = 5, 7


@pytest.mark.parametrize("base,options,index,size", [
    ("scrn", {"context_size": 3}, 1, H),   # (s, h): h, not the context s
    ("lstm", {}, 0, H),                    # (h, c): h, the cell state stays free (sr-LSTM)
    ("gru", {}, 0, H),
    ("delta-rnn", {}, 0, H),
    ("ran", {}, 0, H),                     # (c,): the only carried state
])
def test_the_default_regularizes_the_hidden_state(base, options, index, size):
    cell = get_cell("sr")(I, H, base=base, base_options=options, k=4)
    assert cell.state_index == index
    assert cell.centroids.shape == (4, size)
    # the regularized tensor really is h: for SCRN, s evolves as the base cell computes it
    torch.manual_seed(0)
    x = torch.randn(2, 3, I)
    _, state = cell(x)
    _, base_state = cell.base(x)
    for i, (a, b) in enumerate(zip(state, base_state)):
        if i != index and base == "scrn":
            torch.testing.assert_close(a, b)  # the context is untouched by the stochastic component


def test_an_explicit_state_index_still_chooses():
    cell = get_cell("sr")(I, H, base="scrn", base_options={"context_size": 3}, state_index=0, k=2)
    assert cell.state_index == 0 and cell.centroids.shape == (2, 3)
    with pytest.raises(CellOptionError, match="state_index"):
        get_cell("sr")(I, H, base="scrn", state_index=2)
