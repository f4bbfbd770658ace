"""Kill a short training run at every window and during every validation, resume, and get exactly the run
that was never interrupted (issue 13, item 3).

The run: 3 epochs x 4 training windows of the toy counting stream, validation (5 windows) after every
epoch, dropout, iterative inference and the plateau learning-rate schedule (``lr_halving_patience``), a
``ModelCheckpoint`` that writes ``last.ckpt`` after every step. Each training run is a process of its own,
forked from the test (so no import per run) and ended by a real ``SIGKILL`` that it sends itself at an
exact point: right after the optimizer step of window ``k`` of epoch ``e`` (before that step's checkpoint
is written, so the resume starts from the previous window's), or in the middle of epoch ``e``'s
validation (the resume starts from the checkpoint of the epoch's last window, whose validation has not
run). That is every window of every epoch, the last window of each epoch included.

Two forms, both compared bit for bit with the uninterrupted run (weights, carried state, optimizer and
scheduler state, global step, every logged training loss and ``val_loss``):

* ``chain``: one kill point after the other, each run resuming from the ``last.ckpt`` that the previous,
  itself resumed, run left behind; the checkpoint left at each kill equals the uninterrupted run's
  checkpoint of the same step, and the last resume finishes the run;
* ``from every checkpoint``: a resume from each checkpoint of the uninterrupted run (every window, so
  every kill point, and the end of every epoch) trains to the end.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from tests.training.conftest import make_toy_corpus, quiet_trainer, toy_modules

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hasattr(os, "fork"), reason="each run is a forked process")]

EPOCHS, WINDOWS = 3, 4  # n_train=116 tokens / 4 streams = 29 per stream: ceil(28 / 7) = 4 windows of bptt 7
OPTIONS = dict(dropout_input=0.3, dropout_output=0.3, iterative_inference_step=0.1, lr_halving_patience=0, lr=0.08)


class Record(L.Callback):
    """Append every step's loss and every validation's ``val_loss`` to ``OUT/log-<pid>.jsonl``; SIGKILL
    this process at ``kill`` = ``("train", epoch, window)`` or ``("val", epoch)``; at the end write
    ``OUT/final.ckpt``."""

    def __init__(self, out: Path, kill=None):
        self.out, self.kill = out, tuple(kill) if kill else None
        self.stream = open(out / f"log-{os.getpid()}.jsonl", "a", buffering=1)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.stream.write(json.dumps({"step": trainer.global_step, "epoch": trainer.current_epoch,
                                   "window": int(batch[2]), "loss": float(outputs["loss"]).hex()}) + "\n")
        if self.kill == ("train", trainer.current_epoch, int(batch[2])):
            os.kill(os.getpid(), signal.SIGKILL)  # before ModelCheckpoint (always last) writes this step

    def on_validation_batch_end(self, trainer, module, outputs, batch, batch_idx, dataloader_idx=0):
        if not trainer.sanity_checking and self.kill == ("val", trainer.current_epoch) and batch_idx == 2:
            os.kill(os.getpid(), signal.SIGKILL)

    def on_validation_end(self, trainer, module):
        if not trainer.sanity_checking:
            self.stream.write(json.dumps({"val_epoch": trainer.current_epoch, "step": trainer.global_step,
                                       "val_loss": float(trainer.callback_metrics["val_loss"]).hex()}) + "\n")

    def on_train_end(self, trainer, module):
        trainer.save_checkpoint(self.out / "final.ckpt")


def train(out: Path, ckpts: Path, resume: Path | None = None, kill=None, keep_every_step: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    L.seed_everything(0, verbose=False)
    module, data = toy_modules(make_toy_corpus(n_train=116, n_eval=60), **OPTIONS)
    every = ModelCheckpoint(dirpath=ckpts, every_n_train_steps=1, save_last=True,
                            save_top_k=-1 if keep_every_step else 1, filename="{step}")
    callbacks = [Record(out, kill), every]
    if keep_every_step:  # and the end of every epoch, as a recipe's ModelCheckpoint(monitor=val_loss) saves
        callbacks.append(ModelCheckpoint(dirpath=ckpts / "epochs", filename="{epoch}", monitor="val_loss", save_top_k=-1))
    trainer = quiet_trainer(max_epochs=EPOCHS, enable_checkpointing=True, callbacks=callbacks)
    trainer.fit(module, data, ckpt_path=str(resume) if resume else None)


def in_child(fn, *args, **kwargs) -> int:
    """Run ``fn`` in a forked process; return its exit status (negative: killed by that signal)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            fn(*args, **kwargs)
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def records(out: Path) -> tuple[dict, dict]:
    """``{step: [loss, ...]}`` and ``{epoch: [val_loss, ...]}`` over every process that wrote to ``out``."""
    losses, vals = {}, {}
    for path in sorted(out.glob("log-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut by the kill
            if "val_loss" in row:
                vals.setdefault(row["val_epoch"], []).append(float.fromhex(row["val_loss"]))
            else:
                losses.setdefault(row["step"], []).append((row["epoch"], row["window"], float.fromhex(row["loss"])))
    return losses, vals


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def assert_same_tensors(a, b, what: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, what
        assert torch.equal(a, b) or (a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                                     and torch.equal(a.nan_to_num(), b.nan_to_num())), what
    elif isinstance(a, dict):
        assert set(a) == set(b), (what, sorted(map(str, a)), sorted(map(str, b)))
        for key in a:
            assert_same_tensors(a[key], b[key], f"{what}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_tensors(x, y, f"{what}[{i}]")
    else:
        assert a == b, (what, a, b)


def assert_same_training_state(got: dict, want: dict, where: str) -> None:
    """Weights, carried state, optimizer and scheduler state, step and epoch, and the loader's position."""
    assert got["global_step"] == want["global_step"], where
    assert got["epoch"] == want["epoch"], where
    assert_same_tensors(got["state_dict"], want["state_dict"], f"{where}: weights")
    assert_same_tensors(got.get("dsf_carried_train_state"), want.get("dsf_carried_train_state"), f"{where}: carried state")
    assert_same_tensors(got["optimizer_states"], want["optimizer_states"], f"{where}: optimizer")
    assert_same_tensors(got["lr_schedulers"], want["lr_schedulers"], f"{where}: lr scheduler")
    loader = lambda c: c["loops"]["fit_loop"]["state_dict"].get("combined_loader")  # noqa: E731
    assert loader(got) == loader(want), where


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted run: its log, a checkpoint after every step and the final checkpoint."""
    out = tmp_path_factory.mktemp("straight")
    assert in_child(train, out, out / "ckpt", keep_every_step=True) == 0
    losses, vals = records(out)
    assert sorted(losses) == list(range(1, EPOCHS * WINDOWS + 1))
    assert sorted(vals) == list(range(EPOCHS))
    final = load(out / "final.ckpt")
    assert final["global_step"] == EPOCHS * WINDOWS
    return out, losses, vals, final


def kill_points():
    return [p for e in range(EPOCHS) for p in ([("train", e, k) for k in range(WINDOWS)] + [("val", e)])]


def assert_logs_match(out: Path, straight_losses: dict, straight_vals: dict) -> None:
    losses, vals = records(out)
    assert max(losses, default=0) <= EPOCHS * WINDOWS, f"trained past max_epochs: steps {sorted(losses)}"
    for step, seen in losses.items():  # a step redone after a resume repeats the very same loss
        assert all(s == straight_losses[step][0] for s in seen), (step, seen, straight_losses[step])
    for epoch, seen in vals.items():
        assert all(v == straight_vals[epoch][0] for v in seen), (epoch, seen, straight_vals[epoch])
    return losses, vals


def test_sigkill_at_every_window_and_validation_then_resume_in_a_chain(straight, tmp_path):
    """Each run resumes from the last.ckpt of the previous (resumed) run and is killed at the next point."""
    s_out, s_losses, s_vals, s_final = straight
    out, ckpts = tmp_path / "chain", tmp_path / "chain" / "ckpt"
    last = ckpts / "last.ckpt"
    report = []
    for point in kill_points():
        status = in_child(train, out, ckpts, resume=last if last.exists() else None, kill=point)
        assert status == -signal.SIGKILL, f"the run was not killed at {point} (exit status {status})"
        if not last.exists():  # killed at the very first step
            report.append(f"{point}: no checkpoint yet")
            continue
        left = load(last)
        step = left["global_step"]
        # the last window of an epoch has two checkpoints in the uninterrupted run: before its validation (the step's)
        # and after it (the epoch's end: a resumed run that redid the validation writes last.ckpt there, as the
        # uninterrupted run's own last.ckpt is)
        after_validation = left["dsf_position"]["validated"]
        want = s_out / "ckpt" / ("epochs" if after_validation else "") / (
            f"epoch={left['dsf_position']['epoch']}.ckpt" if after_validation else f"step={step}.ckpt")
        assert_same_training_state(left, load(want), f"last.ckpt at kill {point}")
        report.append(f"{point}: last.ckpt at step {step}{' after validation' if after_validation else ''} == the uninterrupted run's")
    assert in_child(train, out, ckpts, resume=last) == 0
    print("\n" + "\n".join(report))
    losses, vals = assert_logs_match(out, s_losses, s_vals)
    assert sorted(losses) == sorted(s_losses)
    assert sorted(vals) == list(range(EPOCHS)), f"validations missing: ran for epochs {sorted(vals)}"
    assert_same_training_state(load(out / "final.ckpt"), s_final, "final checkpoint")


@pytest.mark.parametrize("step", range(1, EPOCHS * WINDOWS + 1))
def test_resume_from_every_checkpoint_of_the_uninterrupted_run(straight, tmp_path, step):
    """A resume from the checkpoint of every step (the last window of each epoch included, whose
    validation has not run when it is written) trains to exactly the uninterrupted run's end."""
    s_out, s_losses, s_vals, s_final = straight
    out = tmp_path / "resumed"
    assert in_child(train, out, out / "ckpt", resume=s_out / "ckpt" / f"step={step}.ckpt") == 0
    losses, vals = assert_logs_match(out, s_losses, s_vals)
    assert sorted(losses) == list(range(step + 1, EPOCHS * WINDOWS + 1))
    first_epoch = (step - 1) // WINDOWS  # the epoch of that checkpoint's window: its validation is still due
    assert sorted(vals) == list(range(first_epoch, EPOCHS)), f"validations: {sorted(vals)}"
    assert_same_training_state(load(out / "final.ckpt"), s_final, f"resumed from step {step}")


@pytest.mark.parametrize("epoch", range(EPOCHS - 1))
def test_resume_from_every_epoch_end_checkpoint(straight, tmp_path, epoch):
    """A checkpoint written at an epoch's end (after its validation) resumes with the next epoch."""
    s_out, s_losses, s_vals, s_final = straight
    out = tmp_path / "resumed"
    assert in_child(train, out, out / "ckpt", resume=s_out / "ckpt" / "epochs" / f"epoch={epoch}.ckpt") == 0
    losses, vals = assert_logs_match(out, s_losses, s_vals)
    assert sorted(losses) == list(range((epoch + 1) * WINDOWS + 1, EPOCHS * WINDOWS + 1))
    assert sorted(vals) == list(range(epoch + 1, EPOCHS))
    assert_same_training_state(load(out / "final.ckpt"), s_final, f"resumed from the end of epoch {epoch}")
