"""``TextClassifier.classify`` and ``dsf classify`` (issue 16): labels and probabilities of raw texts with a
classifier folder, checked against the module's own forward pass on texts encoded here, one at a time;
the edge cases: an empty text, a batch with one empty item, 1 MB of text, a symbol a closed vocabulary
lacks, input that is not text."""

import io
import json
import time

import pytest
import torch

from dsf_lightning.classification import (
    Classification,
    ClassificationError,
    TextClassifier,
)
from dsf_lightning.tasks.pretrained import DEFAULT_MAX_LENGTH, save_classifier

from .conftest import classifier_logits, tiny_classifier

TEXTS = ["A great movie!", "Boring, awful plot.", "the movie", "Good fun, 10/10 great", "a", "unseen words only"]


@pytest.fixture(scope="module")
def pretrained():
    return tiny_classifier()


@pytest.fixture(scope="module")
def folder(tmp_path_factory, pretrained):
    return save_classifier(pretrained, tmp_path_factory.mktemp("clf") / "tiny-clf")


@pytest.fixture(scope="module")
def classifier(folder):
    return TextClassifier.from_pretrained(folder)


def test_classify_gives_labels_and_probabilities_of_the_module(classifier, pretrained):
    results = classifier.classify(TEXTS)
    assert isinstance(results, list) and all(isinstance(r, Classification) for r in results)
    probs = torch.softmax(classifier_logits(pretrained.model, pretrained.vocab, TEXTS), -1)
    for r, p, text in zip(results, probs, TEXTS):
        assert r.text == text and list(r.probabilities) == ["negative", "positive"]
        assert [r.probabilities["negative"], r.probabilities["positive"]] == pytest.approx(p.tolist(), abs=1e-6)
        assert r.label == ["negative", "positive"][int(p.argmax())] and r.probability == r.probabilities[r.label]
        assert not r.truncated
    assert results[0].num_tokens == 4 and results[0].num_unknown == 0  # a great movie !
    assert results[-1].num_tokens == 3 and results[-1].num_unknown == 3
    assert results[0].to_dict() == {
        "text": "A great movie!", "label": results[0].label, "probability": results[0].probability,
        "probabilities": results[0].probabilities, "num_tokens": 4, "num_unknown": 0, "truncated": False,
    }


def test_one_text_gives_one_record(classifier):
    one = classifier.classify("A great movie!")
    assert isinstance(one, Classification) and one == classifier.classify(["A great movie!"])[0]  # the same batch of one


def test_batching_and_order_do_not_change_results(classifier):
    together = classifier.classify(TEXTS)
    alone = [classifier.classify(t) for t in TEXTS]
    for a, b in zip(together, alone):
        assert a.label == b.label and a.probabilities == pytest.approx(b.probabilities, abs=1e-6)
    small = TextClassifier.from_pretrained(classifier.folder, batch_size=2)
    for a, b in zip(small.classify(TEXTS), together):
        assert a.probabilities == pytest.approx(b.probabilities, abs=1e-6)


def test_an_empty_text_is_the_model_reading_only_its_start_and_end_tokens(classifier, pretrained, caplog):
    with caplog.at_level("WARNING"):
        empty = classifier.classify("")
    reference = torch.softmax(pretrained.model(torch.tensor([[1, 2]]), torch.tensor([2]))[0].detach(), -1)
    assert empty.num_tokens == 0 and empty.text == ""
    assert [empty.probabilities["negative"], empty.probabilities["positive"]] == pytest.approx(reference.tolist(), abs=1e-6)
    assert "no words" in caplog.text
    assert classifier.classify("   \n\t ").num_tokens == 0  # whitespace only: the same
    assert classifier.classify([]) == []


def test_a_batch_with_one_empty_item(classifier):
    batch = classifier.classify(["A great movie!", "", "Boring, awful plot."])
    assert [r.num_tokens for r in batch] == [4, 0, 5]
    for got, alone in zip(batch, (classifier.classify(t) for t in ("A great movie!", "", "Boring, awful plot."))):
        assert got.label == alone.label and got.probabilities == pytest.approx(alone.probabilities, abs=1e-6)


