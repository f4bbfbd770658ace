"""Hostile recipes, command lines and checkpoints against ``dsf fit`` (issue 13, items 1 and 2).

Every case hands the CLI a payload that would create a marker file if jsonargparse imported or
instantiated what it names, through one of the ways the CLI accepts a config or a checkpoint: config
files with and without a suffix, ``--config=``, abbreviated and short options, group files (``--data
data.yaml``, ``data: data.yaml`` inside a config), inline values, environment variables, ``ckpt_path``
inside a config, the top-level ``--config`` before the subcommand, ``--print_config`` and
``--*.help``, checkpoints whose ``hyper_parameters`` carry the payload. The payloads reach code through
names under trusted packages (``torch.serialization.io.FileIO``: jsonargparse falls back to
``getattr`` on ``torch.serialization``, which imported ``io``; ``torch.utils.cpp_extension.subprocess
.Popen``; ``torch.builtins.exec``), through options typed ``Any`` / ``dict[str, Any]``
(``data.corpus``, ``model.cell_options``, ``data.corpus_options``), through ``init_args`` that are class
specs themselves, callbacks / loggers / plugins / optimizer / lr_scheduler keys.

Each case must end with a non-zero exit, no traceback, a message naming the offending class path and
saying what may be named, and no marker. Hostile YAML (an alias bomb, a 3000-deep list) must fail fast
with a message saying what is wrong.
"""

from __future__ import annotations

import copy
import json
import time

import pytest
import torch
import yaml

from dsf_lightning.cli import lightning_cli, main
from tests.reliability.conftest import within

pytestmark = pytest.mark.filterwarnings("ignore")

FILEIO = "torch.serialization.io.FileIO"  # io.FileIO(file, "w") creates the file: synchronous proof
POPEN = "torch.utils.cpp_extension.subprocess.Popen"
ALLOWED_PHRASE = "classes a dsf recipe may name"


def fileio(marker) -> dict:
    return {"class_path": FILEIO, "init_args": {"file": str(marker), "mode": "w"}}


def popen(marker) -> dict:
    return {"class_path": POPEN, "init_args": {"args": f"touch {marker}", "shell": True}}


def planted_spec(marker=None) -> dict:
    return {"class_path": "dsf_planted_plugin.Hook"}


def base_recipe(text_folder) -> dict:
    return {
        "data": {"corpus": "text-folder", "data_root": str(text_folder), "batch_size": 2, "eval_batch_size": 2},
        "model": {"hidden_sizes": [8]},
        "trainer": {"max_steps": 1, "logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
                    "enable_model_summary": False, "limit_val_batches": 0},
    }


