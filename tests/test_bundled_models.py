"""The bundled models: found offline, strict half-precision folders, cards that agree with their config, and
(corpus tier) each headline number re-measured from the stored weights on the official test split."""

import json
import lzma
import math
import os
from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard

import dsf_lightning
from dsf_lightning.hub.registry import PUBLISHED, resolve

ROOT = Path(__file__).resolve().parents[1]
DATA_ROOT = Path(os.environ.get("DSF_DATA_ROOT", ROOT.parent / "shared" / "data"))
PRETRAINED = Path(dsf_lightning.__file__).parent / "pretrained"
# what the package ships; a model listed here whose folder is missing fails the first test below
BUNDLED = ["delta-rnn-ptb", "delta-rnn-ptb-char", "lstm-ptb", "sr-lstm-p-imdb"]
WORD_MODELS = ["delta-rnn-ptb", "lstm-ptb"]  # the DSF model and its baseline: same parameters, recipe and budget


def config(name):
    return json.loads((PRETRAINED / name / "config.json").read_text())


def card_results(name):
    card = ModelCard.load(PRETRAINED / name / "README.md")
    return {(r.metric_name, r.dataset_split): r.metric_value for r in card.data.eval_results}


def corpus_file(*parts):
    path = DATA_ROOT.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


def test_every_bundled_folder_is_listed_and_every_listed_one_is_there():
    shipped = sorted(p.name for p in PRETRAINED.iterdir() if (p / "config.json").is_file())
    assert shipped == sorted(BUNDLED)
    assert sorted(n for n, m in PUBLISHED.items() if m.is_bundled) == sorted(BUNDLED)


