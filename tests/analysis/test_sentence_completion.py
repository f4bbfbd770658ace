"""Sentence completion by LM score (MRSC protocol, IRLM paper sec. 5.3). The MSR Sentence Completion
data is not available offline: the questions here are handmade for a toy corpus."""

import json
from pathlib import Path

import pytest
import torch

from dsf_lightning.analysis import AnalysisError
from dsf_lightning.analysis.fresh import train_small_lm
from dsf_lightning.analysis.sentence_completion import (
    QuestionFormatError,
    complete_questions,
    fill_blank,
    load_questions,
    parse_question,
    score_sentences,
)
from dsf_lightning.scoring import Scorer

from .conftest import make_pretrained

QUESTIONS = [
    {"sentence": "the big cat ___ on the mat", "candidates": ["the", "on", "sat", "mat", "big"], "answer": "sat"},
    {"sentence": "the small dog sat on the ___", "candidates": ["sat", "rug", "the", "small", "on"], "answer": 1},
    {"sentence": "___ big cat sat on the mat", "candidates": ["cat", "on", "sat", "mat", "the"], "answer": "the"},
    {"sentence": "the ___ dog sat on the rug", "candidates": ["on", "sat", "small", "the", "rug"], "answer": "small"},
    {"sentence": "the big dog sat ___ the mat", "candidates": ["on", "sat", "dog", "mat", "big"]},
]


@pytest.fixture(scope="module")
def toy_lm(toy_corpus):
    """An IRLM with long-context units trained on the one-template toy corpus: the answers are known."""
    return train_small_lm(
        "irlm", corpus="text-folder", data_root=str(toy_corpus), corpus_options={"unk": "<unk>"}, steps=120,
        hidden_size=16, batch_size=8, bptt=12, lr=0.02, cell_options={"long_context_units": 8},
    )


def test_a_trained_model_picks_the_right_candidates(toy_lm):
    assert toy_lm.info["freshly_trained"] and toy_lm.info["fresh_training"]["steps"] == 120
    result = complete_questions(toy_lm, QUESTIONS)
    assert result.correct == [True, True, True, True, None]
    assert result.accuracy == 1.0 and result.num_answered == 4
    assert result.questions[4].candidates[result.choices[4]] == "on"
    for scores, choice in zip(result.scores, result.choices):
        assert scores[choice] == max(scores)


def test_sentence_scores_equal_the_scorer(toy_lm):
    sentences = ["the big cat sat on the mat", "the small dog", "mat the on"]
    ours = score_sentences(toy_lm, sentences)
    theirs = [s.logprob for s in Scorer(toy_lm).score(sentences)]
    assert ours == pytest.approx(theirs, rel=1e-5)


def test_unit_subsets(toy_lm):
    sentences = [fill_blank(QUESTIONS[0]["sentence"], c) for c in QUESTIONS[0]["candidates"]]
    full = score_sentences(toy_lm, sentences)
    assert score_sentences(toy_lm, sentences, units="0-15") == pytest.approx(full, rel=1e-6)
    lcu_decoder = score_sentences(toy_lm, sentences, units="lcu")
    lcu_state = score_sentences(toy_lm, sentences, units="lcu", unit_mode="state")
    assert lcu_decoder == pytest.approx(lcu_state, rel=1e-5)  # IRLM units do not interact
    assert lcu_decoder != pytest.approx(full, rel=1e-3)
    assert score_sentences(toy_lm, sentences, units=list(range(8))) == pytest.approx(lcu_decoder, rel=1e-6)
    # the paper's unnormalized LCU score: the sum of the target words' raw logits
    raw = score_sentences(toy_lm, sentences[:1], units="lcu", normalize=False)[0]
    model, vocab = toy_lm.model, toy_lm.vocab
    ids = torch.tensor([[vocab.eos_id, *vocab.encode(sentences[0].split() + ["<eos>"])]])
    with torch.no_grad():
        y, _ = model.features(ids[:, :-1])
        logits = model.decode(y * model.layers[-1].long_context_mask.float())
    assert raw == pytest.approx(float(logits[0].gather(-1, ids[0, 1:, None]).sum()), rel=1e-5)
    result = complete_questions(toy_lm, QUESTIONS, units="lcu", normalize=False)
    assert result.settings == {"units": "lcu", "unit_mode": "decoder", "normalize": False}


