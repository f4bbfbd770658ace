"""Sentence completion by language-model score: the MRSC protocol of the IRLM paper (Pachitariu & Sahani 2013,
"Regularization and nonlinearities for neural language models: when are they needed?", sec. 5.3).

Each question is a sentence with one blank (``___``, three or more underscores) and candidate words
(five in the Microsoft Research Sentence Completion Challenge). Every candidate is filled in, the
whole sentence is scored by the language model (from the ``<eos>`` context, every token and the
final ``<eos>`` predicted from its history, as :mod:`dsf_lightning.scoring` does) and the candidate
with the highest log-probability is chosen.

The long-context-units experiment (sec. 5.3): score with only some units of the top layer, zeroing
the others, e.g. an IRLM's long-context units (``units="lcu"``). ``unit_mode="decoder"`` zeroes them
in what the decoder reads; ``"state"`` also zeroes them in the recurrent state at every step (for an
IRLM, whose units do not interact, the two agree). The paper did not normalize the LCU-only
predictions ("potentially highly disruptive for the normalization constant"): ``normalize=False``
scores a sentence by the sum of the target words' raw logits instead of their log-softmax.

Questions come from JSON Lines, one object per line::

    {"sentence": "the company said its ___ rose sharply", "candidates": ["profit", "tree", ...],
     "answer": "profit"}

``answer`` is optional (a candidate, or its 0-based index); with answers the accuracy is reported.
The MSR Sentence Completion data itself is not distributed with this library (nor available
offline here): the tests use small generated / handmade question sets.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ._common import AnalysisError, encode_text, evaluating, layer_inputs, parse_units

__all__ = [
    "BLANK",
    "CompletionResult",
    "Question",
    "QuestionFormatError",
    "complete_questions",
    "fill_blank",
    "load_questions",
    "parse_question",
    "score_sentences",
    "unit_mask",
]

BLANK = re.compile(r"_{3,}")
UNIT_MODES = ("decoder", "state")


class QuestionFormatError(AnalysisError):
    """A question (or the questions file) is malformed; the message names the line."""


@dataclass
class Question:
    sentence: str
    candidates: list[str]
    answer: int | None = None  # index into candidates
    id: Any = None
    line: int | None = None

    def filled(self) -> list[str]:
        return [fill_blank(self.sentence, c) for c in self.candidates]


def fill_blank(sentence: str, word: str) -> str:
    """``sentence`` with its one blank replaced by ``word``."""
    return BLANK.sub(lambda _: word, sentence, count=1)


def parse_question(obj: Any, where: str = "question") -> Question:
    """A :class:`Question` from a decoded JSON object; :class:`QuestionFormatError` naming ``where``."""
    if not isinstance(obj, dict):
        raise QuestionFormatError(f"{where}: expected a JSON object with 'sentence' and 'candidates', got {type(obj).__name__}")
    unknown = sorted(set(obj) - {"sentence", "candidates", "answer", "id"})
    if unknown:
        raise QuestionFormatError(f"{where}: unknown field(s) {unknown}; known: sentence, candidates, answer, id")
    sentence = obj.get("sentence")
    if not isinstance(sentence, str) or not sentence.strip():
        raise QuestionFormatError(f"{where}: 'sentence' must be a non-empty string")
    blanks = len(BLANK.findall(sentence))
    if blanks == 0:
        raise QuestionFormatError(f"{where}: the sentence has no blank: mark the missing word with ___ ({sentence!r:.80})")
    if blanks > 1:
        raise QuestionFormatError(f"{where}: the sentence has {blanks} blanks; exactly one ___ is allowed")
    if "\n" in sentence:
        raise QuestionFormatError(f"{where}: the sentence must be one line")
    candidates = obj.get("candidates")
    if not isinstance(candidates, list) or len(candidates) < 2:
        raise QuestionFormatError(f"{where}: 'candidates' must be a list of at least two words")
    for c in candidates:
        if not isinstance(c, str) or not c.strip() or "\n" in c:
            raise QuestionFormatError(f"{where}: every candidate must be a non-empty one-line string, got {c!r:.40}")
    candidates = [c.strip() for c in candidates]
    if len(set(candidates)) != len(candidates):
        raise QuestionFormatError(f"{where}: the candidates repeat a word: {candidates}")
    answer = obj.get("answer")
    if answer is not None:
        if isinstance(answer, bool):
            raise QuestionFormatError(f"{where}: 'answer' must be a candidate word or its index, got {answer!r}")
        if isinstance(answer, int):
            if not 0 <= answer < len(candidates):
                raise QuestionFormatError(f"{where}: answer index {answer} is outside 0..{len(candidates) - 1}")
        elif isinstance(answer, str):
            if answer.strip() not in candidates:
                raise QuestionFormatError(f"{where}: the answer {answer!r} is not one of the candidates {candidates}")
            answer = candidates.index(answer.strip())
        else:
            raise QuestionFormatError(f"{where}: 'answer' must be a candidate word or its index, got {answer!r:.40}")
    return Question(sentence=sentence.strip(), candidates=candidates, answer=answer, id=obj.get("id"))


def load_questions(path: str | os.PathLike) -> list[Question]:
    """Questions from a JSON Lines file (blank lines are skipped); errors name the line number."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise QuestionFormatError(f"no such questions file: {path}") from None
    except IsADirectoryError:
        raise QuestionFormatError(f"{path} is a directory, not a questions file") from None
    except UnicodeDecodeError as err:
        raise QuestionFormatError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise QuestionFormatError(f"cannot read {path}: {err.strerror or err}") from None
    questions = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise QuestionFormatError(f"{path} line {lineno}: not valid JSON ({err.msg} at column {err.colno})") from None
        q = parse_question(obj, f"{path} line {lineno}")
        q.line = lineno
        questions.append(q)
    if not questions:
        raise QuestionFormatError(f"{path}: no question in the file (expected one JSON object per line)")
    return questions


