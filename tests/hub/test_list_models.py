"""``dsf list models`` (issue 16): one row per published model with its task, headline metric and value
(read from the folder's card), parameter count, size on disk, and whether it is bundled or on the Hub."""

import argparse
import json

from dsf_lightning.auto import PUBLISHED, list_models
from dsf_lightning.cli.hub import list_models_command
from dsf_lightning.hub import registry
from dsf_lightning.model.pretrained import load_pretrained, save_pretrained
from dsf_lightning.tasks.pretrained import save_classifier

from .conftest import tiny_classifier, tiny_pretrained

HEADER = ["name", "task", "metric", "value", "parameters", "size", "source"]


def _table(capsys) -> dict[str, list[str]]:
    assert list_models_command(argparse.Namespace()) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == HEADER
    starts = [lines[0].index(h) for h in HEADER]  # columns are aligned under their headings
    rows = {}
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None])]
        rows[cells[0]] = cells
    assert len(rows) == len(lines) - 1 == len(PUBLISHED)
    return rows


def test_the_bundled_word_model_shows_its_test_perplexity(capsys):
    rows = _table(capsys)
    folder = registry.PUBLISHED["delta-rnn-ptb"].bundled_path
    model = load_pretrained(folder).model
    parameters = sum(p.numel() for p in model.parameters())  # tied weights once
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    test_ppl = json.loads((folder / "config.json").read_text())["info"]["metrics"]["test_ppl"]
    assert rows["delta-rnn-ptb"] == ["delta-rnn-ptb", "language-model", "test perplexity", f"{test_ppl:.2f}", f"{parameters:,}",
                                     f"{size / 1e6:.1f} MB", "bundled"]
    assert rows["sr-lstm-p-imdb"][1] == "text-classification"


def test_a_bundled_classifier_shows_its_accuracy_and_a_missing_model_its_source(isolated_hub, capsys):
    clf = tiny_classifier()
    save_classifier(clf, isolated_hub / "bundled" / "sr-lstm-p-imdb", dtype="float16")
    save_pretrained(tiny_pretrained(), isolated_hub / "bundled" / "delta-rnn-ptb")
    rows = _table(capsys)
    parameters = sum(p.numel() for p in clf.model.parameters())
    assert rows["sr-lstm-p-imdb"][:5] == ["sr-lstm-p-imdb", "text-classification", "test accuracy", "75.00%", f"{parameters:,}"]
    assert rows["sr-lstm-p-imdb"][6] == "bundled" and rows["sr-lstm-p-imdb"][5].endswith(" MB")
    assert rows["delta-rnn-ptb"][2:4] == ["test perplexity", "6.25"]
    # published, not bundled, not downloaded: what the registry knows, the rest unknown until it is fetched
    assert rows["delta-rnn-ptb-char"] == ["delta-rnn-ptb-char", "language-model", "-", "-", "-", "-",
                                          "hub dsf-lightning/delta-rnn-ptb-char"]
    listed = {row["name"]: row for row in list_models()}
    assert listed["sr-lstm-p-imdb"]["metric"] == "test accuracy" and listed["sr-lstm-p-imdb"]["value"] == 0.75
    assert listed["sr-lstm-p-imdb"]["parameters"] == parameters
    assert listed["delta-rnn-ptb-char"]["value"] is None


def test_a_broken_bundled_folder_is_listed_not_fatal(isolated_hub, capsys):
    folder = save_classifier(tiny_classifier(), isolated_hub / "bundled" / "sr-lstm-p-imdb")
    (folder / "config.json").write_text("{not json")
    rows = _table(capsys)
    assert rows["sr-lstm-p-imdb"][2] == "unreadable" and rows["sr-lstm-p-imdb"][6] == "bundled"
