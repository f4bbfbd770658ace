"""``_checks.check_bool``: the one bool option check, raising each caller's own error class."""

import pytest

from dsf_lightning.cells import CellOptionError
from dsf_lightning.cells.classic import GRUCell
from dsf_lightning.cells.scrn import SCRNCell
from dsf_lightning.data.tokenizers import TokenizerError, WordTokenizer


@pytest.mark.parametrize("value", [1, 0, "yes", None])
def test_non_bool_options_are_refused_with_the_callers_error(value):
    with pytest.raises(CellOptionError, match="reset_after must be true or false"):
        GRUCell(3, 4, reset_after=value)
    with pytest.raises(CellOptionError, match="learn_alpha must be true or false"):
        SCRNCell(3, 4, learn_alpha=value)
    with pytest.raises(TokenizerError, match="lowercase must be true or false"):
        WordTokenizer(lowercase=value)


def test_bools_pass():
    assert GRUCell(3, 4, reset_after=True).reset_after is True
    assert WordTokenizer(lowercase=False).lowercase is False