def test_a_megabyte_of_text_is_cut_at_max_length_quickly(classifier, pretrained):
    words = "great movie , awful plot ! the fun a boring ".split()
    text = " ".join(words[i % len(words)] for i in range(250_000))[:1_000_000]
    assert len(text) == 1_000_000
    start = time.perf_counter()
    result = classifier.classify(text)
    seconds = time.perf_counter() - start
    assert result.truncated and result.num_tokens == DEFAULT_MAX_LENGTH == classifier.max_length
    # the documented rule: the first max_length words (after normalization) are read, the rest ignored
    probs = torch.softmax(classifier_logits(pretrained.model, pretrained.vocab, [text], DEFAULT_MAX_LENGTH), -1)[0]
    assert [result.probabilities["negative"], result.probabilities["positive"]] == pytest.approx(probs.tolist(), abs=1e-5)
    assert seconds < 30, seconds
    shorter = classifier.classify(text, max_length=10)
    assert shorter.num_tokens == 10 and shorter.truncated


def test_a_folder_that_keeps_the_last_symbols_reads_the_end_of_a_long_text(tmp_path, pretrained):
    """keep: last (a model trained on the last words of each review, IMDB keep_words: last) reads the last
    max_length symbols; the folder records it and the card says so."""
    import dataclasses
    import json

    last = dataclasses.replace(pretrained, max_length=4, keep="last")
    folder = save_classifier(last, tmp_path / "last")
    assert json.loads((folder / "config.json").read_text())["keep"] == "last"
    assert "the last 4 symbols of each text" in (folder / "README.md").read_text()
    classifier = TextClassifier.from_pretrained(folder)
    text = "boring awful plot , the movie was great fun !"
    result = classifier.classify(text)
    assert result.truncated and result.num_tokens == 4 and classifier.keep == "last"
    for keep in ("last", "first"):
        want = torch.softmax(classifier_logits(pretrained.model, pretrained.vocab, [text], 4, keep), -1)[0].tolist()
        got = result if keep == "last" else TextClassifier.from_pretrained(save_classifier(
            dataclasses.replace(pretrained, max_length=4), tmp_path / "first")).classify(text)
        assert [got.probabilities["negative"], got.probabilities["positive"]] == pytest.approx(want, abs=1e-6)
    assert result.probabilities != got.probabilities  # the two ends of this text read differently
    with pytest.raises(ValueError, match="keep must be one of"):
        save_classifier(dataclasses.replace(pretrained, keep="end"), tmp_path / "bad")


def test_a_folder_without_the_keep_field_reads_the_first_symbols(tmp_path, pretrained):
    """Folders written before the field read the first max_length symbols, as they always did."""
    import dataclasses
    import json

    from dsf_lightning.hub import PretrainedFormatError
    from dsf_lightning.tasks.pretrained import load_classifier

    folder = save_classifier(dataclasses.replace(pretrained, max_length=4), tmp_path / "old")
    config = json.loads((folder / "config.json").read_text())
    del config["keep"]
    (folder / "config.json").write_text(json.dumps(config))
    assert load_classifier(folder).keep == "first"
    config["keep"] = "middle"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(PretrainedFormatError, match="'keep' must be one of"):
        load_classifier(folder)


def test_bad_input_is_a_clear_error(classifier):
    with pytest.raises(ClassificationError, match="a text .* or a list of texts, got int"):
        classifier.classify(123)
    with pytest.raises(ClassificationError, match=r"texts\[1\] is a bytes, not a str"):
        classifier.classify(["fine", b"bytes"])
    with pytest.raises(ClassificationError, match="max_length must be a positive integer"):
        classifier.classify("x", max_length=0)