def merged(a: dict, b: dict) -> dict:
    out = copy.deepcopy(a)
    for key, value in b.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def run(argv, capsys, wait_for=None) -> tuple[int | str, str]:
    """``main(argv)`` in this process: (exit code, stderr). Any other exception (a traceback for the
    user) comes back as a string in place of the code, so that the marker is checked first."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    except Exception as err:  # noqa: BLE001 - reported by refused()
        code = f"traceback: {type(err).__name__}: {str(err)[:300]}"
    if wait_for is not None:  # a Popen payload runs asynchronously: give it time to show
        deadline = time.monotonic() + 1.0
        while not wait_for.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return code, capsys.readouterr().err


def refused(code, err: str, offending: str, phrase: str = ALLOWED_PHRASE) -> None:
    """A clean refusal: an exit code (not 0, no traceback) and a message naming the offending path and
    what is allowed."""
    assert isinstance(code, int) and code != 0, f"not refused cleanly (exit {code!r}): {err[-1500:]}"
    assert offending in err and phrase in err, f"unclear message: {err[-3000:]}"


# ------------------------------------------------------------------------------------- where it sits
# (name, payload factory, section dict built from the payload, offending class path)
PLACEMENTS = {
    "data.corpus (Any) FileIO via getattr chain": (fileio, lambda p: {"data": {"corpus": p}}, FILEIO),
    "data.corpus (Any) Popen via getattr chain": (popen, lambda p: {"data": {"corpus": p}}, POPEN),
    "model.cell_options (dict[str, Any])": (fileio, lambda p: {"model": {"cell_options": {"dropout": p}}}, FILEIO),
    "model.cell_options list inside Any": (fileio, lambda p: {"model": {"cell_options": {"dropout": [p]}}}, FILEIO),
    "model.cell_options nested dict inside Any": (
        fileio, lambda p: {"model": {"cell_options": {"dropout": {"deeper": p}}}}, FILEIO),
    "data.corpus_options (dict[str, Any])": (fileio, lambda p: {"data": {"corpus_options": {"path": p}}}, FILEIO),
    "init_args of an Any spec is a spec": (
        fileio, lambda p: {"data": {"corpus": {"class_path": "torch.optim.SGD", "init_args": {"params": p}}}}, FILEIO),
    "trainer.callbacks list": (fileio, lambda p: {"trainer": {"callbacks": [p]}}, FILEIO),
    "trainer.callbacks single": (fileio, lambda p: {"trainer": {"callbacks": p}}, FILEIO),
    "trainer.logger": (fileio, lambda p: {"trainer": {"logger": p}}, FILEIO),
    "trainer.plugins init_args spec": (fileio, lambda p: {"trainer": {"plugins": [
        {"class_path": "lightning.pytorch.plugins.AsyncCheckpointIO", "init_args": {"checkpoint_io": p}}]}}, FILEIO),
    "trainer.strategy": (fileio, lambda p: {"trainer": {"strategy": p}}, FILEIO),
    "optimizer key": (fileio, lambda p: {"optimizer": p}, FILEIO),
    "lr_scheduler key": (fileio, lambda p: {"lr_scheduler": p}, FILEIO),
    "LambdaCallback hook = torch.os.system": (
        None, lambda p: {"trainer": {"callbacks": [{"class_path": "lightning.pytorch.callbacks.LambdaCallback",
                                                    "init_args": {"on_fit_start": "torch.os.system"}}]}},
        "lightning.pytorch.callbacks.LambdaCallback"),
    "LambdaLR lr_lambda = torch.builtins.exec": (
        None, lambda p: {"optimizer": "torch.optim.SGD", "lr_scheduler": {
            "class_path": "torch.optim.lr_scheduler.LambdaLR", "init_args": {"lr_lambda": "torch.builtins.exec"}}},
        "torch.optim.lr_scheduler.LambdaLR"),
    "builtins.eval as a class_path": (
        None, lambda p: {"data": {"corpus": {"class_path": "builtins.eval", "init_args": {"source": "1"}}}},
        "builtins.eval"),
    "torch.builtins.exec as a class_path": (
        None, lambda p: {"data": {"corpus": {"class_path": "torch.builtins.exec", "init_args": {"source": "1"}}}},
        "torch.builtins.exec"),
    "a method below an allowed class": (
        None, lambda p: {"data": {"corpus": {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint.__init__"}}},
        "lightning.pytorch.callbacks.ModelCheckpoint.__init__"),
    "planted module in Any": (planted_spec, lambda p: {"data": {"corpus": p}}, "dsf_planted_plugin.Hook"),
    "planted module as callback": (planted_spec, lambda p: {"trainer": {"callbacks": [p]}}, "dsf_planted_plugin.Hook"),
}


def cases(names, fast):
    """Parameters for ``names``; all but the ``fast`` few are marked slow (each CLI call builds the
    parser, ~2.5 s here): the default tier keeps one case per attack class, CI runs them all."""
    return [pytest.param(n, id=n, marks=() if n in fast else pytest.mark.slow) for n in names]


@pytest.mark.parametrize("name", cases(PLACEMENTS, {
    "data.corpus (Any) FileIO via getattr chain", "model.cell_options (dict[str, Any])", "trainer.callbacks list",
    "a method below an allowed class", "planted module in Any"}))
def test_hostile_recipe_placements(name, tmp_path, text_folder, planted, monkeypatch, capsys, hostile_counts):
    monkeypatch.chdir(tmp_path)
    make, section, offending = PLACEMENTS[name]
    marker = tmp_path / "RAN"
    payload = make(marker) if make else None
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(merged(base_recipe(text_folder), section(payload))))
    hostile_counts["dsf fit hostile recipe (placement)"] += 1
    code, err = run(["fit", "--config", str(recipe)], capsys, wait_for=marker if make is popen else None)
    assert not marker.exists() and not planted.exists(), f"the payload ran: {err[-2000:]}"
    refused(code, err, offending)


# ------------------------------------------------------------------------------------ how it is given
def _files(tmp_path, text_folder, marker):
    """The recipe split every way: full file, file without suffix, data group file, outer file naming it."""
    full = merged(base_recipe(text_folder), {"data": {"corpus": fileio(marker)}})
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(full))
    (tmp_path / "recipe").write_text(yaml.safe_dump(full))
    (tmp_path / "recipe.txt").write_text(yaml.safe_dump(full))
    (tmp_path / "recipe.json").write_text(json.dumps(full))
    (tmp_path / "model").write_text(yaml.safe_dump({"hidden_sizes": [8], "cell_options": {"dropout": fileio(marker)}}))
    (tmp_path / "data.yaml").write_text(yaml.safe_dump(full["data"]))
    (tmp_path / "data").write_text(yaml.safe_dump(full["data"]))
    clean = base_recipe(text_folder)
    (tmp_path / "clean.yaml").write_text(yaml.safe_dump(clean))
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "data.yaml").write_text(yaml.safe_dump(full["data"]))
    outer = dict(clean, data="data.yaml")
    (tmp_path / "parts" / "outer.yaml").write_text(yaml.safe_dump(outer))
    return full


def _flow(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()


FORMS = {
    "--config file.yaml": lambda t, full: ["fit", "--config", "recipe.yaml"],
    "--config file without suffix": lambda t, full: ["fit", "--config", "recipe"],
    "--config file.txt": lambda t, full: ["fit", "--config", "recipe.txt"],
    "--config file.json": lambda t, full: ["fit", "--config", "recipe.json"],
    "--config=file": lambda t, full: ["fit", "--config=recipe"],
    "-c file": lambda t, full: ["fit", "-c", "recipe"],
    "--conf (abbreviated)": lambda t, full: ["fit", "--conf", "recipe"],
    "--con=file (abbreviated)": lambda t, full: ["fit", "--con=recipe"],
    "two configs, payload in the second": lambda t, full: ["fit", "--config", "clean.yaml", "--config", "recipe"],
    "--data data.yaml group file": lambda t, full: ["fit", "--config", "clean.yaml", "--data", "data.yaml"],
    "--data group file without suffix": lambda t, full: ["fit", "--config", "clean.yaml", "--data", "data"],
    "--data=group file": lambda t, full: ["fit", "--config", "clean.yaml", "--data=data"],
    "--model group file (cell_options)": lambda t, full: ["fit", "--config", "clean.yaml", "--model", "model"],
    "data: data.yaml inside a config": lambda t, full: ["fit", "--config", "parts/outer.yaml"],
    "--data inline YAML": lambda t, full: ["fit", "--config", "clean.yaml", "--data", _flow(full["data"])],
    "--data.corpus inline": lambda t, full: ["fit", "--config", "clean.yaml", "--data.corpus", _flow(full["data"]["corpus"])],
    "--data.corpus=inline": lambda t, full: ["fit", "--config", "clean.yaml", "--data.corpus=" + _flow(full["data"]["corpus"])],
    "--data.corpus.class_path + init_args": lambda t, full: [
        "fit", "--config", "clean.yaml", "--data.corpus.class_path", FILEIO,
        "--data.corpus.init_args", _flow(full["data"]["corpus"]["init_args"])],
    "--config inline YAML": lambda t, full: ["fit", "--config", _flow(full)],
    "--print_config": lambda t, full: ["fit", "--config", "recipe", "--print_config"],
}


@pytest.mark.parametrize("form", cases(FORMS, {"--config file without suffix", "--data group file without suffix"}))
def test_hostile_recipe_forms(form, tmp_path, text_folder, monkeypatch, capsys, hostile_counts):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "RAN"
    full = _files(tmp_path, text_folder, marker)
    hostile_counts["dsf fit hostile recipe (form)"] += 1
    code, err = run(FORMS[form](tmp_path, full), capsys)
    assert not marker.exists(), f"the payload ran: {err[-2000:]}"
    if form == "--data.corpus.class_path + init_args":  # jsonargparse keeps the last field only
        refused(code, err, "--data.corpus.init_args", phrase="plain data")
    else:
        refused(code, err, FILEIO)


@pytest.mark.parametrize("variable", cases(["PL_FIT__CONFIG", "PL_FIT__DATA"], {"PL_FIT__CONFIG"}))
def test_hostile_recipe_through_environment_variables(variable, tmp_path, text_folder, monkeypatch, capsys, hostile_counts):
    """``JSONARGPARSE_DEFAULT_ENV=true`` makes LightningCLI read ``PL_FIT__*`` variables."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "RAN"
    full = _files(tmp_path, text_folder, marker)
    monkeypatch.setenv("JSONARGPARSE_DEFAULT_ENV", "true")
    if variable == "PL_FIT__CONFIG":
        monkeypatch.setenv(variable, "recipe")
        argv = ["fit"]
    else:
        monkeypatch.setenv(variable, _flow(full["data"]))
        argv = ["fit", "--config", "clean.yaml"]
    hostile_counts["dsf fit hostile recipe (form)"] += 1
    code, err = run(argv, capsys)
    assert not marker.exists(), f"the payload ran: {err[-2000:]}"
    refused(code, err, FILEIO)


