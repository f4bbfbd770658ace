"""`dsf analyze ...` end to end through dsf_lightning.cli.main: PNGs of the expected size, JSON / CSV data,
and one-line errors with exit code 2."""

import csv
import json

import numpy as np
import pytest
from PIL import Image

from dsf_lightning.cli import main

DPI = 40  # small images: fast to draw; the sizes follow from the fixed figure sizes in inches


def _png(path, size_inches):
    """Open the PNG and check it is a real image of figsize * dpi pixels with something drawn on it."""
    with Image.open(path) as im:
        assert im.format == "PNG"
        assert im.size == (round(size_inches[0] * DPI), round(size_inches[1] * DPI))
        pixels = np.asarray(im.convert("L"), dtype=float)
    assert pixels.std() > 1.0  # not a blank canvas


def _run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_state_delta_with_the_bundled_model(tmp_path, capsys):
    out = tmp_path / "sd"
    code, stdout, _ = _run(["analyze", "state-delta", "--text", "the government said the economy grew",
                            "--out", str(out), "--dpi", str(DPI)], capsys)
    assert code == 0, stdout
    _png(out / "state_delta.png", (10, 4))
    data = json.loads((out / "state_delta.json").read_text())
    assert data["model"]["source"] == "delta-rnn-ptb" and not data["model"]["freshly_trained"]
    scores = [t["score"] for t in data["sentences"][0]["tokens"]]
    assert len(scores) == 6 and min(scores) == 0.0 and max(scores) == 1.0
    rows = list(csv.reader(open(out / "state_delta.csv")))
    assert rows[0] == ["sentence", "position", "token", "l1", "score"] and len(rows) == 7


def test_state_delta_several_texts(tmp_path, capsys, toy_models):
    out = tmp_path / "sd2"
    code, _, _ = _run(["analyze", "state-delta", "--model", str(toy_models["delta-rnn"]), "--text", "the cat sat",
                       "--text", "a dog ran", "--out", str(out), "--dpi", str(DPI)], capsys)
    assert code == 0
    _png(out / "state_delta_1.png", (10, 4))
    _png(out / "state_delta_2.png", (10, 4))


def test_influence_with_a_given_ran(tmp_path, capsys, toy_models):
    out = tmp_path / "inf"
    code, stdout, _ = _run(["analyze", "influence", "--model", str(toy_models["ran"]), "--text",
                            "the big dog saw a small bird", "--out", str(out), "--dpi", str(DPI)], capsys)
    assert code == 0
    _png(out / "influence.png", (12, 4.5))
    words = json.loads((out / "influence.json").read_text())["sentences"][0]["words"]
    assert [w["token"] for w in words] == "the big dog saw a small bird".split()
    assert words[0]["predecessor"] is None and all(0 <= w["predecessor"] < w["position"] for w in words[1:])


def test_influence_trains_a_small_ran_when_no_model_is_given(tmp_path, capsys, toy_corpus):
    out = tmp_path / "inf_fresh"
    saved = tmp_path / "saved-ran"
    code, _, err = _run(["analyze", "influence", "--text", "the big cat sat on the mat", "--corpus", "text-folder",
                         "--data-root", str(toy_corpus), "--corpus-option", "unk=<unk>", "--train-steps", "3",
                         "--hidden-size", "8", "--save-model", str(saved), "--out", str(out), "--dpi", str(DPI)], capsys)
    assert code == 0, err
    assert "training a small ran" in err
    _png(out / "influence.png", (12, 4.5))
    model = json.loads((out / "influence.json").read_text())["model"]
    assert model["freshly_trained"] is True and model["training"]["steps"] == 3
    assert (saved / "config.json").exists()
    # the saved model is a pretrained folder the tools accept
    code, _, _ = _run(["analyze", "influence", "--model", str(saved), "--text", "the cat", "--out", str(out / "again"),
                       "--dpi", str(DPI)], capsys)
    assert code == 0


