"""Text normalization: raw text -> the form of a corpus's own preprocessing, by name.

A model reads text the way its training corpus was written. Mikolov's PTB (``ptb``, ``ptb-subword``,
and ``ptb-char`` spelled out) is lowercase, has no punctuation, writes numbers as ``N`` and splits
contractions and possessives as the Penn Treebank does; raw English scored as it comes loses a quarter
of its words to ``<unk>``. A normalizer turns raw text into that form::

    >>> get_normalizer("ptb").normalize("Hello, World! It's 3.5% higher.")
    "hello world\\nit 's N N higher"

Registry: ``none`` (no normalizer: :func:`get_normalizer` returns None), ``ptb``, ``ptb-char``, ``imdb``
(IMDB reviews as :func:`normalize_review` writes them);
:func:`register_normalizer` adds more. A corpus names the normalizer that turns raw text into its form on
its spec (``CorpusSpec.normalizer``: ``ptb`` for ``ptb``; :func:`dsf_lightning.data.corpora.normalizer_for_corpus`
reads it). A pretrained folder records its normalizer in
``config.json`` (``"normalize": "ptb"``) and :class:`~dsf_lightning.scoring.Scorer` applies it by default.

The ``ptb`` rules, read off ``ptb.{train,valid,test}.txt`` (one sentence per line):

* lowercase, except the number symbol ``N`` and specials such as ``<unk>``; accents folded (``café`` ->
  ``cafe``), typographic quotes and dashes made ASCII;
* punctuation tokens (``, . ; : ! ? " ( ) -- ...`` and PTB's ````` / ``''``) are dropped, and so is
  punctuation attached to a word; ``$``, ``#`` (pounds, also for ``£``), ``&`` and a plural possessive's
  ``'`` are tokens, as in the corpus;
* a number (``7``, ``3.5``, ``1,000``, ``.5``, ``1/2``, ``3:30``, ``1989-90``) is ``N``, and so is ``%``:
  ``3.5%`` -> ``N N``, ``$3`` -> ``$ N``, ``US$3`` -> ``us$ N``; ``1980s``, ``13th``, ``30-year`` stay words;
* Treebank clitics split off: ``don't`` -> ``do n't``, ``can't`` -> ``ca n't``, ``won't`` -> ``wo n't``,
  ``it's`` -> ``it 's``, ``'re 've 'm 'll 'd``, ``cannot`` -> ``can not``, ``investors'`` -> ``investors '``;
  ``o'brien`` and ``'80s`` stay whole;
* hyphenated words stay whole (``long-term``); a slash is written ``\\/`` (``and\\/or``);
* abbreviations keep their period (``mr.``, ``u.s.``, ``inc.``, initials ``d.``): an internal period, a
  single letter, or one of PTB's abbreviations; a period after any other word, and ``!`` / ``?``, end
  the sentence: the rest of the line is a new sentence (a new line). A PTB abbreviation that is also a
  word (``no.``, ``mass.``, ``ill.``) keeps its period only when what follows is not capitalized.

Normalization is idempotent on the corpus: every line of ``ptb.{train,valid,test}.txt`` and of
``ptb.char.test.txt`` normalizes to itself (tests/data/test_normalize.py). It works line by line: a
sentence hard-wrapped over several lines is scored as several sentences (join such lines first).
"""

from __future__ import annotations

import abc
import functools
import re
import unicodedata
from collections.abc import Callable
from typing import ClassVar

from .tokenizers import SPECIAL as _SPECIAL  # <unk>, <eos>, ...: kept whole, as the tokenizers keep them

__all__ = [
    "Normalizer",
    "NormalizerError",
    "PTBCharNormalizer",
    "PTBNormalizer",
    "get_normalizer",
    "list_normalizers",
    "register_normalizer",
    "resolve_normalize",
]

NONE = "none"
_REGISTRY: dict[str, type[Normalizer]] = {}


class NormalizerError(ValueError):
    """An unknown normalizer name (the message lists the known ones)."""


