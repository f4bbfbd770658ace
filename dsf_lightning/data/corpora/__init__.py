"""Benchmark corpora by name, tokenized into 1-D int64 tensors per split, cached on disk.

>>> from dsf_lightning.data.corpora import load_corpus, list_corpora
>>> corpus = load_corpus("ptb", data_root="/data")          # or set DSF_DATA_ROOT
>>> corpus.splits["train"].shape, len(corpus.vocab)
(torch.Size([929589]), 10000)

One module per family: :mod:`.ptb` (ptb, ptb-char, ptb-subword), :mod:`.wiki` (wikitext2, text8),
:mod:`.imdb` (imdb-subword), :mod:`.wmt` (wmt-small), :mod:`.text` (text-folder, tinyshakespeare),
:mod:`.unavailable` (one-billion-word, srnn-wikipedia, gutenberg). :mod:`.base` holds the loader,
:mod:`.files` paths / checksums / download, :mod:`.cache` the tokenized cache.
"""

# Importing the modules registers their corpora.
from . import imdb, ptb, text, unavailable, wiki, wmt  # noqa: E402,F401
from .base import (
    SPLITS,
    Corpus,
    CorpusSpec,
    describe_missing,
    find_corpus_spec,
    get_corpus_spec,
    list_corpora,
    load_corpus,
    normalizer_for_corpus,
    register_corpus,
    verify_corpus,
)
from .files import (
    CACHE_DIR_ENV,
    DATA_ROOT_ENV,
    CorpusError,
    FileSpec,
    default_cache_dir,
    download,
    file_digests,
    resolve_data_root,
    verify_file,
    verify_files,
)

__all__ = [
    "CACHE_DIR_ENV",
    "DATA_ROOT_ENV",
    "SPLITS",
    "Corpus",
    "CorpusError",
    "CorpusSpec",
    "FileSpec",
    "default_cache_dir",
    "describe_missing",
    "download",
    "file_digests",
    "find_corpus_spec",
    "get_corpus_spec",
    "list_corpora",
    "load_corpus",
    "normalizer_for_corpus",
    "register_corpus",
    "resolve_data_root",
    "verify_corpus",
    "verify_file",
    "verify_files",
]
