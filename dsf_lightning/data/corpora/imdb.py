"""IMDB reviews (Maas et al. 2011) as a subword language-modelling corpus (DSF paper sec. 4.2-4.3).

Read from the labelled JSON Lines files ``imdb/{train,test}.jsonl.xz`` (one review per line,
``{"id", "rating", "label", "text"}``). Each review is one sequence ending in ``<eos>`` after
:func:`normalize_review`: ``<br />`` tags removed, emoticons -> ``<emo>``, accents stripped,
lower-cased, numbers -> ``<num>``, the punctuation ``. , ! ? ; : ' " ( ) -`` kept as symbols and
any other non-word character -> ``<sym>`` (the paper replaces "emoticons and special non-word
symbols with special tokens"). Words are then split into sec. 4.3 subwords with the cut-off
``min_count``. The corpus has no validation split: every ``valid_every``-th train review
(1-based line numbers 10, 20, ...; 2,500 of 25,000, half positive) is held out as ``valid``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from ..normalize import normalize_review
from ..tokenizers import SubwordTokenizer, Tokenizer
from .base import CorpusSpec, Line, register_corpus
from .files import CorpusError, FileSpec, read_lines

SHA256 = {
    "train": "895b3aaca765c0dd50172a8db7bf9b6c2c6cdb53c799eddb35e5e2fad29d1bb4",
    "test": "33fb536bf1ce694d8debb203af4d6ca791c0d7ed32675e17b74560d425bd7126",
}
IMDB_SUBWORD_MIN_COUNT = 182  # dictionary of 1,926 symbols, as the paper
class IMDBSubword(CorpusSpec):
    name = "imdb-subword"
    description = "IMDB movie reviews (Maas et al. 2011), vowel-based subwords (DSF paper sec. 4.3)"
    url = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
    folder = "imdb"
    howto = (
        "this loader reads the reviews re-packed as JSON Lines (xz): <data root>/imdb/{train,test}.jsonl.xz, "
        'one {"id", "rating", "label", "text"} object per review (aclImdb/{train,test}/{pos,neg}/*.txt)'
    )
    defaults = {"min_count": IMDB_SUBWORD_MIN_COUNT, "valid_every": 10}
    dataset_id, language = "imdb", "en"
    aliases = ("imdb",)  # the same reviews as the sentiment task's data (tasks.IMDBSentimentDataModule)

    def options(self, given: dict) -> dict:
        opts = super().options(given)
        if not isinstance(opts["valid_every"], int) or opts["valid_every"] < 0 or opts["valid_every"] == 1:
            raise CorpusError(
                f"imdb-subword: valid_every must be 0 (no valid split) or >= 2, got {opts['valid_every']!r}"
            )
        return opts

    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        train = FileSpec("imdb/train.jsonl.xz", sha256=SHA256["train"])
        test = FileSpec("imdb/test.jsonl.xz", sha256=SHA256["test"])
        return {"train": [train], "valid": [train], "test": [test]}

    def tokenizer(self, opts: dict) -> Tokenizer:
        return SubwordTokenizer(min_count=opts["min_count"])

    def lines(self, split: str, paths: list[Path], opts: dict) -> Iterator[Line]:
        every = opts["valid_every"]
        if split == "valid" and not every:
            raise CorpusError("imdb-subword: valid_every=0 means there is no valid split; do not request it")
        for path in paths:
            for i, line in enumerate(read_lines(path), 1):
                held_out = bool(every) and i % every == 0
                if split == "test" or held_out == (split == "valid"):
                    yield path, i, normalize_review(json.loads(line)["text"])


register_corpus(IMDBSubword())
