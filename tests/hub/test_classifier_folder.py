"""Text classifiers in the hub folder format (issue 16): strict safetensors + JSON with ``task:
text-classification``, sha256 of every file checked on load, the vocabulary / tokenizer / text normalizer /
label names / length rule the classifier was trained with, float16 storage, a card whose model-index reports
accuracy and test error, and clear errors when a classifier folder meets the language-model loaders (and the
reverse)."""

import hashlib
import json

import pytest
import torch

import dsf_lightning as dsf
from dsf_lightning import RecurrentLM
from dsf_lightning.auto import load
from dsf_lightning.hub import PretrainedFormatError, WrongTaskError
from dsf_lightning.model.pretrained import load_pretrained, save_pretrained
from dsf_lightning.tasks import SequenceClassifier
from dsf_lightning.tasks.pretrained import load_classifier, save_classifier

from .conftest import (
    classifier_logits,
    edit_config,
    rehash,
    tiny_classifier,
    tiny_pretrained,
)

TEXTS = ["A great movie!", "Boring, awful plot.", "the movie", "Good fun, 10/10 great", "a"]


@pytest.fixture
def classifier():
    return tiny_classifier()


@pytest.fixture
def clf_folder(tmp_path, classifier):
    return save_classifier(classifier, tmp_path / "tiny-clf")


def test_save_load_gives_bit_identical_logits(clf_folder, classifier):
    loaded = load_classifier(clf_folder)
    assert type(loaded.model) is SequenceClassifier and not loaded.model.training
    assert torch.equal(classifier_logits(loaded.model, loaded.vocab, TEXTS), classifier_logits(classifier.model, classifier.vocab, TEXTS))
    assert loaded.vocab.symbols == classifier.vocab.symbols and loaded.vocab.unk_id == classifier.vocab.unk_id
    assert loaded.tokenizer.to_dict() == classifier.tokenizer.to_dict()
    assert loaded.labels == ["negative", "positive"] and loaded.normalize == "imdb"
    assert loaded.max_length == classifier.max_length and loaded.info == classifier.info
    assert dict(loaded.model.hparams)["cell_options"] == {"k": 3}


def test_config_records_the_task_and_every_files_sha256(clf_folder):
    config = json.loads((clf_folder / "config.json").read_text())
    assert config["task"] == "text-classification" and config["format"] == "dsf-lightning"
    assert config["labels"] == ["negative", "positive"] and config["normalize"] == "imdb"
    assert set(config["files"]) == {"model.safetensors", "vocab.json", "dsf_tokenizer.json"}
    for name, record in config["files"].items():
        data = (clf_folder / name).read_bytes()
        assert record == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    assert sorted(p.name for p in clf_folder.iterdir()) == ["README.md", "config.json", "dsf_tokenizer.json", "model.safetensors", "vocab.json"]
    # the architecture only: training settings (optimizer, lr) are info, not what builds the model
    assert "lr" not in config["model"] and config["model"]["cell"] == "sr-lstm-p"


def test_saving_twice_writes_the_same_bytes(tmp_path, classifier):
    a = save_classifier(classifier, tmp_path / "a")
    b = save_classifier(classifier, tmp_path / "b")
    for name in ("config.json", "model.safetensors", "vocab.json", "dsf_tokenizer.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_float16_storage(tmp_path, classifier):
    full = save_classifier(classifier, tmp_path / "fp32")
    half = save_classifier(classifier, tmp_path / "fp16", dtype="float16")
    assert json.loads((half / "config.json").read_text())["weights"]["dtype"] == "float16"
    saved = (full / "model.safetensors").stat().st_size - (half / "model.safetensors").stat().st_size
    assert abs(saved - 2 * sum(p.numel() for p in classifier.model.parameters())) <= 64  # 2 of 4 bytes per parameter
    loaded = load_classifier(half)
    assert next(loaded.model.parameters()).dtype == torch.float32  # cast back on load
    for name, p in classifier.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], p.half().float()), name


def test_a_corrupted_file_is_refused_by_its_checksum(clf_folder):
    path = clf_folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(PretrainedFormatError, match=r"model\.safetensors: sha256 .* does not match config\.json"):
        load_classifier(clf_folder)


def test_a_truncated_file_is_refused(clf_folder):
    path = clf_folder / "vocab.json"
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(PretrainedFormatError, match=r"vocab\.json: has .* bytes but config\.json records .*truncated"):
        load_classifier(clf_folder)


def test_a_swapped_vocabulary_is_refused_even_when_rehashed(clf_folder):
    path = clf_folder / "vocab.json"
    doc = json.loads(path.read_text())
    doc["alphabet"][0], doc["alphabet"][1] = doc["alphabet"][1], doc["alphabet"][0]  # same size, other ids
    path.write_text(json.dumps(doc))
    rehash(clf_folder)
    with pytest.raises(PretrainedFormatError, match=r"vocab\.json: is not the vocabulary the model was trained with"):
        load_classifier(clf_folder)


