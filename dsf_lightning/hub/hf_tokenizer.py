"""A Hugging Face ``tokenizers``-library ``tokenizer.json`` for a model folder, written only where it gives
exactly this library's ids.

The name ``tokenizer.json`` belongs to the ``tokenizers`` library on the Hub (``Tokenizer.from_file``,
``transformers`` and the Hub's widgets read it), so a folder keeps this library's own tokenizer in
``dsf_tokenizer.json`` and writes ``tokenizer.json`` as a real ``tokenizers`` file when, and only when, a
``tokenizers`` pipeline reproduces :meth:`Tokenizer.tokenize_line` + the vocabulary's ids exactly:

* ``word`` (without ``lowercase``) and ``char`` in ``mode="ptb"`` (both ``str.split()`` on whitespace):
  a ``Replace`` normalizer turning U+001C..U+001F into spaces (Python's ``str.split`` treats those four
  separators as whitespace, Rust's ``char::is_whitespace`` does not; every other whitespace code point
  agrees), ``WhitespaceSplit``, a ``WordLevel`` model over the vocabulary (its ``<unk>`` for unknown
  words) and a ``TemplateProcessing`` post-processor appending ``<eos>`` (``$A <eos>``);
* ``char`` in ``mode="plain"``: a ``Replace`` normalizer turning spaces into the space symbol, a ``Split``
  pre-tokenizer isolating every code point, the same ``WordLevel`` model and ``<eos>``.

Nothing is written for the DSF subword splitter (its vowel rules are no ``tokenizers`` model), for
``word`` with ``lowercase`` (``tokenizers``' ``Lowercase`` maps characters one by one, Python's
``str.lower`` handles a word-final capital sigma) or for tokenizers registered by users.

A model whose config.json names the ``ptb`` (word) or ``ptb-char`` (character, ``mode="ptb"``) text
normalizer gets it in front of that pipeline, as a sequence of ``tokenizers`` normalizers (regex
replacements, ``NFKD``, ``StripAccents``, ``Lowercase``), so ``Tokenizer.from_file(path).encode(raw).ids``
gives the Scorer's ids on raw text ("The Market rose 3.5% to $1,200 on Monday."). Each sentence end inside
a line becomes ``<eos>``, as the Scorer ends each sentence. It is exact on every line we compared (see
tests/hub/test_hf_tokenizer.py: newswire, Tiny Shakespeare, WikiText-2, PTB); the differences left are
edge cases a regex pipeline cannot express: an empty line gives ``[<eos>]`` there and nothing here; a
raw ``<eos>`` written at the end of a line after a sentence end; a special such as ``<UNK>`` written in
capitals (lowercased there, kept here); a ``ptb-char`` line already spelled out (``t h e _ c a t``), which
the Scorer keeps as it is and ``tokenizers`` normalizes again. Other normalizers (``imdb``, registered
ones) are not expressed: the file then reads text already normalized. The file is built with the
``tokenizers`` library itself (a dependency).
"""

from __future__ import annotations

import json

from ..data.normalize import _ABBREVIATIONS, _AMBIGUOUS, _PTB_CHARS, _TRANSLATE, PTBCharNormalizer
from ..data.tokenizers import CharTokenizer, Tokenizer, WordTokenizer
from ..data.vocab import Vocabulary

# Python's str.split() whitespace minus Rust's char::is_whitespace: the four information separators
PY_ONLY_WHITESPACE = "[\u001c-\u001f]"
ANY_CODE_POINT = r"[\s\S]"  # Oniguruma (tokenizers' regex engine) has no (?s); this matches every code point
#: the text normalizers a tokenizers pipeline expresses, for the tokenizer kinds they read
EXPRESSED = {"ptb": "word", "ptb-char": "char"}

# data.normalize's PTB rules as Oniguruma regexes over whitespace-separated tokens ((?<!\S) / (?!\S): a token's
# start / end; \K: what comes before it is matched but not replaced, since Replace writes a fixed string)
_LEAD, _LEAD_NO_QUOTE = r"\"'`(\[{<", r"\"`(\[{<"
_TRAIL, _TRAIL_NO_DOT = r"\"'`)\]}>,;:!?.", r"\"'`)\]}>,;:!?"
_NUMBER = r"[+-]?(?:\d[\d,]*(?:[.:]\d+)*|\.\d+)(?:(?:\\?/|-)\d[\d,.]*)?"
_SPECIAL = r"<[^<>\s]+>"
_KEPT_QUOTE = r"(?!(?:s|re|ve|m|ll|d|\d0s)?[^a-z0-9\s]*(?!\S))"  # after a leading ': it is stripped, not kept
# placeholders (no text holds them: control characters neither Python nor Rust splits on): a sentence end,
# an abbreviation's period, a plural possessive's quote
_END, _ABBR, _POSS = "\u0003", "\u0001", "\u0002"