class Normalizer(abc.ABC):
    """Turns a line of raw text into sentences in a corpus's form (one output line per sentence)."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""

    @abc.abstractmethod
    def sentences(self, line: str) -> list[tuple[str, bool]]:
        """``(sentence, closed)`` pieces of one line, in order: ``closed`` when the piece ended with a
        sentence end (``.`` ``!`` ``?``). Only the last piece may be open; a piece may be empty (e.g. a
        lone ``.`` closing a sentence begun in an earlier part of a long line)."""

    def continue_sentence(self, piece: str) -> str:
        """``piece`` (a sentence's text from :meth:`sentences`) as it reads when it continues a sentence
        begun in an earlier part of a long line (cut between words)."""
        return piece

    def normalize_line(self, line: str) -> list[str]:
        """The non-empty sentences of one line."""
        return [s for s, _ in self.sentences(line) if s]

    def normalize(self, text: str) -> str:
        """A text, line by line: its sentences joined by newlines (lines left empty are dropped)."""
        return "\n".join(s for line in text.splitlines() for s in self.normalize_line(line))

    __call__ = normalize

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def register_normalizer(name: str) -> Callable[[type[Normalizer]], type[Normalizer]]:
    """Class decorator: make a :class:`Normalizer` available by ``name``."""

    def deco(cls: type[Normalizer]) -> type[Normalizer]:
        if not name or name == NONE:
            raise NormalizerError(f"a normalizer needs a name other than {NONE!r}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def list_normalizers() -> list[str]:
    """The names :func:`get_normalizer` accepts (``none`` first)."""
    return [NONE, *sorted(_REGISTRY)]


def get_normalizer(name: str | Normalizer | None) -> Normalizer | None:
    """The normalizer called ``name``; None for ``"none"`` or None (no normalization); a
    :class:`Normalizer` is returned as it is."""
    if name is None or isinstance(name, Normalizer):
        return name
    if not isinstance(name, str) or (name != NONE and name not in _REGISTRY):
        raise NormalizerError(f"unknown normalizer {name!r:.80}; known: {', '.join(list_normalizers())}")
    return None if name == NONE else _REGISTRY[name]()


def resolve_normalize(asked: str | Normalizer | None, own: str | None) -> Normalizer | None:
    """What to apply: ``asked`` when given (``"none"`` turns normalization off), else ``own`` (the model's)."""
    return get_normalizer(own if asked is None else asked)


# ============================================================================================== PTB
# What raw text writes with characters PTB has no (ASCII) form for.
_TRANSLATE = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u00ab": '"', "\u00bb": '"', "\u2033": '"',
    "\u2013": " -- ", "\u2014": " -- ", "\u2015": " -- ", "\u2212": "-", "\u2010": "-", "\u2011": "-",
    "\u2026": " ... ", "\u00a3": "#", "\u00a0": " ",
})
# Abbreviations written with a final period (no internal one) in the PTB vocabulary, and a few titles: kept with it.
_ABBREVIATIONS = frozenset(
    "mr mrs ms messrs dr prof rev gen gov sen sens rep adm col jr sr st corp inc co cos ltd bros cie "
    "etc vs no jan feb aug sept oct nov dec calif conn fla ariz tenn colo neb wis nev okla kan ala mich md "
    "ky ga minn mass ill va pa wash ore ind del mo lt capt sgt".split()
)
# ... of which these are also English words: at the end of a sentence the period is the sentence's.
_AMBIGUOUS = frozenset("no mass ill wash ore ind del mo pa va".split())
# Tokens PTB writes with a leading apostrophe.
_CLITICS = ("n't", "'s", "'re", "'ve", "'m", "'ll", "'d")
_KEPT_SYMBOLS = frozenset({"$", "#", "&", "'", "\\*", "\\*\\*"})  # punctuation-only tokens of the vocabulary
_NUMBER = re.compile(r"^[+-]?(?:\d[\d,]*(?:[.:]\d+)*|\.\d+)(?:(?:\\?/|-)\d[\d,.]*)?$")
_CURRENCY = re.compile(r"^([a-z]{0,3}\$|#)(.+)$")  # $3, us$3, #5 (pounds): the sign is a token of its own
_LEADING = "\"'`([{<"
# A leading 's, 're, '80s or lone ' is kept when nothing word-like follows it. One regex ending in [^a-z0-9]*$
# rescanned the rest of the token at each leading quote (quadratic on a run of quotes before a letter): the
# clitic is matched alone and the rest read off the token's last a-z0-9, found once (greedy .* backs off: linear).
_LEADING_CLITIC = re.compile(r"'(?:s|re|ve|m|ll|d|\d0s)")
_LAST_WORDLIKE = re.compile(r".*[a-z0-9]", re.S)

_TRAILING = "\"'`)]}>,;:!?."
_WORDLIKE = re.compile(r"[a-z0-9]")


