"""``dsf export`` of a classifier checkpoint (issue 16): a SequenceClassifier trained by ``dsf fit`` with an
IMDB-style recipe (a tiny review set written here) becomes a classifier folder; ``--evaluate test`` puts the
accuracy on the DataModule's test split(s), measured with the stored weights, into the card; the centroids'
prototypical words (sr-RNN Table 6) go into the card too."""

import json
import lzma
import os
import random
import shutil
import textwrap

import pytest
import torch

from dsf_lightning.cli import main
from dsf_lightning.data.corpora.imdb import normalize_review
from dsf_lightning.tasks import IMDBSentimentDataModule, SequenceClassifier
from dsf_lightning.tasks.pretrained import load_classifier

POSITIVE = "great good fun excellent loved".split()
NEGATIVE = "bad awful boring terrible hated".split()
NEUTRAL = "the movie plot a was and it".split()


def _reviews(n: int, seed: int, flipped: float = 0.0) -> list[dict]:
    """Reviews whose sentiment words give the label, except a ``flipped`` share whose label is the other one
    (so the test accuracy is not 100% and depends on which reviews are scored)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = i % 2
        words = [rng.choice(NEUTRAL) for _ in range(rng.randint(3, 9))]
        for _ in range(rng.randint(1, 3)):
            words.insert(rng.randrange(len(words) + 1), rng.choice(POSITIVE if label else NEGATIVE).capitalize())
        label = 1 - label if rng.random() < flipped else label
        rows.append({"id": i, "rating": 9 if label else 2, "label": label, "text": " ".join(words) + "!"})
    return rows


def _write_imdb(root):
    (root / "imdb").mkdir(parents=True)
    for split, n, seed, flipped in (("train", 120, 0, 0.0), ("test", 40, 1, 0.25)):
        with lzma.open(root / "imdb" / f"{split}.jsonl.xz", "wt", encoding="utf-8") as f:
            for row in _reviews(n, seed, flipped):
                f.write(json.dumps(row) + "\n")
    return root


RECIPE = """\
seed_everything: 0
trainer:
  max_epochs: 3
  accelerator: cpu
  enable_progress_bar: false
  enable_model_summary: false
  default_root_dir: {run}
  logger:
    class_path: lightning.pytorch.loggers.CSVLogger
    init_args: {{save_dir: {run}, name: logs}}
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args: {{dirpath: {run}/checkpoints, filename: best, monitor: val_acc, mode: max, save_last: true}}
model:
  class_path: dsf_lightning.tasks.SequenceClassifier
  init_args:
    cell: sr-lstm-p
    hidden_size: 8
    embedding_size: 8
    cell_options: {{k: 3, tau: 1.0}}
    lr: 0.03
data:
  class_path: dsf_lightning.tasks.IMDBSentimentDataModule
  init_args:
    data_root: {root}
    verify: false
    max_vocab: 30
    valid_every: 5
    batch_size: 8
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("imdb-run")
    root = _write_imdb(tmp / "data")
    run = tmp / "run"
    recipe = tmp / "recipe.yaml"
    # the recipe writes below its run directory (relative paths; an absolute one would have to come from the
    # command line), the data it reads may be anywhere
    recipe.write_text(RECIPE.format(run="run", root=root))
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        assert main(["fit", "--config", str(recipe)]) == 0
    finally:
        os.chdir(cwd)
    ckpt = run / "checkpoints" / "best.ckpt"
    assert ckpt.is_file() and (run / "logs" / "version_0" / "config.yaml").is_file()
    return {"root": root, "run": run, "ckpt": ckpt, "recipe": recipe, "tmp": tmp}


def _module(ckpt) -> SequenceClassifier:
    raw = torch.load(ckpt, map_location="cpu", weights_only=True)
    hp = {k: v for k, v in raw["hyper_parameters"].items() if not k.startswith("_")}
    module = SequenceClassifier(**hp)
    module.load_state_dict(raw["state_dict"])
    return module.eval()


def _accuracy(model, vocab, root) -> tuple[float, int]:
    """Accuracy on the test reviews, each normalized, encoded and run alone here."""
    correct = n = 0
    with lzma.open(root / "imdb" / "test.jsonl.xz", "rt", encoding="utf-8") as f:
        for line in f:
            review = json.loads(line)
            ids = torch.tensor([vocab.encode(normalize_review(review["text"]).split())])
            with torch.no_grad():
                predicted = int(model(ids, torch.tensor([ids.shape[1]])).argmax(-1))
            correct += predicted == review["label"]
            n += 1
    return correct / n, n


