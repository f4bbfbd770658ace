"""Model cards: model-index results that huggingface_hub reads back, the template, overrides."""

import re
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

from dsf_lightning.data.tokenizers import get_tokenizer
from dsf_lightning.hub import ModelCardError
from dsf_lightning.hub.card import FIELDS, PLACEHOLDER, TEMPLATE_PATH, render_template
from dsf_lightning.model.pretrained import save_pretrained

from .conftest import tiny_pretrained

REPO_TEMPLATE = Path(__file__).parents[2] / "model_cards" / "template.md"


def _results(card_path):
    return [
        {"metric": r.metric_type, "value": r.metric_value, "dataset": r.dataset_type, "split": r.dataset_split, "task": r.task_type}
        for r in ModelCard.load(card_path).data.eval_results
    ]


def test_the_packaged_template_is_the_repository_template():
    # model_cards/template.md is a symlink to the copy the package ships: one text, two doors
    assert REPO_TEMPLATE.resolve() == TEMPLATE_PATH.resolve()
    used = set(PLACEHOLDER.findall(REPO_TEMPLATE.read_text()))
    assert used <= set(FIELDS) and set(FIELDS) - used == {"repo_id"}  # repo_id goes into how_to_score


def test_eval_results_parse_back_from_the_card(tmp_path):
    given = [
        {"metric": "perplexity", "value": 93.1, "dataset": "ptb", "split": "test"},
        {"metric": "perplexity", "value": 97.25, "dataset": "ptb", "split": "valid", "dataset_name": "Penn Treebank"},
    ]
    folder = save_pretrained(tiny_pretrained(), tmp_path / "m", eval_results=given)
    assert _results(folder / "README.md") == [  # model-index names the dataset by its Hub id
        {"metric": "perplexity", "value": 93.1, "dataset": "ptb_text_only", "split": "test", "task": "text-generation"},
        {"metric": "perplexity", "value": 97.25, "dataset": "ptb_text_only", "split": "validation", "task": "text-generation"},
    ]
    card = ModelCard.load(folder / "README.md")
    assert card.data.eval_results[1].dataset_name == "Penn Treebank"
    assert card.data.library_name == "dsf-lightning" and "delta-rnn" in card.data.tags
    assert card.data.model_name == "m"
    text = card.text
    assert "| ptb | test | perplexity | 93.1 |" in text and "{{" not in text and "<!--" not in text
    assert "Ororbia" in text  # the Delta-RNN paper


def test_the_evaluation_table_tells_apart_two_results_of_one_split(tmp_path):
    given = [
        {"metric": "perplexity", "value": 93.5, "dataset": "ptb", "split": "test"},
        {"metric": "perplexity", "value": 89.4, "dataset": "ptb", "split": "test", "metric_name": "test perplexity, dynamic evaluation #2"},
        {"metric": "perplexity", "value": 100.3, "dataset": "ptb", "split": "valid", "metric_name": "valid perplexity"},
    ]
    text = ModelCard.load(save_pretrained(tiny_pretrained(), tmp_path / "m", eval_results=given) / "README.md").text
    assert "| ptb | test | perplexity | 93.5 |" in text
    assert "| ptb | test | perplexity, dynamic evaluation #2 | 89.4 |" in text
    assert "| ptb | validation | perplexity | 100.3 |" in text


def test_default_results_come_from_info_metrics_ppl_for_words_bpc_for_characters(tmp_path):
    words = save_pretrained(tiny_pretrained(), tmp_path / "words")
    chars = save_pretrained(tiny_pretrained(tokenizer="char"), tmp_path / "chars")
    assert {(r["metric"], r["split"], r["value"]) for r in _results(words / "README.md")} == {
        ("perplexity", "validation", 6.5), ("perplexity", "test", 6.25),
    }
    assert {(r["metric"], r["split"], r["value"]) for r in _results(chars / "README.md")} == {
        ("bpc", "validation", 1.5), ("bpc", "test", 1.45),
    }
    assert "bits per character" in (chars / "README.md").read_text()


