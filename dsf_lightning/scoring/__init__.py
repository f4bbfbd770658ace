"""Score text with a pretrained recurrent language model: per-token log-probabilities, perplexity, bpc.

>>> scorer = from_pretrained("delta-rnn-ptb")                      # doctest: +SKIP
>>> s = scorer.score("the market rose sharply")                    # doctest: +SKIP
>>> s.tokens, s.logprob, s.ppl                                     # doctest: +SKIP
(['the', 'market', 'rose', 'sharply', '<eos>'], -31.2, 516.6)
>>> scorer.score_document("valid.txt").ppl                         # doctest: +SKIP

Conventions (the same for word, character and subword models; the pretrained's own tokenizer is used):

* A *text* is a sentence: one line, tokenized by the model's tokenizer, which appends the end symbol
  (``<eos>``). A text with newlines is several lines scored as one sequence.
* The context before the first token is the end-of-sentence symbol: models are trained on a stream
  in which every sentence follows ``<eos>``. So a sentence is scored by feeding ``<eos>`` to the zero
  state, then every token of the sentence, and every token (its final ``<eos>`` included) is
  predicted from its history. For a vocabulary without an end symbol (text8's single stream) the
  first token of a sequence is context only and is not scored.
* ``logprobs`` are natural logs; ``surprisal`` is in bits (``-logprob / ln 2``); ``ppl`` is
  ``exp(-mean logprob)``; ``bpc`` (character models only) is the mean surprisal in bits per symbol.
* Out-of-vocabulary words become the unknown symbol (``<unk>``) and are counted in ``num_oov``
  (``oov_rate`` = ``num_oov / num_tokens``; a literal ``<unk>`` in the text is a vocabulary symbol, not
  an OOV word). A rate above :data:`OOV_WARN_RATE` (5%) logs a warning: the perplexity of such text says
  little. A closed vocabulary (characters) has no unknown symbol, so an unknown symbol is a
  :class:`ScoringError` that names it and lists what the vocabulary contains.
* Text is first normalized like the model's training data (:mod:`dsf_lightning.data.normalize`): a
  model folder records its normalizer (``"normalize": "ptb"`` in config.json: lowercase, punctuation
  dropped, numbers as ``N``, Treebank clitics, one sentence per line) and it is applied by default;
  ``normalize="none"`` scores the text as it is, ``normalize="ptb"`` asks for one. Results keep the
  original ``text``; ``tokens`` are what the model read.

:meth:`Scorer.score` batches a list of sentences (sorted by length, right-padded, padding masked out
— padding never changes a sentence's numbers, results come back in input order);
``carry_state=True`` scores the list as one continuous stream (a document) instead.
:meth:`Scorer.score_document` streams a document of any length (lines read lazily from a file, or
any iterable of lines) in windows of ``window`` tokens with the recurrent state carried across them:
the same numbers as one pass, with memory that does not grow with the document (running float64
sums only, unless ``per_token=True``). :meth:`Scorer.iter_token_scores` yields ``(token, logprob)``
pairs for callers who want per-token output without holding it.

Modules: :mod:`.scorer` (:class:`Scorer`, :func:`from_pretrained`), :mod:`.results` (:class:`SentenceScore`,
:class:`DocumentScore`, :class:`ScoringError`), :mod:`.lines` (the text as parts in bounded memory),
:mod:`.generation` (:meth:`Scorer.generate`). This package only re-exports.
"""

from .lines import MAX_LINE_BYTES, READ_LIMIT  # noqa: F401 - the reading limits, read here by callers
from .results import LN2, DocumentScore, ScoringError, SentenceScore  # noqa: F401
from .scorer import DECODE_ELEMENTS, DEFAULT_WARMUP, OOV_WARN_RATE, STREAM_BLOCK, Scorer, from_pretrained  # noqa: F401

__all__ = [
    "DocumentScore",
    "Scorer",
    "ScoringError",
    "SentenceScore",
    "from_pretrained",
]