def test_export_gives_the_checkpoints_logits_and_the_datamodules_vocabulary(trained, tmp_path):
    out = tmp_path / "clf"
    assert main(["export", str(trained["ckpt"]), str(out)]) == 0
    loaded = load_classifier(out)
    module = _module(trained["ckpt"])
    ids = torch.tensor([[1, 5, 6, 7, 8, 2], [1, 9, 4, 2, 0, 0]])
    lengths = torch.tensor([6, 4])
    with torch.no_grad():
        assert torch.equal(loaded.model(ids, lengths), module(ids, lengths))
    vocab = IMDBSentimentDataModule(data_root=trained["root"], verify=False, max_vocab=30, valid_every=5).prepare_vocab()
    assert loaded.vocab.symbols == vocab.symbols
    assert loaded.labels == ["negative", "positive"] and loaded.normalize == "imdb" and loaded.tokenizer.name == "word"
    info = loaded.info
    assert info["corpus"] == "imdb" and info["datamodule"] == "IMDBSentimentDataModule"
    assert info["checkpoint"]["file"] == "best.ckpt" and info["training"]["lr"] == 0.03
    assert info["data"]["max_vocab"] == 30 and "data_root" not in info["data"]
    assert str(trained["tmp"]) not in json.dumps(info)  # no local paths in a file meant for publishing
    assert "config.yaml" in info["recipe"]


def test_export_evaluate_measures_the_test_accuracy_with_the_stored_weights(trained, tmp_path, capsys):
    out = tmp_path / "clf16"
    assert main(["export", str(trained["ckpt"]), str(out), "--evaluate", "test", "--dtype", "float16", "--prototypes", "all"]) == 0
    assert "exported" in capsys.readouterr().out
    loaded = load_classifier(out)
    accuracy, n = _accuracy(loaded.model, loaded.vocab, trained["root"])  # the fp16-stored weights
    metrics = loaded.info["metrics"]
    assert 0.5 < accuracy < 1  # a quarter of the test labels are flipped
    assert metrics["test_accuracy"] == pytest.approx(accuracy, abs=1e-9) and metrics["test_sequences"] == n == 40
    assert metrics["test_error"] == pytest.approx(1 - accuracy, abs=1e-9)
    from huggingface_hub import ModelCard

    results = {(r.metric_type, r.dataset_split): r.metric_value for r in ModelCard.load(out / "README.md").data.eval_results}
    assert results[("accuracy", "test")] == pytest.approx(accuracy) and results[("error", "test")] == pytest.approx(1 - accuracy)
    # the prototypes (sr-RNN Table 6): per centroid, the words with the highest mean transition probability
    prototypes = loaded.info["prototypes"]
    assert prototypes["sequences"] == 40 and len(prototypes["centroids"]) == 3
    words = {w["symbol"] for c in prototypes["centroids"] for w in c["top"]}
    assert words and words <= set(loaded.vocab.symbols) - {"<pad>", "<s>", "</s>"}
    card = (out / "README.md").read_text()
    assert "Prototypical words" in card and "sr-RNN paper, Table 6" in card


