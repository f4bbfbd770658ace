"""Run with the code of commit fd98642 (before issue 14's refactor): writes a mid-epoch checkpoint of a toy
run and the final weights of the same run uninterrupted."""
import json
import shutil
import sys
from pathlib import Path

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__import__("os").environ.get("PYTHONPATH", ".").split(":")[0]).resolve()))
from tests.training.conftest import make_toy_corpus
from tests.training.test_lightning_training import CrashAt, run

out, tmp = Path(sys.argv[1]), Path(sys.argv[2])
options = dict(dropout_input=0.3, dropout_output=0.3, iterative_inference_step=0.1, cell="scrn", cell_options={"context_size": 4})
corpus = make_toy_corpus()
run(tmp / "straight", corpus, **options)
w = torch.load(tmp / "straight" / "weights.pt")
save_file({k: v.contiguous() for k, v in w.items()}, str(out / "straight_weights.safetensors"))
shutil.copy(tmp / "straight" / "metrics.json", out / "straight_metrics.json")
ckpts = tmp / "ckpts"
try:
    run(tmp / "crashed", corpus, callbacks=[ModelCheckpoint(dirpath=ckpts, every_n_train_steps=2, save_top_k=-1, save_last=True), CrashAt(13)],
        trainer_kwargs={"enable_checkpointing": True}, **options)
except BaseException:
    pass
shutil.copy(ckpts / "last.ckpt", out / "mid_epoch.ckpt")
ck = torch.load(out / "mid_epoch.ckpt", weights_only=False)
(out / "README.md").write_text(
    "Written by the code of commit fd98642 (before issue 14 moved the package's modules), with\n"
    "`/work/scratch/make_pre_refactor.py` (the toy stream of tests/training/conftest.py, an SCRN, dropout and\n"
    f"iterative inference): `mid_epoch.ckpt` is the last checkpoint of a run stopped at step 13 (global_step {ck['global_step']});\n"
    "`straight_weights.safetensors` / `straight_metrics.json` are the final weights and metrics of the same run uninterrupted.\n"
    "tests/training/test_checkpoints_from_before.py resumes the checkpoint with today's code and must land on those weights.\n")
print("global_step", ck["global_step"], json.load(open(out / "straight_metrics.json")))
