"""analysis._common.evaluating: eval mode for the block, the training flag restored after (also on errors)."""

import pytest
import torch

from dsf_lightning.analysis._common import evaluating


def test_evaluating_restores_the_training_flag_even_after_an_error():
    net = torch.nn.Sequential(torch.nn.Dropout(0.5)).train()
    with evaluating(net) as inside:
        assert inside is net and not net.training and not net[0].training
    assert net.training and net[0].training
    with pytest.raises(RuntimeError, match="boom"), evaluating(net):
        raise RuntimeError("boom")
    assert net.training
    net.eval()
    with evaluating(net):
        pass
    assert not net.training
