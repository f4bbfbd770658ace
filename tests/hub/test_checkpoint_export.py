"""A real tiny Lightning run -> checkpoint -> export_checkpoint -> load_pretrained gives the module's logits."""

import argparse
import json

import pytest
import torch

from dsf_lightning.cli.hub import add_export_parser
from dsf_lightning.data.corpora import load_corpus
from dsf_lightning.export.language_model import export_checkpoint, pretrained_from_checkpoint
from dsf_lightning.hub import CheckpointError
from dsf_lightning.model.pretrained import load_pretrained

from .conftest import Boom, fit_tiny_lm, logits_of


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Train two epochs on a tiny text-folder corpus with the real Trainer and a ModelCheckpoint."""
    tmp = tmp_path_factory.mktemp("run")
    root, module, data = fit_tiny_lm(tmp, [], cell="delta-rnn", hidden_sizes=[16], embedding_size=16, tie_weights=True,
                                     dropout_input=0.1, lr=3e-3, lr_halving_patience=1)
    module.eval()
    return {"root": root, "ckpt": tmp / "checkpoints" / "last.ckpt", "module": module, "corpus": data.corpus, "tmp": tmp}


def test_weights_only_reads_a_real_lightning_checkpoint(trained):
    ckpt = torch.load(trained["ckpt"], map_location="cpu", weights_only=True)  # no error: nothing needs unpickling
    assert {"state_dict", "hyper_parameters", "optimizer_states", "callbacks"} <= set(ckpt)


def test_export_gives_the_modules_logits(trained, tmp_path):
    folder = export_checkpoint(trained["ckpt"], tmp_path / "exported", corpus_name="text-folder", data_root=trained["root"])
    loaded = load_pretrained(folder)
    tokens = trained["corpus"].splits["test"][:60].reshape(3, 20)
    assert torch.equal(logits_of(loaded.model, tokens), logits_of(trained["module"].model, tokens))
    assert loaded.vocab == trained["corpus"].vocab
    assert loaded.tokenizer.to_dict() == trained["corpus"].tokenizer.to_dict()
    info = loaded.info
    assert info["corpus"] == "text-folder" and info["checkpoint"]["file"] == "last.ckpt" and info["checkpoint"]["epoch"] == 1
    assert info["training"]["lr"] == 3e-3 and info["training"]["optimizer"] == "adam"
    assert str(trained["root"]) not in json.dumps(info)  # no local paths in a file meant for publishing
    assert loaded.config.dropout_input == 0.1 and not loaded.model.training  # training settings kept, eval mode


def test_export_float16(trained, tmp_path):
    folder = export_checkpoint(trained["ckpt"], tmp_path / "f16", corpus_name="text-folder", data_root=trained["root"], dtype="float16")
    tokens = trained["corpus"].splits["test"][:60].reshape(3, 20)
    torch.testing.assert_close(
        logits_of(load_pretrained(folder).model, tokens), logits_of(trained["module"].model, tokens), rtol=1e-2, atol=5e-3
    )


def test_the_corpus_comes_from_datamodule_hparams_when_present(trained, tmp_path):
    ckpt = torch.load(trained["ckpt"], map_location="cpu", weights_only=True)
    ckpt["datamodule_hyper_parameters"] = {"corpus": "text-folder", "data_root": str(trained["root"]), "corpus_options": {}}
    path = tmp_path / "with_dm.ckpt"
    torch.save(ckpt, path)
    assert pretrained_from_checkpoint(path).vocab == trained["corpus"].vocab


def test_the_corpus_comes_from_a_lightning_cli_config_beside_the_checkpoint(trained, tmp_path):
    run = tmp_path / "lightning_logs" / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "epoch=1.ckpt").write_bytes(trained["ckpt"].read_bytes())
    (run / "config.yaml").write_text(f"seed_everything: 0\ndata:\n  corpus: text-folder\n  data_root: {trained['root']}\n  batch_size: 4\n")
    pretrained = pretrained_from_checkpoint(run / "checkpoints" / "epoch=1.ckpt")
    assert pretrained.vocab == trained["corpus"].vocab and pretrained.info["corpus"] == "text-folder"


def test_a_loaded_corpus_object_is_accepted(trained):
    assert pretrained_from_checkpoint(trained["ckpt"], trained["corpus"]).vocab == trained["corpus"].vocab


def without_reader(trained, tmp_path):
    """The run's checkpoint as a run before issue 35 wrote it: no vocabulary in the DataModule's state."""
    ckpt = torch.load(trained["ckpt"], map_location="cpu", weights_only=True)
    ckpt["LanguageModelDataModule"].pop("reader")
    path = tmp_path / "old" / "last.ckpt"
    path.parent.mkdir()
    torch.save(ckpt, path)
    return path


def test_no_corpus_information_is_a_clear_error(trained, tmp_path):
    with pytest.raises(CheckpointError, match="cannot tell which corpus.*dsf export --corpus"):
        pretrained_from_checkpoint(without_reader(trained, tmp_path))


def test_the_vocabulary_comes_from_the_checkpoint_not_the_corpus_files(trained, tmp_path):
    """Issue 35: export never rebuilds the vocabulary, so files edited after training (or gone) change nothing."""
    ckpt = torch.load(trained["ckpt"], map_location="cpu", weights_only=True)
    ckpt["datamodule_hyper_parameters"] = {"corpus": "text-folder", "data_root": str(tmp_path / "gone"), "corpus_options": {}}
    path = tmp_path / "moved.ckpt"
    torch.save(ckpt, path)
    pretrained = pretrained_from_checkpoint(path)
    assert pretrained.vocab == trained["corpus"].vocab and pretrained.info["corpus"] == "text-folder"
    assert pretrained.tokenizer.to_dict() == trained["corpus"].tokenizer.to_dict()


def test_a_corpus_with_another_vocabulary_is_refused(trained):
    char = load_corpus("text-folder", data_root=trained["root"], tokenizer="char")
    with pytest.raises(CheckpointError, match=r"vocab_size=\d+ but corpus 'text-folder'.*wrong corpus"):
        pretrained_from_checkpoint(trained["ckpt"], char)


def test_a_checkpoint_with_unsafe_objects_is_refused_without_unpickling(trained, tmp_path):
    marker = tmp_path / "marker"
    ckpt = torch.load(trained["ckpt"], map_location="cpu", weights_only=True)
    ckpt["hyper_parameters"]["payload"] = Boom(marker)
    path = tmp_path / "evil.ckpt"
    torch.save(ckpt, path)
    with pytest.raises(CheckpointError, match="weights_only.*never unpickles"):
        pretrained_from_checkpoint(path, trained["corpus"])
    assert not marker.exists()


def test_broken_checkpoints(trained, tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        pretrained_from_checkpoint(tmp_path / "missing.ckpt")
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(trained["ckpt"].read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="truncated.ckpt: not a readable"):
        pretrained_from_checkpoint(truncated, trained["corpus"])
    other = tmp_path / "other.ckpt"
    torch.save({"weights": torch.zeros(3)}, other)
    with pytest.raises(CheckpointError, match="not a LanguageModelModule checkpoint"):
        pretrained_from_checkpoint(other, trained["corpus"])
    ckpt = torch.load(trained["ckpt"], map_location="cpu", weights_only=True)
    ckpt["state_dict"]["model.layers.0.W"] = ckpt["state_dict"]["model.layers.0.W"][:, :3]
    bad = tmp_path / "bad_shape.ckpt"
    torch.save(ckpt, bad)
    with pytest.raises(CheckpointError, match="layers.0.W.*shape"):
        pretrained_from_checkpoint(bad, trained["corpus"])


def _cli(argv):
    parser = argparse.ArgumentParser(prog="dsf")
    add_export_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_dsf_export_command(trained, tmp_path, capsys):
    results = '[{"metric": "perplexity", "value": 12.5, "dataset": "text-folder", "split": "test"}]'
    code = _cli(["export", str(trained["ckpt"]), str(tmp_path / "out"), "--corpus", "text-folder", "--data-root",
                 str(trained["root"]), "--dtype", "float16", "--eval-results", results, "--info", '{"hardware": "1 CPU core"}'])
    assert code == 0
    assert "exported" in capsys.readouterr().out
    loaded = load_pretrained(tmp_path / "out")
    assert loaded.info["hardware"] == "1 CPU core"
    from huggingface_hub import ModelCard

    (result,) = ModelCard.load(tmp_path / "out" / "README.md").data.eval_results
    assert (result.metric_type, result.metric_value, result.dataset_type) == ("perplexity", 12.5, "text-folder")


def test_dsf_export_command_errors_are_one_line(trained, tmp_path, capsys):
    assert _cli(["export", str(tmp_path / "missing.ckpt"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsf export: error: ") and "no such checkpoint" in err and "Traceback" not in err and err.count("\n") == 1
    assert _cli(["export", str(without_reader(trained, tmp_path)), str(tmp_path / "out")]) == 2
    assert "cannot tell which corpus" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_dsf_export_card_options_are_checked_before_the_checkpoint_is_read(tmp_path, capsys):
    missing = str(tmp_path / "missing.ckpt")
    assert _cli(["export", missing, str(tmp_path / "out"), "--eval-results", '{"metric": "ppl"}']) == 2
    assert capsys.readouterr().err == "dsf export: error: --eval-results must be a JSON list of results\n"
    assert _cli(["export", missing, str(tmp_path / "out"), "--info", "[1]"]) == 2
    assert capsys.readouterr().err == "dsf export: error: --info must be a JSON object\n"
    assert _cli(["export", missing, str(tmp_path / "out"), "--card-extra", "{not json"]) == 2
    assert capsys.readouterr().err.startswith("dsf export: error: --card-extra: not JSON and not a JSON file")


def test_export_evaluates_the_stored_weights_on_the_split_files(trained, tmp_path):
    """--evaluate scores each split's file with the weights as stored (float16 here); a user who scores
    the same file with the exported folder gets the card's number."""
    from huggingface_hub import ModelCard

    from dsf_lightning.scoring import from_pretrained

    folder = export_checkpoint(trained["ckpt"], tmp_path / "evaluated", corpus_name="text-folder",
                               data_root=trained["root"], dtype="float16", evaluate=("valid", "test"), dynamic=(1, 2))
    info = load_pretrained(folder).info
    scorer = from_pretrained(folder)
    for split in ("valid", "test"):
        doc = scorer.score_document(trained["root"] / f"{split}.txt")
        assert info["metrics"][f"{split}_ppl"] == pytest.approx(doc.ppl, abs=1e-4)  # stored to 4 decimals
        assert info["metrics"][f"{split}_tokens"] == doc.num_tokens
    card = {r.metric_name: r.metric_value for r in ModelCard.load(folder / "README.md").data.eval_results}
    assert card["test perplexity"] == pytest.approx(info["metrics"]["test_ppl"])
    assert card["test perplexity, dynamic evaluation #1"] == pytest.approx(info["metrics"]["test_ppl_dynamic1"])
    assert card["test perplexity, dynamic evaluation #2"] == pytest.approx(info["metrics"]["test_ppl_dynamic2"])
    # learning while evaluating helps on this repetitive toy corpus
    assert info["metrics"]["test_ppl_dynamic2"] < info["metrics"]["test_ppl"]