@pytest.mark.slow
def test_hostile_recipe_given_before_the_subcommand(tmp_path, text_folder, monkeypatch, capsys, hostile_counts):
    """LightningCLI's top-level ``--config`` (before ``fit``), reached through ``lightning_cli``."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "RAN"
    full = _files(tmp_path, text_folder, marker)
    (tmp_path / "toplevel").write_text(yaml.safe_dump({"fit": full}))
    hostile_counts["dsf fit hostile recipe (form)"] += 1
    message = ""
    try:
        lightning_cli(["--config", "toplevel", "fit"])
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    except ValueError as err:  # UnsafeRecipeError, which `dsf` prints with exit code 2
        code, message = (2, str(err)) if type(err).__name__ == "UnsafeRecipeError" else (f"traceback: {err!r}", "")
    err = capsys.readouterr().err + message
    assert not marker.exists(), f"the payload ran: {err[-2000:]}"
    refused(code, err, FILEIO)


@pytest.mark.parametrize("option", cases(["--trainer.callbacks.help", "--trainer.logger.help"], {"--trainer.callbacks.help"}))
def test_help_for_a_foreign_class_imports_nothing(option, tmp_path, planted, monkeypatch, capsys, hostile_counts):
    monkeypatch.chdir(tmp_path)
    hostile_counts["dsf fit hostile recipe (form)"] += 1
    code, err = run(["fit", option, "dsf_planted_plugin.Hook"], capsys)
    assert not planted.exists()
    refused(code, err, "dsf_planted_plugin.Hook")


# ---------------------------------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def project_checkpoint(tmp_path_factory):
    """A genuine LanguageModelModule checkpoint (two steps on the toy stream)."""
    import lightning as L

    from tests.training.conftest import make_toy_corpus, quiet_trainer, toy_modules

    L.seed_everything(0, verbose=False)
    module, data = toy_modules(make_toy_corpus())
    trainer = quiet_trainer(max_steps=2, limit_val_batches=0)
    trainer.fit(module, data)
    path = tmp_path_factory.mktemp("ckpt") / "good.ckpt"
    trainer.save_checkpoint(path)
    return path


CKPT_HPARAMS = {
    "cell_options FileIO": lambda m: {"cell_options": {"dropout": fileio(m)}},
    "cell_options Popen": lambda m: {"cell_options": {"dropout": popen(m)}},
}
CKPT_FORMS = {
    "--ckpt_path x.ckpt": lambda p: ["--ckpt_path", str(p)],
    "--ckpt_path=x": lambda p: ["--ckpt_path=" + str(p.with_suffix(""))],
    "ckpt_path in a config file": lambda p: ["--config", str(p.parent / "resume.yaml")],
}


@pytest.mark.parametrize("form", cases(CKPT_FORMS, {"--ckpt_path=x"}))
@pytest.mark.parametrize("hparams", cases(CKPT_HPARAMS, {"cell_options FileIO"}))
def test_hostile_checkpoint_hyper_parameters(hparams, form, project_checkpoint, tmp_path, text_folder, monkeypatch, capsys, hostile_counts):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "RAN"
    ckpt = torch.load(project_checkpoint, weights_only=True)
    ckpt["hyper_parameters"].update(CKPT_HPARAMS[hparams](marker))
    evil = tmp_path / "evil.ckpt"
    torch.save(ckpt, evil)
    torch.save(ckpt, evil.with_suffix(""))
    (tmp_path / "resume.yaml").write_text(yaml.safe_dump({"ckpt_path": str(evil)}))
    hostile_counts["dsf fit --ckpt_path hostile hyper_parameters"] += 1
    argv = ["fit", "--data.corpus", "text-folder", "--data.data_root", str(text_folder), "--trainer.max_steps", "3",
            "--trainer.logger", "false", "--trainer.enable_checkpointing", "false", *CKPT_FORMS[form](evil)]
    code, err = run(argv, capsys, wait_for=marker if "Popen" in hparams else None)
    assert not marker.exists(), f"the payload ran: {err[-2000:]}"
    refused(code, err, POPEN if "Popen" in hparams else FILEIO)


@pytest.mark.parametrize("form", cases(CKPT_FORMS, {"ckpt_path in a config file"}))
def test_hostile_checkpoint_class_path_of_a_task_model(form, project_checkpoint, tmp_path, monkeypatch, capsys, hostile_counts):
    """A task recipe (subclass mode): LightningCLI turns ``_class_path`` in the hyper-parameters into the
    model's ``class_path``."""
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "RAN"
    ckpt = torch.load(project_checkpoint, weights_only=True)
    ckpt["hyper_parameters"] = {"_class_path": FILEIO, "file": str(marker), "mode": "w"}
    evil = tmp_path / "evil.ckpt"
    torch.save(ckpt, evil)
    torch.save(ckpt, evil.with_suffix(""))
    (tmp_path / "resume.yaml").write_text(yaml.safe_dump({"ckpt_path": str(evil)}))
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "tomita" / "sr_gru_g1.yaml"
    hostile_counts["dsf fit --ckpt_path hostile hyper_parameters"] += 1
    code, err = run(["fit", "--config", str(recipe), "--trainer.logger", "false", *CKPT_FORMS[form](evil)], capsys)
    assert not marker.exists(), f"the payload ran: {err[-2000:]}"
    refused(code, err, FILEIO)


