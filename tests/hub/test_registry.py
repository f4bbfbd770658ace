"""Published names, resolve() order, list_models and the CLI parts that show them."""

import argparse

import pytest
import torch

from dsf_lightning.auto import PUBLISHED, list_models, load
from dsf_lightning.cli.hub import add_export_parser, add_list_models_parser, add_push_parser, list_models_command
from dsf_lightning.hub import registry
from dsf_lightning.hub.registry import ModelDownloadError, PublishedModel, UnknownModelError, resolve
from dsf_lightning.model.pretrained import save_pretrained

from .conftest import logits_of, tiny_pretrained


def test_published_models():
    assert set(PUBLISHED) == {"delta-rnn-ptb", "delta-rnn-ptb-char", "lstm-ptb", "sr-lstm-p-imdb"}
    for name, published in PUBLISHED.items():
        assert published.repo_id == f"dsf-lightning/{name}" and published.bundled == name and published.description
    assert PUBLISHED["sr-lstm-p-imdb"].task == "text-classification" and PUBLISHED["delta-rnn-ptb"].task == "language-model"


def test_a_local_folder_comes_first(tmp_path, tokens):
    pretrained = tiny_pretrained()
    folder = save_pretrained(pretrained, tmp_path / "delta-rnn-ptb")
    assert resolve(folder) == folder
    assert resolve(str(folder)) == folder
    assert torch.equal(logits_of(load(folder).model, tokens), logits_of(pretrained.model, tokens))


def test_an_unknown_short_name_lists_the_known_ones(isolated_hub):
    with pytest.raises(UnknownModelError) as info:
        resolve("delta-rnn-pt")
    message = str(info.value)
    assert "'delta-rnn-pt'" in message and "delta-rnn-ptb, delta-rnn-ptb-char" in message
    assert "Did you mean 'delta-rnn-ptb'?" in message
    assert isinstance(info.value, KeyError)
    with pytest.raises(UnknownModelError, match="Published models: delta-rnn-ptb"):
        load("gpt2")


def test_a_missing_path_is_not_mistaken_for_a_repo(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model folder"):
        resolve(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        resolve("./missing/folder")
    with pytest.raises(UnknownModelError, match="not a valid Hub repo id"):
        resolve("owner/na me")


def test_a_bundled_copy_is_used_when_present(isolated_hub, tokens):
    pretrained = tiny_pretrained()
    bundled = save_pretrained(pretrained, isolated_hub / "bundled" / "delta-rnn-ptb")
    assert resolve("delta-rnn-ptb") == bundled
    assert torch.equal(logits_of(load("delta-rnn-ptb").model, tokens), logits_of(pretrained.model, tokens))
    rows = {row["name"]: row for row in list_models()}
    assert rows["delta-rnn-ptb"]["source"] == f"bundled ({bundled})"
    assert rows["delta-rnn-ptb-char"]["source"] == "hub"
    assert rows["delta-rnn-ptb"]["repo_id"] == "dsf-lightning/delta-rnn-ptb"


def test_without_a_bundled_copy_the_hub_is_asked_and_offline_says_so(isolated_hub):
    with pytest.raises(ModelDownloadError) as info:
        resolve("delta-rnn-ptb-char")
    message = str(info.value)
    assert "dsf-lightning/delta-rnn-ptb-char" in message and "HF_HUB_OFFLINE" in message
    with pytest.raises(ModelDownloadError, match="owner/model.*HF_HUB_OFFLINE"):
        resolve("owner/model")


def test_an_explicit_revision_bypasses_the_bundled_copy(isolated_hub, monkeypatch):
    save_pretrained(tiny_pretrained(), isolated_hub / "bundled" / "delta-rnn-ptb")
    asked = []
    monkeypatch.setattr(registry, "download", lambda repo_id, revision=None: asked.append((repo_id, revision)) or isolated_hub)
    resolve("delta-rnn-ptb", revision="v2")
    assert asked == [("dsf-lightning/delta-rnn-ptb", "v2")]
    monkeypatch.setitem(PUBLISHED, "pinned", PublishedModel("owner/pinned", revision="a" * 40))
    resolve("pinned")
    assert asked[-1] == ("owner/pinned", "a" * 40)  # a published name downloads at its pinned revision


def test_list_models_command_prints_a_table(isolated_hub, capsys):
    assert list_models_command(argparse.Namespace()) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "task", "metric", "value", "parameters", "size", "source"]
    assert any(line.startswith("delta-rnn-ptb ") and "dsf-lightning/delta-rnn-ptb" in line for line in lines)
    assert any(line.startswith("delta-rnn-ptb-char") for line in lines) and len(lines) == 1 + len(PUBLISHED)


def test_the_cli_parts_register_subcommands():
    parser = argparse.ArgumentParser(prog="dsf")
    commands = parser.add_subparsers(dest="command", required=True)
    add_export_parser(commands)
    add_push_parser(commands)
    listing = commands.add_parser("list").add_subparsers(dest="what", required=True)
    add_list_models_parser(listing)
    args = parser.parse_args(["export", "a.ckpt", "out", "--corpus", "ptb", "--corpus-option", "tokenizer=char", "--corpus-option", "min_count=2"])
    assert args.handler.__name__ == "export_command" and args.corpus_option == [("tokenizer", "char"), ("min_count", 2)]
    args = parser.parse_args(["push", "folder", "owner/name", "--revision", "v1", "--private"])
    assert args.handler.__name__ == "push_command" and args.revision == "v1" and args.private
    assert parser.parse_args(["list", "models"]).handler is list_models_command


def test_push_refuses_a_broken_folder_before_any_network(tmp_path, capsys):
    from dsf_lightning.cli.hub import push_command

    folder = save_pretrained(tiny_pretrained(), tmp_path / "m")
    (folder / "model.safetensors").unlink()
    code = push_command(argparse.Namespace(folder=str(folder), repo_id="owner/m", revision="main", token=None, private=False, message="x"))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("dsf push: error: ") and "model.safetensors: missing file" in err and "Traceback" not in err
