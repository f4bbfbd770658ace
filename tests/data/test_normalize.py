"""Text normalization (``dsf_lightning.data.normalize``): raw text -> the form of a corpus's preprocessing.

The expected outputs are written by hand from the conventions observed in Mikolov's PTB files
(../shared/data/ptb): lowercase; punctuation tokens dropped; numbers (``3.5``, ``1,000``, ``1\\/2``) and
``%`` each become ``N``; ``$`` and ``#`` (pounds) are tokens of their own; possessive ``'s`` and the clitics
``n't 're 've 'm 'll 'd`` split off (``ca n't``, ``wo n't``); a plural possessive's apostrophe is the token
``'``; hyphenated words stay whole (``long-term``, ``30-year``); abbreviations keep their period (``mr.``,
``u.s.``, ``inc.``); a slash is written ``\\/``; one sentence per line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import dsf_lightning
from dsf_lightning.data.corpora import normalizer_for_corpus
from dsf_lightning.data.normalize import (
    NormalizerError,
    get_normalizer,
    list_normalizers,
)

ROOT = Path(__file__).resolve().parents[2]
DATA_ROOT = Path(os.environ.get("DSF_DATA_ROOT") or ROOT.parent / "shared" / "data")
BUNDLED_VOCAB = Path(dsf_lightning.__file__).parent / "pretrained" / "delta-rnn-ptb" / "vocab.json"

ptb = get_normalizer("ptb")


def sentences(text: str) -> list[str]:
    return ptb.normalize_line(text)


# ------------------------------------------------------------------------------ the rules, one by one
@pytest.mark.parametrize(
    "raw, expected",
    [
        # case: everything lowercase, but the number symbol N and specials such as <unk> stay as they are
        ("The Market ROSE", ["the market rose"]),
        ("<unk> N stays", ["<unk> N stays"]),
        # punctuation attached to words, and punctuation tokens, are dropped
        ("Hello, World; yes: no", ["hello world yes no"]),
        ('"Quoted" (parenthetical) [bracketed] {braced}', ["quoted parenthetical bracketed braced"]),
        ("`` PTB quotes '' and -- dashes - and ... dots", ["ptb quotes and dashes and dots"]),
        # numbers become N; a percent sign is a token of its own, also N; $ and # are kept, split off
        ("It's 3.5% higher", ["it 's N N higher"]),
        ("1,000 or 12,345.67 or .5 or 7 or 3:30", ["N or N or N or N or N"]),
        ("$3.5 billion and US$ 2 and C$5", ["$ N billion and us$ N and c$ N"]),
        ("£5 million", ["# N million"]),
        ("1/2 and 7 1/2 and 1\\/2", ["N and N N and N"]),
        ("-5 and +3", ["N and N"]),
        ("the 1980s and the 13th and the '80s", ["the 1980s and the 13th and the '80s"]),
        # contractions and possessives split off PTB-style
        ("don't can't won't isn't", ["do n't ca n't wo n't is n't"]),
        ("They're here, we've gone, I'm sure, you'll see, he'd go", ["they 're here we 've gone i 'm sure you 'll see he 'd go"]),
        ("the company's shares and the investors' money", ["the company 's shares and the investors ' money"]),
        ("cannot", ["can not"]),
        ("O'Brien and D'Arcy", ["o'brien and d'arcy"]),
        # hyphenated words stay whole; a standalone or doubled hyphen is punctuation
        ("a long-term, 30-year plan--mostly - done", ["a long-term 30-year plan mostly done"]),
        ("1989-90", ["N"]),
        # abbreviations keep their period and do not end the sentence
        ("Mr. Smith of Apple Inc. visited the U.S. on Oct. 5", ["mr. smith of apple inc. visited the u.s. on oct. N"]),
        ("John D. Rockefeller", ["john d. rockefeller"]),
        ("No. 5 was it", ["no. N was it"]),
        # sentence ends split the line (one sentence per line, as in the corpus)
        ("He left. She stayed! Why? Because.", ["he left", "she stayed", "why", "because"]),
        ('He said "stop." Then he left.', ["he said stop", "then he left"]),
        ("I said no. Then I left", ["i said no", "then i left"]),
        # slashes are escaped as in the treebank; asterisks of raw text are punctuation
        ("and/or", ["and\\/or"]),
        ("* * *", []),
        # typographic characters: curly quotes and apostrophes, dashes, accents
        ("\u201cCurly\u201d isn\u2019t it\u2019s \u2014 na\u00efve caf\u00e9", ["curly is n't it 's naive cafe"]),
        # nothing left
        ("", []),
        ("  ...  !!! ", []),
    ],
)
def test_ptb_rules(raw, expected):
    assert sentences(raw) == expected


def test_normalize_joins_sentences_with_newlines_and_drops_empty_lines():
    assert ptb.normalize("First one. Second!\n\n--\nThird") == "first one\nsecond\nthird"


def test_the_registry():
    assert {"none", "ptb", "ptb-char"} <= set(list_normalizers())
    assert get_normalizer("none") is None and get_normalizer(None) is None
    assert get_normalizer(ptb) is ptb
    with pytest.raises(NormalizerError, match=r"unknown normalizer 'bogus'.*none.*ptb"):
        get_normalizer("bogus")
    assert normalizer_for_corpus("ptb") == "ptb" and normalizer_for_corpus("ptb-subword") == "ptb"
    assert normalizer_for_corpus("ptb-char") == "ptb-char"
    assert normalizer_for_corpus("text-folder") is None and normalizer_for_corpus("wikitext-2") is None


def test_ptb_char_spells_the_ptb_form():
    char = get_normalizer("ptb-char")
    assert char.normalize_line("Hello, World! It's 5%.") == ["h e l l o _ w o r l d", "i t _ ' s _ N _ N"]
    # characters outside PTB-char's closed inventory are dropped (accents are folded first)
    assert char.normalize_line("na\u00efve @home") == ["n a i v e _ h o m e"]


# ------------------------------------------------------------------------------ idempotence on PTB text
def test_every_ptb_vocabulary_symbol_is_a_fixed_point():
    """Every word of the bundled PTB model's vocabulary, alone on a line or inside a PTB-style line,
    normalizes to itself (so normalizing text that is already PTB changes nothing)."""
    symbols = [s for s in json.loads(BUNDLED_VOCAB.read_text())["symbols"] if s != "<eos>"]
    assert len(symbols) == 9999
    moved = [s for s in symbols if sentences(s) != [s]]
    assert moved == []
    inside = [s for s in symbols if sentences(f"the {s} of N") != [f"the {s} of N"]]
    assert inside == []


@pytest.mark.corpus
@pytest.mark.parametrize("split", [pytest.param("train", marks=pytest.mark.slow), "valid", "test"])
def test_normalizing_ptb_changes_nothing(split):
    path = DATA_ROOT / "ptb" / f"ptb.{split}.txt"
    if not path.exists():
        pytest.skip(f"{path} not present")
    changed = [line for line in path.read_text().splitlines() if sentences(line) != [" ".join(line.split())]]
    assert changed == []


@pytest.mark.corpus
def test_normalizing_ptb_char_changes_nothing():
    path = DATA_ROOT / "ptb_char" / "ptb.char.test.txt"
    if not path.exists():
        pytest.skip(f"{path} not present")
    char = get_normalizer("ptb-char")
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    assert [line for line in lines if char.normalize_line(line) != [" ".join(line.split())]] == []


def test_a_cached_token_does_not_carry_the_token_after_it_into_another_context():
    """Words are cached token by token; "no." depends on the word after it, so the same raw token must give
    both readings in one process, in either order, and equal the uncached rules."""
    from dsf_lightning.data import normalize as module

    lines = ["I said no. Then I left", "No. 5 was it", "I said no. Then I left", "the mass. general hospital",
             "Go to Mass. Then eat", "No. 5 was it"]
    expected = [["i said no", "then i left"], ["no. N was it"], ["i said no", "then i left"],
                ["the mass. general hospital"], ["go to mass", "then eat"], ["no. N was it"]]
    module._token_words.cache_clear()
    assert [sentences(line) for line in lines] == expected
    assert module._token_words.cache_info().hits > 0  # the cache served some of them
    uncached = module._token_words.__wrapped__
    for token, following in [("no.", "Then"), ("no.", "5"), ("Mass.", "Then"), ("don't", None), ("$3", None)]:
        assert module._token_words(token, following) == uncached(token, following)
