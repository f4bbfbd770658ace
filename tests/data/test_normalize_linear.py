"""The normalizers run in time linear in the text's length, on pathological text too (issue 38, item 4).

A regex with overlapping quantifiers rescans the rest of a token at each position: the PTB normalizer took
16 s on 32k apostrophes before a letter. Each family below is normalized at two sizes 16x apart; the CPU time
may grow at most 4 x 16 = 64 times (linear: ~16; quadratic: ~256). A ratio, not a time: it holds on a slow or
busy machine. The small size keeps the failing (quadratic) run of the old code under a few seconds.
"""

from __future__ import annotations

import itertools
import re
import time

import pytest

from dsf_lightning.data.normalize import _token_words, _word_start, get_normalizer

SMALL, GROWTH = 1024, 16
BOUND = 4 * GROWTH  # linear is GROWTH, quadratic GROWTH ** 2

# name -> text of about n characters. One token (the worst case: the normalizer works token by token)
# unless the family is about what separates tokens.
FAMILIES = {
    "apostrophes before a letter": lambda n: "'" * n + "a",
    "apostrophes alone": lambda n: "'" * n,
    "apostrophes after a word": lambda n: "s" + "'" * n,
    "alternating quotes before a word": lambda n: "'\"" * (n // 2) + "word",
    "backquotes and brackets before a clitic": lambda n: "`(" * (n // 2) + "'s'a",
    "quote-period runs": lambda n: "'.'" * (n // 3) + "a",
    "double quotes before a word": lambda n: '"' * n + "a",
    "periods after a word": lambda n: "a" + "." * n,
    "periods before a word": lambda n: "." * n + "a",
    "word-period runs": lambda n: "a." * (n // 2) + "a",
    "hyphens": lambda n: "-" * n,
    "hyphens before a number": lambda n: "-" * n + "1",
    "digits with commas": lambda n: "1," * (n // 2) + "x",
    "digits with periods": lambda n: "1." * (n // 2) + "x",
    "number range that fails at the end": lambda n: "1" * (n // 2) + "-" + "1." * (n // 4) + "x",
    "currency before digits": lambda n: "$" + "1," * (n // 2) + "x",
    "slashes": lambda n: "a/" * (n // 2),
    "percent signs": lambda n: "%" * n,
    "a very long word": lambda n: "a" * n,
    "a very long word ending in n't": lambda n: "a" * n + "n't",
    "whitespace": lambda n: " " * n + "a",
    "many short sentences": lambda n: "a. " * (n // 3),
    "many clitics": lambda n: "'s " * (n // 3),
}
IMDB_FAMILIES = {
    "emoticon-like runs": lambda n: ":" + ")" * n + "x",
    "line breaks with spaces": lambda n: "<br" + " " * n + "x",
    "numbers with separators": lambda n: "1." * (n // 2) + "x",
    "apostrophes": lambda n: "'" * n + "a",
}


def _cpu_time(normalizer, text: str) -> float:
    _token_words.cache_clear()  # time the work, not the cache
    start = time.process_time()
    normalizer.normalize(text)
    return time.process_time() - start


def _growth(normalizer, family) -> tuple[float, float]:
    """CPU seconds at SMALL and SMALL * GROWTH characters (the best of a few runs: noise only adds)."""
    small = min(_cpu_time(normalizer, family(SMALL)) for _ in range(5))
    small = max(small, 1e-5)  # below the clock's resolution
    big_text = family(SMALL * GROWTH)
    big = _cpu_time(normalizer, big_text)
    if big > BOUND * small:  # a retry only where the first run looks superlinear (a busy machine)
        big = min(big, _cpu_time(normalizer, big_text))
    return small, big


@pytest.mark.parametrize("name", list(FAMILIES))
@pytest.mark.parametrize("normalizer", ["ptb", "ptb-char"])
def test_ptb_normalizers_are_linear_on_pathological_text(normalizer, name):
    small, big = _growth(get_normalizer(normalizer), FAMILIES[name])
    assert big <= BOUND * small, (
        f"{normalizer} on {name}: {small * 1e3:.2f} ms at {SMALL} chars, {big * 1e3:.1f} ms at {SMALL * GROWTH}: "
        f"{big / small:.0f}x for {GROWTH}x the text (linear ~{GROWTH}x)"
    )


@pytest.mark.parametrize("name", list(IMDB_FAMILIES))
def test_imdb_normalizer_is_linear_on_pathological_text(name):
    small, big = _growth(get_normalizer("imdb"), IMDB_FAMILIES[name])
    assert big <= BOUND * small, f"imdb on {name}: {big / small:.0f}x for {GROWTH}x the text"


def test_word_start_reads_leading_quotes_as_the_old_regex_did():
    """The linear rewrite against the regex it replaced, on every short token over the characters it reads."""
    old = re.compile(r"'(?:s|re|ve|m|ll|d|\d0s)?(?:[^a-z0-9]*)$")

    def old_start(low: str) -> int:
        start = 0
        while start < len(low) and low[start] in "\"'`([{<" and not old.match(low, start):
            start += 1
        return start

    alphabet = "'\"(srevmld80x."
    checked = 0
    for n in range(1, 6):
        for chars in itertools.product(alphabet, repeat=n):
            token = "".join(chars)
            assert _word_start(token) == old_start(token), token
            checked += 1
    assert checked > 500_000
    ptb = get_normalizer("ptb")
    assert ptb.normalize("'" * 5000 + "a") == "a"
    assert ptb.normalize("''s '80s 'tis") == "'s '80s tis"