class Boom:
    """Unpickling this creates ``marker`` (a pickle payload, which weights-only loading refuses)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("form", cases(["--weights_only false", "weights_only: false in a config"], {"--weights_only false"}))
def test_a_pickled_checkpoint_is_refused_even_with_weights_only_false(
        form, project_checkpoint, tmp_path, text_folder, monkeypatch, capsys, hostile_counts):
    """LightningCLI's ``--weights_only false`` (which a config file can set next to ``ckpt_path``) would
    hand the checkpoint to an unrestricted unpickler: the CLI checks it weights-only first, always."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "RAN"
    ckpt = torch.load(project_checkpoint, weights_only=True)
    ckpt["hyper_parameters"]["payload"] = Boom(marker)
    evil = tmp_path / "evil.ckpt"
    torch.save(ckpt, evil)
    (tmp_path / "resume.yaml").write_text(yaml.safe_dump({"ckpt_path": str(evil), "weights_only": False}))
    extra = ["--ckpt_path", str(evil), "--weights_only", "false"] if form.startswith("--") else ["--config", "resume.yaml"]
    hostile_counts["dsf fit --ckpt_path hostile hyper_parameters"] += 1
    code, err = run(["fit", "--data.corpus", "text-folder", "--data.data_root", str(text_folder),
                     "--trainer.logger", "false", *extra], capsys)
    assert not marker.exists(), f"the payload ran: {err[-2000:]}"
    refused(code, err, str(evil), phrase="nothing was unpickled")


