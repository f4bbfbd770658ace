"""A checkpoint written before issue 14 moved the package's modules still resumes exactly (tests/data/pre_refactor:
written by the code of commit fd98642 with its make.py): resuming it with today's code ends on the weights and
validation loss of the same run left uninterrupted under the old code, to float round-off: since then the
training loss (fused_loss) and Adam (torch's fused kernel) compute the same values in another order, so the
last bits differ (the same code resuming its own checkpoints stays bit-exact: test_lightning_training)."""

import json
import math
from pathlib import Path

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from safetensors.torch import load_file

from .conftest import make_toy_corpus
from .test_lightning_training import run

DATA = Path(__file__).resolve().parents[1] / "data" / "pre_refactor"
OPTIONS = dict(dropout_input=0.3, dropout_output=0.3, iterative_inference_step=0.1, cell="scrn", cell_options={"context_size": 4})


def test_a_checkpoint_from_before_the_refactor_resumes_to_the_same_weights(tmp_path):
    old = torch.load(DATA / "mid_epoch.ckpt", weights_only=False)
    assert 0 < old["global_step"] < 13  # stopped mid-run
    save = dict(dirpath=tmp_path / "ckpts", every_n_train_steps=2, save_top_k=-1, save_last=True)
    module, trainer = run(tmp_path / "resumed", make_toy_corpus(), callbacks=[ModelCheckpoint(**save)],
                          ckpt_path=str(DATA / "mid_epoch.ckpt"), trainer_kwargs={"enable_checkpointing": True}, **OPTIONS)
    straight = load_file(str(DATA / "straight_weights.safetensors"))
    resumed = torch.load(tmp_path / "resumed" / "weights.pt")
    assert set(resumed) == set(straight)
    for name in straight:
        torch.testing.assert_close(resumed[name], straight[name], rtol=1e-5, atol=1e-6, msg=name)
    metrics = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert math.isclose(metrics["val_loss"], json.loads((DATA / "straight_metrics.json").read_text())["val_loss"], rel_tol=1e-6)