def test_lcu_needs_an_irlm_with_lcus():
    with pytest.raises(AnalysisError, match="long-context units"):
        score_sentences(make_pretrained("delta-rnn"), ["the cat"], units="lcu")
    with pytest.raises(AnalysisError, match="outside"):
        score_sentences(make_pretrained("delta-rnn"), ["the cat"], units="0-99")


def test_fill_blank():
    assert fill_blank("the ___ sat", "cat") == "the cat sat"
    assert fill_blank("the _____ sat", "big cat") == "the big cat sat"


@pytest.mark.parametrize("obj, message", [
    ({"sentence": "the cat sat", "candidates": ["a", "b"]}, "no blank"),
    ({"sentence": "the ___ sat ___", "candidates": ["a", "b"]}, "2 blanks"),
    ({"sentence": "the ___ sat", "candidates": ["a"]}, "at least two"),
    ({"sentence": "the ___ sat", "candidates": ["a", "a"]}, "repeat"),
    ({"sentence": "the ___ sat", "candidates": ["a", "b"], "answer": "c"}, "not one of the candidates"),
    ({"sentence": "the ___ sat", "candidates": ["a", "b"], "answer": 5}, "outside"),
    ({"sentence": "", "candidates": ["a", "b"]}, "non-empty"),
    ({"candidates": ["a", "b"]}, "sentence"),
    ({"sentence": "the ___ sat", "candidates": ["a", "b"], "color": 1}, "unknown field"),
    (["the ___ sat"], "JSON object"),
])
def test_malformed_questions(obj, message):
    with pytest.raises(QuestionFormatError, match=message):
        parse_question(obj, "q")


def test_questions_file_errors_name_the_line(tmp_path):
    path = tmp_path / "q.jsonl"
    good = json.dumps(QUESTIONS[0])
    path.write_text(good + "\n\n" + '{"sentence": "broken' + "\n")
    with pytest.raises(QuestionFormatError, match="line 3: not valid JSON"):
        load_questions(path)
    path.write_text(good + "\n" + json.dumps({"sentence": "no blank here", "candidates": ["a", "b"]}) + "\n")
    with pytest.raises(QuestionFormatError, match="line 2: the sentence has no blank"):
        load_questions(path)
    path.write_text("\n\n")
    with pytest.raises(QuestionFormatError, match="no question"):
        load_questions(path)
    with pytest.raises(QuestionFormatError, match="no such questions file"):
        load_questions(tmp_path / "missing.jsonl")
    path.write_text(good + "\n" + json.dumps(QUESTIONS[1]) + "\n")
    qs = load_questions(path)
    assert [q.line for q in qs] == [1, 2] and qs[0].answer == 2 and qs[1].answer == 1


def test_the_handmade_question_file_is_well_formed():
    """tests/analysis/data/handmade_questions.jsonl: 12 MRSC-style questions in PTB's vocabulary (handmade:
    the MSR data is not available offline), 5 candidates each, all answered."""
    qs = load_questions(Path(__file__).parent / "data" / "handmade_questions.jsonl")
    assert len(qs) == 12 and all(len(q.candidates) == 5 and q.answer is not None for q in qs)


def test_out_of_vocabulary_candidates_are_reported(toy_lm):
    result = complete_questions(toy_lm, [{"sentence": "the ___ sat", "candidates": ["cat", "zebra", "big dog"]}])
    assert result.oov_candidates == [["zebra"]]