def test_export_records_per_sentence_dynamic_evaluation(trained, tmp_path):
    """``dynamic_updates="sentence"`` (the DSF paper's per-sample updates): config.json's metrics and the
    card say so, and the number differs from the 20-token default's."""
    folder = export_checkpoint(trained["ckpt"], tmp_path / "sentences", corpus_name="text-folder",
                               data_root=trained["root"], evaluate=("test",), dynamic=(1,), dynamic_updates="sentence")
    metrics = load_pretrained(folder).info["metrics"]
    assert metrics["dynamic_updates"] == "sentence" and "dynamic_segment_length" not in metrics
    assert "after every sentence" in (folder / "README.md").read_text()
    default = export_checkpoint(trained["ckpt"], tmp_path / "segments", corpus_name="text-folder",
                                data_root=trained["root"], evaluate=("test",), dynamic=(1,))
    other = load_pretrained(default).info["metrics"]
    assert other["dynamic_updates"] == "segment" and other["dynamic_segment_length"] == 20
    assert other["test_ppl_dynamic1"] != metrics["test_ppl_dynamic1"]
    with pytest.raises(ValueError, match="dynamic_updates"):
        export_checkpoint(trained["ckpt"], tmp_path / "bad", corpus_name="text-folder", data_root=trained["root"],
                          evaluate=("test",), dynamic=(1,), dynamic_updates="words")


def test_dsf_export_dynamic_updates_flag(trained, tmp_path):
    assert _cli(["export", str(trained["ckpt"]), str(tmp_path / "out"), "--corpus", "text-folder", "--data-root",
                 str(trained["root"]), "--evaluate", "test", "--dynamic", "1", "--dynamic-updates", "sentence"]) == 0
    assert load_pretrained(tmp_path / "out").info["metrics"]["dynamic_updates"] == "sentence"