def test_bad_labels_and_lengths_in_config_are_refused(clf_folder):
    edit_config(clf_folder, lambda c: c.update(labels=["only-one"]))
    with pytest.raises(PretrainedFormatError, match=r"config\.json: 'labels' must be 2 distinct"):
        load_classifier(clf_folder)
    edit_config(clf_folder, lambda c: c.update(labels=["negative", "positive"], max_length=0))
    with pytest.raises(PretrainedFormatError, match=r"config\.json: 'max_length' must be a positive"):
        load_classifier(clf_folder)


def test_extra_or_missing_tensors_are_refused(tmp_path, classifier):
    other = tiny_classifier(hidden_size=10)
    a = save_classifier(classifier, tmp_path / "a")
    b = save_classifier(other, tmp_path / "b")
    (a / "model.safetensors").write_bytes((b / "model.safetensors").read_bytes())
    rehash(a)
    with pytest.raises(PretrainedFormatError, match=r"model\.safetensors.*(shape|far larger|at most)"):
        load_classifier(a)


def test_an_unknown_task_is_a_clear_error(clf_folder):
    edit_config(clf_folder, lambda c: c.update(task="image-segmentation"))
    with pytest.raises(PretrainedFormatError, match=r"task 'image-segmentation'.*language-model, text-classification"):
        load(clf_folder, task="auto")


# --------------------------------------------------------------------------------------- cross loaders
def test_the_language_model_loaders_refuse_a_classifier_folder_and_name_the_right_one(clf_folder):
    for call in (lambda: load_pretrained(clf_folder), lambda: load(clf_folder), lambda: RecurrentLM.from_pretrained(clf_folder),
                 lambda: dsf.Scorer.from_pretrained(clf_folder)):
        with pytest.raises(WrongTaskError) as info:
            call()
        message = str(info.value)
        assert "holds a text classifier" in message and "not a language model" in message, message
        assert "dsf classify" in message and "SequenceClassifier.from_pretrained" in message, message


def test_the_classifier_loaders_refuse_a_language_model_folder_and_name_the_right_one(tmp_path):
    from dsf_lightning.classification import TextClassifier

    lm = save_pretrained(tiny_pretrained(), tmp_path / "lm")
    for call in (lambda: load_classifier(lm), lambda: load(lm, task="text-classification"),
                 lambda: SequenceClassifier.from_pretrained(lm), lambda: TextClassifier.from_pretrained(lm)):
        with pytest.raises(WrongTaskError) as info:
            call()
        message = str(info.value)
        assert "holds a language model" in message and "not a text classifier" in message, message
        assert "dsf score" in message and "RecurrentLM.from_pretrained" in message, message


def test_dsf_score_on_a_classifier_folder_says_which_command(clf_folder, capsys):
    from dsf_lightning.cli import main

    assert main(["score", "--model", str(clf_folder), "great movie"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsf score: error:") and "dsf classify" in err and "Traceback" not in err


# --------------------------------------------------------------------------------------- one loader for both
def test_from_pretrained_returns_the_right_object_for_each_kind(clf_folder, tmp_path):
    from dsf_lightning.classification import TextClassifier
    from dsf_lightning.model.pretrained import Pretrained
    from dsf_lightning.tasks.pretrained import PretrainedClassifier

    lm = save_pretrained(tiny_pretrained(), tmp_path / "lm")
    assert type(dsf.from_pretrained(clf_folder)) is TextClassifier
    assert type(dsf.from_pretrained(lm)) is dsf.Scorer
    assert type(load(clf_folder, task="auto")) is PretrainedClassifier and type(load(lm, task="auto")) is Pretrained
    assert type(load(clf_folder, task="text-classification")) is PretrainedClassifier
    with pytest.raises(ValueError, match=r"task must be one of .*'auto'"):
        load(lm, task="tagging")


def test_the_model_class_saves_and_loads_itself(tmp_path, classifier):
    folder = classifier.model.save_pretrained(
        tmp_path / "m", vocab=classifier.vocab, tokenizer=classifier.tokenizer, labels=classifier.labels,
        normalize="imdb", info=classifier.info,
    )
    model = SequenceClassifier.from_pretrained(folder)
    assert torch.equal(classifier_logits(model, model.vocab, TEXTS), classifier_logits(classifier.model, classifier.vocab, TEXTS))
    assert model.pretrained_labels == ["negative", "positive"] and model.pretrained_normalize == "imdb"
    again = model.save_pretrained(tmp_path / "again")  # what from_pretrained kept is saved back
    for name in ("config.json", "model.safetensors", "vocab.json", "dsf_tokenizer.json"):
        assert (again / name).read_bytes() == (folder / name).read_bytes(), name
    with pytest.raises(ValueError, match="pass vocab= and tokenizer="):
        tiny_classifier().model.save_pretrained(tmp_path / "bare")


def test_the_card_reports_accuracy_and_test_error(clf_folder):
    from huggingface_hub import ModelCard

    card = ModelCard.load(clf_folder / "README.md")
    results = {(r.metric_type, r.dataset_split): r.metric_value for r in card.data.eval_results}
    assert results == {("accuracy", "test"): 0.75, ("error", "test"): 0.25}
    assert card.data.pipeline_tag == "text-classification" and "text-classification" in card.data.tags
    text = (clf_folder / "README.md").read_text()
    assert "negative, positive" in text and "dsf classify" in text and "4,096" in text
