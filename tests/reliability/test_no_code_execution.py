"""Nothing loaded from a checkpoint or a recipe is unpickled or executed.

* A Lightning checkpoint carrying a pickle payload (unpickling it creates a marker file) is refused by
  ``pretrained_from_checkpoint``, ``dsf export``, a resume through ``AtomicCheckpointIO`` (even with
  ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``, which makes Lightning's own loader unpickle it) and
  ``dsf fit --ckpt_path``.
* jsonargparse imports the module of any ``class_path`` and resolves dotted names given to callables;
  under the ``dsf`` CLI it imports only the allowed classes (``recipe_guard``), checked before any import
  (a planted module that creates a marker when imported proves it was never imported). The full attack
  suite (every config / checkpoint form, getattr chains, Any values, hostile YAML) is
  ``test_recipe_attacks.py``.
"""

from __future__ import annotations

import pickle
import textwrap

import lightning as L
import pytest
import torch

from dsf_lightning.cli import main
from dsf_lightning.export.language_model import pretrained_from_checkpoint
from dsf_lightning.hub import CheckpointError
from dsf_lightning.training.checkpoint_io import AtomicCheckpointIO, CheckpointLoadError
from dsf_lightning.training.recipe_guard import ALLOWED_PHRASE
from tests.training.conftest import make_toy_corpus, quiet_trainer, toy_modules


