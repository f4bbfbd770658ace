"""State trajectories and their 2-D PCA."""

import pytest
import torch

from dsf_lightning.analysis.trajectories import pca_2d, state_trajectories

from .conftest import make_pretrained


def test_pca_recovers_a_plane_exactly():
    torch.manual_seed(0)
    coords = torch.randn(9, 2, dtype=torch.float64) * torch.tensor([3.0, 1.0], dtype=torch.float64)
    basis = torch.linalg.qr(torch.randn(6, 2, dtype=torch.float64))[0].T  # [2, 6] orthonormal rows
    data = coords @ basis + 5.0
    points, ratio, comps = pca_2d(data)
    assert ratio.sum() == pytest.approx(1.0)
    assert ratio[0] >= ratio[1]
    assert torch.allclose(points @ comps + data.mean(0), data, atol=1e-9)
    # distances between states are kept
    assert torch.allclose(torch.cdist(points, points), torch.cdist(data, data), atol=1e-9)


def test_pca_of_a_single_direction_pads_with_zeros():
    data = torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    points, ratio, _ = pca_2d(data)
    assert points.shape == (3, 2) and torch.allclose(points[:, 1], torch.zeros(3, dtype=torch.float64), atol=1e-12)
    assert ratio[0] == pytest.approx(1.0)


def test_lstm_gives_hidden_and_cell_state_trajectories():
    pretrained = make_pretrained("lstm", hidden=6)
    result = state_trajectories(pretrained, "the big cat sat on the mat")
    assert result.labels == ["<eos>", "the", "big", "cat", "sat", "on", "the", "mat"]
    assert [s.name for s in result.states] == ["h", "c"]
    for s in result.states:
        assert s.values.shape == (8, 6) and s.points.shape == (8, 2)
        assert 0 <= sum(s.explained) <= 1 + 1e-9
    # the values are the cell's states: the last h is what the model's features end in
    with torch.no_grad():
        ids = torch.tensor([[pretrained.vocab.eos_id, *pretrained.vocab.encode(result.labels[1:])]])
        _, state = pretrained.model.features(ids)
    assert torch.allclose(result.states[0].values[-1].float(), state[0][0][0], atol=1e-6)
    assert torch.allclose(result.states[1].values[-1].float(), state[0][1][0], atol=1e-6)


def test_single_state_cell_has_one_trajectory():
    result = state_trajectories(make_pretrained("delta-rnn"), "a dog")
    assert [s.name for s in result.states] == ["h"] and len(result.labels) == 3
