"""The registry's face: names, lookup errors, user registration, size validation for every cell."""

import pytest
import torch

from dsf_lightning import cells
from dsf_lightning.cells import (
    CellOptionError,
    DuplicateCellError,
    RecurrentCell,
    UnknownCellError,
    get_cell,
    list_cells,
    register_cell,
    registry,
)


def test_list_cells_is_sorted_and_holds_the_papers_cells():
    names = list_cells()
    assert names == sorted(names)
    assert {"delta-rnn", "delta-rnn-simple", "delta-rnn-ln"} <= set(names)


def test_unknown_name_lists_the_known_ones_and_suggests():
    with pytest.raises(UnknownCellError) as info:
        get_cell("delta-rn")
    message = str(info.value)
    assert "unknown cell 'delta-rn'" in message
    assert "Did you mean 'delta-rnn'" in message
    for name in list_cells():
        assert name in message
    assert isinstance(info.value, KeyError)


class _Doubler(RecurrentCell):
    """A toy user cell: h_t = x_t-projection + h_{t-1}."""

    def __init__(self, input_size, hidden_size):
        super().__init__(input_size, hidden_size)
        self.proj = torch.nn.Linear(input_size, hidden_size)

    def project_inputs(self, x):
        return self.proj(x)

    def recur(self, projected_t, state):
        h = projected_t + state[0]
        return h, (h,)


@pytest.fixture
def clean_registry():
    saved = dict(registry._CELLS)
    yield
    registry._CELLS.clear()
    registry._CELLS.update(saved)


def test_user_cell_registers_and_is_built_by_name(clean_registry):
    register_cell("my-doubler")(_Doubler)
    assert "my-doubler" in list_cells()
    cell = cells.build_cell("my-doubler", 3, 4)
    out, (h,) = cell(torch.ones(2, 5, 3))
    assert out.shape == (2, 5, 4)
    torch.testing.assert_close(out[:, -1], 5 * cell.proj(torch.ones(2, 3)))


def test_duplicate_name_fails_loudly(clean_registry):
    with pytest.raises(DuplicateCellError, match="delta-rnn"):
        register_cell("delta-rnn")(_Doubler)


def test_only_cells_can_register(clean_registry):
    with pytest.raises(TypeError, match="RecurrentCell"):
        register_cell("not-a-cell")(torch.nn.Linear)


@pytest.mark.parametrize("name", list_cells())
@pytest.mark.parametrize("sizes,option", [((0, 6), "input_size"), ((6, 0), "hidden_size"), ((6, -3), "hidden_size"), ((2.5, 6), "input_size")])
def test_non_positive_sizes_fail_for_every_cell(name, sizes, option):
    with pytest.raises(CellOptionError, match=option):
        get_cell(name)(*sizes)