class Boom:
    """Unpickling this creates ``marker``: proof that something was unpickled."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def real_checkpoint(tmp_path):
    """A genuine LanguageModelModule checkpoint (a few steps on the toy stream)."""
    L.seed_everything(0, verbose=False)
    module, data = toy_modules(make_toy_corpus())
    trainer = quiet_trainer(max_steps=2, limit_val_batches=0)
    trainer.fit(module, data)
    path = tmp_path / "good.ckpt"
    trainer.save_checkpoint(path)
    return path


@pytest.fixture
def evil_checkpoint(tmp_path, real_checkpoint):
    """The genuine checkpoint with a pickle payload among its hyper-parameters."""
    marker = tmp_path / "PWNED"
    ckpt = torch.load(real_checkpoint, weights_only=True)
    ckpt["hyper_parameters"]["payload"] = Boom(marker)
    path = tmp_path / "evil.ckpt"
    torch.save(ckpt, path)
    proof = tmp_path / "proof"
    pickle.loads(pickle.dumps(Boom(proof)))  # the payload is live
    assert proof.exists()
    return path, marker


def test_pretrained_from_checkpoint_refuses_the_payload(evil_checkpoint):
    path, marker = evil_checkpoint
    with pytest.raises(CheckpointError, match="weights_only|refuses") as info:
        pretrained_from_checkpoint(path, make_toy_corpus())
    assert "never unpickles" in str(info.value)
    assert not marker.exists()


def test_dsf_export_refuses_the_payload(evil_checkpoint, tmp_path, capsys):
    path, marker = evil_checkpoint
    code = main(["export", str(path), str(tmp_path / "out"), "--corpus", "text-folder"])
    assert code != 0
    assert "refuses" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("force_unsafe_default", [False, True], ids=["torch-default", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"])
def test_resume_with_atomic_checkpoint_io_refuses_the_payload(evil_checkpoint, monkeypatch, force_unsafe_default):
    path, marker = evil_checkpoint
    if force_unsafe_default:
        monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    module, data = toy_modules(make_toy_corpus())
    trainer = quiet_trainer(max_steps=4, plugins=[AtomicCheckpointIO()])
    with pytest.raises(CheckpointLoadError, match="weights-only loading refuses.*nothing was unpickled"):
        trainer.fit(module, data, ckpt_path=str(path))
    assert not marker.exists()


def test_why_the_explicit_default_matters(evil_checkpoint, monkeypatch):
    """Lightning's own loader leaves weights_only to torch, whose default an environment variable flips:
    then the payload runs. (AtomicCheckpointIO, above, refuses it in the same situation.)"""
    path, marker = evil_checkpoint
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    from lightning.pytorch.plugins.io import TorchCheckpointIO

    with pytest.warns(UserWarning):
        TorchCheckpointIO().load_checkpoint(path)
    assert marker.exists()


def test_dsf_fit_ckpt_path_refuses_the_payload(evil_checkpoint, tmp_path, monkeypatch, capsys, text_folder):
    path, marker = evil_checkpoint
    monkeypatch.chdir(tmp_path)
    code = main(["fit", "--data.corpus", "text-folder", "--data.data_root", str(text_folder), "--ckpt_path", str(path)])
    assert code == 2
    assert "nothing was unpickled" in capsys.readouterr().err
    assert not marker.exists()


# ----------------------------------------------------------------------------------------------- recipes
def recipe(tmp_path, text_folder, extra: str):
    path = tmp_path / "recipe.yaml"
    path.write_text(textwrap.dedent(f"""
        data:
          corpus: text-folder
          data_root: {text_folder}
          batch_size: 2
          eval_batch_size: 2
        model:
          hidden_sizes: [8]
        trainer:
          max_steps: 1
          logger: false
    """) + textwrap.dedent(extra))
    return path


HOSTILE_RECIPES = {
    "callback os.system": """
        trainer_callbacks:
          - class_path: os.system
            init_args: {command: "touch MARKER"}
    """,
    "callback subprocess.Popen": """
        trainer_callbacks:
          - class_path: subprocess.Popen
            init_args: {args: [touch, MARKER]}
    """,
    "planted module": """
        trainer_callbacks:
          - class_path: dsf_planted_plugin.Hook
    """,
    "LambdaCallback calling os.system": """
        trainer_callbacks:
          - class_path: lightning.pytorch.callbacks.LambdaCallback
            init_args: {on_fit_start: os.system}
    """,
    "class_path inside cell_options": """
        model_cell_options:
            dropout: {class_path: subprocess.Popen, init_args: {args: [touch, MARKER]}}
    """,
    "class_path as the corpus": """
        data_corpus_override: {class_path: subprocess.Popen, init_args: {args: [touch, MARKER]}}
    """,
}


def _materialize(text: str, marker) -> str:
    """The snippets above with their section names spelled as YAML nesting."""
    text = text.replace("MARKER", str(marker))
    text = text.replace("trainer_callbacks:", "trainer:\n  callbacks:")
    text = text.replace("model_cell_options:", "model:\n  cell_options:")
    text = text.replace("data_corpus_override:", "data:\n  corpus:")
    return text


@pytest.mark.parametrize("name", sorted(HOSTILE_RECIPES))
def test_a_recipe_naming_foreign_code_is_refused_before_anything_is_imported(
        name, tmp_path, text_folder, planted, monkeypatch, capsys, hostile_counts):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "RAN"
    base = recipe(tmp_path, text_folder, "")
    override = tmp_path / "override.yaml"
    override.write_text(textwrap.dedent(_materialize(textwrap.dedent(HOSTILE_RECIPES[name]), marker)))
    code = main(["fit", "--config", str(base), "--config", str(override)])
    hostile_counts["dsf fit recipe with foreign class_path / callable"] += 1
    err = capsys.readouterr().err
    assert code == 2, err
    assert ALLOWED_PHRASE in err and "nothing was imported" in err
    assert not marker.exists() and not planted.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["--trainer.callbacks+=subprocess.Popen"],
        ["--trainer.callbacks", '[{"class_path": "dsf_planted_plugin.Hook"}]'],
        ["--trainer.callbacks.class_path", "dsf_planted_plugin.Hook"],
        ["--trainer.logger", "{class_path: os.system}"],
    ],
)
def test_command_line_overrides_naming_foreign_code_are_refused(argv, tmp_path, text_folder, planted, monkeypatch, capsys, hostile_counts):
    monkeypatch.chdir(tmp_path)
    hostile_counts["dsf fit command-line class_path"] += 1
    code = main(["fit", "--config", str(recipe(tmp_path, text_folder, "")), *argv])
    err = capsys.readouterr().err
    assert code == 2 and ALLOWED_PHRASE in err, err[-2000:]
    assert not planted.exists()


def test_the_guard_is_what_stops_the_import(tmp_path, text_folder, planted, monkeypatch):
    """Trusting the planted class (DSF_TRUSTED_CLASSES) lets jsonargparse import it: the marker
    appears, so the refusals above are the guard's doing."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DSF_TRUSTED_CLASSES", "dsf_planted_plugin.Hook")
    path = recipe(tmp_path, text_folder, """
        trainer:
          callbacks:
            - class_path: dsf_planted_plugin.Hook
    """)
    from dsf_lightning.cli import lightning_cli

    lightning_cli(["--config", str(path)], run=False)
    assert planted.exists()


