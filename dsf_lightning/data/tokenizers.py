"""Line tokenizers (word, character, vowel-based subword), registered by name.

>>> tok = get_tokenizer("char", mode="plain")
>>> tok.tokenize_line("to be")
['t', 'o', '_', 'b', 'e', '<eos>']

Every tokenizer turns one line (without its newline) into a list of symbols ending with one
end-of-line symbol ``eos`` (``eos=None`` appends nothing), and round-trips through plain JSON
(:meth:`Tokenizer.to_json`, :func:`tokenizer_from_json`), learned state included.

The subword tokenizer implements the segmentation of the Delta-RNN paper
(Ororbia II, Mikolov & Reitter 2017, "Learning Simpler Language Models with the Differential State Framework",
sec. 4.3), see :class:`SubwordTokenizer`.
"""

from __future__ import annotations

import abc
import inspect
import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import chain
from typing import ClassVar

from .._checks import check_bool
from .._json import JSONLimitError, loads_bounded

logger = logging.getLogger(__name__)

FORMAT = "dsf_lightning.tokenizer/1"
SPECIAL = re.compile(r"^<[^<>\s]+>$")  # tokens such as <unk>, kept whole by the subword tokenizer

_REGISTRY: dict[str, type[Tokenizer]] = {}


class TokenizerError(ValueError):
    """Unknown tokenizer name, bad option, or malformed tokenizer JSON."""


def register_tokenizer(name: str) -> Callable[[type], type]:
    """Class decorator: make a :class:`Tokenizer` subclass available to :func:`get_tokenizer`."""

    def deco(cls: type) -> type:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise TokenizerError(f"tokenizer name {name!r} is already registered")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def list_tokenizers() -> list[str]:
    return sorted(_REGISTRY)


def _accepted_options(cls: type) -> list[str] | None:
    """The keyword options ``cls.__init__`` takes, or None when it takes ``**kwargs``."""
    try:
        params = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"]


def get_tokenizer(name: str, **options) -> Tokenizer:
    """A new tokenizer by registered name (``word``, ``char``, ``subword``) with its options."""
    if not isinstance(name, str):
        raise TokenizerError(
            f"a tokenizer name must be a string, got {type(name).__name__} {name!r:.80}; known: {', '.join(list_tokenizers())}"
        )
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise TokenizerError(f"unknown tokenizer {name!r}; known: {', '.join(list_tokenizers())}") from None
    accepted = _accepted_options(cls)
    if accepted is not None:
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise TokenizerError(
                f"bad options for tokenizer {name!r}: unknown option(s) {', '.join(map(repr, unknown))}; "
                f"it takes: {', '.join(accepted) or 'no options'}"
            )
    try:
        return cls(**options)
    except TokenizerError as err:
        raise TokenizerError(f"bad options for tokenizer {name!r}: {err}") from None
    except TypeError as err:
        raise TokenizerError(f"bad options for tokenizer {name!r}: {err}") from err


def tokenizer_from_json(text: str) -> Tokenizer:
    """Rebuild any registered tokenizer (options and learned state) from :meth:`Tokenizer.to_json`.

    Anything malformed (not JSON, another format, a missing or wrongly typed field, an unknown option,
    an option or state of the wrong type) raises :class:`TokenizerError` naming the field.
    """
    try:
        data = loads_bounded(text)
    except JSONLimitError as err:  # invalid, nested thousands deep, huge numbers: never a RecursionError
        raise TokenizerError(f"invalid tokenizer JSON: {err}") from None
    except TypeError as err:
        raise TokenizerError(f"invalid tokenizer JSON: {err}") from err
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise TokenizerError(f"not a {FORMAT} document (its 'format' field must be {FORMAT!r})")
    known = ", ".join(list_tokenizers())
    if "name" not in data:
        raise TokenizerError(f"tokenizer JSON has no 'name' field: it must name the tokenizer (one of {known})")
    name = data["name"]
    if not isinstance(name, str):
        raise TokenizerError(f"tokenizer JSON field 'name' must be a string (one of {known}), got {name!r:.80}")
    options, state = data.get("options", {}), data.get("state", {})
    if not isinstance(options, dict):
        raise TokenizerError(
            f"tokenizer JSON field 'options' must be an object of keyword options (or absent), got {options!r:.80}"
        )
    if not isinstance(state, dict):
        raise TokenizerError(f"tokenizer JSON field 'state' must be an object (or absent), got {state!r:.80}")
    tok = get_tokenizer(name, **options)
    try:
        tok.set_state(state)
    except TokenizerError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as err:  # a registered tokenizer's own set_state
        raise TokenizerError(f"tokenizer JSON field 'state' is not a valid state for tokenizer {name!r}: {err!r}") from None
    return tok


