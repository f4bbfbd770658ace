"""``dsf fit`` hardening (issue 38, items 3, 5 and 7): the configuration a run saves never replaces a file no run
wrote (the user's own ``config.yaml`` stays byte-identical); a resume whose recipe leaves an architecture option at
its default while the checkpoint differs is an error naming both; a mistyped ``--ckpt_path``, a cluster plugin
outside its cluster and a full disk under a checkpoint are one-line errors (exit 2), the previous checkpoint intact;
``ddp_spawn`` on CPU trains (the model and the saved-config callback pickle)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dsf_lightning.cli import main
from dsf_lightning.training.saved_config import MARKER
from tests.reliability.conftest import write_text_folder

#: the user's recipe, with comments: it must never change
RECIPE = """\
# my recipe: do not touch   (a comment a YAML dump would drop)
model:
  cell: lstm
  hidden_sizes: [8]
  embedding_size: 8
  lr: 0.002   # the rate I like
data:
  corpus: text-folder
  data_root: {corpus}
  batch_size: 2
  bptt: 6
trainer:
  max_steps: 2
  logger: false
  enable_progress_bar: false
  enable_model_summary: false
"""


@pytest.fixture
def run_folder(tmp_path, monkeypatch):
    """A folder holding a tiny corpus and the user's ``config.yaml``; the working directory of the test."""
    monkeypatch.setenv("DSF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    corpus = write_text_folder(tmp_path / "corpus", lines=40)
    (tmp_path / "config.yaml").write_text(RECIPE.format(corpus=corpus))
    return tmp_path


def _fit(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["fit", *map(str, args)])
    return code, capsys.readouterr().err


def _one_line_error(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("dsf fit: error:")]
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------------------------------ saved configs
def test_a_run_never_rewrites_the_users_config(run_folder, capsys):
    """``dsf fit --config config.yaml --model.lr 0.5`` in the folder of that config.yaml (logger off: the run's
    log dir is that folder) leaves it byte-identical and saves the run's configuration beside it."""
    user = (run_folder / "config.yaml").read_bytes()
    assert _fit(capsys, "--config", "config.yaml", "--model.lr", "0.5")[0] == 0
    assert (run_folder / "config.yaml").read_bytes() == user
    saved = (run_folder / "config.dsf.yaml").read_text()
    assert saved.startswith(MARKER + "\n") and "lr: 0.5" in saved
    # a second run replaces the configuration a run saved, still not the user's
    assert _fit(capsys, "--config", "config.yaml", "--model.lr", "0.25")[0] == 0
    assert (run_folder / "config.yaml").read_bytes() == user
    assert "lr: 0.25" in (run_folder / "config.dsf.yaml").read_text()
    assert not list(run_folder.glob(".config*.tmp-*"))  # written under a temporary name, renamed into place


def test_default_root_dir_keeps_a_config_no_run_wrote(run_folder, capsys):
    """``default_root_dir=DIR`` does not replace ``DIR/config.yaml`` (nor ``config.dsf.yaml``) written by
    someone else; a configuration a run saved there is replaced (a resume in the same folder)."""
    out = run_folder / "out"
    out.mkdir()
    (out / "config.yaml").write_bytes(b"# notes of mine\nkeep: me\n")
    (out / "config.dsf.yaml").write_bytes(b"mine: too\n")
    assert _fit(capsys, "--config", "config.yaml", "--trainer.default_root_dir", out)[0] == 0
    assert (out / "config.yaml").read_bytes() == b"# notes of mine\nkeep: me\n"
    assert (out / "config.dsf.yaml").read_bytes() == b"mine: too\n"
    assert (out / "config.dsf-2.yaml").read_text().startswith(MARKER)

    ours = run_folder / "ours"
    assert _fit(capsys, "--config", "config.yaml", "--trainer.default_root_dir", ours)[0] == 0
    assert _fit(capsys, "--config", "config.yaml", "--trainer.default_root_dir", ours, "--model.lr", "0.125")[0] == 0
    assert "lr: 0.125" in (ours / "config.yaml").read_text()
    assert not (ours / "config.dsf.yaml").exists()


def test_a_saved_config_given_as_the_recipe_is_not_replaced(run_folder, capsys):
    """A configuration a run saved, copied into a folder and used there as ``--config``, is the user's now."""
    assert _fit(capsys, "--config", "config.yaml", "--trainer.default_root_dir", "first")[0] == 0
    recipe = run_folder / "first" / "config.yaml"
    before = recipe.read_bytes()
    assert before.startswith(MARKER.encode())
    assert _fit(capsys, "--config", recipe, "--trainer.default_root_dir", "first", "--model.lr", "0.5")[0] == 0
    assert recipe.read_bytes() == before
    assert "lr: 0.5" in (run_folder / "first" / "config.dsf.yaml").read_text()


# ------------------------------------------------------------------------------------------ resume
@pytest.fixture
def lstm_checkpoint(run_folder, capsys) -> Path:
    """A checkpoint of a tiny LSTM trained for 2 steps with the user's recipe (copied out of its run folder)."""
    assert _fit(capsys, "--config", "config.yaml", "--trainer.default_root_dir", "lstm")[0] == 0
    (written,) = (run_folder / "lstm").rglob("*.ckpt")
    ckpt = run_folder / "lstm.ckpt"
    ckpt.write_bytes(written.read_bytes())
    assert torch.load(ckpt, weights_only=True)["hyper_parameters"]["cell"] == "lstm"
    return ckpt


@pytest.mark.parametrize(
    "drop,message",
    [
        ("  cell: lstm\n", "model.cell: 'delta-rnn' now (the default: the recipe leaves it out), 'lstm' in checkpoint"),
        ("  hidden_sizes: [8]\n", "model.hidden_sizes: 256 now (the default: the recipe leaves it out), [8] in checkpoint"),
        ("  embedding_size: 8\n", "model.embedding_size: None now (the default: the recipe leaves it out), 8 in checkpoint"),
    ],
    ids=["cell", "hidden_sizes", "embedding_size"],
)
def test_a_resume_that_leaves_an_architecture_option_out_names_both(run_folder, lstm_checkpoint, capsys, drop, message):
    recipe = run_folder / "recipe.yaml"
    recipe.write_text((run_folder / "config.yaml").read_text().replace(drop, ""))
    code, err = _fit(capsys, "--config", recipe, "--trainer.default_root_dir", "resumed", "--trainer.max_steps", "4",
                     "--ckpt_path", lstm_checkpoint)
    assert code == 2, err
    line = _one_line_error(err)
    assert message in line and "set the options the recipe leaves out to the checkpoint's values" in line, line
    assert not (run_folder / "resumed" / "checkpoints").exists()  # refused before training


def test_the_same_recipe_resumes_and_options_that_are_not_the_architecture_still_come_from_the_checkpoint(
        run_folder, lstm_checkpoint, capsys):
    code, err = _fit(capsys, "--config", "config.yaml", "--trainer.default_root_dir", "resumed", "--trainer.max_steps", "4",
                     "--ckpt_path", lstm_checkpoint)
    assert code == 0, err
    recipe = run_folder / "recipe.yaml"  # lr is not an architecture option: left out, it is the checkpoint's
    recipe.write_text((run_folder / "config.yaml").read_text().replace("  lr: 0.002   # the rate I like\n", ""))
    code, err = _fit(capsys, "--config", recipe, "--trainer.default_root_dir", "again", "--trainer.max_steps", "4",
                     "--ckpt_path", lstm_checkpoint)
    assert code == 0, err
    (written,) = (run_folder / "again").rglob("*.ckpt")
    hp = torch.load(written, weights_only=True)["hyper_parameters"]
    assert (hp["cell"], hp["lr"], torch.load(written, weights_only=True)["global_step"]) == ("lstm", 0.002, 4)


# ------------------------------------------------------------------------------------------ one-line errors
def _not_a_checkpoint(folder: Path) -> dict[str, tuple[Path, str]]:
    (folder / "ckpts").mkdir()
    (folder / "notes.txt").write_text("hello\n")
    torch.save([1, 2, 3], folder / "list.ckpt")
    (folder / "half.ckpt").write_bytes(b"PK\x03\x04" + b"\0" * 50)
    (folder / "random.ckpt").write_bytes(bytes(range(223, 256)) * 3)  # not a pickle: not "Python objects" either
    exported = Path(__file__).parents[1] / "dsf_lightning" / "pretrained" / "lstm-ptb"
    return {
        "missing": (folder / "lstm.ckpt.bak", "no such file"),
        "folder": (folder / "ckpts", "is a folder, not a checkpoint file"),
        "text": (folder / "notes.txt", "not a readable checkpoint"),
        "not-lightning": (folder / "list.ckpt", "not a Lightning checkpoint"),
        "truncated": (folder / "half.ckpt", "not a readable checkpoint"),
        "device": (Path("/dev/zero"), "is not a regular file"),
        "random": (folder / "random.ckpt", "not a readable checkpoint (not a torch.save file)"),
        "exported-folder": (exported, "is started from with --model.init_from FOLDER"),
        "exported-weights": (exported / "model.safetensors", "is started from with --model.init_from FOLDER"),
    }


@pytest.mark.parametrize("case", ["missing", "folder", "text", "not-lightning", "truncated", "device", "random",
                                  "exported-folder", "exported-weights"])
def test_a_mistyped_ckpt_path_is_one_line(run_folder, capsys, case):
    path, message = _not_a_checkpoint(run_folder)[case]
    code, err = _fit(capsys, "--config", "config.yaml", "--ckpt_path", path)
    assert code == 2, err
    line = _one_line_error(err)
    assert f"--ckpt_path {path}" in line and message in line, line


@pytest.mark.parametrize("options, message", [
    # a recipe's schedule and a command line that adds the other one (stacked recipes do the same)
    (["--model.lr_decay_after_epoch", "2", "--model.lr_halving_patience", "0"],
     "lr_decay_after_epoch and lr_halving_patience are two schedules: set only one (to drop a recipe's, give it "
     "as null: --model.lr_decay_after_epoch null)"),
    (["--model.lr_decay_factor", "1.5"], "lr_decay_factor must be in (0, 1], got 1.5"),
    (["--model.carry_state_after_step", "0"], "carry_state_after_step must be a number of steps >= 1"),
])
def test_training_options_that_do_not_fit_are_one_line(run_folder, capsys, options, message):
    """TrainConfig's checks run when LightningCLI builds the module: a bad combination of training options is the
    user's (exit 2, one line naming the options), not a traceback."""
    code, err = _fit(capsys, "--config", "config.yaml", *options)
    assert code == 2, err
    assert message in _one_line_error(err)


def test_slurm_environment_outside_slurm_is_one_line(run_folder, capsys, monkeypatch):
    for name in list(os.environ):
        if name.startswith("SLURM_"):
            monkeypatch.delenv(name)
    plugin = "lightning.pytorch.plugins.environments.SLURMEnvironment"
    for extra in ([], ["--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.accelerator", "cpu"]):
        code, err = _fit(capsys, "--config", "config.yaml", "--trainer.plugins", plugin, *extra)
        assert code == 2, err
        line = _one_line_error(err)
        assert "SLURMEnvironment" in line and "SLURM_NTASKS" in line and "srun" in line, line
    assert not (run_folder / "checkpoints").exists()


def _cli(folder: Path, *args, preexec=None, timeout=240) -> subprocess.CompletedProcess:
    env = {**os.environ, "DSF_CACHE_DIR": str(folder / "cache"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "dsf_lightning.cli", "fit", *map(str, args)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=timeout, preexec_fn=preexec)


@pytest.mark.slow
def test_ddp_spawn_on_cpu_trains(run_folder):
    """``ddp_spawn`` pickles the trainer into each process: the Delta-RNN's identity activation (a lambda before)
    and the saved-config callback (it held the parser, which holds the CLI) pickle; 2 processes, gloo, 2 steps."""
    recipe = run_folder / "delta.yaml"
    recipe.write_text((run_folder / "config.yaml").read_text().replace("cell: lstm", "cell: delta-rnn"))
    done = _cli(run_folder, "--config", recipe, "--trainer.default_root_dir", "spawn", "--trainer.strategy", "ddp_spawn",
                "--trainer.devices", "2", "--trainer.accelerator", "cpu")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Starting with 2 processes" in done.stderr + done.stdout
    (written,) = (run_folder / "spawn").rglob("*.ckpt")
    assert torch.load(written, weights_only=True)["global_step"] == 2
    assert (run_folder / "spawn" / "config.yaml").read_text().startswith(MARKER)


def _small_file_system(folder: Path, size_kb: int):
    """Mount a tmpfs of ``size_kb`` at ``folder`` (root only); None when it cannot be mounted."""
    folder.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(folder)],
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return folder if done.returncode == 0 else None


def test_a_full_disk_under_a_checkpoint_is_one_line_and_keeps_the_previous_one(run_folder, lstm_checkpoint):
    """A real ENOSPC (a 48 KiB tmpfs holding the previous ``last.ckpt`` and a filler: no room for a second copy).
    Where nothing can be mounted (not root), RLIMIT_FSIZE below the checkpoint's size gives EFBIG instead."""
    good = lstm_checkpoint.read_bytes()
    mounted = _small_file_system(run_folder / "small", 48)
    target = run_folder / "small"
    preexec = None
    try:
        if mounted is not None:
            (target / "filler").write_bytes(b"\0" * (48 * 1024 - len(good) - 10 * 1024))
        else:
            def preexec():  # the child may write files up to the checkpoint's size less 1 KiB
                import resource
                import signal

                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (len(good) - 1024, len(good) - 1024))
        (target / "last.ckpt").write_bytes(good)
        done = _cli(run_folder, "--config", "config.yaml", "--trainer.default_root_dir", "full",
                    "--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.dirpath", target,
                    "--trainer.callbacks.save_top_k", "0", "--trainer.callbacks.save_last", "true",
                    "--trainer.callbacks.enable_version_counter", "false", preexec=preexec)
        assert done.returncode == 2, done.stderr[-3000:]
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
        (line,) = [x for x in done.stderr.splitlines() if x.startswith("dsf fit: error:")]
        assert f"{target / 'last.ckpt'}: checkpoint not written" in line, line
        assert ("the disk is full" if mounted else "file size limit") in line, line
        assert "previous complete checkpoint" in line
        assert (target / "last.ckpt").read_bytes() == good  # the previous checkpoint, intact
        assert sorted(p.name for p in target.iterdir()) == (["filler", "last.ckpt"] if mounted else ["last.ckpt"])
    finally:
        if mounted is not None:
            subprocess.run(["umount", str(mounted)], capture_output=True, timeout=30)


def test_export_reads_the_configuration_the_run_saved_beside_the_users(tmp_path):
    """``dsf export`` looks for the run's configuration beside its checkpoint: ``config.dsf.yaml`` (what the run
    saved when ``config.yaml`` was the user's) comes first."""
    from dsf_lightning.training.read_checkpoint import cli_configs

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "config.yaml").write_text("data: {corpus: ptb}\n")
    (tmp_path / "config.dsf.yaml").write_text(f"{MARKER}\ndata: {{corpus: text-folder}}\n")
    found = cli_configs(tmp_path / "checkpoints" / "last.ckpt")
    assert found[:2] == [tmp_path / "config.dsf.yaml", tmp_path / "config.yaml"]


def test_every_cell_pickles():
    """``ddp_spawn`` pickles the module into each process: every registered cell, with its default options."""
    import pickle

    from dsf_lightning.cells.registry import list_cells
    from dsf_lightning.training import LanguageModelModule

    for name in list_cells():
        module = LanguageModelModule(vocab_size=10, cell=name, hidden_sizes=[8], embedding_size=8)
        copy = pickle.loads(pickle.dumps(module))
        assert copy.state_dict().keys() == module.state_dict().keys(), name