def test_timescales_of_a_given_irlm_and_of_a_fresh_one(tmp_path, capsys, toy_models, toy_corpus):
    out = tmp_path / "ts"
    code, _, _ = _run(["analyze", "timescales", "--model", str(toy_models["irlm"]), "--out", str(out), "--dpi", str(DPI)], capsys)
    assert code == 0
    _png(out / "timescales.png", (8, 5))
    data = json.loads((out / "timescales.json").read_text())
    assert data["summary"]["long_context_units"] == 6 and len(data["units"]) == 8
    fresh = tmp_path / "ts_fresh"
    code, _, err = _run(["analyze", "timescales", "--corpus", "text-folder", "--data-root", str(toy_corpus),
                         "--corpus-option", "unk=<unk>", "--train-steps", "3", "--hidden-size", "8",
                         "--out", str(fresh), "--dpi", str(DPI)], capsys)
    assert code == 0, err
    _png(fresh / "timescales.png", (8, 5))
    data = json.loads((fresh / "timescales.json").read_text())
    assert data["model"]["freshly_trained"] is True and data["summary"]["long_context_units"] == 6
    rows = list(csv.reader(open(fresh / "timescales.csv")))
    assert rows[0] == ["layer", "unit", "r", "timescale", "long_context"] and len(rows) == 9


def test_centroids_of_a_fresh_tomita_sr_gru(tmp_path, capsys):
    out = tmp_path / "cent"
    code, stdout, err = _run(["analyze", "centroids", "--train-steps", "5", "--hidden-size", "8", "--k", "4",
                              "--grammar", "1", "--out", str(out), "--dpi", str(DPI)], capsys)
    assert code == 0, err
    _png(out / "centroids.png", (13, 6))
    _png(out / "centroids_per_symbol.png", (13, 4.5))
    data = json.loads((out / "centroids.json").read_text())
    assert data["model"]["freshly_trained"] is True and data["k"] == 4
    assert sum(data["visits"]) == data["num_steps"]
    assert sum(map(sum, data["transitions"])) == data["num_steps"] - data["num_sequences"]
    assert (out / "centroids_prototypes.csv").exists() and (out / "centroids_transitions.csv").exists()


def test_centroids_of_an_sr_lstm_language_model(tmp_path, capsys, toy_models):
    out = tmp_path / "cent_lm"
    sentences = tmp_path / "s.txt"
    sentences.write_text("the big cat sat\n\na dog ran on the rug\n")
    code, _, err = _run(["analyze", "centroids", "--model", str(toy_models["sr-lstm"]), "--file", str(sentences),
                         "--text", "the bird", "--out", str(out), "--dpi", str(DPI)], capsys)
    assert code == 0, err
    _png(out / "centroids.png", (13, 6))
    data = json.loads((out / "centroids.json").read_text())
    assert data["num_sequences"] == 3 and data["num_steps"] == 3 + 5 + 7


def test_trajectories_of_an_lstm(tmp_path, capsys, toy_models):
    out = tmp_path / "traj"
    code, _, _ = _run(["analyze", "trajectories", "--model", str(toy_models["lstm"]), "--text", "the big cat sat on the mat",
                       "--out", str(out), "--dpi", str(DPI)], capsys)
    assert code == 0
    _png(out / "trajectories.png", (12, 5.5))
    _png(out / "trajectories_heatmap.png", (12, 7))
    data = json.loads((out / "trajectories.json").read_text())
    assert [s["name"] for s in data["sentences"][0]["states"]] == ["h", "c"]


def test_complete_reports_accuracy(tmp_path, capsys, toy_models):
    questions = tmp_path / "q.jsonl"
    questions.write_text("\n".join(json.dumps(q) for q in [
        {"sentence": "the ___ sat", "candidates": ["cat", "on", "mat"], "answer": "cat"},
        {"sentence": "a dog ___ on the rug", "candidates": ["ran", "the"], "answer": 0},
        {"sentence": "the big ___", "candidates": ["tree", "zebra"]},
    ]) + "\n")
    out = tmp_path / "comp"
    code, stdout, _ = _run(["analyze", "complete", "--model", str(toy_models["irlm"]), "--questions", str(questions),
                            "--units", "lcu", "--unnormalized", "--out", str(out), "--dpi", str(DPI)], capsys)
    assert code == 0
    assert "accuracy" in stdout and "2 answered" in stdout
    assert "note: 1 candidate(s) outside the model's vocabulary, scored as its unknown symbol: zebra" in stdout
    _png(out / "complete.png", (10, 6))
    data = json.loads((out / "complete.json").read_text())
    assert data["num_questions"] == 3 and data["num_answered"] == 2
    assert data["settings"] == {"units": "lcu", "unit_mode": "decoder", "normalize": False}
    assert data["questions"][2]["correct"] is None and data["questions"][2]["oov_candidates"] == ["zebra"]