def _ptb_steps(end: str | None) -> list:
    """tokenizers normalizers writing a raw line in data.normalize's ``ptb`` form, each sentence end inside the
    line as ``end`` (None: left as the placeholder ``_END``)."""
    from tokenizers import Regex
    from tokenizers import normalizers as N

    def rx(pattern: str, content: str):
        return N.Replace(Regex(pattern), content)

    plain, ambiguous = "|".join(sorted(_ABBREVIATIONS - _AMBIGUOUS)), "|".join(sorted(_AMBIGUOUS))
    token_start = rf"(?:(?<!\S)[{_LEAD}]*|-)"  # an abbreviation's stem: after leading quotes, or the last hyphen
    steps = [N.Replace(chr(code), text) for code, text in _TRANSLATE.items()]
    steps += [
        N.NFKD(), N.StripAccents(), N.Replace("--", " -- "), rx(PY_ONLY_WHITESPACE, " "),
        rx(r"(?<!\S)N(?!\S)", "0"),  # the number symbol survives Lowercase as a number
        # the last period of a token's trailing punctuation, after an abbreviation (u.s. / a. / mr. / no. N): kept
        rx(rf"{token_start}(?:[A-Za-z0-9.]*\.[A-Za-z0-9.]*[A-Za-z0-9]|[A-Za-z]|(?i:{plain}))\K\.(?=[{_TRAIL_NO_DOT}]*(?!\S))", _ABBR),
        rx(rf"{token_start}(?i:{ambiguous})\K\.(?=[{_TRAIL_NO_DOT}]*(?:\s*$|\s++[{_LEAD}]*+(?!\p{{Lu}})))", _ABBR),
        # a sentence ends after a token whose trailing punctuation holds ! or ? or exactly one period
        rx(rf"(?:(?<!\S)|(?<=[^\s{_TRAIL}]))(?:(?=[{_TRAIL}]*[!?])[{_TRAIL}]+|[{_TRAIL_NO_DOT}]*\.[{_TRAIL_NO_DOT}]*)(?!\S)\K", f" {_END} "),
        N.Lowercase(),
        # investors' keeps its quote (unless the word's leading punctuation, stripped, ends with a quote)
        rx(rf"(?<!\S)(?![{_LEAD}]*'{_KEPT_QUOTE}[^{_LEAD}])\S*s\K'(?!\S)", _POSS),
        # leading quotes and brackets, but not the quote of 's 're '80s or a lone ' with nothing word-like after it
        rx(rf"(?<!\S)(?!{_SPECIAL}(?!\S))(?:[{_LEAD_NO_QUOTE}]|'{_KEPT_QUOTE})+", ""),
        rx(rf"(?<!\S)(?!{_SPECIAL}(?!\S)|'(?!\S))\S*?\K[{_TRAIL}]+(?!\S)", ""),  # trailing punctuation
        N.Replace(_ABBR, "."), N.Replace(_POSS, "'"),
        rx(rf"(?<!\S)(?:[a-z]{{0,3}}\$|#)\K(?=(?:{_NUMBER}|%)(?!\S))", " "),  # $3 -> $ 3
        rx(r"(?<=\S)\K(?=%(?!\S))", " "),
        rx(r"(?<=\S)\K(?=n't(?!\S))", " "),  # Treebank clitics
        rx(r"(?<=[a-z0-9])\K(?='(?:s|re|ve|m|ll|d)(?!\S))", " "),
        rx(r"(?<=s)\K(?='(?!\S))", " "),
        rx(r"(?<!\S)cannot(?!\S)", "can not"),
        rx(rf"(?<!\S)(?:{_NUMBER}|%|0)(?!\S)", "N"),
        # punctuation-only tokens dropped, but $ # & ' \* \*\* N and specials such as <unk>
        rx(rf"(?<!\S)(?!(?:\$|#|&|'|\\\*|\\\*\\\*|N|{_SPECIAL})(?!\S))[^\sa-z0-9{_END}]+(?!\S)", ""),
        rx(r"(?<!\\)/", r"\/"),
        # empty sentences dropped; the line's last sentence end is the post-processor's <eos>
        rx(rf"^(?:\s*{_END})+", ""), rx(rf"{_END}(?:\s*{_END})+", _END), rx(rf"\s*{_END}\s*$", ""),
    ]
    if end is not None:
        steps.append(N.Replace(_END, f" {end} "))
    return steps


