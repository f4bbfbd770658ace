"""Symbol vocabularies: an ordered list of symbols, its index, and the end / unknown symbols.

>>> vocab = Vocabulary.build([["a", "b", "a"]], specials=("<eos>",), eos="<eos>")
>>> vocab.symbols, vocab.encode(["a", "b", "<eos>"])
(['<eos>', 'a', 'b'], [1, 2, 0])

A vocabulary is *closed* when it has no unknown symbol (``unk=None``, e.g. PTB characters): encoding
a symbol outside it raises :class:`VocabularyError` naming the symbol and where it came from.
Serialisation is plain JSON (:meth:`Vocabulary.to_json` / :meth:`Vocabulary.from_json`), never pickle.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence

from .._json import JSONLimitError, loads_bounded

FORMAT = "dsf_lightning.vocabulary/1"


class VocabularyError(ValueError):
    """A symbol is not in a closed vocabulary, or a vocabulary definition is invalid."""


class Vocabulary:
    """Ordered symbols with ``stoi`` (symbol -> id), an ``eos`` symbol and an optional ``unk`` symbol.

    ``eos`` may be ``None`` only for corpora without line structure (e.g. text8's single stream).
    """

    def __init__(self, symbols: Sequence[str], *, eos: str | None = "<eos>", unk: str | None = None):
        self.symbols: list[str] = [str(s) for s in symbols]
        self.stoi: dict[str, int] = {s: i for i, s in enumerate(self.symbols)}
        if len(self.stoi) != len(self.symbols):
            dupes = sorted(s for s, n in Counter(self.symbols).items() if n > 1)
            raise VocabularyError(f"duplicate symbols in vocabulary: {dupes[:10]}")
        for role, sym in (("eos", eos), ("unk", unk)):
            if sym is not None and sym not in self.stoi:
                raise VocabularyError(f"{role} symbol {sym!r} is not among the vocabulary's symbols")
        self.eos = eos
        self.unk = unk

    # ----------------------------------------------------------------------------- basics
    @property
    def eos_id(self) -> int | None:
        return None if self.eos is None else self.stoi[self.eos]

    @property
    def unk_id(self) -> int | None:
        return None if self.unk is None else self.stoi[self.unk]

    @property
    def closed(self) -> bool:
        """True when there is no unknown symbol: out-of-vocabulary input is an error."""
        return self.unk is None

    def __len__(self) -> int:
        return len(self.symbols)

    def __contains__(self, symbol: object) -> bool:
        return symbol in self.stoi

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return (self.symbols, self.eos, self.unk) == (other.symbols, other.eos, other.unk)

    def __repr__(self) -> str:
        return f"Vocabulary(size={len(self)}, eos={self.eos!r}, unk={self.unk!r})"

    # ----------------------------------------------------------------------------- coding
    def encode(self, tokens: Iterable[str], *, source: str | None = None) -> list[int]:
        """Map symbols to ids; unknown symbols become ``unk``, or raise when the vocabulary is closed.

        ``source`` (e.g. ``"data/train.txt line 3"``) is only used in the error message.
        """
        stoi = self.stoi
        tokens = tokens if isinstance(tokens, (list, tuple)) else list(tokens)
        try:
            return [stoi[t] for t in tokens]
        except KeyError:
            pass
        if self.unk is not None:
            unk_id = stoi[self.unk]
            return [stoi.get(t, unk_id) for t in tokens]
        bad = next(t for t in tokens if t not in stoi)
        where = f" (from {source})" if source else ""
        raise VocabularyError(
            f"token {bad!r}{where} is not in the closed vocabulary of {len(self)} symbols "
            "(it has no unknown symbol); rebuild the vocabulary or give it an unk symbol"
        )

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Map ids back to symbols (accepts ints or a 1-D tensor)."""
        symbols = self.symbols
        ids = ids.tolist() if hasattr(ids, "tolist") else [int(i) for i in ids]
        if any(i < 0 or i >= len(symbols) for i in ids):
            bad = next(i for i in ids if not 0 <= i < len(symbols))
            raise VocabularyError(f"id {bad} is outside the vocabulary (size {len(symbols)})")
        return [symbols[i] for i in ids]

    # ----------------------------------------------------------------------------- building
    @classmethod
    def build(
        cls,
        token_iterable: Iterable[Iterable[str]] | Iterable[str],
        *,
        specials: Sequence[str] = ("<eos>",),
        eos: str | None = "<eos>",
        unk: str | None = None,
        min_count: int = 1,
        max_size: int | None = None,
    ) -> Vocabulary:
        """Build from tokens (a flat iterable of strings, or an iterable of token lists).

        Order: ``specials`` first (``eos`` and ``unk`` are added to them if missing), then the other
        symbols by decreasing count, ties by first occurrence. Symbols seen fewer than ``min_count``
        times are dropped; ``max_size`` caps the total size (specials included). Dropping symbols
        needs an ``unk`` symbol to map them to later, unless the caller knows none will be encoded.
        """
        if min_count < 1:
            raise VocabularyError(f"min_count must be >= 1, got {min_count}")
        counts: Counter[str] = Counter()
        for item in token_iterable:
            if isinstance(item, str):
                counts[item] += 1
            else:
                counts.update(item)
        head = list(dict.fromkeys([*specials, *(s for s in (eos, unk) if s is not None)]))
        if max_size is not None and max_size < len(head):
            raise VocabularyError(f"max_size={max_size} is smaller than the {len(head)} special symbols")
        taken = set(head)
        rest = [s for s, n in counts.most_common() if n >= min_count and s not in taken]
        if max_size is not None:
            rest = rest[: max_size - len(head)]
        return cls(head + rest, eos=eos, unk=unk)

    # ----------------------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        return {"format": FORMAT, "symbols": list(self.symbols), "eos": self.eos, "unk": self.unk}

    @classmethod
    def from_dict(cls, data: dict) -> Vocabulary:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise VocabularyError(f"not a {FORMAT} document")
        return cls(data["symbols"], eos=data.get("eos"), unk=data.get("unk"))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Vocabulary:
        try:
            data = loads_bounded(text)
        except JSONLimitError as err:  # invalid, nested thousands deep, huge numbers: never a RecursionError
            raise VocabularyError(f"invalid vocabulary JSON: {err}") from None
        return cls.from_dict(data)

    def save(self, path) -> None:
        """Write the JSON form to ``path`` (UTF-8)."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json())

    @classmethod
    def load(cls, path) -> Vocabulary:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            return cls.from_json(text)
        except VocabularyError as err:
            raise VocabularyError(f"{path}: {err}") from None