def _check_eos(value: object, name: str = "eos") -> str | None:
    if value is not None and not (isinstance(value, str) and value):
        raise TokenizerError(f"{name} must be a non-empty string or None, got {value!r:.80}")
    return value


def _check_str_list(name: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise TokenizerError(f"{name} must be a list of non-empty strings, got {value!r:.80}")
    return list(value)


class Tokenizer(abc.ABC):
    """Base class: ``tokenize_line``, optional ``fit`` on training lines, JSON round trip."""

    name: ClassVar[str] = ""
    needs_fit: ClassVar[bool] = False
    #: Where a long line may be cut so that its parts, tokenized with :meth:`tokenize_part`, give the
    #: symbols of the whole line: ``"space"`` (right after a space or tab: words stay whole), ``"char"``
    #: (between any two characters) or ``None`` (nowhere: the line must be tokenized whole). Streaming
    #: readers (``Scorer.score_document``) hand a line without newlines over in bounded parts.
    cut_at: ClassVar[str | None] = None

    def __init__(self, *, eos: str | None = "<eos>"):
        self.eos = _check_eos(eos)

    @abc.abstractmethod
    def tokenize_line(self, line: str) -> list[str]:
        """The symbols of one line of text, the end-of-line symbol last (when the tokenizer has one)."""

    def tokenize_part(self, part: str, *, continued: bool, last: bool) -> list[str]:
        """The symbols of one part of a line cut where :attr:`cut_at` allows: the end symbol only when
        ``last``. ``continued``: earlier parts of the same line gave symbols (a tokenizer that marks word
        boundaries needs it). Concatenated over the parts, the symbols equal :meth:`tokenize_line`'s."""
        if self.cut_at is None and (continued or not last):
            raise TokenizerError(f"the {self.name!r} tokenizer cannot tokenize a line in parts (cut_at is None)")
        tokens = self.tokenize_line(part)
        if self.eos is not None and not last:
            tokens.pop()
        return tokens

    def fit(self, lines: Iterable[str]) -> Tokenizer:
        """Learn state from training lines (no-op for stateless tokenizers)."""
        return self

    def options(self) -> dict:
        """Constructor keyword arguments (JSON types only)."""
        return {"eos": self.eos}

    def state(self) -> dict:
        """Learned state (empty for stateless tokenizers)."""
        return {}

    def set_state(self, state: dict) -> None:
        if not isinstance(state, dict):
            raise TokenizerError(f"tokenizer state must be a dict, got {state!r:.80}")
        if state:
            raise TokenizerError(f"tokenizer {self.name!r} has no state, got keys {sorted(map(str, state))}")

    def to_dict(self) -> dict:
        return {"format": FORMAT, "name": self.name, "options": self.options(), "state": self.state()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Tokenizer:
        tok = tokenizer_from_json(text)
        if not isinstance(tok, cls):
            raise TokenizerError(f"JSON describes a {tok.name!r} tokenizer, not a {cls.__name__}")
        return tok

    def _end(self, tokens: list[str]) -> list[str]:
        if self.eos is not None:
            tokens.append(self.eos)
        return tokens

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({opts})"


@register_tokenizer("word")
class WordTokenizer(Tokenizer):
    """Whitespace-separated words, then ``eos``; a blank line gives ``[eos]`` (as WikiText loaders)."""

    cut_at = "space"

    def __init__(self, *, eos: str | None = "<eos>", lowercase: bool = False):
        super().__init__(eos=eos)
        self.lowercase = check_bool("lowercase", lowercase, TokenizerError)

    def options(self) -> dict:
        return {"eos": self.eos, "lowercase": self.lowercase}

    def tokenize_line(self, line: str) -> list[str]:
        return self._end((line.lower() if self.lowercase else line).split())


@register_tokenizer("char")
class CharTokenizer(Tokenizer):
    """Characters, then ``eos``.

    ``mode="ptb"``: Mikolov's ``ptb.char.*`` format, symbols already separated by spaces and ``_``
    marking word boundaries (``"a _ b"`` -> ``a _ b``). ``mode="plain"``: every character is a
    symbol and a space becomes ``space`` (``"_"``), so plain text and PTB-char share a convention.
    """

    MODES = ("plain", "ptb")

    def __init__(self, *, eos: str | None = "<eos>", mode: str = "plain", space: str = "_"):
        super().__init__(eos=eos)
        if not isinstance(mode, str) or mode not in self.MODES:
            raise TokenizerError(f"char tokenizer mode must be one of {self.MODES}, got {mode!r:.80}")
        if not isinstance(space, str) or len(space) != 1:
            raise TokenizerError(f"space symbol must be one character, got {space!r:.80}")
        self.mode, self.space = mode, space

    def options(self) -> dict:
        return {"eos": self.eos, "mode": self.mode, "space": self.space}

    @property
    def cut_at(self) -> str:  # type: ignore[override]
        return "char" if self.mode == "plain" else "space"  # PTB-char symbols are space-separated

    def tokenize_line(self, line: str) -> list[str]:
        if self.mode == "ptb":
            return self._end(line.split())
        return self._end(list(line.replace(" ", self.space)))


def segment_word(word: str, vowels: str = "aeiou") -> list[str]:
    """Split one word into subwords by the three rules of DSF paper sec. 4.3.

    1. :func:`split_on_vowels`: every vowel is a piece, every run of non-vowels is a piece.
    2. :func:`link_vowels`: each vowel takes the consonant immediately to its right, if any.
    3. :func:`merge_stragglers`: each single-character piece joins the piece on its right,
       unless the piece on its left is shorter (then the left one); a final one joins the left.

    >>> segment_word("banknote"), segment_word("street"), segment_word("the")
    (['ban', 'kn', 'ote'], ['str', 'eet'], ['the'])

    Vowels match case-insensitively; a one-character word stays whole. The paper's aim holds:
    no subword of a longer word is shorter than two characters.
    """
    if len(word) <= 1:
        return [word]
    return merge_stragglers(link_vowels(split_on_vowels(word, vowels), vowels))


def _is_vowel(piece: str, vowels: str) -> bool:
    return len(piece) == 1 and piece.lower() in vowels


def split_on_vowels(word: str, vowels: str = "aeiou") -> list[str]:
    """Rule 1: ``"banknote"`` -> ``b a nkn o t e``."""
    pieces: list[str] = []
    for c in word:
        if c.lower() in vowels or not pieces or _is_vowel(pieces[-1], vowels):
            pieces.append(c)
        else:
            pieces[-1] += c
    return pieces


def link_vowels(pieces: list[str], vowels: str = "aeiou") -> list[str]:
    """Rule 2: ``b a nkn o t e`` -> ``b an kn ot e``."""
    pieces, out, i = list(pieces), [], 0
    while i < len(pieces):
        p = pieces[i]
        nxt = pieces[i + 1] if i + 1 < len(pieces) else None
        if _is_vowel(p, vowels) and nxt is not None and not _is_vowel(nxt, vowels):
            out.append(p + nxt[0])
            if len(nxt) > 1:
                pieces[i + 1] = nxt[1:]
                i += 1
            else:
                i += 2
            continue
        out.append(p)
        i += 1
    return out


def merge_stragglers(pieces: list[str]) -> list[str]:
    """Rule 3: ``b an kn ot e`` -> ``ban kn ote``; ``ab c def`` -> ``abc def`` (left is shorter)."""
    if len(pieces) <= 1:
        return list(pieces)
    pieces, merged = list(pieces), []
    for i, p in enumerate(pieces):
        if len(p) == 1:
            left = merged[-1] if merged else None
            right = pieces[i + 1] if i + 1 < len(pieces) else None
            if right is not None and (left is None or len(left) >= len(right)):
                pieces[i + 1] = p + right
                continue
            if left is not None:
                merged[-1] = left + p
                continue
        merged.append(p)
    return merged


@register_tokenizer("subword")
class SubwordTokenizer(Tokenizer):
    """Vowel-based subwords of DSF paper sec. 4.3, with a frequency cut-off learned by :meth:`fit`.

    Words are segmented by :func:`segment_word`. ``fit`` counts the subwords of the training lines
    and keeps those seen at least ``min_count`` times (at most ``max_subwords`` of them, most
    frequent first); a kept-out (rare) subword is decomposed into its single characters. The
    dictionary is: kept subwords + every single character of the training words + ``eos``
    (the paper's "subwords + 26 single characters + 1 end-token"). Tokens like ``<unk>`` stay
    whole and are always kept. Word boundaries are not marked unless ``boundary`` is set, in which
    case that symbol is emitted between words. Before ``fit`` nothing is decomposed.

    The default cut-off ``min_count=15`` gives 2,404 symbols on PTB (2,357 subwords incl. ``<unk>``
    + 46 characters + ``<eos>``), against the paper's 2,405 (2,378 + 26 + 1).
    """

    needs_fit: ClassVar[bool] = True
    cut_at = "space"

    def __init__(
        self,
        *,
        eos: str | None = "<eos>",
        min_count: int = 15,
        max_subwords: int | None = None,
        vowels: str = "aeiou",
        lowercase: bool = False,
        boundary: str | None = None,
    ):
        super().__init__(eos=eos)
        if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
            raise TokenizerError(f"min_count must be an integer >= 1, got {min_count!r:.80}")
        if max_subwords is not None and (isinstance(max_subwords, bool) or not isinstance(max_subwords, int) or max_subwords < 0):
            raise TokenizerError(f"max_subwords must be a non-negative integer or None, got {max_subwords!r:.80}")
        if not isinstance(vowels, str):
            raise TokenizerError(f"vowels must be a string of vowel characters (e.g. 'aeiou'), got {vowels!r:.80}")
        self.min_count, self.max_subwords = min_count, max_subwords
        self.vowels, self.lowercase = vowels.lower(), check_bool("lowercase", lowercase, TokenizerError)
        self.boundary = _check_eos(boundary, "boundary")
        self.subwords: list[str] | None = None  # kept subwords, most frequent first
        self.chars: list[str] = []
        self._kept: set[str] = set()
        self._memo: dict[str, list[str]] = {}

    def options(self) -> dict:
        return {
            "eos": self.eos,
            "min_count": self.min_count,
            "max_subwords": self.max_subwords,
            "vowels": self.vowels,
            "lowercase": self.lowercase,
            "boundary": self.boundary,
        }

    def state(self) -> dict:
        return {} if self.subwords is None else {"subwords": self.subwords, "chars": self.chars}

    def set_state(self, state: dict) -> None:
        """``{}`` (not fitted) or ``{"subwords": [...], "chars": [...]}`` as :meth:`state` gives."""
        if not isinstance(state, dict):
            raise TokenizerError(f"subword tokenizer state must be a dict, got {state!r:.80}")
        if not state:
            self.subwords, self.chars, self._kept = None, [], set()
        else:
            if set(state) != {"subwords", "chars"}:
                raise TokenizerError(
                    f"subword tokenizer state must have exactly the fields 'subwords' and 'chars' (or be empty "
                    f"before fit), got {sorted(map(str, state))}; refit the tokenizer or re-export it"
                )
            subwords = _check_str_list("subword tokenizer state field 'subwords'", state["subwords"])
            chars = _check_str_list("subword tokenizer state field 'chars'", state["chars"])
            self.subwords, self.chars = subwords, chars
            self._kept = set(self.subwords)
        self._memo = {}

    @property
    def fitted(self) -> bool:
        return self.subwords is not None

    def segment(self, word: str) -> list[str]:
        """Sec. 4.3 segmentation of one word, without the frequency cut-off."""
        return [word] if SPECIAL.match(word) else segment_word(word, self.vowels)

    def fit(self, lines: Iterable[str]) -> SubwordTokenizer:
        words: Counter[str] = Counter()
        for line in lines:
            words.update((line.lower() if self.lowercase else line).split())
        counts: Counter[str] = Counter()
        specials, chars = [], set()
        for word, n in words.items():
            if SPECIAL.match(word):
                specials.append(word)
                continue
            chars.update(word)
            for piece in segment_word(word, self.vowels):
                counts[piece] += n
        kept = [s for s, n in counts.most_common() if n >= self.min_count and len(s) > 1]
        if self.max_subwords is not None:
            kept = kept[: self.max_subwords]
        kept += sorted(set(specials) - set(kept))
        self.set_state({"subwords": kept, "chars": sorted(chars - set(kept))})
        logger.info(
            "subword dictionary: %d subwords (count >= %d) + %d single characters, from %d word types",
            len(kept), self.min_count, len(self.chars), len(words),
        )
        return self

    def symbols(self) -> list[str]:
        """The dictionary without ``eos``: kept subwords, then single characters (and boundary)."""
        if self.subwords is None:
            raise TokenizerError("subword tokenizer is not fitted: call fit(train_lines) first")
        extra = [self.boundary] if self.boundary is not None else []
        return list(dict.fromkeys([*self.subwords, *self.chars, *extra]))

    def tokenize_word(self, word: str) -> list[str]:
        out = self._memo.get(word)
        if out is None:
            out = []
            for piece in self.segment(word):
                if self.subwords is None or len(piece) == 1 or piece in self._kept:
                    out.append(piece)
                else:
                    out.extend(piece)  # rare subword -> single characters
            self._memo[word] = out
        return out

    def tokenize_line(self, line: str) -> list[str]:
        words = (line.lower() if self.lowercase else line).split()
        memo = self._memo
        try:
            parts = [memo[w] for w in words]
        except KeyError:
            parts = [self.tokenize_word(w) for w in words]
        if self.boundary is not None:
            parts = [p for i, part in enumerate(parts) for p in ([[self.boundary]] if i else []) + [part]]
        return self._end(list(chain.from_iterable(parts)))

    def tokenize_part(self, part: str, *, continued: bool, last: bool) -> list[str]:
        tokens = super().tokenize_part(part, continued=continued, last=last)
        if self.boundary is not None and continued and tokens and tokens[0] != self.eos:
            tokens.insert(0, self.boundary)  # the boundary between the previous part's last word and this one's first
        return tokens