def test_reproduce_dynamic_evaluation_loads_a_checkpoint_safely(project_checkpoint, tmp_path, hostile_counts):
    """``dsf reproduce`` evaluates a row's checkpoint with ``load_from_checkpoint``, which (with the
    ``_instantiator`` Lightning allows) parses the hyper-parameters with jsonargparse *outside* the CLI,
    and unpickles without weights-only unless told: both payloads are refused there too."""
    from types import SimpleNamespace

    import lightning as L

    from dsf_lightning.reproduce.runner import run_dynamic
    from dsf_lightning.training import LanguageModelModule
    from dsf_lightning.training.recipe_guard import UnsafeRecipeError

    marker = tmp_path / "RAN"
    ckpt = torch.load(project_checkpoint, weights_only=True)
    ckpt["hyper_parameters"]["_instantiator"] = "lightning.pytorch.cli.instantiate_module"
    ckpt["hyper_parameters"]["cell_options"] = {"dropout": fileio(marker)}
    forged = tmp_path / "forged.ckpt"
    torch.save(ckpt, forged)
    pickled = tmp_path / "pickled.ckpt"
    ckpt = torch.load(project_checkpoint, weights_only=True)
    ckpt["hyper_parameters"]["payload"] = Boom(marker)
    torch.save(ckpt, pickled)
    row, recipe = SimpleNamespace(parent="p", evaluation="dynamic1"), {"data": {"corpus": "ptb"}}
    for path, error in ((forged, UnsafeRecipeError), (pickled, Exception)):
        hostile_counts["dsf reproduce dynamic evaluation checkpoint"] += 1
        with pytest.raises(error) as info:
            run_dynamic(row, {"checkpoint": str(path)}, recipe, None, "tiny")
        assert not marker.exists(), f"{path.name}: the payload ran ({info.value!r})"
        assert "Weights only load failed" in str(info.value) or FILEIO in str(info.value), str(info.value)[:1000]
    # the same file through Lightning's own loader does run the payload: the guard is what stops it
    L.seed_everything(0, verbose=False)
    with pytest.raises(Exception):
        LanguageModelModule.load_from_checkpoint(forged, map_location="cpu")
    assert marker.exists()


