"""``last.ckpt`` is the latest validated state, not the best: Lightning 2.6's ``ModelCheckpoint(save_last=True)``
with a monitor writes ``last.ckpt`` only when a top-k checkpoint was saved, so a resume from it went back to the
best epoch (:class:`~dsf_lightning.training.guards.LastCheckpointAtEveryValidation`)."""

import json

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from dsf_lightning.cli import main
from dsf_lightning.training.guards import LastCheckpointAtEveryValidation
from tests.test_own_text_cli import QUIET, write_lines


class WorseEveryEpoch(L.LightningModule):
    """A toy whose ``val_loss`` rises each epoch: only epoch 0 is ever the best."""

    def __init__(self, batch_size=4):
        super().__init__()
        self.batch_size = batch_size
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", float(self.current_epoch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=self.batch_size)

    val_dataloader = train_dataloader


def fit_toy(tmp_path, callbacks, val_check_interval=1.0, batch_size=4):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="best", monitor="val_loss", save_last=True)
    trainer = L.Trainer(max_epochs=3, callbacks=[checkpoint, *callbacks], logger=False, enable_progress_bar=False,
                        enable_model_summary=False, val_check_interval=val_check_interval, num_sanity_val_steps=0)
    trainer.fit(WorseEveryEpoch(batch_size))
    return torch.load(tmp_path / "last.ckpt", weights_only=False), torch.load(tmp_path / "best.ckpt", weights_only=False)


def test_plain_lightning_last_ckpt_is_the_last_epoch_with_the_callback(tmp_path):
    last, best = fit_toy(tmp_path / "with", [LastCheckpointAtEveryValidation()])
    assert best["epoch"] == 0
    assert last["epoch"] == 2 and last["global_step"] == 6
    # without it, Lightning's own rule: last.ckpt is a copy of the best epoch (what this callback fixes)
    last, _ = fit_toy(tmp_path / "without", [])
    assert last["epoch"] == 0 and last["global_step"] == 2


def test_mid_epoch_validation_writes_last_before_the_next_window(tmp_path):
    checkpoints = []

    class Spy(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            checkpoints.append((trainer.global_step, (tmp_path / "last.ckpt").is_file()
                                and torch.load(tmp_path / "last.ckpt", weights_only=False)["global_step"]))

    fit_toy(tmp_path, [LastCheckpointAtEveryValidation(), Spy()], val_check_interval=2, batch_size=2)
    # 4 windows an epoch, validation after every second: before each window, last.ckpt holds the step last validated
    assert [(step, saved) for step, saved in checkpoints if step > 0] == [(step, step - step % 2) for step in range(1, 12)]


def test_dsf_fit_last_ckpt_is_the_last_epoch_when_a_later_epoch_is_not_the_best(tmp_path):
    folder = tmp_path / "text"
    write_lines(folder / "train.txt", 60)
    write_lines(folder / "valid.txt", 10, 500)
    ckpts = tmp_path / "ckpts"
    # mode max on a falling val_loss: only epoch 0 is a top-k checkpoint
    callback = json.dumps({"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                           "init_args": {"dirpath": str(ckpts), "filename": "best", "monitor": "val_loss", "mode": "max",
                                         "save_last": True}})
    argv = ["fit", "--data.corpus", "text-folder", "--data.corpus_options", json.dumps({"path": str(folder)}),
            "--trainer.max_epochs", "3", "--trainer.callbacks+", callback, "--trainer.default_root_dir", str(tmp_path),
            *QUIET]
    assert main(argv) == 0
    best = torch.load(ckpts / "best.ckpt", weights_only=False)
    last = torch.load(ckpts / "last.ckpt", weights_only=False)
    assert best["epoch"] == 0
    assert last["epoch"] == 2 and last["global_step"] > best["global_step"]