def test_accuracy_results(tmp_path):
    folder = save_pretrained(tiny_pretrained(), tmp_path / "m", eval_results=[{"metric": "accuracy", "value": 0.9, "dataset": "imdb"}])
    assert _results(folder / "README.md") == [
        {"metric": "accuracy", "value": 0.9, "dataset": "imdb", "split": "test", "task": "text-classification"}
    ]


def test_card_extra_overrides_fields_and_metadata(tmp_path):
    folder = save_pretrained(
        tiny_pretrained(), tmp_path / "m",
        card_extra={"description": "Our **best** model.", "comparison": "- pytorch/examples LSTM: 99.1", "license": "apache-2.0",
                    "repo_id": "owner/m", "tags": ["ptb"]},
    )
    card = ModelCard.load(folder / "README.md")
    assert "Our **best** model." in card.text and "pytorch/examples LSTM: 99.1" in card.text
    assert 'from_pretrained("owner/m")' in card.text
    assert card.data.license == "apache-2.0" and "ptb" in card.data.tags


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"metric": "perplexity", "value": float("nan"), "dataset": "ptb"}, "finite"),
        ({"metric": "bleu", "value": 1.0, "dataset": "ptb"}, "unknown metric"),
        ({"metric": "perplexity", "value": 1.0}, "needs"),
        ({"metric": "perplexity", "value": 1.0, "dataset": "ptb", "colour": "red"}, "unknown key"),
    ],
)
def test_bad_eval_results_fail_before_anything_is_written(tmp_path, bad, match):
    with pytest.raises(ModelCardError, match=match):
        save_pretrained(tiny_pretrained(), tmp_path / "m", eval_results=[bad])
    assert not any(tmp_path.iterdir())


def test_unknown_card_extra_and_template_placeholders_are_errors(tmp_path):
    with pytest.raises(ModelCardError, match="unknown key.*'colour'"):
        save_pretrained(tiny_pretrained(), tmp_path / "m", card_extra={"colour": "red"})
    with pytest.raises(ModelCardError, match="placeholder.*'mystery'"):
        render_template("# {{ model_name }} {{ mystery }}", {"model_name": "x"})
    assert render_template("<!-- notes -->\n# {{model_name}}", {"model_name": "x"}) == "# x"


@pytest.mark.parametrize("metrics,says", [
    ({"test_ppl_dynamic1": 90.0, "dynamic_lr": 0.005, "dynamic_updates": "sentence"}, "after every sentence"),
    ({"test_ppl_dynamic1": 90.0, "dynamic_lr": 0.005, "dynamic_segment_length": 20}, "every 20 tokens"),
    ({"test_ppl_dynamic1": 90.0, "dynamic_lr": 0.005, "dynamic_updates": "segment", "dynamic_segment_length": 35},
     "every 35 tokens"),
])
def test_the_card_says_how_dynamic_evaluation_updated(tmp_path, metrics, says):
    """DSF sec 4.2 updates after each evaluated sentence; the library's default every 20 tokens: the card
    says which one its dynamic-evaluation numbers used (older folders recorded only the segment length)."""
    pretrained = tiny_pretrained()
    pretrained.info = {**pretrained.info, "corpus": "ptb", "metrics": metrics}
    text = (save_pretrained(pretrained, tmp_path / "m") / "README.md").read_text()
    line = next(l for l in text.splitlines() if l.startswith("Dynamic evaluation"))
    assert says in line and "0.005" in line


def test_no_dynamic_line_without_dynamic_numbers(tmp_path):
    text = (save_pretrained(tiny_pretrained(), tmp_path / "m") / "README.md").read_text()
    assert "Dynamic evaluation" not in text


# ------------------------------------------------------------------------------ Hub conventions (issue 15 item 4)
@pytest.mark.parametrize("corpus, hub_id", [("ptb", "ptb_text_only"), ("wikitext2", "wikitext"), ("imdb-subword", "imdb"),
                                            ("tinyshakespeare", "tiny_shakespeare")])