def test_yaml_python_tags_are_not_constructed(tmp_path, text_folder, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "TAGGED"
    path = recipe(tmp_path, text_folder, "")
    text = path.read_text().replace("corpus: text-folder", f'corpus: !!python/object/apply:os.system ["touch {marker}"]')
    path.write_text(text)
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", str(path)])
    assert info.value.code == 2
    assert "python/object/apply" in capsys.readouterr().err
    assert not marker.exists()


def test_forged_checkpoint_hyper_parameters_cannot_import_code(real_checkpoint, tmp_path, text_folder, planted, monkeypatch, capsys):
    """LightningCLI parses a --ckpt_path checkpoint's hyper_parameters into its config (jsonargparse then
    imports any class_path there): a weights-only-safe checkpoint can still carry one."""
    monkeypatch.chdir(tmp_path)
    ckpt = torch.load(real_checkpoint, weights_only=True)
    ckpt["hyper_parameters"]["cell_options"] = {"x": {"class_path": "dsf_planted_plugin.Hook"}}
    forged = tmp_path / "forged.ckpt"
    torch.save(ckpt, forged)
    code = main(["fit", "--data.corpus", "text-folder", "--data.data_root", str(text_folder), "--ckpt_path", str(forged)])
    assert code == 2
    err = capsys.readouterr().err
    assert "dsf_planted_plugin.Hook" in err and ALLOWED_PHRASE in err
    assert not planted.exists()


def test_every_class_path_of_the_shipped_recipes_is_allowed():
    """The recipes name only allowed classes (test_recipes.py parses each through the guarded CLI)."""
    from pathlib import Path

    import yaml

    from dsf_lightning.training.recipe_guard import _import_paths, allowed_classes

    allowed = _import_paths(allowed_classes())
    recipes = sorted((Path(__file__).resolve().parents[2] / "recipes").rglob("*.yaml"))
    assert recipes
    named = set()
    for path in recipes:
        stack = [yaml.safe_load(path.read_text())]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                named.update(v for k, v in node.items() if k == "class_path")
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
    assert named and named <= allowed, sorted(named - allowed)


def test_a_foreign_class_path_in_a_nested_config_file_is_refused(tmp_path, text_folder, planted, monkeypatch, capsys):
    """jsonargparse reads a group given as a file name (``trainer: trainer.yaml``, relative to the
    config that names it): what it names meets the same allowlist."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "trainer.yaml").write_text("callbacks:\n  - class_path: dsf_planted_plugin.Hook\n")
    base = recipe(tmp_path, text_folder, "")
    outer = base.read_text().replace("trainer:\n  max_steps: 1\n  logger: false\n", "") + "trainer: trainer.yaml\n"
    (tmp_path / "parts" / "outer.yaml").write_text(outer)
    for argv in (["--config", str(tmp_path / "parts" / "outer.yaml")],
                 ["--config", str(base), "--trainer", str(tmp_path / "parts" / "trainer.yaml")]):
        code = main(["fit", *argv])
        err = capsys.readouterr().err
        assert code == 2 and "dsf_planted_plugin.Hook" in err and ALLOWED_PHRASE in err, err[-2000:]
    assert not planted.exists()
