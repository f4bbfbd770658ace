"""IRLM timescales -1/log|r| (IRLM paper sec. 5.1)."""

import math

import pytest
import torch

from dsf_lightning.analysis import AnalysisError
from dsf_lightning.analysis.timescales import irlm_timescales

from .conftest import make_pretrained


def test_timescales_equal_minus_one_over_log_abs_r():
    pretrained = make_pretrained("irlm", hidden=8, cell_options={"long_context_units": 3, "r_init": 0.3})
    cell = pretrained.model.layers[0]
    with torch.no_grad():  # spread the ordinary units' self-connections, negative ones included
        cell.rho[3:] = torch.tensor([-3.0, -1.5, 0.7, 1.5, 3.0])
    result = irlm_timescales(pretrained)
    r = cell.r.double()
    assert result.r == pytest.approx(r.tolist())
    assert result.timescale == pytest.approx([-1.0 / math.log(abs(v)) for v in r.tolist()])
    assert result.timescale == pytest.approx(cell.timescales().double().tolist(), rel=1e-5)
    assert result.long_context == [True] * 3 + [False] * 5
    assert all(0.7 < v < 1.0 for v in result.r[:3])  # LCUs stay in their range
    assert all(t > 0 for t in result.timescale)
    assert len(result) == 8 and result.summary()["long_context_units"] == 3


def test_zero_self_connection_has_zero_timescale():
    pretrained = make_pretrained("irlm", hidden=4)  # r_init 0: every unit starts at r = 0
    result = irlm_timescales(pretrained)
    assert result.timescale == [0.0] * 4


def test_every_irlm_layer_is_listed():
    result = irlm_timescales(make_pretrained("irlm", hidden=4, layers=2))
    assert result.layer == [0] * 4 + [1] * 4 and result.unit == [0, 1, 2, 3] * 2


def test_timescales_need_an_irlm():
    with pytest.raises(AnalysisError, match="IRLM"):
        irlm_timescales(make_pretrained("ran"))
