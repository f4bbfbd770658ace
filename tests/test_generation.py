"""Text generation (``Scorer.generate``, ``dsf generate``) with the bundled ``delta-rnn-ptb`` and a tiny
character model built here.

The reference next-token distributions are computed in the test by re-reading the whole prefix
(``<eos>``, prompt, tokens generated so far) from the zero state at every step, in float64: nothing
of the generator's carried state, filtering or sampling code is reused.
"""

import copy
import json
import math
import types

import pytest
import torch

from dsf_lightning import from_pretrained
from dsf_lightning.cli import main
from dsf_lightning.data.tokenizers import get_tokenizer
from dsf_lightning.data.vocab import Vocabulary
from dsf_lightning.model import LMConfig, RecurrentLM
from dsf_lightning.scoring import Scorer
from dsf_lightning.scoring.generation import GenerationError, GenerationState

PROMPT = "the market"


@pytest.fixture(scope="module")
def scorer():
    return from_pretrained("delta-rnn-ptb")


@pytest.fixture(scope="module")
def model64(scorer):
    return copy.deepcopy(scorer.model).double().eval()


def reference_logprobs(scorer, model64, prefix_ids: list[int]) -> torch.Tensor:
    """log p(next | prefix) in float64, the prefix read from the zero state in one pass."""
    with torch.no_grad():
        y, _ = model64.features(torch.tensor([prefix_ids]))
        logits = model64.decode(y[0, -1])
    return torch.log_softmax(logits.double(), dim=-1)


def prompt_ids(scorer, prompt: str) -> list[int]:
    return [scorer.vocab.eos_id, *scorer.vocab.encode(prompt.split())]


def test_the_same_seed_gives_the_same_text_and_another_seed_other_text(scorer):
    a = scorer.generate(PROMPT, max_new_tokens=15, seed=7)
    b = scorer.generate(PROMPT, max_new_tokens=15, seed=7)
    c = scorer.generate(PROMPT, max_new_tokens=15, seed=8)
    assert a.text == b.text and a.ids == b.ids and len(a.ids) == 15
    assert c.ids != a.ids
    batch = scorer.generate(PROMPT, max_new_tokens=15, seed=7, num_samples=4)
    again = scorer.generate(PROMPT, max_new_tokens=15, seed=7, num_samples=4)
    assert [s.ids for s in batch] == [s.ids for s in again]
    assert len({tuple(s.ids) for s in batch}) > 1  # the samples of a batch differ


def test_temperature_zero_is_greedy_and_small_temperatures_tend_to_it(scorer, model64):
    greedy = scorer.generate(PROMPT, max_new_tokens=12, temperature=0)
    prefix = prompt_ids(scorer, PROMPT)
    for i in greedy.ids:  # the argmax of the model's own distribution at every step
        ref = reference_logprobs(scorer, model64, prefix)
        assert i == int(ref.argmax())
        prefix.append(i)
    cold = scorer.generate(PROMPT, max_new_tokens=12, temperature=1e-4, seed=3)
    assert cold.ids == greedy.ids
    # the reported logprobs are the model's own (temperature 1, no filtering)
    prefix = prompt_ids(scorer, PROMPT)
    for i, lp in zip(greedy.ids, greedy.logprobs):
        assert lp == pytest.approx(float(reference_logprobs(scorer, model64, prefix)[i]), abs=1e-4)
        prefix.append(i)


def test_an_empty_prompt_starts_a_sentence_after_eos(scorer, model64):
    out = scorer.generate("", max_new_tokens=3, temperature=0)
    assert out.ids[0] == int(reference_logprobs(scorer, model64, [scorer.vocab.eos_id]).argmax())
    assert not out.text.startswith(" ")


def _allowed_top_k(logp: torch.Tensor, k: int) -> set[int]:
    return set(torch.topk(logp, k).indices.tolist())


def _allowed_top_p(logp: torch.Tensor, p: float, temperature: float, k: int | None, tol: float = 1e-5) -> set[int]:
    """The smallest most-probable set with probability >= p of the distribution after temperature and top-k
    (tokens at the edge within ``tol`` count as allowed: float32 against float64)."""
    logits = logp / temperature
    if k is not None:
        kth = torch.topk(logits, k).values[-1]
        logits = torch.where(logits >= kth, logits, torch.tensor(-math.inf, dtype=logits.dtype))
    probs = torch.softmax(logits, -1)
    order = torch.argsort(probs, descending=True).tolist()
    allowed, mass = set(), 0.0
    for i in order:
        if mass >= p + tol:
            break
        allowed.add(i)
        mass += float(probs[i])
    return allowed


