"""The bundled ``delta-rnn-ptb``: found offline, loads strictly, and reproduces its card."""

import json
import os
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

import dsf_lightning
from dsf_lightning.hub.registry import resolve

BUNDLED = Path(dsf_lightning.__file__).parent / "pretrained" / "delta-rnn-ptb"
ROOT = Path(__file__).resolve().parents[1]
DATA_ROOT = Path(os.environ.get("DSF_DATA_ROOT", ROOT.parent / "shared" / "data"))


def card_metrics():
    return json.loads((BUNDLED / "config.json").read_text())["info"]["metrics"]


def test_the_short_name_resolves_to_the_bundled_copy_without_network(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve("delta-rnn-ptb") == BUNDLED


def test_weights_are_half_precision_and_small():
    size = (BUNDLED / "model.safetensors").stat().st_size
    assert size < 12_000_000  # 5.66M parameters in float16
    assert json.loads((BUNDLED / "config.json").read_text())["weights"]["dtype"] == "float16"


def test_the_repository_card_is_the_bundled_card():
    assert (ROOT / "model_cards" / "delta-rnn-ptb.md").resolve() == (BUNDLED / "README.md").resolve()
    results = {r.metric_name: r.metric_value for r in ModelCard.load(BUNDLED / "README.md").data.eval_results}
    metrics = card_metrics()
    assert results["test perplexity"] == pytest.approx(metrics["test_ppl"])
    assert results["validation perplexity"] == pytest.approx(metrics["valid_ppl"])
    assert results["test perplexity, dynamic evaluation #2"] == pytest.approx(metrics["test_ppl_dynamic2"])
    assert metrics["test_ppl_dynamic2"] < metrics["test_ppl_dynamic1"] < metrics["test_ppl"]


def test_scores_a_sentence():
    scorer = dsf_lightning.from_pretrained("delta-rnn-ptb")
    plain = scorer.score("the company said its profit rose in the third quarter")
    shuffled = scorer.score("quarter third the in rose profit its said company the")
    assert plain.tokens[-1] == "<eos>" and len(plain.logprobs) == len(plain.tokens) == 11
    assert plain.ppl < shuffled.ppl / 5  # it has learned English word order


@pytest.mark.corpus
@pytest.mark.slow
def test_scoring_the_ptb_test_file_gives_the_cards_perplexity():
    test_file = DATA_ROOT / "ptb" / "ptb.test.txt"
    if not test_file.exists():
        pytest.skip(f"{test_file} not present")
    doc = dsf_lightning.from_pretrained("delta-rnn-ptb").score_document(test_file)
    assert doc.num_tokens == 82430
    assert doc.ppl == pytest.approx(card_metrics()["test_ppl"], abs=1e-3)