def _fold(line: str) -> str:
    """ASCII quotes and dashes, accents removed (``naïve`` -> ``naive``); other characters kept."""
    line = line.translate(_TRANSLATE)
    if line.isascii():
        return line
    decomposed = unicodedata.normalize("NFKD", line)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _is_abbreviation(word: str, following: str | None) -> bool:
    """Whether ``word`` (lowercase, ending in ".") keeps its period, given the raw token after it."""
    stem = word[:-1].rsplit("-", 1)[-1]  # non-u.s. / calif.-based: the last part decides
    if not stem or not stem.replace(".", "").isalnum():
        return False
    if word.endswith(".."):
        return False
    if "." in stem or (len(stem) == 1 and stem.isalpha()):
        return True  # u.s. / a.m. / initials
    if stem not in _ABBREVIATIONS:
        return False
    if stem not in _AMBIGUOUS or following is None:
        return True
    head = following.lstrip(_LEADING)
    return not head[:1].isupper() or head == "N"  # "no. 5", "mass. general"... but "I said no. Then"


def _split_clitic(word: str) -> list[str]:
    """Treebank clitics: do n't, ca n't, wo n't, it 's, they 're, investors ' ; o'brien stays whole."""
    if word in _CLITICS or word == "'":
        return [word]
    if word.endswith("n't") and len(word) > 3:
        stem = word[:-3]
        return [stem, "n't"]
    for clitic in _CLITICS[1:]:
        if word.endswith(clitic) and len(word) > len(clitic) and word[-len(clitic) - 1].isalnum():
            return [word[: -len(clitic)], clitic]
    if word.endswith("'") and len(word) > 1 and word[-2] == "s":
        return [word[:-1], "'"]
    if word == "cannot":
        return ["can", "not"]
    return [word]


def _word_token(token: str) -> str | None:
    """One token after splitting: N for a number or %, None for punctuation, else the token itself."""
    if token in ("%", "N") or _NUMBER.match(token):
        return "N"
    if token in _KEPT_SYMBOLS or _SPECIAL.match(token):
        return token
    if not _WORDLIKE.search(token):
        return None  # punctuation only: dropped, as in Mikolov's files
    if "/" in token:
        token = re.sub(r"(?<!\\)/", r"\\/", token)
    return token


@register_normalizer("ptb")
class PTBNormalizer(Normalizer):
    """Mikolov's PTB form (see the module docstring for the rules)."""

    description = "Mikolov's Penn Treebank: lowercase, no punctuation, numbers as N, Treebank clitics"

    def sentences(self, line: str) -> list[tuple[str, bool]]:
        raw = _fold(line).replace("--", " -- ").split()
        out: list[tuple[str, bool]] = []
        words: list[str] = []
        for i, token in enumerate(raw):
            # only a token with a period reads the one after it (_is_abbreviation): the others are cached alone
            following = raw[i + 1] if "." in token and i + 1 < len(raw) else None
            kept, ends = _token_words(token, following)
            words.extend(kept)
            if ends:
                out.append((" ".join(words), True))
                words = []
        if words or not out:
            out.append((" ".join(words), False))
        return out


@functools.lru_cache(maxsize=1 << 16)
def _token_words(token: str, following: str | None) -> tuple[tuple[str, ...], bool]:
    """The words one raw token becomes and whether a sentence ends after it (``following``: the raw token
    after it, or None). Cached: a document repeats its words, and this is most of normalizing a line."""
    core, ends = _strip(token, following)
    return (tuple(w for w in map(_word_token, _split(core)) if w) if core else ()), ends


def _word_start(low: str) -> int:
    """Where a lowercased token's word begins: after its leading quotes and brackets, but at a leading
    ``'s 're 've 'm 'll 'd '80s`` or lone ``'`` with nothing word-like after it (kept as a token)."""
    start, tail = 0, -1  # tail: one past the token's last a-z0-9 (0: none), read at the first leading quote
    while start < len(low) and low[start] in _LEADING:
        if low[start] == "'":
            if tail < 0:
                m = _LAST_WORDLIKE.match(low)
                tail = m.end() if m else 0
            clitic = _LEADING_CLITIC.match(low, start)
            if tail <= (clitic.end() if clitic else start + 1):
                break
        start += 1
    return start


def _strip(token: str, following: str | None) -> tuple[str, bool]:
    """``(token lowercased without the punctuation around it, whether a sentence ends after it)``."""
    if token in _KEPT_SYMBOLS or token == "N" or _SPECIAL.match(token):
        return token, False
    low = token.lower()
    start = _word_start(low)
    end, ends, dots = len(low), False, 0
    while end > start and low[end - 1] in _TRAILING:
        c = low[end - 1]
        if c == "'" and end == len(low) and end - start > 1 and low[end - 2] == "s" and not low[:start].endswith("'"):
            break  # investors' : a plural possessive (split off by _split_clitic)
        if c == "." and not dots and _is_abbreviation(low[start:end], following):
            break
        dots += c == "."
        ends = ends or c in "!?"
        end -= 1
    # a period ends the sentence; an ellipsis ("wait...") does not
    return low[start:end], ends or dots == 1


