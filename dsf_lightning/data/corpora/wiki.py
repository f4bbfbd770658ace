"""Wikipedia-derived corpora: WikiText-2 and text8.

- ``wikitext2``: ``wikitext2/wiki.{train,valid,test}.tokens``, words + one ``<eos>`` per line
  (blank lines included, as the pytorch/examples and AWD-LSTM loaders count: valid 217,646,
  test 245,569). Only valid/test exist offline here: the default load raises :class:`CorpusError`
  naming ``wiki.train.tokens``; ``splits=("valid", "test")`` loads them with a vocabulary built
  from those two splits (not the official 33,278-word one).
- ``text8``: the first 100M characters of Wikipedia (``text8/text8`` or ``text8/text8.zip``),
  split into the first 90M / next 5M / last 5M characters. ``level="char"``: 27 symbols
  (a-z and ``_`` for space), no end-of-line symbol; ``level="word"``: words seen at least
  ``min_count`` (5) times in train, others ``<unk>``.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

from ..tokenizers import CharTokenizer, Tokenizer, WordTokenizer
from ..vocab import Vocabulary
from .base import CorpusSpec, Line, register_corpus
from .files import CorpusError, FileSpec

WIKITEXT2_TRAIN_GIT_BLOB = "2d84b35af79e411d73ea7cae83c73964c6ac83b4"  # sha256 unknown (no copy here)
WIKITEXT2_SHA256 = {
    "valid": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
    "test": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
}


class WikiText2(CorpusSpec):
    name = "wikitext2"
    description = "WikiText-2 v1 (tokenized, <unk> version)"
    url = "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip"
    folder = "wikitext2"
    howto = "unpack wikitext-2/wiki.{train,valid,test}.tokens from the archive into <data root>/wikitext2/"
    unk = "<unk>"
    dataset_id, language = "wikitext", "en"

    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        return {
            "train": [FileSpec("wikitext2/wiki.train.tokens", git_blob=WIKITEXT2_TRAIN_GIT_BLOB)],
            "valid": [FileSpec("wikitext2/wiki.valid.tokens", sha256=WIKITEXT2_SHA256["valid"])],
            "test": [FileSpec("wikitext2/wiki.test.tokens", sha256=WIKITEXT2_SHA256["test"])],
        }

    def tokenizer(self, opts: dict) -> Tokenizer:
        return WordTokenizer()


class Text8(CorpusSpec):
    name = "text8"
    description = "text8, first 100M characters of cleaned English Wikipedia (Mahoney)"
    url = "http://mattmahoney.net/dc/text8.zip"
    folder = "text8"
    howto = "put text8.zip (or the unzipped file text8) into <data root>/text8/"
    language = "en"
    defaults = {"level": "char", "min_count": 5, "split_chars": (90_000_000, 5_000_000, 5_000_000)}
    _chunk = 1 << 20  # lines handed to the tokenizer (the file is one 100M-character line)

    def options(self, given: dict) -> dict:
        opts = super().options(given)
        if opts["level"] not in ("char", "word"):
            raise CorpusError(f"text8: level must be 'char' or 'word', got {opts['level']!r}")
        return opts

    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        spec = FileSpec("text8/text8", alternatives=(FileSpec("text8/text8.zip", url=self.url),))
        return {split: [spec] for split in self.splits}

    def tokenizer(self, opts: dict) -> Tokenizer:
        return CharTokenizer(eos=None) if opts["level"] == "char" else WordTokenizer(eos=None)

    def unk_symbol(self, opts: dict) -> str | None:
        return "<unk>" if opts["level"] == "word" else None

    def vocabulary(self, tokenizer: Tokenizer, tokenized: dict[str, list], opts: dict) -> Vocabulary:
        if opts["level"] == "char":  # min_count is the word-level cut-off
            opts = {**opts, "min_count": 1}
        return super().vocabulary(tokenizer, tokenized, opts)

    def lines(self, split: str, paths: list[Path], opts: dict) -> Iterator[Line]:
        path = paths[0]
        if path.suffix == ".zip":
            with path.open("rb") as raw, zipfile.ZipFile(raw) as zf:  # path.open: the bytes load_corpus hashed
                text = zf.read("text8").decode("ascii")
        else:
            text = path.read_text(encoding="ascii")
        sizes = opts["split_chars"]
        start = sum(sizes[: self.splits.index(split)])
        part = text[start : start + sizes[self.splits.index(split)]]
        pos, n = 0, 0
        while pos < len(part):  # chunks; word level cuts only at spaces
            end = min(pos + self._chunk, len(part))
            if opts["level"] == "word" and end < len(part):
                end = part.rfind(" ", pos, end) + 1 or end
            n += 1
            yield path, n, part[pos:end]
            pos = end


for _spec in (WikiText2(), Text8()):
    register_corpus(_spec)
