"""A checkpoint stores the carried training state itself, not the window of outputs it is a slice of.

The last step of a window's state is a view into the window's [T, B, H] outputs; ``torch.save`` writes a
view's whole storage, so a CPU run once saved every window's outputs with each checkpoint (a character model,
T = 100, B = 128, H = 1000: 51 MB of state in a checkpoint whose weights and Adam moments are 13 MB).
"""

from __future__ import annotations

import pytest
import torch

from tests.training.conftest import make_toy_corpus, quiet_trainer, toy_modules

CELLS = ["delta-rnn", "lstm", "elman", "scrn"]


@pytest.mark.parametrize("cell", CELLS)
def test_a_checkpoint_holds_the_carried_state_and_not_the_window_it_came_from(cell, tmp_path):
    torch.manual_seed(0)
    module, data = toy_modules(make_toy_corpus(n_train=2000, n_eval=60), bptt=40, cell=cell, hidden_sizes=[32])
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0)
    trainer.fit(module, data)
    path = tmp_path / "run.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)

    state = checkpoint["dsf_carried_train_state"]
    assert state and all(t.shape[0] == 4 for t in state)  # [streams, features] per state tensor
    for t in state:
        assert t.untyped_storage().nbytes() == t.numel() * t.element_size(), (
            f"a carried-state tensor of {t.numel()} elements saved {t.untyped_storage().nbytes()} bytes of storage")
    # and the file: the weights, Adam's two moments and the state, plus bookkeeping
    weights = sum(p.numel() * p.element_size() for p in module.parameters())
    carried = sum(t.numel() * t.element_size() for t in state)
    assert path.stat().st_size < 3 * weights + carried + 64_000


def test_a_resumed_checkpoint_saved_before_any_window_keeps_the_restored_state(tmp_path):
    """The other branch: resumed, then saved before a window ran (the state is still the restored one)."""
    module, data = toy_modules(make_toy_corpus(n_train=2000, n_eval=60), bptt=40, hidden_sizes=[32])
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0)
    trainer.fit(module, data)
    saved = [t.clone() for layer in module._carried["train"] for t in layer]
    module._carried["train"], module._restored_train_state = None, [torch.cat([t, t])[: t.shape[0]] for t in saved]
    checkpoint = {}
    module.on_save_checkpoint(checkpoint)
    for t, expected in zip(checkpoint["dsf_carried_train_state"], saved, strict=True):
        assert torch.equal(t, expected)
        assert t.untyped_storage().nbytes() == t.numel() * t.element_size()