@pytest.mark.parametrize("options", [dict(top_k=5), dict(top_p=0.5), dict(top_k=20, top_p=0.7, temperature=0.8)],
                         ids=["top_k", "top_p", "top_k+top_p+temperature"])
def test_top_k_and_top_p_never_emit_a_token_outside_the_allowed_set(scorer, model64, options):
    samples = scorer.generate(PROMPT, max_new_tokens=6, seed=11, num_samples=5, **options)
    temperature, k, p = options.get("temperature", 1.0), options.get("top_k"), options.get("top_p")
    outside_plain_top1 = 0
    for s in samples:
        prefix = prompt_ids(scorer, PROMPT)
        for i in s.ids:
            logp = reference_logprobs(scorer, model64, prefix)
            if k is not None:
                assert i in _allowed_top_k(logp, k)
            if p is not None:
                assert i in _allowed_top_p(logp, p, temperature, k)
            outside_plain_top1 += i != int(logp.argmax())
            prefix.append(i)
    assert outside_plain_top1 > 0  # it samples: not just the greedy path


def test_n_calls_of_one_token_equal_one_call_of_n_tokens_with_the_state_carried(scorer):
    for options in (dict(seed=5, top_p=0.9), dict(seed=2, num_samples=3, temperature=1.3)):
        whole = scorer.generate(PROMPT, max_new_tokens=10, **options)
        first_options = dict(options)
        out, state = scorer.generate(PROMPT, max_new_tokens=1, return_state=True, **first_options)
        pieces = [out]
        step_options = {k: v for k, v in options.items() if k not in ("seed", "num_samples")}
        for _ in range(9):
            out, state = scorer.generate("", max_new_tokens=1, state=state, return_state=True, **step_options)
            pieces.append(out)
        assert isinstance(state, GenerationState)
        if isinstance(whole, list):
            for b, sample in enumerate(whole):
                assert [p[b].ids[0] for p in pieces] == sample.ids
                assert "".join(p[b].text for p in pieces) == sample.text
                assert [p[b].logprobs[0] for p in pieces] == pytest.approx(sample.logprobs, abs=1e-5)
        else:
            assert [p.ids[0] for p in pieces] == whole.ids
            assert "".join(p.text for p in pieces) == whole.text


def test_a_state_is_a_value_two_continuations_from_it_are_the_same(scorer):
    _, state = scorer.generate(PROMPT, max_new_tokens=3, seed=9, return_state=True)
    a = scorer.generate("", max_new_tokens=6, state=state)
    b = scorer.generate("", max_new_tokens=6, state=state)
    assert a.ids == b.ids
    assert scorer.generate("", max_new_tokens=6, state=state, seed=1).ids != a.ids  # a seed reseeds


def test_a_prompt_given_with_a_state_continues_the_text(scorer):
    whole = scorer.generate("the market rose", max_new_tokens=4, temperature=0)
    _, state = scorer.generate("the market", max_new_tokens=0, temperature=0, return_state=True)
    rest = scorer.generate("rose", max_new_tokens=4, temperature=0, state=state)
    assert rest.ids == whole.ids and rest.text == whole.text


def test_the_prompt_is_read_once_then_one_step_per_token(scorer, monkeypatch):
    calls = []
    features = scorer.model.features

    def spy(tokens, state=None):
        calls.append(tuple(tokens.shape))
        return features(tokens, state)

    monkeypatch.setattr(scorer.model, "features", spy)
    scorer.generate("the market rose sharply", max_new_tokens=6, seed=0, num_samples=2)
    # <eos> the market rose in one pass (batch 1), then 6 steps of the 2 samples reading one token each
    assert calls == [(1, 4)] + [(2, 1)] * 6


def test_ban_unk_never_emits_unk(scorer):
    unk = scorer.vocab.unk_id
    greedy = scorer.generate("", max_new_tokens=30, temperature=0)
    assert unk in greedy.ids  # this model's greedy path falls into <unk> <unk> ...
    banned = scorer.generate("", max_new_tokens=30, temperature=0, ban_unk=True)
    assert unk not in banned.ids and "<unk>" not in banned.text
    hot = scorer.generate(PROMPT, max_new_tokens=40, temperature=1.5, seed=0, num_samples=8, ban_unk=True)
    assert all(unk not in s.ids for s in hot)


def _char_scorer():
    torch.manual_seed(0)
    tok = get_tokenizer("char", mode="plain")
    chars = list("abc_")
    vocab = Vocabulary(["<eos>", *chars], eos="<eos>")
    model = RecurrentLM(LMConfig(vocab_size=len(vocab), cell="delta-rnn", hidden_sizes=[8], embedding_size=4))
    return Scorer(types.SimpleNamespace(model=model, vocab=vocab, tokenizer=tok, info={}))


