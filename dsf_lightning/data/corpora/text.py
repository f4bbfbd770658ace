"""Plain-text corpora: any folder of ``{train,valid,test}.txt``, and Tiny Shakespeare.

``text-folder`` options:

- ``path``: the folder (absolute, or relative to the data root; default: the data root itself).
  Loads the splits whose files exist unless ``splits=`` is given.
- ``tokenizer``: ``"word"``, ``"char"`` or ``"subword"`` (or a :class:`Tokenizer`, e.g. the fitted
  one of another corpus), with ``tokenizer_options`` (e.g. ``{"min_count": 5}`` for subwords).
- ``unk``, ``min_count``, ``max_size``: how a word/char vocabulary is built from train
  (dropping rare symbols needs ``unk``). Pass ``vocab=`` to :func:`load_corpus` instead to reuse a
  fixed vocabulary: with a closed one (no unk), a token outside it raises
  :class:`~dsf_lightning.data.vocab.VocabularyError` naming the token, the file and the line.

``tinyshakespeare``: Karpathy's ``input.txt`` (1,115,394 characters), character level (space ->
``_``, newline -> ``<eos>``: 65 symbols), split at the line boundaries nearest after 90% and 95%
of the characters (option ``fractions``); the vocabulary is built from all loaded splits.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import accumulate
from pathlib import Path

from ..tokenizers import CharTokenizer, Tokenizer, get_tokenizer, tokenizer_from_json
from .base import CorpusSpec, Line, register_corpus
from .files import CorpusError, FileSpec, read_lines


class TextFolder(CorpusSpec):
    name = "text-folder"
    description = "a folder of train.txt / valid.txt / test.txt"
    folder = ""
    howto = "give the folder with path=... (absolute, or relative to the data root)"
    defaults = {
        "path": None,
        "tokenizer": "word",
        "tokenizer_options": {},
        "unk": None,
        "min_count": 1,
        "max_size": None,
    }
    optional_splits = True

    def options(self, given: dict) -> dict:
        opts = super().options(given)
        if (opts["min_count"] > 1 or opts["max_size"]) and opts["unk"] is None:
            raise CorpusError("text-folder: min_count/max_size drop symbols, so they need unk='<unk>' (or similar)")
        return opts

    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        base = str(opts["path"]).rstrip("/") + "/" if opts["path"] else ""
        return {split: [FileSpec(f"{base}{split}.txt")] for split in self.splits}

    def tokenizer(self, opts: dict) -> Tokenizer:
        tok = opts["tokenizer"]
        if isinstance(tok, Tokenizer):
            return tokenizer_from_json(tok.to_json())  # a private copy
        return get_tokenizer(tok, **opts["tokenizer_options"])

    def unk_symbol(self, opts: dict) -> str | None:
        return opts["unk"]


class TinyShakespeare(CorpusSpec):
    name = "tinyshakespeare"
    description = "Tiny Shakespeare (char-rnn input.txt), character level"
    url = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
    folder = "tinyshakespeare"
    defaults = {"fractions": (0.9, 0.05, 0.05)}
    vocab_from_all = True
    SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"

    def options(self, given: dict) -> dict:
        opts = super().options(given)
        fr = opts["fractions"]
        if len(fr) != 3 or min(fr) <= 0 or abs(sum(fr) - 1) > 1e-9:
            raise CorpusError(f"tinyshakespeare: fractions must be 3 positive numbers summing to 1, got {fr!r}")
        return opts

    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        spec = FileSpec("tinyshakespeare/input.txt", sha256=self.SHA256, url=self.url)
        return {split: [spec] for split in self.splits}

    def tokenizer(self, opts: dict) -> Tokenizer:
        return CharTokenizer(mode="plain")

    def lines(self, split: str, paths: list[Path], opts: dict) -> Iterator[Line]:
        lines = list(read_lines(paths[0]))
        ends = list(accumulate(len(line) + 1 for line in lines))  # characters up to each line's end
        cuts = [0]
        for frac in accumulate(opts["fractions"][:2]):
            cuts.append(next(i + 1 for i, e in enumerate(ends) if e >= frac * ends[-1]))
        cuts.append(len(lines))
        k = self.splits.index(split)
        for i in range(cuts[k], cuts[k + 1]):
            yield paths[0], i + 1, lines[i]


for _spec in (TextFolder(), TinyShakespeare()):
    register_corpus(_spec)
