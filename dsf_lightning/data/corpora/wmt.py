"""Non-English WMT news data of Botha & Blunsom (2014), "DATA-S": cs, de, es, fr, ru.

``wmt_botha2014_small/<language>/{train,valid,test}.txt``: lower-cased, tokenized, ``<unk>`` for
rare words, one sentence per line; words + one ``<eos>`` per line. Option ``language`` (required).
The train files are missing offline here: load with ``splits=("valid", "test")`` (vocabulary built
from those splits, see :mod:`.base`). Train files are checked by their git blob ids.
"""

from __future__ import annotations

from ..tokenizers import Tokenizer, WordTokenizer
from .base import CorpusSpec, register_corpus
from .files import CorpusError, FileSpec

COMMIT = "06f4e51bb6d8f28dee6da245a6e5cc4e006555d7"
RAW = f"https://raw.githubusercontent.com/zh3nis/lstm-syl/{COMMIT}/data/{{lang}}/{{split}}.txt"
SHA256 = {
    ("cs", "valid"): "3a32e8a1060a1f183a6de5cb4ad9ff9c77d1208adb75dd8757c3a1a6f2e2e734",
    ("cs", "test"): "f305f83390f8f3752b80c4c3bd5a18cf81bc1d27dc802d75badca931a3f963a7",
    ("de", "valid"): "77535be8ad7113f8f461aa1939641581f5b0616c4475bc266be160cd4564f3a3",
    ("de", "test"): "ddd3fa872e2a3ddc0c18c9d9cdfa17b9e6b740d903118926a97978829b3ecc7e",
    ("es", "valid"): "cff63248cbc4f0091c821d03aa145d21a0be5977cbfef61c5c76985d031d5b72",
    ("es", "test"): "4c89745d1be9c2ff82ab307950173830eb145ceef84a5e3e367bd195c5126322",
    ("fr", "valid"): "eac556920caabbb276c806e55d0b6765e1bf71fe8355ae2b5a6e6040abe415fb",
    ("fr", "test"): "ff5a27a00969530ef66e4ec28f2404c5c376bff99169d54e8f05ea567beed407",
    ("ru", "valid"): "a7e43647b07aa107c064d08a14cd896828b4dd406dced4c1d6786f9c27f74e4e",
    ("ru", "test"): "644112ac35c4b9d5ef2b0b97267cf5a423e40d254e658dad48084643450776da",
}
TRAIN_GIT_BLOB = {
    "cs": "de36fee879b23d7be88b07bbd4bff129384128a2",
    "de": "70082e26997237e4cf658d6b9e797dfc70ebe3f7",
    "es": "5178b3398ca4dc50487dc9fc4eb1334824d719b3",
    "fr": "04a34536f9ba19433190c970328dfb688daeb623",
    "ru": "ac0db77dcd3dda95d4709cbfd2c7fde0c5a55d3a",
}
LANGUAGES = tuple(TRAIN_GIT_BLOB)


class WMTSmall(CorpusSpec):
    name = "wmt-small"
    description = "WMT news LM data of Botha & Blunsom 2014 (DATA-S), word level"
    url = f"https://github.com/zh3nis/lstm-syl/tree/{COMMIT}/data"
    folder = "wmt_botha2014_small"
    howto = "put <language>/{train,valid,test}.txt into <data root>/wmt_botha2014_small/"
    defaults = {"language": None}
    unk = "<unk>"

    def options(self, given: dict) -> dict:
        opts = super().options(given)
        if opts["language"] not in LANGUAGES:
            raise CorpusError(f"wmt-small: option language must be one of {LANGUAGES}, got {opts['language']!r}")
        return opts

    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        lang = opts["language"]
        out = {}
        for split in self.splits:
            url = RAW.format(lang=lang, split=split)
            path = f"{self.folder}/{lang}/{split}.txt"
            if split == "train":
                out[split] = [FileSpec(path, git_blob=TRAIN_GIT_BLOB[lang], url=url)]
            else:
                out[split] = [FileSpec(path, sha256=SHA256[lang, split], url=url)]
        return out

    def tokenizer(self, opts: dict) -> Tokenizer:
        return WordTokenizer()


register_corpus(WMTSmall())
