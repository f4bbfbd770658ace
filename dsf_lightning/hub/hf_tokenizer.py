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
``str.lower`` handles a word-final capital sigma) or for tokenizers registered by users. The JSON is
built here, without importing ``tokenizers`` (not a dependency); tests load it with the library and
compare ids on PTB.
"""

from __future__ import annotations

import json

from ..data.tokenizers import CharTokenizer, Tokenizer, WordTokenizer
from ..data.vocab import Vocabulary

# Python's str.split() whitespace minus Rust's char::is_whitespace: the four information separators
PY_ONLY_WHITESPACE = "[\u001c-\u001f]"
ANY_CODE_POINT = r"[\s\S]"  # Oniguruma (tokenizers' regex engine) has no (?s); this matches every code point


def _pipeline(tokenizer: Tokenizer) -> tuple[dict, dict] | None:
    """``(normalizer, pre_tokenizer)`` reproducing ``tokenizer``'s split of a line, or None if none is exact."""
    whitespace = ({"type": "Replace", "pattern": {"Regex": PY_ONLY_WHITESPACE}, "content": " "}, {"type": "WhitespaceSplit"})
    if type(tokenizer) is WordTokenizer and not tokenizer.lowercase:
        return whitespace
    if type(tokenizer) is CharTokenizer:
        if tokenizer.mode == "ptb":
            return whitespace
        return (
            {"type": "Replace", "pattern": {"String": " "}, "content": tokenizer.space},
            {"type": "Split", "pattern": {"Regex": ANY_CODE_POINT}, "behavior": "Isolated", "invert": False},
        )
    return None


def _absent(vocab: Vocabulary) -> str:
    """An unknown-token name the closed vocabulary does not hold (so unknown symbols stay an error)."""
    name = "<unk>"
    while name in vocab.stoi:
        name = f"<{name}>"
    return name


def hf_tokenizer_json(tokenizer: Tokenizer, vocab: Vocabulary) -> str | None:
    """The ``tokenizers``-library JSON giving exactly ``vocab.encode(tokenizer.tokenize_line(line))`` for
    every line, or None where no ``tokenizers`` pipeline is exact (see the module docstring)."""
    pipeline = _pipeline(tokenizer)
    if pipeline is None or tokenizer.eos != vocab.eos:
        return None
    normalizer, pre_tokenizer = pipeline
    post = None
    if tokenizer.eos is not None:
        eos = tokenizer.eos
        special = {"SpecialToken": {"id": eos, "type_id": 0}}
        post = {
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}}, special],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, special,
                     {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": eos, "type_id": 1}}],
            "special_tokens": {eos: {"id": eos, "ids": [vocab.eos_id], "tokens": [eos]}},
        }
    document = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        # no added tokens: "<eos>" or "<unk>" written inside a word must stay part of that word, as here
        "added_tokens": [],
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post,
        "decoder": None,
        # a closed vocabulary (characters) has no <unk>: tokenizers then refuses an unknown symbol, as Scorer does
        "model": {"type": "WordLevel", "vocab": dict(vocab.stoi), "unk_token": vocab.unk if vocab.unk is not None else _absent(vocab)},
    }
    return json.dumps(document, ensure_ascii=False, indent=None)


#: the parts of a tokenizer.json that decide its ids (what :func:`hf_tokenizer_json` writes for them)
ID_FIELDS = ("normalizer", "pre_tokenizer", "post_processor", "added_tokens")
PROBE_SYMBOLS = 500  # vocabulary symbols, evenly spaced, in the probe text


def hf_tokenizer_mismatch(document, tokenizer: Tokenizer, vocab: Vocabulary) -> str | None:
    """Why the parsed tokenizer.json ``document`` would not give the ids ``tokenizer`` + ``vocab`` give (None:
    it does): every token must have the vocabulary's id (a permuted vocabulary is caught whatever checksums say),
    the pipeline must be the exact one :func:`hf_tokenizer_json` writes, and where the ``tokenizers`` library is
    installed a probe text (vocabulary symbols and an unknown word) must encode to the same ids."""
    expected = hf_tokenizer_json(tokenizer, vocab)
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
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:  # not a dependency: the checks above already pin every id
        return None
    specials = {vocab.eos, vocab.unk}
    symbols = [s for s in vocab.symbols if s not in specials and s.strip() == s and s]
    step = max(1, len(symbols) // PROBE_SYMBOLS)
    probe = " ".join([*symbols[::step][:PROBE_SYMBOLS], "zqxjvk\u00e9"])
    try:
        ours = vocab.encode(tokenizer.tokenize_line(probe))
    except ValueError:  # a closed vocabulary without the probe's unknown word: probe its symbols only
        probe = probe.rsplit(" ", 1)[0]
        ours = vocab.encode(tokenizer.tokenize_line(probe))
    try:
        theirs = HFTokenizer.from_str(json.dumps(document)).encode(probe).ids
    except Exception as err:  # noqa: BLE001 - whatever the library refuses, the file does not give our ids
        return f"the tokenizers library cannot use it ({type(err).__name__}: {str(err)[:120]})"
    if theirs != ours:
        at = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
        return f"a probe text encodes to other ids (from token {at}: {theirs[at:at + 3]} there, {ours[at:at + 3]} here)"
    return None