def test_a_closed_vocabulary_names_the_unknown_symbol(tmp_path):
    from dsf_lightning.data.tokenizers import get_tokenizer
    from dsf_lightning.tasks import SequenceClassifier, Vocabulary
    from dsf_lightning.tasks.pretrained import PretrainedClassifier

    vocab = Vocabulary(["0", "1"])  # a Tomita grammar's alphabet: no <unk>
    torch.manual_seed(0)
    model = SequenceClassifier(vocab_size=len(vocab), cell="sr-gru", hidden_size=6, cell_options={"k": 3}).eval()
    folder = save_classifier(PretrainedClassifier(model, vocab, get_tokenizer("char", eos=None), ["reject", "accept"]), tmp_path / "t")
    tomita = TextClassifier.from_pretrained(folder)
    result = tomita.classify(["0101", ""])  # the empty string is a string of the language like any other
    ids = torch.tensor([vocab.encode("0101")])
    reference = torch.softmax(model(ids, torch.tensor([6]))[0].detach(), -1)
    assert result[0].probabilities["accept"] == pytest.approx(float(reference[1]), abs=1e-6) and result[1].num_tokens == 0
    with pytest.raises(ClassificationError, match=r"texts\[1\].*'2'.*outside the vocabulary"):
        tomita.classify(["01", "0121"])


# --------------------------------------------------------------------------------------------- dsf classify
def _run(argv, capsys, stdin: str | None = None, monkeypatch=None):
    from dsf_lightning.cli import main

    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_dsf_classify_prints_a_table(folder, classifier, capsys):
    code, out, err = _run(["classify", "--model", str(folder), "A great movie!", "Boring, awful plot."], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["#", "label", "p(negative)", "p(positive)", "tokens", "text"]
    expected = classifier.classify(["A great movie!", "Boring, awful plot."])
    for line, r in zip(lines[1:], expected):
        cells = line.split()
        assert cells[1] == r.label and float(cells[2]) == pytest.approx(r.probabilities["negative"], abs=1e-4)
        assert cells[4] == str(r.num_tokens) and line.endswith(r.text)
    assert len(lines) == 3


def test_dsf_classify_json_file_and_stdin(folder, classifier, capsys, tmp_path, monkeypatch):
    reviews = tmp_path / "reviews.txt"
    reviews.write_text("A great movie!\n\nBoring, awful plot.\n", encoding="utf-8")
    code, out, err = _run(["classify", "--model", str(folder), "--file", str(reviews), "--json"], capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]  # JSON lines: one per text
    assert all(r["model"] == str(folder) and sorted(r["probabilities"]) == ["negative", "positive"] for r in rows)
    assert [r["text"] for r in rows] == ["A great movie!", "", "Boring, awful plot."]  # one text per line
    assert {k: v for k, v in rows[0].items() if k not in ("model", "max_length")} == classifier.classify("A great movie!").to_dict()
    code, out, err = _run(["classify", "--model", str(folder), "--file", "-", "--json"], capsys, "the movie\nfun\n", monkeypatch)
    assert code == 0, err
    assert [json.loads(line)["text"] for line in out.splitlines()] == ["the movie", "fun"]
    code, out, err = _run(["classify", "--model", str(folder), "--file", str(reviews), "--whole-file", "--json"], capsys)
    assert code == 0 and [json.loads(line)["num_tokens"] for line in out.splitlines()] == [9]  # the file as one text


def test_dsf_classify_errors_are_one_line(folder, capsys, tmp_path):
    code, _, err = _run(["classify", "--model", str(folder)], capsys)
    assert code == 2 and err.startswith("dsf classify: error: nothing to classify") and "Traceback" not in err
    code, _, err = _run(["classify", "--model", str(folder), "--file", str(tmp_path / "none.txt")], capsys)
    assert code == 2 and "none.txt" in err
    code, _, err = _run(["classify", "--model", str(folder), "x", "--file", str(tmp_path / "none.txt")], capsys)
    assert code == 2 and "not both" in err