def test_a_checkpoint_written_by_the_project_still_resumes(tmp_path, text_folder, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "recipe.yaml"
    clean = base_recipe(text_folder)
    # relative: a recipe file writes only inside its run directory (an absolute one comes from the command line)
    clean["trainer"].update(enable_checkpointing=True, max_steps=2, default_root_dir="run")
    recipe.write_text(yaml.safe_dump(clean))
    assert main(["fit", "--config", str(recipe)]) == 0
    ckpts = sorted((tmp_path / "run").rglob("*.ckpt"))
    assert ckpts, "no checkpoint written"
    assert main(["fit", "--config", str(recipe), "--trainer.max_steps", "3", "--ckpt_path", str(ckpts[-1])]) == 0
    # and loads as dsf reproduce loads it (Lightning's instantiator, under the allowlist)
    from dsf_lightning.training import LanguageModelModule
    from dsf_lightning.training.recipe_guard import guarded

    assert "_instantiator" in torch.load(ckpts[-1], weights_only=True)["hyper_parameters"]
    module = guarded(LanguageModelModule.load_from_checkpoint, ckpts[-1], map_location="cpu", weights_only=True)
    assert module.hparams.hidden_sizes == [8]


# ---------------------------------------------------------------------------------------- hostile YAML
def alias_bomb(where: str) -> str:
    """Billion laughs: 9 levels of 9 aliases, 9**9 strings once expanded, a few hundred bytes."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n" + where + "\n"


def deep_list(depth: int = 3000) -> str:
    return "[" * depth + "]" * depth


HOSTILE_YAML = {
    "alias bomb in cell_options (file)": lambda t: ("file", alias_bomb("model: {cell_options: {dropout: *a8}}"), "alias"),
    "alias bomb in trainer.max_steps (file)": lambda t: ("file", alias_bomb("trainer: {max_steps: *a8}"), "alias"),
    "alias bomb inline --model.cell_options": lambda t: (
        ["--model.cell_options", "{" + alias_bomb("x: *a8").replace("\n", ", ").rstrip(", ") + "}"], None, "alias"),
    "self-referencing alias (a cycle)": lambda t: ("file", "model: {cell_options: &c {dropout: *c}}\n", "itself"),
    "3000-deep list in cell_options (file)": lambda t: ("file", f"model: {{cell_options: {{dropout: {deep_list()}}}}}\n", "nested"),
    "3000-deep list in trainer.max_steps (file)": lambda t: ("file", f"trainer: {{max_steps: {deep_list()}}}\n", "nested"),
    "3000-deep list inline --model.cell_options": lambda t: (["--model.cell_options", "{x: " + deep_list() + "}"], None, "nested"),
    "3000-deep mapping (file)": lambda t: ("file", "model: {cell_options: " + "{a: " * 3000 + "1" + "}" * 3000 + "}\n", "nested"),
}


@pytest.mark.parametrize("name", cases(HOSTILE_YAML, {"alias bomb in cell_options (file)", "3000-deep list in trainer.max_steps (file)"}))
def test_hostile_yaml_fails_fast_and_clearly(name, tmp_path, text_folder, monkeypatch, capsys, hostile_counts):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clean.yaml").write_text(yaml.safe_dump(base_recipe(text_folder)))
    extra, text, what = HOSTILE_YAML[name](tmp_path)
    if extra == "file":
        (tmp_path / "hostile").write_text(text)
        extra = ["--config", "hostile"]
    hostile_counts["dsf fit hostile YAML"] += 1
    start = time.perf_counter()
    with within(20):  # the unbounded walk hangs: fail instead of hanging the suite
        code, err = run(["fit", "--config", "clean.yaml", *extra], capsys)
    seconds = time.perf_counter() - start
    assert seconds < 15, f"{seconds:.1f} s"  # building the parser alone takes ~2.5 s here; the check: below
    refused(code, err.lower(), what, phrase="")


@pytest.mark.slow
def test_hostile_checkpoint_structure_fails_fast_and_clearly(project_checkpoint, tmp_path, text_folder, monkeypatch, capsys, hostile_counts):
    """The same shapes inside a checkpoint's hyper_parameters (shared references survive weights-only
    unpickling: the pickle memo plays the part of YAML aliases)."""
    monkeypatch.chdir(tmp_path)
    ckpt = torch.load(project_checkpoint, weights_only=True)
    level = ["lol"] * 9
    for _ in range(8):
        level = [level] * 9
    deep: list = []
    for _ in range(3000):
        deep = [deep]
    import sys

    limit = sys.getrecursionlimit()
    for name, value, what in (("alias bomb", level, "alias"), ("3000-deep", deep, "nested")):
        ckpt["hyper_parameters"]["cell_options"] = {"dropout": value}
        path = tmp_path / f"{name}.ckpt"
        sys.setrecursionlimit(20_000)  # pickling 3000 levels needs it (the attacker's machine, not ours)
        try:
            torch.save(ckpt, path)
        finally:
            sys.setrecursionlimit(limit)
        hostile_counts["dsf fit --ckpt_path hostile hyper_parameters"] += 1
        start = time.perf_counter()
        with within(20):
            code, err = run(["fit", "--data.corpus", "text-folder", "--data.data_root", str(text_folder),
                             "--trainer.logger", "false", "--ckpt_path", str(path)], capsys)
        assert time.perf_counter() - start < 15
        refused(code, err.lower(), what, phrase="")


def test_the_structure_check_itself_is_fast():
    """The refusal of the alias bomb and of the 3000-deep list, without the parser around it (the issue
    asks for < 2 s; measured ~1 ms)."""
    from dsf_lightning.training.recipe_guard import ConfigTooComplexError, check_config_structure

    deep: list = []
    for _ in range(3000):  # built here: PyYAML >= 6.0.4 refuses to parse 3000 levels itself
        deep = [deep]
    for text, what in ((alias_bomb("x: *a8"), "too many aliases"), (deep, "nested more than"),
                       ("&c {x: *c}", "contains itself")):
        value = text if isinstance(text, list) else yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        start = time.perf_counter()
        with pytest.raises(ConfigTooComplexError, match=what):
            check_config_structure(value)
        assert time.perf_counter() - start < 2
    check_config_structure(base_recipe("/data"))  # an ordinary recipe passes
    wide = {"hidden_sizes": list(range(100_000))}  # big but flat: fine
    check_config_structure(wide)


def test_the_allowlist_is_exact_classes_under_their_re_export_names():
    """Every module that re-exports an allowed class under its name may be used (the shipped tests name
    ``lightning.pytorch.plugins.io.TorchCheckpointIO``, a lightning.fabric class); nothing below a
    class, and no getattr chain to another object, is allowed."""
    import lightning.pytorch  # noqa: F401 - the re-exporting modules are found among those imported

    from dsf_lightning.training.recipe_guard import _import_paths, allowed_classes

    paths = _import_paths(allowed_classes())
    assert {"lightning.pytorch.plugins.io.TorchCheckpointIO", "lightning.pytorch.callbacks.ModelCheckpoint",
            "lightning.pytorch.callbacks.model_checkpoint.ModelCheckpoint", "torch.optim.Adam",
            "dsf_lightning.tasks.SequenceClassifier"} <= paths
    for foreign in (FILEIO, POPEN, "torch.os.system", "torch.builtins.exec", "lightning.pytorch.callbacks.LambdaCallback",
                    "lightning.pytorch.callbacks.ModelCheckpoint.__init__", "torch.optim", "lightning"):
        assert foreign not in paths


def test_trusting_a_class_of_your_own(monkeypatch, caplog):
    """``DSF_TRUSTED_CLASSES`` takes exact class paths: a function or a missing name is a clear error; the
    retired package-wide ``DSF_TRUSTED_MODULES`` is no longer read (a warning says so)."""
    from dsf_lightning.training.recipe_guard import UnsafeRecipeError, allowed_classes

    monkeypatch.setenv("DSF_TRUSTED_CLASSES", "collections.OrderedDict")
    assert allowed_classes()["collections.OrderedDict"].__name__ == "OrderedDict"
    for entry, what in (("os.system", "not a class"), ("no_such_pkg_xyz.Thing", "cannot import")):
        monkeypatch.setenv("DSF_TRUSTED_CLASSES", entry)
        with pytest.raises(UnsafeRecipeError, match=f"DSF_TRUSTED_CLASSES.*{what}"):
            allowed_classes()
    monkeypatch.delenv("DSF_TRUSTED_CLASSES")
    monkeypatch.setenv("DSF_TRUSTED_MODULES", "my_pkg")
    with caplog.at_level("WARNING"):
        assert "my_pkg" not in " ".join(allowed_classes())
    assert "DSF_TRUSTED_CLASSES" in caplog.text


def test_the_policy_is_only_in_force_while_the_cli_runs():
    """jsonargparse's settings are process-wide: the CLI restores them (a library user's own
    jsonargparse parsers are not affected)."""
    from jsonargparse import _common, _loaders_dumpers

    from dsf_lightning.training.recipe_guard import recipe_policy

    before = (dict(_common.parsing_settings), _loaders_dumpers.loaders["yaml"], _loaders_dumpers.yaml_load)
    with recipe_policy():
        assert _common.parsing_settings["import_paths_enforced"] is True
        assert _loaders_dumpers.loaders["yaml"] is not before[1]
    assert (dict(_common.parsing_settings), _loaders_dumpers.loaders["yaml"], _loaders_dumpers.yaml_load) == before