# ------------------------------------------------------------------------------------------- scoring
def unit_mask(model: Any, units: str | Sequence[int] | None) -> Tensor | None:
    """A float mask over the top layer's outputs: 1 for the chosen units, 0 for the rest.

    ``units``: None (every unit), ``"lcu"`` (an IRLM's long-context units, sec. 5.3), ``"short"``
    (the other IRLM units), or indices / ranges like ``"0-383"`` or ``[0, 5, 7]``."""
    if units is None:
        return None
    top = model.layers[-1]
    size = top.output_size
    if isinstance(units, str) and units.strip().lower() in ("lcu", "lcus", "long-context", "short", "short-context"):
        if getattr(top, "cell_name", "") != "irlm" or not getattr(top, "long_context_units", 0):
            raise AnalysisError(
                f"units={units!r} needs an IRLM top layer with long-context units (cell 'irlm', option "
                f"long_context_units > 0); this model's top layer is {getattr(top, 'cell_name', type(top).__name__)!r}"
                + (" without long-context units" if getattr(top, "cell_name", "") == "irlm" else "")
            )
        mask = top.long_context_mask
        if units.strip().lower().startswith("short"):
            mask = ~mask
        return mask.to(next(model.parameters()).dtype)
    chosen = parse_units(units, size)
    mask = torch.zeros(size, dtype=next(model.parameters()).dtype)
    mask[chosen] = 1.0
    return mask


@torch.no_grad()
def _top_features(model: Any, inputs: Tensor, mask: Tensor | None, unit_mode: str) -> Tensor:
    if mask is None:
        y, _ = model.features(inputs)
        return y
    if unit_mode == "decoder":
        y, _ = model.features(inputs)
        return y * mask
    top = model.layers[-1]
    x = layer_inputs(model, inputs, -1)
    state = top.init_state(inputs.shape[0], inputs.device, x.dtype)
    outs = []
    size = mask.shape[0]
    for projected_t in top.project_inputs(x).unbind(1):
        state = tuple(s * mask if s.shape[-1] == size else s for s in state)
        out, state = top.recur(projected_t, state)
        outs.append(out * mask)
    return torch.stack(outs, 1)


@torch.no_grad()
def score_sentences(
    pretrained: Any,
    sentences: Sequence[str],
    *,
    units: str | Sequence[int] | None = None,
    unit_mode: str = "decoder",
    normalize: bool = True,
    batch_size: int = 32,
) -> list[float]:
    """The score of every sentence: the sum over its tokens (and final ``<eos>``) of the natural-log
    probability given the history from ``<eos>`` (``normalize=False``: the raw target logits)."""
    if unit_mode not in UNIT_MODES:
        raise AnalysisError(f"unit_mode must be one of {UNIT_MODES}, got {unit_mode!r}")
    model = pretrained.model
    if pretrained.vocab.eos_id is None:
        raise AnalysisError("sentence completion needs a model whose vocabulary has an end-of-sentence symbol")
    with evaluating(model):
        mask = unit_mask(model, units)
        if mask is not None and unit_mode == "state":
            top = model.layers[-1]
            if not any(n == mask.shape[0] for n in top.state_sizes):
                raise AnalysisError(
                    f"unit_mode='state' needs a state tensor of the top layer's output size {mask.shape[0]}; "
                    f"its state sizes are {top.state_sizes}"
                )
        seqs = [encode_text(pretrained, s, with_eos=True).ids for s in sentences]
        scores: list[float] = [0.0] * len(seqs)
        pad = pretrained.vocab.eos_id
        order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
        for lo in range(0, len(order), batch_size):
            chunk = order[lo : lo + batch_size]
            L = max(len(seqs[i]) for i in chunk)
            ids = torch.full((len(chunk), L), pad, dtype=torch.long)
            for row, i in enumerate(chunk):
                ids[row, : len(seqs[i])] = torch.tensor(seqs[i])
            inputs, targets = ids[:, :-1], ids[:, 1:]
            live = torch.arange(L - 1)[None, :] < torch.tensor([len(seqs[i]) - 1 for i in chunk])[:, None]
            logits = model.decode(_top_features(model, inputs, mask, unit_mode)).double()  # [B, L-1, V]
            if normalize:
                logits = F.log_softmax(logits, dim=-1)
            picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) * live
            for row, i in enumerate(chunk):
                scores[i] = float(picked[row].sum())
    return scores


