"""``state_reset_prob``: training streams restart windows from zeros at random, the rest carry their state,
and a resumed run draws the same streams (the real Lightning Trainer on the toy corpus)."""

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from dsf_lightning.training import LanguageModelModule

from .conftest import quiet_trainer, toy_modules
from .test_lightning_training import CrashAt, read, run


class Recording(LanguageModelModule):
    """Records the state each training window starts from and the state it leaves."""

    def _training_loss(self, inputs, targets, state):
        loss, final = super()._training_loss(inputs, targets, state)
        self.seen.append((state[0][0].detach().clone(), final[0][0].detach().clone()))
        return loss, final


def windows(toy_corpus, p):
    _, data = toy_modules(toy_corpus)
    module = Recording(vocab_size=data.vocab_size, hidden_sizes=[16], embedding_size=8, lr=3e-3, state_reset_prob=p)
    module.seen = []
    quiet_trainer(max_epochs=1, limit_val_batches=0).fit(module, data)
    return module.seen


@pytest.mark.parametrize("p", [0.0, 0.5])
def test_drawn_streams_start_from_zeros_and_the_others_carry_their_state(toy_corpus, p):
    seen = windows(toy_corpus, p)
    assert len(seen) > 50 and not seen[0][0].any()  # window 0 of the epoch: zeros for every stream
    reset = carried = 0
    for (start, _), (_, previous_end) in zip(seen[1:], seen[:-1]):
        for row, end in zip(start, previous_end):
            if not row.any():
                reset += 1
            else:
                assert torch.equal(row, end)  # untouched: exactly what the last window left
                carried += 1
    share = reset / (reset + carried)
    if p == 0:
        assert reset == 0
    else:
        assert 0.35 < share < 0.65, share  # ~200 draws at p = 0.5


def test_a_resumed_run_resets_the_same_streams(tmp_path, toy_corpus):
    options = dict(state_reset_prob=0.3, dropout_output=0.2)
    run(tmp_path / "straight", toy_corpus, **options)
    _, straight, straight_metrics = read(tmp_path / "straight")
    ckpts = tmp_path / "ckpts"
    save = dict(dirpath=ckpts, every_n_train_steps=2, save_top_k=-1, save_last=True)
    with pytest.raises(BaseException):
        run(tmp_path / "crashed", toy_corpus, callbacks=[ModelCheckpoint(**save), CrashAt(13)],
            trainer_kwargs={"enable_checkpointing": True}, **options)
    run(tmp_path / "resumed", toy_corpus, callbacks=[ModelCheckpoint(**save)], ckpt_path=str(ckpts / "last.ckpt"),
        trainer_kwargs={"enable_checkpointing": True}, **options)
    _, resumed, resumed_metrics = read(tmp_path / "resumed")
    for name in straight:
        torch.testing.assert_close(resumed[name], straight[name], rtol=0, atol=0, msg=name)
    assert resumed_metrics["val_loss"] == straight_metrics["val_loss"]
    run(tmp_path / "without", toy_corpus, dropout_output=0.2)
    _, without, _ = read(tmp_path / "without")
    assert any(not torch.equal(without[name], straight[name]) for name in straight)  # the option changes training


@pytest.mark.parametrize("bad", [-0.1, 1.0, 2, True, "0.1", float("nan")])
def test_a_bad_probability_is_refused(bad):
    with pytest.raises(ValueError, match="state_reset_prob must be a probability in"):
        LanguageModelModule(vocab_size=13, hidden_sizes=[8], state_reset_prob=bad)


def test_validation_worse_than_uniform_while_training_learns_is_warned_once(recwarn):
    module = LanguageModelModule(vocab_size=13, hidden_sizes=[8])  # uniform: ln 13 = 2.565 nats
    module._warn_if_it_needs_its_carried_state(2.4, torch.tensor(1.0))  # worse than training, better than uniform
    module._warn_if_it_needs_its_carried_state(5.0, torch.tensor(2.3))  # training no better than ~uniform yet
    assert not [w for w in recwarn if "state_reset_prob" in str(w.message)]
    module._warn_if_it_needs_its_carried_state(5.0, torch.tensor(1.0))
    module._warn_if_it_needs_its_carried_state(6.0, torch.tensor(0.9))
    said = [str(w.message) for w in recwarn if "state_reset_prob" in str(w.message)]
    assert len(said) == 1 and "val_loss 5.000 is worse than a uniform guess (ln V = 2.565)" in said[0]
