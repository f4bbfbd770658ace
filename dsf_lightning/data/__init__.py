"""The data layer: vocabularies, tokenizers and benchmark corpora.

:mod:`.vocab` (:class:`Vocabulary`), :mod:`.tokenizers` (word / char / DSF sec. 4.3 subword
tokenizers by name) and :mod:`.corpora` (:func:`load_corpus` by name, with a data root, file
checksums and a tokenized cache).
"""

from .corpora import Corpus, CorpusError, list_corpora, load_corpus, verify_corpus, verify_files
from .tokenizers import (
    CharTokenizer,
    SubwordTokenizer,
    Tokenizer,
    TokenizerError,
    WordTokenizer,
    get_tokenizer,
    list_tokenizers,
    register_tokenizer,
    tokenizer_from_json,
)
from .vocab import Vocabulary, VocabularyError

__all__ = [
    "CharTokenizer",
    "Corpus",
    "CorpusError",
    "SubwordTokenizer",
    "Tokenizer",
    "TokenizerError",
    "Vocabulary",
    "VocabularyError",
    "WordTokenizer",
    "get_tokenizer",
    "list_corpora",
    "list_tokenizers",
    "load_corpus",
    "register_tokenizer",
    "tokenizer_from_json",
    "verify_corpus",
    "verify_files",
]