def _ptb_char_steps(eos: str, space: str) -> list:
    """tokenizers normalizers writing a raw line in data.normalize's ``ptb-char`` form: the ``ptb`` form
    spelled out (``space`` between words, characters outside PTB-char's inventory dropped)."""
    from tokenizers import Regex
    from tokenizers import normalizers as N

    inventory = "".join("\\" + c if c in "\\-[]^" else c for c in sorted(_PTB_CHARS))
    return [
        *_ptb_steps(None),
        N.Replace(Regex(rf"[^{inventory}\s{_END}]"), ""), N.Replace(Regex(r"\s+"), " "), N.Strip(),
        N.Replace(Regex(rf"\s*{_END}\s*"), _END), N.Replace(" ", space),
        N.Replace(Regex(r"(?<=\S)\K(?=\S)"), " "),  # every symbol a token: t h e _ c a t
        N.Replace(_END, eos),
    ]


def _pipeline(tokenizer: Tokenizer, normalize: str | None) -> tuple[list, object] | None:
    """``(normalizers, pre_tokenizer)`` reproducing ``normalize`` + ``tokenizer``'s split of a line, or None if
    none is exact."""
    from tokenizers import Regex
    from tokenizers import normalizers as N
    from tokenizers import pre_tokenizers as P

    whitespace = ([N.Replace(Regex(PY_ONLY_WHITESPACE), " ")], P.WhitespaceSplit())
    if type(tokenizer) is WordTokenizer and not tokenizer.lowercase:
        return ([*_ptb_steps(tokenizer.eos), *whitespace[0]], whitespace[1]) if normalize == "ptb" and tokenizer.eos else whitespace
    if type(tokenizer) is CharTokenizer:
        if tokenizer.mode == "ptb":
            if normalize == "ptb-char" and tokenizer.eos:
                return [*_ptb_char_steps(tokenizer.eos, PTBCharNormalizer.space), *whitespace[0]], whitespace[1]
            return whitespace
        return [N.Replace(" ", tokenizer.space)], P.Split(Regex(ANY_CODE_POINT), behavior="isolated", invert=False)
    return None


def _absent(vocab: Vocabulary) -> str:
    """An unknown-token name the closed vocabulary does not hold (so unknown symbols stay an error)."""
    name = "<unk>"
    while name in vocab.stoi:
        name = f"<{name}>"
    return name


