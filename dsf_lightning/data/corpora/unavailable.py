"""Corpora of the papers that are not available offline, registered for informative errors.

- ``one-billion-word`` (Chelba et al. 2014; RAN paper): 99 training shards + held-out shard 0.
  Registered with its canonical archive and file names; even when present it is refused, since
  0.8B tokens do not fit this in-memory loader.
- ``srnn-wikipedia`` (Daniluk et al. 2017; sr-RNN paper sec. 5): 7,500 English Wikipedia
  articles, 22.5M / 1.2M / 1.2M words, the 77k most frequent train words as vocabulary. The
  layout ``srnn_wikipedia/{train,valid,test}.txt`` is this library's convention (the archive's own
  file names are not recorded here); when present it loads as a word corpus.
- ``gutenberg`` (MSR Sentence Completion Challenge training novels; IRLM paper sec. 5.2): about
  500 19th-century novels, ``gutenberg/Holmes_Training_Data/*.TXT``. There is no standard split,
  so it is refused even when present: build train/valid/test files and use ``text-folder``.
"""

from __future__ import annotations

from pathlib import Path

from ..tokenizers import Tokenizer, WordTokenizer
from .base import CorpusSpec, register_corpus
from .files import CorpusError, FileSpec

LM1B = "1-billion-word-language-modeling-benchmark-r13output"


class OneBillionWord(CorpusSpec):
    name = "one-billion-word"
    description = "One Billion Word benchmark (Chelba et al. 2014)"
    url = f"http://www.statmt.org/lm-benchmark/{LM1B}.tar.gz"
    folder = "one_billion_word"
    howto = f"unpack the archive into <data root>/one_billion_word/ (giving {LM1B}/...)"
    splits = ("train", "test")
    language = "en"

    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        base = f"{self.folder}/{LM1B}"
        train = [
            FileSpec(f"{base}/training-monolingual.tokenized.shuffled/news.en-{i:05d}-of-00100") for i in range(1, 100)
        ]
        test = [FileSpec(f"{base}/heldout-monolingual.tokenized.shuffled/news.en.heldout-00000-of-00050")]
        return {"train": train, "test": test}

    def tokenizer(self, opts: dict) -> Tokenizer:
        return WordTokenizer()

    def check_supported(self, root: Path, opts: dict) -> None:
        raise CorpusError(
            "one-billion-word: files found, but its 0.8B tokens are too large for this in-memory loader "
            "(not supported yet)"
        )


class SrnnWikipedia(CorpusSpec):
    name = "srnn-wikipedia"
    description = "Wikipedia corpus of Daniluk et al. 2017 used by the sr-RNN paper"
    url = "https://goo.gl/s8cyYa"
    folder = "srnn_wikipedia"
    howto = (
        "put the corpus as train.txt / valid.txt / test.txt (one sentence or paragraph per line) "
        "into <data root>/srnn_wikipedia/"
    )
    defaults = {"max_size": 77_000 + 2}  # 77k words + <eos> + <unk>
    unk = "<unk>"

    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        return {split: [FileSpec(f"{self.folder}/{split}.txt")] for split in self.splits}

    def tokenizer(self, opts: dict) -> Tokenizer:
        return WordTokenizer()


class Gutenberg(CorpusSpec):
    name = "gutenberg"
    description = "Project Gutenberg novels of the MSR Sentence Completion Challenge"
    url = "https://www.microsoft.com/en-us/research/project/msr-sentence-completion-challenge/"
    folder = "gutenberg"
    howto = "put the training novels (Holmes_Training_Data/*.TXT) into <data root>/gutenberg/Holmes_Training_Data/"
    splits = ("train",)

    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        return {"train": [FileSpec(f"{self.folder}/Holmes_Training_Data/")]}

    def tokenizer(self, opts: dict) -> Tokenizer:
        return WordTokenizer()

    def check_supported(self, root: Path, opts: dict) -> None:
        raise CorpusError(
            "gutenberg: the novels have no standard train/valid/test split; write your split as "
            "train.txt/valid.txt/test.txt and load it with load_corpus('text-folder', path=...)"
        )


for _spec in (OneBillionWord(), SrnnWikipedia(), Gutenberg()):
    register_corpus(_spec)
