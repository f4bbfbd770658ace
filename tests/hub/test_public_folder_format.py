"""The folder format is public (issue 36): no unit outside the hub imports a private name of it, and a bundled
model folder re-saved from its own weights is the committed folder, byte for byte."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import dsf_lightning

PACKAGE = Path(dsf_lightning.__file__).resolve().parent
BUNDLED = PACKAGE / "pretrained"


def private_hub_imports(source: str = "dsf_lightning.hub") -> list[str]:
    """``where: name`` for every ``from <source>[...] import _name`` (relative forms included, function-level ones too)
    in a module of another unit than ``source``'s."""
    found = []
    unit = source.split(".")[1]
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0].removesuffix(".py") == unit:
            continue
        package = ["dsf_lightning", *relative.parts[:-1]]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            target = ".".join(p for p in (base, node.module or "") if p)
            if not (target == source or target.startswith(f"{source}.")):
                continue
            modules = target.split(".")[2:]
            names = [alias.name for alias in node.names]
            private = [m for m in modules if m.startswith("_")] + [n for n in names if n.startswith("_")]
            if private:
                found.append(f"dsf_lightning/{relative}:{node.lineno}: from {target} import {', '.join(private)}")
    return found


def test_no_unit_outside_the_hub_imports_a_private_name_of_it():
    found = private_hub_imports()
    assert not found, "private hub names imported across units (make them public in dsf_lightning.hub.folder):\n" + "\n".join(found)


@pytest.mark.parametrize("source", ["dsf_lightning.model.pretrained", "dsf_lightning.tasks.pretrained"])
def test_no_other_unit_imports_a_private_name_of_a_models_folder_module(source):
    """Export and checkpoint reading build models from configs as the folder loaders do, through public names."""
    found = private_hub_imports(source)
    assert not found, f"private names of {source} imported across units:\n" + "\n".join(found)


def test_the_checker_sees_a_private_import(tmp_path, monkeypatch):
    fake = tmp_path / "dsf_lightning"
    (fake / "model").mkdir(parents=True)
    (fake / "model" / "x.py").write_text("def f():\n    from ..hub.folder import _secret\n")
    (fake / "auto.py").write_text("from .hub import _folder\n")
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    assert private_hub_imports() == ["dsf_lightning/auto.py:1: from dsf_lightning.hub import _folder",
                                     "dsf_lightning/model/x.py:2: from dsf_lightning.hub.folder import _secret"]


@pytest.mark.parametrize("name", sorted(p.name for p in BUNDLED.iterdir() if (p / "config.json").is_file()))
def test_a_bundled_folder_saved_again_from_its_weights_is_byte_identical(name, tmp_path, monkeypatch):
    """load (the kind the folder holds) -> save_pretrained writes every file of the committed folder again, byte for
    byte (config.json with the committed folder's library and torch versions put in for the ones running here)."""
    from dsf_lightning.auto import load

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bundled = BUNDLED / name
    saved = load(bundled, task="auto").save_pretrained(tmp_path / name)
    assert sorted(p.name for p in saved.iterdir()) == sorted(p.name for p in bundled.iterdir())
    committed = json.loads((bundled / "config.json").read_text())
    for path in sorted(saved.iterdir()):
        data = path.read_bytes()
        if path.name == "config.json":
            mine = json.loads(data)
            for key in ("library_version", "torch_version"):
                data = data.replace(f'"{key}": "{mine[key]}"'.encode(), f'"{key}": "{committed[key]}"'.encode())
        assert data == (bundled / path.name).read_bytes(), f"{name}/{path.name} differs from the committed file"


@pytest.mark.parametrize("name", sorted(p.name for p in BUNDLED.iterdir() if (p / "config.json").is_file()))
def test_a_folder_read_as_its_object_and_written_is_the_same_folder(name, tmp_path):
    """read_folder -> the kind's loader builds the model from the object (reading the weights into it) -> write: the
    committed folder again, byte for byte (its card's text kept as read)."""
    from dsf_lightning.hub.folder import ClassifierFolder, LanguageModelFolder, read_folder
    from dsf_lightning.model.pretrained import load_pretrained
    from dsf_lightning.tasks.pretrained import load_classifier

    bundled = BUNDLED / name
    files = read_folder(bundled)
    task = json.loads((bundled / "config.json").read_text())["task"]
    assert type(files) is {"language-model": LanguageModelFolder, "text-classification": ClassifierFolder}[task]
    assert files.path == bundled and files.vocab_json == (bundled / "vocab.json").read_bytes()
    assert files.tokenizer_json == (bundled / "dsf_tokenizer.json").read_bytes()
    assert files.card.data["license"] and files.tensors is None  # the weights wait for the model that bounds them
    model = (load_pretrained if task == "language-model" else load_classifier)(files).model
    assert set(files.tensors) <= set(model.state_dict())
    written = files.write(tmp_path / name)
    assert sorted(p.name for p in written.iterdir()) == sorted(p.name for p in bundled.iterdir())
    for path in sorted(written.iterdir()):
        assert path.read_bytes() == (bundled / path.name).read_bytes(), f"{name}/{path.name} differs"


def test_each_kind_of_folder_object_refuses_the_other_kind_and_a_write_without_weights(tmp_path):
    from dsf_lightning.hub import WrongTaskError
    from dsf_lightning.hub.folder import ClassifierFolder, LanguageModelFolder

    with pytest.raises(WrongTaskError, match=r"holds a text classifier .* load it with"):
        LanguageModelFolder.read(BUNDLED / "sr-lstm-p-imdb")
    with pytest.raises(WrongTaskError, match=r"holds a language model .* load it with"):
        ClassifierFolder.read(BUNDLED / "delta-rnn-ptb")
    files = LanguageModelFolder.read(BUNDLED / "delta-rnn-ptb")
    with pytest.raises(ValueError, match="no weights to write"):
        files.write(tmp_path / "copy")
    assert not (tmp_path / "copy").exists()


def test_a_loader_given_the_other_kinds_folder_object_names_the_right_loader():
    from dsf_lightning.hub import WrongTaskError
    from dsf_lightning.hub.folder import read_folder
    from dsf_lightning.model.pretrained import load_pretrained
    from dsf_lightning.tasks.pretrained import load_classifier

    with pytest.raises(WrongTaskError, match=r"holds a language model .* load it with"):
        load_classifier(read_folder(BUNDLED / "delta-rnn-ptb"))
    with pytest.raises(WrongTaskError, match=r"holds a text classifier .* load it with"):
        load_pretrained(read_folder(BUNDLED / "sr-lstm-p-imdb"))


def test_the_onnx_export_takes_a_folder_object(tmp_path):
    """to_onnx of a LanguageModelFolder builds its model (the same graph as from the path) and, as for a path,
    refuses an output inside the folder before building anything."""
    pytest.importorskip("onnxscript")
    from dsf_lightning.export import ExportError
    from dsf_lightning.export.onnx import to_onnx
    from dsf_lightning.hub.folder import LanguageModelFolder

    from .conftest import tiny_pretrained

    files = LanguageModelFolder.read(tiny_pretrained().save_pretrained(tmp_path / "tiny"))
    with pytest.raises(ExportError, match="inside the source model folder"):
        to_onnx(files, files.path / "model.onnx")
    assert files.tensors is None  # refused before the weights were read
    assert to_onnx(files, tmp_path / "tiny.onnx").stat().st_size > 0