@pytest.mark.parametrize("name", BUNDLED)
def test_the_short_name_resolves_to_the_bundled_copy_without_network(name, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve(name) == PRETRAINED / name


@pytest.mark.parametrize("name", BUNDLED)
def test_weights_are_half_precision_and_small(name):
    from safetensors import safe_open

    with safe_open(PRETRAINED / name / "model.safetensors", "pt") as f:
        count = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
    assert dtypes == {"F16"} and config(name)["weights"]["dtype"] == "float16"
    assert (PRETRAINED / name / "model.safetensors").stat().st_size < 2 * count + 64_000  # 2 bytes a weight + header


@pytest.mark.parametrize("name", BUNDLED)
def test_the_repository_card_is_the_bundled_card_and_reports_the_configs_metrics(name):
    assert (ROOT / "model_cards" / f"{name}.md").resolve() == (PRETRAINED / name / "README.md").resolve()
    metrics, results = config(name)["info"]["metrics"], card_results(name)
    headline = {"delta-rnn-ptb": ("test perplexity", "test_ppl"), "lstm-ptb": ("test perplexity", "test_ppl"),
                "delta-rnn-ptb-char": ("test bits per character", "test_bpc"),
                "sr-lstm-p-imdb": ("test accuracy", "test_accuracy")}[name]
    assert results[(headline[0], "test")] == pytest.approx(metrics[headline[1]])
    text = (PRETRAINED / name / "README.md").read_text()
    assert "hardware" in text and "training time" in text  # the card says on what and in how long


@pytest.mark.parametrize("name", WORD_MODELS)
def test_the_word_models_card_has_dynamic_evaluation(name):
    results, metrics = card_results(name), config(name)["info"]["metrics"]
    assert results[("test perplexity, dynamic evaluation #2", "test")] == pytest.approx(metrics["test_ppl_dynamic2"])
    assert metrics["test_ppl_dynamic2"] < metrics["test_ppl_dynamic1"] < metrics["test_ppl"]


@pytest.mark.parametrize("name", WORD_MODELS)
def test_the_word_model_scores_a_sentence(name):
    scorer = dsf_lightning.from_pretrained(name)
    plain = scorer.score("the company said its profit rose in the third quarter")
    shuffled = scorer.score("quarter third the in rose profit its said company the")
    assert plain.tokens[-1] == "<eos>" and len(plain.logprobs) == len(plain.tokens) == 11
    assert plain.ppl < shuffled.ppl / 5  # it has learned English word order


def test_the_character_model_knows_english_spelling():
    scorer = dsf_lightning.from_pretrained("delta-rnn-ptb-char")
    plain = scorer.score("the company said its profit rose in the third quarter")
    scrambled = scorer.score("teh cmopnay siad its prfoit rsoe in teh thrid qaurter")
    assert plain.bpc < 2.5 < scrambled.bpc  # uniform over its 50 symbols would be 5.6 bits


def test_the_classifier_reads_sentiment():
    classifier = dsf_lightning.from_pretrained("sr-lstm-p-imdb")
    good, bad = classifier.classify(["A wonderful film. The acting is superb and I loved every minute of it.",
                                     "A boring, stupid mess. The worst film I have seen in years; a waste of time."])
    assert (good.label, bad.label) == ("positive", "negative")
    assert good.probability > 0.8 and bad.probability > 0.8


@pytest.mark.corpus
@pytest.mark.slow
@pytest.mark.parametrize("name", WORD_MODELS)
def test_scoring_the_ptb_test_file_gives_the_cards_perplexity(name):
    doc = dsf_lightning.from_pretrained(name).score_document(corpus_file("ptb", "ptb.test.txt"))
    assert doc.num_tokens == 82430
    assert doc.ppl == pytest.approx(config(name)["info"]["metrics"]["test_ppl"], abs=1e-3)


def test_the_baseline_had_the_delta_rnns_parameters_recipe_and_budget():
    """lstm-ptb is delta-rnn-ptb's baseline (issue 16): parameter counts within 0.01%, the same training
    options but the cell's, and the same recipe budget; its card puts the two test perplexities side by side."""
    delta, lstm = config("delta-rnn-ptb"), config("lstm-ptb")
    counts = {name: sum(p.numel() for p in dsf_lightning.from_pretrained(name).model.parameters()) for name in WORD_MODELS}
    assert abs(counts["lstm-ptb"] - counts["delta-rnn-ptb"]) / counts["delta-rnn-ptb"] < 1e-4
    assert (delta["model"]["cell"], lstm["model"]["cell"]) == ("delta-rnn", "lstm")
    assert delta["info"]["training"] == lstm["info"]["training"]
    for key in ("dropout_input", "dropout_output", "tie_weights"):
        assert delta["model"][key] == lstm["model"][key]
    budgets = [yaml.safe_load((ROOT / config(n)["info"]["recipe"].split()[0]).read_text())["trainer"]["max_time"] for n in WORD_MODELS]
    assert budgets[0] == budgets[1]
    card = (PRETRAINED / "lstm-ptb" / "README.md").read_text()
    assert f"{delta['info']['metrics']['test_ppl']:.2f}" in card


@pytest.mark.corpus
@pytest.mark.slow
def test_scoring_the_ptb_char_test_file_gives_the_cards_bits_per_character():
    metrics = config("delta-rnn-ptb-char")["info"]["metrics"]
    doc = dsf_lightning.from_pretrained("delta-rnn-ptb-char").score_document(corpus_file("ptb_char", "ptb.char.test.txt"))
    assert doc.num_tokens == metrics["test_tokens"]
    assert doc.bpc == pytest.approx(metrics["test_bpc"], abs=1e-4)


@pytest.mark.corpus
@pytest.mark.slow
def test_classifying_the_imdb_test_reviews_gives_the_cards_accuracy():
    """All 25,000 test reviews, raw text through ``classify`` (the user's path, not the DataModule's)."""
    with lzma.open(corpus_file("imdb", "test.jsonl.xz"), "rt", encoding="utf-8") as f:
        reviews = [json.loads(line) for line in f]
    assert len(reviews) == 25_000
    classifier = dsf_lightning.from_pretrained("sr-lstm-p-imdb", batch_size=64)
    labels = classifier.labels
    predicted = classifier.classify([r["text"] for r in reviews])
    accuracy = sum(p.label == labels[r["label"]] for p, r in zip(predicted, reviews)) / len(reviews)
    assert accuracy == pytest.approx(config("sr-lstm-p-imdb")["info"]["metrics"]["test_accuracy"], abs=1e-9)