def _split(core: str) -> list[str]:
    """Currency signs, percent signs and clitics split off a token."""
    m = _CURRENCY.match(core)
    if m and (_NUMBER.match(m.group(2)) or m.group(2) == "%"):
        return [m.group(1), m.group(2)]
    if core.endswith("%") and len(core) > 1:
        return [core[:-1], "%"]
    return _split_clitic(core)


_PTB = PTBNormalizer()
# PTB-char's closed inventory (ptb_char/SOURCE.md): a-z, 0-9, N, the spelled-out <unk>, # $ & ' * - . / \
_PTB_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789N<>#$&'*-./\\")


@register_normalizer("ptb-char")
class PTBCharNormalizer(Normalizer):
    """Mikolov's ``ptb.char.*`` form: the ``ptb`` form of the text, spelled out (symbols separated by
    spaces, ``_`` between words: ``it 's`` -> ``i t _ ' s``), the way the char files were made from the
    word files; characters outside PTB-char's closed inventory are dropped. A line already in that form
    (every token one symbol of the inventory or ``_``) is left as it is."""

    description = "Mikolov's Penn Treebank, character level: the ptb form spelled out, '_' between words"
    space = "_"

    def sentences(self, line: str) -> list[tuple[str, bool]]:
        symbols = line.split()
        if symbols and all(len(s) == 1 and (s in _PTB_CHARS or s == self.space) for s in symbols):
            return [(" ".join(symbols), False)]
        return [(self._spell(sentence), closed) for sentence, closed in _PTB.sentences(line)]

    def continue_sentence(self, piece: str) -> str:
        return f"{self.space} {piece}"  # the word boundary the cut fell on

    def _spell(self, sentence: str) -> str:
        words = ("".join(c for c in word if c in _PTB_CHARS) for word in sentence.split())
        return " ".join(self.space.join(w for w in words if w))


# ============================================================================================= IMDB
_REVIEW_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)
_REVIEW_EMOTICON = re.compile(r"(?<!\S)[:;=8][-o*']?[)\](\[dDpP/\\|]+(?!\S)")
_REVIEW_NUMBER = re.compile(r"[0-9]+(?:[.,][0-9]+)*")
_REVIEW_OTHER = re.compile(r"[^a-z\s.,!?;:'\"()\-\x01-\x03]")  # after numbers became \x02
_REVIEW_APOSTROPHE = re.compile(r"(?<![a-z])'|'(?![a-z])")  # apostrophes inside words stay
_REVIEW_COMBINING = re.compile("[\u0300-\u036f]")
_REVIEW_PUNCTUATION = ".,!?;:\"()-"


def normalize_review(text: str) -> str:
    """One review as a line of space-separated words, punctuation and special tokens.

    >>> normalize_review("Great film :)<br /><br />10/10, Café!")
    'great film <emo> <num> <sym> <num> , cafe !'
    """
    text = _REVIEW_EMOTICON.sub(" \x01 ", _REVIEW_BR.sub(" ", text))
    if not text.isascii():
        text = _REVIEW_COMBINING.sub("", unicodedata.normalize("NFKD", text))
    text = _REVIEW_OTHER.sub(" \x03 ", _REVIEW_NUMBER.sub(" \x02 ", text.lower()))
    for c in _REVIEW_PUNCTUATION:
        text = text.replace(c, f" {c} ")
    text = " ".join(_REVIEW_APOSTROPHE.sub(" ' ", text).split())
    return text.replace("\x01", "<emo>").replace("\x02", "<num>").replace("\x03", "<sym>")


@register_normalizer("imdb")
class IMDBNormalizer(Normalizer):
    """IMDB reviews in the form the ``imdb`` corpora and ``IMDBSentimentDataModule`` read them
    (:func:`normalize_review`: lower case, ``<br />`` dropped, numbers as
    ``<num>``, emoticons as ``<emo>``, punctuation split off). A review is one sequence: each line is one piece,
    never split into sentences."""

    description = "IMDB reviews: lower case, <br /> dropped, numbers <num>, emoticons <emo>, punctuation split off"

    def sentences(self, line: str) -> list[tuple[str, bool]]:
        return [(normalize_review(line), False)]