def test_without_the_training_config_the_recipe_can_be_named(trained, tmp_path, capsys):
    alone = tmp_path / "alone" / "model.ckpt"
    alone.parent.mkdir()
    shutil.copy(trained["ckpt"], alone)
    assert main(["export", str(alone), str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "cannot tell which data" in err and "--recipe" in err
    assert main(["export", str(alone), str(tmp_path / "y"), "--recipe", str(trained["recipe"])]) == 0
    vocab = IMDBSentimentDataModule(data_root=trained["root"], verify=False, max_vocab=30, valid_every=5).prepare_vocab()
    assert load_classifier(tmp_path / "y").vocab.symbols == vocab.symbols


def _export_with_an_edited_recipe(trained, tmp_path, capsys, old: str, new: str) -> str:
    """``dsf export`` of the run's checkpoint (alone) with its recipe's ``old`` text replaced by ``new``:
    refused with exit 2 and nothing written; returns the error."""
    edited = tmp_path / "edited.yaml"
    edited.write_text(trained["recipe"].read_text().replace(old, new))
    alone = tmp_path / "model.ckpt"
    shutil.copy(trained["ckpt"], alone)
    assert main(["export", str(alone), str(tmp_path / "z"), "--recipe", str(edited)]) == 2
    assert not (tmp_path / "z").exists()
    return capsys.readouterr().err


def test_a_recipe_that_builds_another_vocabulary_is_refused(trained, tmp_path, capsys):
    err = _export_with_an_edited_recipe(trained, tmp_path, capsys, "max_vocab: 30", "max_vocab: 12")
    assert "vocab_size=" in err and "wrong recipe" in err


def test_data_that_pads_short_reviews_is_refused(trained, tmp_path, capsys):
    err = _export_with_an_edited_recipe(trained, tmp_path, capsys, "max_vocab: 30", "max_vocab: 30\n    pad_to_cut: true")
    assert "pad_to_cut" in err and "unpadded" in err


def test_a_model_trained_on_the_last_words_of_each_review_exports_reading_the_last_words(trained, tmp_path):
    """keep_words: last in the recipe -> the folder's keep is "last": classify reads the end of a long review
    (it used to be refused: a folder could only read the first max_length symbols)."""
    from dsf_lightning.classification import TextClassifier

    from .conftest import classifier_logits

    edited = tmp_path / "last.yaml"
    edited.write_text(trained["recipe"].read_text().replace("max_vocab: 30", "max_vocab: 30\n    keep_words: last"))
    alone = tmp_path / "model.ckpt"
    shutil.copy(trained["ckpt"], alone)
    out = tmp_path / "last"
    assert main(["export", str(alone), str(out), "--recipe", str(edited), "--max-length", "5"]) == 0
    loaded = load_classifier(out)
    assert loaded.keep == "last" and loaded.max_length == 5 and loaded.info["data"]["keep_words"] == "last"
    text = "Terrible plot and the movie was boring , but great fun and excellent loved it !"
    got = TextClassifier(loaded).classify(text)
    want = torch.softmax(classifier_logits(_module(trained["ckpt"]), loaded.vocab, [text], 5, "last"), -1)[0]
    assert got.truncated and got.probabilities["positive"] == pytest.approx(float(want[1]), abs=1e-6)


def test_language_model_options_are_refused_for_a_classifier(trained, tmp_path, capsys):
    assert main(["export", str(trained["ckpt"]), str(tmp_path / "w"), "--corpus", "ptb"]) == 2
    assert "--corpus" in capsys.readouterr().err
    assert main(["export", str(trained["ckpt"]), str(tmp_path / "w.onnx"), "--format", "onnx"]) == 2
    assert "exports language models only" in capsys.readouterr().err
    from dsf_lightning.export.language_model import pretrained_from_checkpoint
    from dsf_lightning.hub import CheckpointError

    with pytest.raises(CheckpointError, match="holds a SequenceClassifier.*dsf export"):
        pretrained_from_checkpoint(trained["ckpt"])  # the language-model export's own function says so too


def test_a_recipe_naming_a_class_outside_the_task_datamodules_is_refused(trained, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent("""\
        data:
          class_path: subprocess.Popen
          init_args: {args: [touch, owned]}
    """))
    assert main(["export", str(trained["ckpt"]), str(tmp_path / "v"), "--recipe", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "subprocess.Popen" in err and "IMDBSentimentDataModule" in err
    assert not (tmp_path / "owned").exists()


def test_export_reads_the_average_a_polyak_run_kept(trained, tmp_path, capsys):
    """A classifier checkpoint whose run kept a PolyakAveraging average (its state written into the checkpoint
    here) exports the average by default, the training weights with --weights training."""
    raw = torch.load(trained["ckpt"], map_location="cpu", weights_only=True)
    averages = {k: v + 0.25 for k, v in raw["state_dict"].items() if v.dtype.is_floating_point}
    raw["callbacks"]["PolyakAveraging{'start_step': 0, 'decay': 0.99}"] = {
        "start_step": 0, "decay": 0.99, "num_averaged": 7, "last_step": 7, "averages": averages}
    path = tmp_path / "averaged.ckpt"
    torch.save(raw, path)
    shutil.copy(trained["ckpt"].parents[1] / "logs" / "version_0" / "config.yaml", tmp_path / "config.yaml")
    for flags, expected in (([], averages), (["--weights", "training"], raw["state_dict"])):
        out = tmp_path / f"clf{len(flags)}"
        assert main(["export", str(path), str(out), *flags]) == 0
        loaded = load_classifier(out)
        for name, value in loaded.model.state_dict().items():
            assert torch.equal(value, expected[name]), name
    assert "weights: PolyakAveraging: the exponential moving average (decay 0.99) of 7 training iterates" in capsys.readouterr().out