def hf_tokenizer_json(tokenizer: Tokenizer, vocab: Vocabulary, normalize: str | None = None, *, symbols: dict | None = None) -> str | None:
    """The ``tokenizers``-library JSON giving ``vocab.encode(tokenizer.tokenize_line(line))`` for every line
    (after the text normalizer ``normalize``, config.json's, where :data:`EXPRESSED` holds it), or None where
    no ``tokenizers`` pipeline is exact (see the module docstring). ``symbols``: the WordLevel vocabulary
    written instead of ``vocab``'s (the load check compares the pipeline alone, without 10,000 symbols)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import normalizers, processors
    from tokenizers.models import WordLevel

    pipeline = _pipeline(tokenizer, normalize)
    if pipeline is None or tokenizer.eos != vocab.eos:
        return None
    steps, pre_tokenizer = pipeline
    # a closed vocabulary (characters) has no <unk>: tokenizers then refuses an unknown symbol, as Scorer does
    unk = vocab.unk if vocab.unk is not None else _absent(vocab)
    hf = HFTokenizer(WordLevel(dict(vocab.stoi) if symbols is None else symbols, unk_token=unk))
    hf.normalizer = steps[0] if len(steps) == 1 else normalizers.Sequence(steps)
    hf.pre_tokenizer = pre_tokenizer
    # no added tokens: "<eos>" or "<unk>" written inside a word must stay part of that word, as here
    if tokenizer.eos is not None:
        eos = tokenizer.eos
        hf.post_processor = processors.TemplateProcessing(single=f"$A {eos}", pair=f"$A {eos} $B:1 {eos}:1", special_tokens=[(eos, vocab.eos_id)])
    return hf.to_str()


#: the parts of a tokenizer.json that decide its ids (what :func:`hf_tokenizer_json` writes for them)
ID_FIELDS = ("normalizer", "pre_tokenizer", "post_processor", "added_tokens")
PROBE_SYMBOLS = 500  # vocabulary symbols, evenly spaced, in the probe text


def hf_tokenizer_mismatch(document, tokenizer: Tokenizer, vocab: Vocabulary, normalize: str | None = None) -> str | None:
    """Why the parsed tokenizer.json ``document`` would not give the ids ``tokenizer`` + ``vocab`` give (None:
    it does): every token must have the vocabulary's id (a permuted vocabulary is caught whatever checksums say),
    the pipeline must be the exact one :func:`hf_tokenizer_json` writes (with config.json's text normalizer
    ``normalize``, or without it: folders written before it was carried), and a probe text (vocabulary
    symbols and an unknown word) must encode to the same ids."""
    specials = {s: vocab.stoi[s] for s in (vocab.eos, vocab.unk) if s is not None}  # the pipeline alone is compared
    expected = hf_tokenizer_json(tokenizer, vocab, normalize, symbols=specials)
    legacy = expected is not None and normalize in EXPRESSED and isinstance(document, dict)
    if legacy and document.get("normalizer") != json.loads(expected)["normalizer"]:
        expected = hf_tokenizer_json(tokenizer, vocab, symbols=specials)  # an older folder: its file reads normalized text
    if expected is None:
        return f"no tokenizers pipeline reproduces a {tokenizer.name!r} tokenizer, so no such file belongs to the model"
    expected = json.loads(expected)
    model = document.get("model") if isinstance(document, dict) else None
    if not (isinstance(model, dict) and model.get("type") == "WordLevel" and isinstance(model.get("vocab"), dict)):
        return "it holds no WordLevel vocabulary"
    ids = model["vocab"]
    for token, i in vocab.stoi.items():
        if ids.get(token) != i:
            return f"token {token!r:.60} has id {ids.get(token)!r:.20} there but {i} in the vocabulary"
    if len(ids) != len(vocab.stoi):
        return f"it holds {len(ids) - len(vocab.stoi):,} token(s) the vocabulary does not"
    for key in ID_FIELDS:
        if document.get(key) != expected[key]:
            return f"its {key} is not the one that reproduces the model's tokenizer"
    if model.get("unk_token") != expected["model"]["unk_token"]:
        return f"its unk_token {model.get('unk_token')!r:.60} is not {expected['model']['unk_token']!r:.60}"
    return _probe_mismatch(document, tokenizer, vocab)


def _probe_mismatch(document: dict, tokenizer: Tokenizer, vocab: Vocabulary) -> str | None:
    """The ids of a probe text through the ``tokenizers`` library against ours, where it is installed."""
    from tokenizers import Tokenizer as HFTokenizer
    specials = {vocab.eos, vocab.unk}
    symbols = [s for s in vocab.symbols if s not in specials and s.strip() == s and s]
    step = max(1, len(symbols) // PROBE_SYMBOLS)
    probe = " ".join([*symbols[::step][:PROBE_SYMBOLS], "zqxjvk\u00e9"])
    try:
        ours = vocab.encode(tokenizer.tokenize_line(probe))
    except ValueError:  # a closed vocabulary without the probe's unknown word: probe its symbols only
        probe = probe.rsplit(" ", 1)[0]
        ours = vocab.encode(tokenizer.tokenize_line(probe))
    # the normalizer is pinned above (the exact one); the probe, text already normalized, checks the rest
    document = {**document, "normalizer": None} if (document.get("normalizer") or {}).get("type") == "Sequence" else document
    try:
        theirs = HFTokenizer.from_str(json.dumps(document)).encode(probe).ids
    except Exception as err:  # noqa: BLE001 - whatever the library refuses, the file does not give our ids
        return f"the tokenizers library cannot use it ({type(err).__name__}: {str(err)[:120]})"
    if theirs != ours:
        at = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
        return f"a probe text encodes to other ids (from token {at}: {theirs[at:at + 3]} there, {ours[at:at + 3]} here)"
    return None