# ------------------------------------------------------------------------------------------- errors
def test_unknown_tool_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "no-such-tool"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["influence", "--model", "{delta-rnn}", "--text", "the cat"], "influence needs a RAN"),
    (["timescales", "--model", "{ran}"], "timescales need an IRLM"),
    (["centroids", "--model", "{lstm}", "--text", "the cat"], "none has centroids"),
    (["centroids", "--model", "{sr-lstm}"], "give --text and/or --file"),
    (["state-delta", "--model", "{delta-rnn}", "--text", "  "], "empty text"),
    (["trajectories", "--model", "{delta-rnn}", "--text", ""], "empty text"),
    (["complete", "--model", "{delta-rnn}", "--questions", "{bad_json}"], "line 2: not valid JSON"),
    (["complete", "--model", "{delta-rnn}", "--questions", "{no_blank}"], "line 1: the sentence has no blank"),
    (["complete", "--model", "{delta-rnn}", "--questions", "{missing}"], "no such questions file"),
    (["complete", "--model", "{delta-rnn}", "--questions", "{good}", "--units", "lcu"], "long-context units"),
    (["state-delta", "--model", "{nowhere}", "--text", "the cat"], "no such model folder"),
    (["influence", "--text", "the cat", "--data-root", "{empty}", "--train-steps", "2"], "cannot load corpus"),
])
def test_errors_are_one_line_with_exit_code_2(argv, message, tmp_path, capsys, toy_models):
    (tmp_path / "bad.jsonl").write_text('{"sentence": "the ___ sat", "candidates": ["a", "b"]}\n{"sentence": \n')
    (tmp_path / "no_blank.jsonl").write_text('{"sentence": "the cat sat", "candidates": ["a", "b"]}\n')
    (tmp_path / "good.jsonl").write_text('{"sentence": "the ___ sat", "candidates": ["cat", "dog"]}\n')
    (tmp_path / "empty").mkdir()
    paths = {**{k: str(v) for k, v in toy_models.items()}, "bad_json": str(tmp_path / "bad.jsonl"),
             "no_blank": str(tmp_path / "no_blank.jsonl"), "missing": str(tmp_path / "missing.jsonl"),
             "good": str(tmp_path / "good.jsonl"), "nowhere": str(tmp_path / "nowhere"), "empty": str(tmp_path / "empty")}
    argv = [a.format(**paths) if a.startswith("{") else a for a in argv]
    code, _, err = _run(["analyze", *argv, "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert message in lines[-1] and lines[-1].startswith(f"dsf analyze {argv[0]}: error:")


def test_a_lightning_checkpoint_is_accepted_as_model(tmp_path, capsys, toy_corpus):
    """A LanguageModelModule-style checkpoint (state_dict under 'model.', hyper_parameters, the corpus in
    datamodule_hyper_parameters) is read safely and its vocabulary rebuilt from the corpus."""
    import torch

    from dsf_lightning.analysis.fresh import train_small_lm

    options = {"unk": "<unk>"}
    trained = train_small_lm("ran", corpus="text-folder", data_root=str(toy_corpus), corpus_options=options,
                             steps=2, hidden_size=8)
    ckpt = tmp_path / "ran.ckpt"
    torch.save({
        "state_dict": {f"model.{k}": v for k, v in trained.model.state_dict().items()},
        "hyper_parameters": trained.model.config.to_dict(),
        "datamodule_hyper_parameters": {"corpus": "text-folder", "data_root": str(toy_corpus), "corpus_options": options},
    }, ckpt)
    out = tmp_path / "inf_ckpt"
    code, _, err = _run(["analyze", "influence", "--model", str(ckpt), "--text", "the big cat sat", "--out", str(out),
                         "--dpi", str(DPI)], capsys)
    assert code == 0, err
    _png(out / "influence.png", (12, 4.5))
    assert json.loads((out / "influence.json").read_text())["model"]["freshly_trained"] is False
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    code, _, err = _run(["analyze", "influence", "--model", str(other), "--text", "the cat", "--out", str(out)], capsys)
    assert code == 2 and "not a Lightning checkpoint" in err
