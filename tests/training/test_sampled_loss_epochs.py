"""sampled_loss_epochs: the sampled loss (Jean et al. 2015) for the first epochs, then the full softmax."""

import lightning as L
import pytest
import torch

from dsf_lightning.training.config import TrainConfig, TrainConfigError

from .conftest import quiet_trainer, toy_modules

SAMPLED = dict(sampled_loss="sampled_softmax", sampled_loss_samples=4, sampled_loss_noise="log-uniform", lr=1e-2)


class _Objective(L.Callback):
    """Records, for every training window, whether the sampled loss ran (a forward hook on it) and whether the
    full softmax's loss did (a wrapper around ``_decoded_nll``)."""

    def __init__(self):
        self.seen = []  # (epoch, batch_idx, sampled calls, full-softmax calls)

    def on_train_start(self, trainer, module):
        self.calls = {"sampled": 0, "full": 0}
        module.sampled_loss.register_forward_hook(lambda *_: self.calls.__setitem__("sampled", self.calls["sampled"] + 1))
        full = module._decoded_nll

        def counted(y, targets):
            self.calls["full"] += 1
            return full(y, targets)

        module._decoded_nll = counted

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.seen.append((trainer.current_epoch, batch_idx, self.calls["sampled"], self.calls["full"]))
        self.calls = {"sampled": 0, "full": 0}


def _fit(corpus, epochs, callbacks=(), ckpt_path=None, trainer_kwargs=None, **options):
    L.seed_everything(0)
    module, data = toy_modules(corpus, **{**SAMPLED, **options})
    trainer = quiet_trainer(max_epochs=epochs, limit_val_batches=0, callbacks=list(callbacks), **(trainer_kwargs or {}))
    trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    return module, trainer


def test_the_sampled_loss_trains_until_the_switch_then_the_full_softmax(toy_corpus):
    objective = _Objective()
    _, trainer = _fit(toy_corpus, 3, [objective], sampled_loss_epochs=1.5)
    batches = trainer.num_training_batches
    assert batches > 2 and len(objective.seen) == 3 * batches
    for epoch, batch, sampled, full in objective.seen:
        before = epoch + batch / batches < 1.5
        assert (sampled, full) == ((1, 0) if before else (0, 1)), (epoch, batch)
    assert {e for e, *_ in objective.seen} == {0, 1, 2}


def test_before_the_switch_it_is_the_sampled_loss_and_after_it_is_not(toy_corpus):
    switching, _ = _fit(toy_corpus, 1, sampled_loss_epochs=1.0)
    throughout, _ = _fit(toy_corpus, 1)
    for (name, a), b in zip(switching.state_dict().items(), throughout.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)  # epoch 1: the same training, window for window
    switched, _ = _fit(toy_corpus, 2, sampled_loss_epochs=1.0)
    sampled, _ = _fit(toy_corpus, 2)
    full, _ = _fit(toy_corpus, 2, sampled_loss=None, sampled_loss_samples=1024, sampled_loss_noise="unigram")
    assert not torch.equal(switched.model.embedding.weight, sampled.model.embedding.weight)
    assert not torch.equal(switched.model.embedding.weight, full.model.embedding.weight)


def test_a_run_resumed_across_the_switch_trains_as_the_uninterrupted_one(tmp_path, toy_corpus):
    whole, _ = _fit(toy_corpus, 3, sampled_loss_epochs=1.5)
    _, first = _fit(toy_corpus, 1, sampled_loss_epochs=1.5)
    first.save_checkpoint(tmp_path / "epoch1.ckpt")
    resumed, _ = _fit(toy_corpus, 3, ckpt_path=tmp_path / "epoch1.ckpt", sampled_loss_epochs=1.5)
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "2"])
def test_a_bad_number_of_epochs_is_refused_naming_the_option(bad):
    with pytest.raises(TrainConfigError, match="sampled_loss_epochs must be a number of epochs > 0"):
        TrainConfig(sampled_loss="nce", sampled_loss_epochs=bad)


def test_epochs_without_a_sampled_loss_is_refused():
    with pytest.raises(TrainConfigError, match="but sampled_loss is not set"):
        TrainConfig(sampled_loss_epochs=2)
    with pytest.raises(TrainConfigError, match="nce_log_z 'learned'"):
        TrainConfig(sampled_loss="nce", nce_log_z="learned", sampled_loss_epochs=2)
    assert TrainConfig(sampled_loss="sampled_softmax", sampled_loss_epochs=0.5).sampled_loss_epochs == 0.5