def test_a_character_model_generates_characters():
    scorer = _char_scorer()
    out = scorer.generate("ab c", max_new_tokens=40, seed=0, temperature=1.5)
    assert set(out.tokens) <= {"a", "b", "c", "_", "<eos>"}
    assert out.text == "".join({"_": " ", "<eos>": "\n"}.get(t, t) for t in out.tokens)
    assert " " in out.text and len(out.text) == 40  # characters concatenated, "_" a space, one char per token
    # the prompt was read as characters, its spaces as "_": continuing it equals scoring's encoding
    greedy = scorer.generate("ab c", max_new_tokens=1, temperature=0)
    with torch.no_grad():
        logits, _ = scorer.model(torch.tensor([scorer.vocab.encode(["<eos>", "a", "b", "_", "c"])]))
    assert greedy.ids == [int(logits[0, -1].argmax())]


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(temperature=-0.5), "temperature must be a finite number >= 0"),
        (dict(temperature=float("nan")), "temperature must be a finite number >= 0"),
        (dict(top_p=0.0), r"top_p must be a number in \(0, 1\]"),
        (dict(top_p=1.5), r"top_p must be a number in \(0, 1\]"),
        (dict(top_k=0), "top_k must be an integer >= 1"),
        (dict(max_new_tokens=-1), "max_new_tokens must be an integer >= 0"),
        (dict(num_samples=0), "num_samples must be an integer >= 1"),
        (dict(seed="x"), "seed must be an integer or None"),
        (dict(state="x"), "state must be a GenerationState"),
    ],
)
def test_bad_arguments_are_clear_errors(scorer, options, message):
    with pytest.raises(GenerationError, match=message):
        scorer.generate(PROMPT, **options)


def test_dsf_generate_streams_the_same_text_as_the_api(scorer, capsys):
    expected = scorer.generate(PROMPT, max_new_tokens=8, seed=4, top_k=50)
    assert main(["generate", PROMPT, "--max-new-tokens", "8", "--seed", "4", "--top-k", "50"]) == 0
    assert capsys.readouterr().out == PROMPT + expected.text + "\n"

    samples = scorer.generate(PROMPT, max_new_tokens=5, seed=4, num_samples=2, ban_unk=True)
    assert main(["generate", PROMPT, "-n", "5", "--seed", "4", "--num-samples", "2", "--ban-unk", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["sample"] for r in rows] == [0, 1]
    assert [r["text"] for r in rows] == [s.text for s in samples]
    assert [r["tokens"] for r in rows] == [s.tokens for s in samples]

    assert main(["generate", PROMPT, "-n", "5", "--seed", "4", "--num-samples", "2", "--ban-unk"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("[0] " + PROMPT + samples[0].text) and ("[1] " + PROMPT + samples[1].text) in out


def test_dsf_generate_flushes_every_token(monkeypatch):
    import io
    import sys

    class Counting(io.StringIO):
        flushes = 0

        def flush(self):
            Counting.flushes += 1

    out = Counting()
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["generate", PROMPT, "--max-new-tokens", "7", "--seed", "1"]) == 0
    assert Counting.flushes >= 7


@pytest.mark.parametrize("argv,message", [
    (["--temperature", "-1"], "temperature must be a finite number >= 0"),
    (["--top-p", "2"], "top_p must be a number in (0, 1]"),
])
def test_dsf_generate_bad_arguments_exit_2_with_one_line(capsys, argv, message):
    assert main(["generate", PROMPT, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsf generate: error:") and message in err and err.count("\n") == 1


def test_detokenizer_joins_words_concatenates_characters_and_restores_subword_boundaries():
    from dsf_lightning.scoring.generation import Detokenizer

    word = Detokenizer(get_tokenizer("word"), "<eos>")
    assert word.text(["the", "market", "<eos>", "it", "rose"]) == "the market\nit rose"
    assert word.text(["rose"], line_start=False) == " rose"  # after a prompt that ends inside a line
    char = Detokenizer(get_tokenizer("char", mode="plain"), "<eos>")
    assert char.text(["t", "o", "_", "b", "e", "<eos>", "o"]) == "to be\no"
    marked = Detokenizer(get_tokenizer("subword", boundary="<w>"), "<eos>")
    assert marked.text(["ban", "kn", "ote", "<w>", "the", "<eos>", "str", "eet"]) == "banknote the\nstreet"
    unmarked = Detokenizer(get_tokenizer("subword"), "<eos>")  # no boundary symbol: pieces stay apart
    assert unmarked.text(["ban", "kn", "ote"]) == "ban kn ote"