@dataclass
class CompletionResult:
    """Per question: every candidate's score, the chosen candidate and (with an answer) whether it is
    right; ``accuracy`` over the questions that have an answer (None when none has)."""

    questions: list[Question]
    scores: list[list[float]]
    choices: list[int]
    settings: dict = field(default_factory=dict)
    #: per question, the candidates with a word outside the model's vocabulary (scored as the unknown
    #: symbol, which is frequent in corpora like PTB: such a candidate can win for the wrong reason)
    oov_candidates: list[list[str]] = field(default_factory=list)

    @property
    def correct(self) -> list[bool | None]:
        return [None if q.answer is None else q.answer == c for q, c in zip(self.questions, self.choices)]

    @property
    def num_answered(self) -> int:
        return sum(1 for q in self.questions if q.answer is not None)

    @property
    def accuracy(self) -> float | None:
        marks = [c for c in self.correct if c is not None]
        return sum(marks) / len(marks) if marks else None

    def to_dict(self) -> dict[str, Any]:
        rows = []
        oov = self.oov_candidates or [[] for _ in self.questions]
        for q, s, c, ok, bad in zip(self.questions, self.scores, self.choices, self.correct, oov):
            rows.append({
                "id": q.id, "line": q.line, "sentence": q.sentence, "candidates": q.candidates, "scores": s,
                "choice": q.candidates[c], "answer": None if q.answer is None else q.candidates[q.answer], "correct": ok,
                "oov_candidates": bad,
            })
        return {"settings": self.settings, "num_questions": len(self.questions), "num_answered": self.num_answered,
                "accuracy": self.accuracy, "questions": rows}

    def to_csv_rows(self) -> list[list]:
        rows = [["question", "line", "sentence", "choice", "answer", "correct", "best_score", "scores"]]
        for n, (q, s, c, ok) in enumerate(zip(self.questions, self.scores, self.choices, self.correct)):
            rows.append([
                n, q.line or "", q.sentence, q.candidates[c], "" if q.answer is None else q.candidates[q.answer],
                "" if ok is None else int(ok), s[c], " ".join(f"{v:.4f}" for v in s),
            ])
        return rows


def complete_questions(
    pretrained: Any,
    questions: Sequence[Question | dict],
    *,
    units: str | Sequence[int] | None = None,
    unit_mode: str = "decoder",
    normalize: bool = True,
    batch_size: int = 32,
) -> CompletionResult:
    """Answer every question by the highest-scoring filled-in sentence (ties: the first candidate)."""
    qs = [q if isinstance(q, Question) else parse_question(q, f"question {n}") for n, q in enumerate(questions)]
    if not qs:
        raise AnalysisError("no question to answer")
    flat = [s for q in qs for s in q.filled()]
    try:
        flat_scores = score_sentences(
            pretrained, flat, units=units, unit_mode=unit_mode, normalize=normalize, batch_size=batch_size
        )
    except AnalysisError as err:
        raise AnalysisError(f"cannot score the filled-in sentences: {err}") from None
    scores, choices, pos = [], [], 0
    for q in qs:
        s = flat_scores[pos : pos + len(q.candidates)]
        pos += len(q.candidates)
        scores.append(s)
        choices.append(max(range(len(s)), key=lambda i: (s[i], -i)))
    settings = {"units": units if units is None or isinstance(units, str) else list(units),
                "unit_mode": unit_mode, "normalize": normalize}
    return CompletionResult(
        questions=qs, scores=scores, choices=choices, settings=settings,
        oov_candidates=[_oov_candidates(pretrained, q) for q in qs],
    )


def _oov_candidates(pretrained: Any, q: Question) -> list[str]:
    vocab, tokenizer = pretrained.vocab, pretrained.tokenizer
    eos = getattr(tokenizer, "eos", None)
    return [c for c in q.candidates if any(t != eos and t not in vocab for t in tokenizer.tokenize_line(c))]