def test_card_metadata_language_dataset_hub_id_and_pipeline(tmp_path, corpus, hub_id):
    p = tiny_pretrained()
    p.info = {**p.info, "corpus": corpus}
    card = ModelCard.load(save_pretrained(p, tmp_path / "m") / "README.md")
    assert card.data.language == "en" and card.data.datasets == [hub_id]
    assert card.data.pipeline_tag == "text-generation"  # the model generates (Scorer.generate, dsf generate)
    assert {r.dataset_type for r in card.data.eval_results} == {hub_id}
    assert "Not meant to generate" not in card.text


def test_a_corpus_without_a_hub_dataset_names_none(tmp_path):
    card = ModelCard.load(save_pretrained(tiny_pretrained(), tmp_path / "m") / "README.md")  # corpus "toy"
    assert card.data.datasets is None and card.data.language is None


def _python_block(card_text: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", card_text, re.S)
    assert len(blocks) == 1, card_text
    return blocks[0]


@pytest.mark.parametrize("tokenizer", ["word", "char", "char-ptb"])
def test_the_how_to_use_snippet_runs_against_the_folder(tmp_path, monkeypatch, capsys, tokenizer):
    p = tiny_pretrained(tokenizer="char" if tokenizer.startswith("char") else "word")
    if tokenizer == "char-ptb":
        p.tokenizer = get_tokenizer("char", mode="ptb")
    folder = save_pretrained(p, tmp_path / "m")  # the snippet loads "m": run where that folder is
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    exec(compile(_python_block((folder / "README.md").read_text()), "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"RecurrentLM {sum(t.numel() for t in p.model.parameters())}"
    assert len(out) == 3


def test_the_bundled_card_snippet_runs(monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    text = (Path(__file__).parents[2] / "model_cards" / "delta-rnn-ptb.md").read_text()
    card = ModelCard(text)
    assert card.data.language == "en" and card.data.datasets == ["ptb_text_only"] and card.data.pipeline_tag == "text-generation"
    exec(compile(_python_block(text), "delta-rnn-ptb.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("['the', 'market', 'rose', 'sharply', '<eos>']") and out[-1].startswith("RecurrentLM ")


@pytest.mark.parametrize("cell", ["lstm", "elman", "irlm"])
def test_the_description_names_the_cell_without_a_wrong_article(tmp_path, cell):
    # "A lstm recurrent language model" read wrong for cells whose names start with a vowel sound
    lm = ModelCard.load(save_pretrained(tiny_pretrained(cell), tmp_path / "lm") / "README.md").text
    assert f"A recurrent language model with the `{cell}` cell (1 layer(s) of 8 units)" in lm
    assert f"A {cell} " not in lm


def test_the_classifier_description_names_the_cell_without_a_wrong_article(tmp_path):
    from dsf_lightning.tasks.pretrained import save_classifier

    from .conftest import tiny_classifier

    text = ModelCard.load(save_classifier(tiny_classifier("sr-lstm-p"), tmp_path / "clf") / "README.md").text
    assert "A text classifier with the `sr-lstm-p` cell (8 units, 3 centroids)" in text
    assert "A sr-lstm-p " not in text


@pytest.mark.parametrize("config, says", [
    ({}, "| dropout (training) | none |"),
    ({"cell_options": {"dropout": 0.5}}, "| dropout (training) | cell option dropout 0.5 |"),
    ({"dropout_output": 0.25, "cell_options": {"dropout": 0.5}}, "| dropout (training) | output 0.25, cell option dropout 0.5 |"),
])
def test_the_card_names_the_dropout_it_was_trained_with_also_the_cells_own(tmp_path, config, says):
    # the DSF Table 1 Delta-RNN-drop (dropout on the inner function, eq. 12, a cell option) read "none"
    lm = ModelCard.load(save_pretrained(tiny_pretrained("delta-rnn", **config), tmp_path / "lm") / "README.md").text
    assert says in lm
