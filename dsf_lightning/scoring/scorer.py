"""The :class:`Scorer`: a pretrained language model that scores text (sentences, batches, documents of any
length) and generates it; :func:`from_pretrained` makes one. The conventions are those of
:mod:`dsf_lightning.scoring`."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._machine import check_device
from ..data.corpora import normalizer_for_corpus
from ..data.normalize import Normalizer, NormalizerError, list_normalizers, resolve_normalize
from ..data.textfile import LongWord, Part, normalized_parts
from ..hub.registry import HUB_KEYWORDS, check_keywords, dtype_argument, load_with
from ..model.pretrained import load_pretrained, save_pretrained
from .generation import generate as generate_text
from .lines import READ_LIMIT, _Counter, _iter_file_lines, _iter_given_lines, _split_text
from .results import DocumentScore, ScoringError, SentenceScore

logger = logging.getLogger(__name__)

# At most this many logits are alive at once while decoding (rows * vocabulary size): 4M floats = 16 MB.
DECODE_ELEMENTS = 1 << 22
#: Above this share of out-of-vocabulary tokens a scoring call logs a warning. PTB's own test set has 5.8%
#: <unk> tokens, all literal in the file (0% OOV by this count); raw English read by the PTB model as it
#: comes: 31% (newswire prose) to 41% (Shakespeare), normalized: 0.2% and 17% (tests/test_scoring_normalize.py).
OOV_WARN_RATE = 0.05
#: The parallel mode's default warm-up (``warmup=None``): tokens fed to each piece before its first scored
#: token, not counted (see :meth:`Scorer.score_document`).
DEFAULT_WARMUP = 64
#: The parallel mode reads a document in blocks of this many tokens, each cut into ``streams`` pieces, so
#: that memory stays bounded whatever the document's length (a block's ids and results: about 15 MB).
STREAM_BLOCK = 1 << 18



class Scorer:
    """Scores text with a pretrained model (anything with ``model``, ``vocab``, ``tokenizer``, ``info``,
    e.g. :class:`dsf_lightning.model.pretrained.Pretrained`).

    ``batch_size``: sentences per forward pass in :meth:`score`. ``window``: time steps per forward
    pass (the state is carried between windows; bounds the memory of long sentences and documents).
    The model is moved to ``device``, put in eval mode and its parameters stop requiring gradients.
    ``normalize``: the text normalizer (:mod:`dsf_lightning.data.normalize`) applied before tokenizing:
    None (default) is the model's own (``pretrained.normalize``, config.json's ``normalize``), ``"none"``
    scores text as it is, a name (``"ptb"``) or a :class:`~dsf_lightning.data.normalize.Normalizer` asks
    for that one. :attr:`normalizer` is what is applied (None for nothing).
    """

    def __init__(
        self,
        pretrained: Any,
        device: str | torch.device = "cpu",
        batch_size: int = 32,
        window: int = 256,
        normalize: str | Normalizer | None = None,
    ):
        for name, value in (("batch_size", batch_size), ("window", window)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ScoringError(f"{name} must be a positive integer, got {value!r}")
        missing = [a for a in ("model", "vocab", "tokenizer") if getattr(pretrained, a, None) is None]
        if missing:
            raise ScoringError(f"a pretrained model needs model, vocab and tokenizer; missing {missing}")
        self.pretrained = pretrained
        self.vocab = pretrained.vocab
        self.tokenizer = pretrained.tokenizer
        self.device = check_device(device, ScoringError)
        self.batch_size = batch_size
        self.window = window
        self.model = pretrained.model.to(self.device).eval()
        self.model.requires_grad_(False)
        vocab_size = getattr(getattr(self.model, "config", None), "vocab_size", None)
        if vocab_size is not None and vocab_size != len(self.vocab):
            raise ScoringError(
                f"the model predicts {vocab_size} symbols but its vocabulary has {len(self.vocab)}: "
                "they do not belong together"
            )
        tok_eos = getattr(self.tokenizer, "eos", None)
        if tok_eos is not None and tok_eos != self.vocab.eos:
            raise ScoringError(
                f"the tokenizer ends lines with {tok_eos!r} but the vocabulary's end symbol is {self.vocab.eos!r}"
            )
        self.eos_id: int | None = self.vocab.eos_id
        self.unk_id: int | None = self.vocab.unk_id
        self.char_level = getattr(self.tokenizer, "name", "") == "char"
        self._pad_id = self.eos_id if self.eos_id is not None else 0
        self._symbols = self.vocab.symbols
        self._stoi = self.vocab.stoi
        own = getattr(pretrained, "normalize", None)
        try:
            self.normalizer: Normalizer | None = resolve_normalize(normalize, own)
        except NormalizerError as err:
            if normalize is None:
                raise ScoringError(
                    f"the model's config.json asks for text normalizer {own!r:.80}, which this installation does not "
                    f"know (known: {', '.join(list_normalizers())}); upgrade dsf-lightning, or score the text as it is "
                    "with normalize='none' (dsf score --normalize none)"
                ) from None
            raise ScoringError(f"{err} (the normalize option, dsf score --normalize)") from None
        info = getattr(pretrained, "info", None)
        corpus = info.get("corpus") if isinstance(info, dict) else None
        #: the normalizer this model's training data calls for (to suggest when none is applied)
        self.own_normalize: str | None = own or (normalizer_for_corpus(corpus) if isinstance(corpus, str) else None)

    # -- construction / saving -------------------------------------------------------------------
    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        revision: str | None = None,
        *,
        cache_dir: str | os.PathLike | None = None,
        force_download: bool = False,
        local_files_only: bool = False,
        token: str | bool | None = None,
        dtype: Any = None,
        device: str | torch.device = "cpu",
        batch_size: int = 32,
        window: int = 256,
        normalize: str | Normalizer | None = None,
        **unknown,
    ) -> Scorer:
        """Resolve (hub name, repo id or local folder), load strictly and wrap a pretrained model.

        ``revision``, ``cache_dir``, ``force_download``, ``local_files_only``, ``token``: huggingface_hub's
        download keywords (only the model's files are fetched; a local folder or the bundled copy needs no
        download). ``dtype``: ``torch.float16`` / ``torch.bfloat16`` / ``torch.float32`` or its name, the
        weights cast after the strict load (log-probabilities are still computed in float32).
        ``device``, ``batch_size``, ``window``, ``normalize``: the :class:`Scorer`'s.
        """
        dtype = dtype_argument(f"{cls.__name__}.from_pretrained", dtype, unknown)  # torch_dtype= too
        check_device(device, ScoringError)  # before anything is downloaded or read
        accepted = (*HUB_KEYWORDS, "dtype", "torch_dtype", "device", "batch_size", "window", "normalize")
        check_keywords(f"{cls.__name__}.from_pretrained", unknown, accepted)
        pretrained = load_with(load_pretrained, name_or_path, revision=revision, dtype=dtype, cache_dir=cache_dir,
                               force_download=force_download, local_files_only=local_files_only, token=token)
        return cls(pretrained, device=device, batch_size=batch_size, window=window, normalize=normalize)

    def save_pretrained(self, folder: str | os.PathLike, **kw):
        """Save the wrapped pretrained model with :func:`dsf_lightning.model.pretrained.save_pretrained`."""
        return save_pretrained(self.pretrained, folder, **kw)

    def __repr__(self) -> str:
        return (
            f"Scorer(vocab={len(self.vocab):,}, tokenizer={getattr(self.tokenizer, 'name', '?')!r}, "
            f"device={str(self.device)!r}, batch_size={self.batch_size}, window={self.window})"
        )

    # -- encoding --------------------------------------------------------------------------------
    def _encode_line(self, line: str, where: str) -> tuple[list[int], list[int], list[str]]:
        """``(ids, oov_positions, oov_words)`` of one line (the end symbol included)."""
        return self._encode_tokens(self.tokenizer.tokenize_line(line), where)

    def _encode_part(self, text: str, where: str, continued: bool, last: bool) -> tuple[list[int], list[int], list[str]]:
        """:meth:`_encode_line` for one part of a line (see :meth:`Tokenizer.tokenize_part`)."""
        if isinstance(text, LongWord):  # a word too long to hold: one unknown word
            if self.unk_id is None:
                raise ScoringError(
                    f"{where}: a word longer than {READ_LIMIT:,} bytes, and this model's closed vocabulary has no "
                    "unknown symbol to read it as; split or remove it"
                )
            boundary = getattr(self.tokenizer, "boundary", None) if continued else None
            ids = ([self._stoi[boundary]] if boundary in self._stoi else []) + [self.unk_id]
            return ids, [len(ids) - 1], [text]
        if last and not continued:
            return self._encode_line(text, where)
        return self._encode_tokens(self.tokenizer.tokenize_part(text, continued=continued, last=last), where)

    def _encode_tokens(self, tokens: list[str], where: str) -> tuple[list[int], list[int], list[str]]:
        stoi = self._stoi
        try:
            return [stoi[t] for t in tokens], [], []
        except KeyError:
            pass
        if self.unk_id is None:
            bad = next(t for t in tokens if t not in stoi)
            raise ScoringError(self._closed_message(bad, where))
        ids, positions, words = [], [], []
        for i, t in enumerate(tokens):
            j = stoi.get(t)
            if j is None:
                j = self.unk_id
                positions.append(i)
                words.append(t)
            ids.append(j)
        return ids, positions, words

    def _closed_message(self, bad: str, where: str) -> str:
        code = f" (U+{ord(bad):04X})" if len(bad) == 1 else f" ({len(bad):,} characters)" if len(bad) > 80 else ""
        shown = self._symbols if len(self._symbols) <= 120 else self._symbols[:100]
        listing = " ".join(repr(s) for s in shown)
        more = f" ... and {len(self._symbols) - len(shown)} more" if len(shown) < len(self._symbols) else ""
        hint = ""
        if getattr(self.tokenizer, "mode", None) == "ptb" and len(bad) > 1:
            space = getattr(self.tokenizer, "space", "_")
            hint = (
                f"; this character model reads PTB-char text: symbols separated by spaces and {space!r} "
                f"between words, e.g. 'a {space} c a t'"
            )
        return (
            f"symbol {bad!r:.80}{code} in {where} is not in the model's closed vocabulary (it has no unknown "
            f"symbol); the vocabulary's {len(self._symbols)} symbols are: {listing}{more}{hint}"
        )

    def text_lines(self, text: str) -> list[str]:
        """The lines of ``text`` as the model reads them: normalized by :attr:`normalizer` (one line per
        sentence, lines left empty dropped) when there is one, else the text's own lines."""
        lines = _split_text(text)
        if self.normalizer is None:
            return lines
        return [sentence for line in lines for sentence in self.normalizer.normalize_line(line)]

    def _encode_text(self, text: Any, where: str) -> tuple[list[int], list[int], list[str]]:
        if not isinstance(text, str):
            raise ScoringError(f"{where} is a {type(text).__name__}, not a str")
        if text == "":
            raise ScoringError(f"empty text ({where}): there is nothing to score")
        ids: list[int] = []
        positions: list[int] = []
        words: list[str] = []
        lines = self.text_lines(text)
        if not lines:
            raise ScoringError(
                f"{where} {text[:60]!r}: nothing left to score after normalization (normalizer "
                f"{self.normalizer.name!r} drops punctuation); to score the text as it is, pass normalize='none' "
                "(dsf score --normalize none)"
            )
        for j, line in enumerate(lines):
            line_ids, pos, w = self._encode_line(line, where if len(lines) == 1 else f"{where} line {j + 1}")
            positions.extend(p + len(ids) for p in pos)
            words.extend(w)
            ids.extend(line_ids)
        return ids, positions, words

    # -- the numerics ----------------------------------------------------------------------------
    def _target_logprobs(self, feats: Tensor, targets: Tensor) -> Tensor:
        """``log p(target)`` for rows of top-layer features ``[N, D]`` and targets ``[N]``, decoded in
        chunks so that at most :data:`DECODE_ELEMENTS` logits exist at once."""
        n = feats.shape[0]
        if n == 0:
            return feats.new_zeros(0)
        rows = max(64, DECODE_ELEMENTS // max(1, len(self.vocab)))
        rows = -(-n // -(-n // rows))  # as many chunks, evenly sized: a thin last chunk's product runs slowly
        parts = []
        for i in range(0, n, rows):
            logits = self.model.decode(feats[i : i + rows])
            if logits.dtype not in (torch.float32, torch.float64):  # a half-precision model: normalize in float32
                logits = logits.float()
            logp = torch.log_softmax(logits, dim=-1)
            parts.append(logp.gather(-1, targets[i : i + rows, None]).squeeze(-1))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    @torch.inference_mode()
    def _score_batch(self, seqs: list[list[int]]) -> list[list[float]]:
        """Independent sequences (each: context token + targets), longest first, from the zero state.

        Right-padded to the longest, run in windows of ``self.window`` steps with the state carried;
        sequences that have ended are dropped from the batch at window boundaries, and padded positions
        are never decoded, so padding cannot change any sentence's numbers.
        """
        lengths = [len(s) - 1 for s in seqs]  # number of targets, non-increasing
        batch, longest = len(seqs), lengths[0]
        data = torch.full((batch, longest + 1), self._pad_id, dtype=torch.long)
        for b, s in enumerate(seqs):
            data[b, : len(s)] = torch.tensor(s, dtype=torch.long)
        lengths_t = torch.tensor(lengths)
        out = torch.zeros(batch, longest, dtype=torch.float64)
        state = None
        active = batch
        for t0 in range(0, longest, self.window):
            t1 = min(t0 + self.window, longest)
            while lengths[active - 1] <= t0:
                active -= 1
            if state is not None and active < state[0][0].shape[0]:
                state = tuple(tuple(s[:active] for s in layer) for layer in state)
            inputs = data[:active, t0:t1].to(self.device)
            feats, state = self.model.features(inputs, state)
            mask = torch.arange(t0, t1)[None, :] < lengths_t[:active, None]  # [active, w]
            targets = data[:active, t0 + 1 : t1 + 1][mask].to(self.device)
            lp = self._target_logprobs(feats[mask.to(self.device)], targets)
            out[:active, t0:t1][mask] = lp.to("cpu", torch.float64)
        return [out[b, : lengths[b]].tolist() for b in range(batch)]

    @torch.inference_mode()
    def _score_window(self, inputs: list[int], targets: list[int], state):
        x = torch.tensor([inputs], dtype=torch.long, device=self.device)
        feats, state = self.model.features(x, state)
        y = torch.tensor(targets, dtype=torch.long, device=self.device)
        return self._target_logprobs(feats[0], y).to("cpu", torch.float64), state

    def _normalized_parts(self, parts: Iterable[Part]) -> Iterator[Part]:
        """Parts of raw lines -> parts of normalized sentences (:func:`dsf_lightning.data.textfile.normalized_parts`)."""
        return normalized_parts(parts, self.normalizer)

    def _iter_chunks(self, parts: Iterable[Part], size: int) -> Iterator[tuple[int, list[int], int]]:
        """Parts of lines ``(text, where, last)`` as one token sequence in chunks of ``size`` targets (the
        last one shorter): yields ``(context, target ids, number of OOV targets)``, the context being the
        token before the chunk's first target. Holds at most a chunk plus one part of tokens, and each
        chunk costs the same whatever the length of the line it comes from (the buffer is consumed by
        index, compacted once per part). The parts are normalized first (:meth:`_normalized_parts`) when
        the scorer has a normalizer."""
        parts = self._normalized_parts(parts)
        prev = self.eos_id  # the context before the first token; None: the first token is context
        buf: list[int] = []
        start = 0  # buf[:start] has been handed over
        oov_at: list[int] = []  # positions in buf mapped to the unknown symbol (increasing)
        next_oov = 0  # oov_at[:next_oov] have been counted
        continued = False  # earlier parts of the current line gave symbols
        for text, where, last in parts:
            ids, positions, _ = self._encode_part(text, where, continued, last)
            continued = not last and (continued or bool(ids))
            if prev is None:
                if not ids:
                    continue
                prev = ids[0]
                ids = ids[1:]
                positions = [p - 1 for p in positions if p > 0]
            base = len(buf)
            buf.extend(ids)
            oov_at.extend(base + p for p in positions)
            while len(buf) - start >= size:
                end = start + size
                targets = buf[start:end]
                n_oov = 0
                while next_oov < len(oov_at) and oov_at[next_oov] < end:
                    n_oov += 1
                    next_oov += 1
                yield prev, targets, n_oov
                prev = targets[-1]
                start = end
            if start:
                del buf[:start]
                oov_at = [p - start for p in oov_at[next_oov:]]
                start = next_oov = 0
        if buf:
            yield prev, buf, len(oov_at)

    def _iter_windows(
        self, parts: Iterable[Part], window: int, streams: int = 1, warmup: int = 0
    ) -> Iterator[tuple[list[int], Tensor, int]]:
        """Score parts of lines ``(text, where, last)`` as one sequence; yields ``(target ids, float64
        logprobs, number of OOV targets)`` in document order.

        ``streams == 1`` (the exact mode): one stream with the state carried across windows of
        ``window`` targets, one window per yield. ``streams > 1`` (the parallel mode): blocks of
        :data:`STREAM_BLOCK` targets, each scored by :meth:`_score_streams` with the ``warmup`` tokens
        before it as history (none at the document's start), one block per yield."""
        if streams == 1:
            state = None
            for prev, targets, n_oov in self._iter_chunks(parts, window):
                lp, state = self._score_window([prev, *targets[:-1]], targets, state)
                yield targets, lp, n_oov
            return
        history: list[int] = []  # the `warmup` tokens before the next block's context
        for prev, targets, n_oov in self._iter_chunks(parts, STREAM_BLOCK):
            tokens = [*history, prev, *targets]
            yield targets, self._score_streams(tokens, len(history), streams, warmup, window), n_oov
            history = tokens[max(0, len(tokens) - 1 - warmup) : -1]

    @torch.inference_mode()
    def _score_streams(self, tokens: list[int], history: int, streams: int, warmup: int, window: int) -> Tensor:
        """The parallel mode on one block: ``tokens`` are ``history`` tokens, the context, then the ``N``
        targets; returns their float64 log-probabilities in order.

        The targets are cut into ``S = ceil(N / ceil(N / streams))`` contiguous pieces of
        ``ceil(N / streams)`` (the last one shorter), run side by side as the rows of one batch in windows
        of ``window`` steps with each row's state carried. Each row starts from the zero state ``warmup``
        tokens before its piece (the tokens there are read, their predictions not counted), or at the
        block's first token when that is nearer: at the document's start (no history) that is the exact
        start, so the first piece, and any piece whose warm-up reaches back to it, is scored exactly.
        Every target is counted once, by the row of its piece; a row that ends early is padded, and its
        padding is never decoded."""
        n = len(tokens) - history - 1
        size = -(-n // streams)
        first = torch.arange(0, n, size)  # [S] each piece's first target
        last = torch.clamp(first + size, max=n)  # [S] ... and one past its last
        begin = torch.clamp(history + first - warmup, min=0)  # [S] each row's first input in `tokens`
        lengths = history + last - begin  # [S] inputs read by each row
        ids = torch.tensor(tokens, dtype=torch.long)
        out = torch.empty(n, dtype=torch.float64)
        state = None
        steps = int(lengths.max())
        for t0 in range(0, steps, window):
            # [S, w]: tokens[at] predicts tokens[at + 1], target number `at - history` of the block
            at = begin[:, None] + torch.arange(t0, min(t0 + window, steps))
            target_pos = at - history
            keep = (at < (history + last)[:, None]) & (target_pos >= first[:, None])  # not warm-up, not padding
            feats, state = self.model.features(ids[at.clamp(max=len(tokens) - 1)].to(self.device), state)
            if keep.any():
                targets = ids[(at + 1).clamp(max=len(tokens) - 1)][keep].to(self.device)
                lp = self._target_logprobs(feats[keep.to(self.device)], targets)
                out[target_pos[keep]] = lp.to("cpu", torch.float64)
        return out

    # -- public API ------------------------------------------------------------------------------
    def score(
        self,
        text_or_texts: str | Sequence[str],
        *,
        carry_state: bool = False,
        streams: int = 1,
        warmup: int | None = None,
    ):
        """Score one text (-> :class:`SentenceScore`) or a list of texts (-> list, in input order).

        ``carry_state=False``: every text starts fresh (the state after ``<eos>`` from zeros), and a
        list is scored in batches of ``batch_size`` sorted by length. ``carry_state=True``: the texts of
        the list are one continuous stream, in order (a document); each text's numbers are its part of it.
        ``streams`` / ``warmup`` (with ``carry_state=True``): the parallel mode of :meth:`score_document`.
        """
        streams, warmup = self._check_streams(streams, warmup)
        if streams > 1 and not carry_state:
            raise ScoringError(
                f"streams={streams} cuts one continuous stream into pieces: pass carry_state=True (dsf score "
                "--carry-state); independent texts are already scored side by side, batch_size at a time"
            )
        single = isinstance(text_or_texts, str)
        if single:
            texts = [text_or_texts]
        else:
            try:
                texts = list(text_or_texts)
            except TypeError:
                raise ScoringError(
                    f"score() takes a str or a list of str, got {type(text_or_texts).__name__}"
                ) from None
        if not texts:
            return []
        encoded = [self._encode_text(t, "the text" if single else f"text {i}") for i, t in enumerate(texts)]
        if carry_state:
            results = self._score_stream(texts, encoded, streams, warmup)
        else:
            results = self._score_independent(texts, encoded)
        self._warn_oov(sum(r.num_oov for r in results), sum(r.num_tokens for r in results), "the text" if single else "the texts")
        return results[0] if single else results

    def _warn_oov(self, num_oov: int, num_tokens: int, what: str) -> None:
        """Log a warning when more than :data:`OOV_WARN_RATE` of the scored tokens were OOV words."""
        if not num_tokens or num_oov / num_tokens <= OOV_WARN_RATE:
            return
        if self.normalizer is None and self.own_normalize:
            hint = (f"normalize the text as the model's training data was: dsf score --normalize {self.own_normalize} "
                    f"(Scorer(..., normalize={self.own_normalize!r}))")
        elif self.normalizer is not None:
            hint = (f"the text was normalized ({self.normalizer.name!r}) and is still far from the training data's "
                    "vocabulary: its perplexity is not comparable with the model's test perplexity")
        else:
            hint = "text this far from the training data's vocabulary gets a perplexity that says little"
        logger.warning(
            "%s: %.1f%% of the %s scored tokens (%s) are out of the model's vocabulary and were scored as %r; %s",
            what, 100 * num_oov / num_tokens, f"{num_tokens:,}", f"{num_oov:,}", self.vocab.unk, hint,
        )

    def _make_result(self, text, ids, positions, words, logprobs, skip_first: bool) -> SentenceScore:
        scored = ids[1:] if skip_first else ids
        n_oov = sum(1 for p in positions if p >= (1 if skip_first else 0))
        return SentenceScore(
            text=text,
            tokens=[self._symbols[i] for i in scored],
            logprobs=logprobs,
            num_oov=n_oov,
            oov_words=words if not (skip_first and positions and positions[0] == 0) else words[1:],
            char_level=self.char_level,
        )

    def _score_independent(self, texts, encoded) -> list[SentenceScore]:
        if self.eos_id is not None:
            seqs = [[self.eos_id, *ids] for ids, _, _ in encoded]
        else:
            seqs = [ids for ids, _, _ in encoded]
            for i, s in enumerate(seqs):
                if len(s) < 2:
                    raise ScoringError(
                        f"text {i} has {len(s)} token(s): this model has no end symbol, so the first token is "
                        "context only and at least two are needed"
                    )
        order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))  # stable: equal lengths keep order
        logprobs: list[list[float] | None] = [None] * len(seqs)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            for i, lp in zip(chunk, self._score_batch([seqs[i] for i in chunk])):
                logprobs[i] = lp
        skip = self.eos_id is None
        return [
            self._make_result(t, ids, pos, words, lp, skip)
            for t, (ids, pos, words), lp in zip(texts, encoded, logprobs)
        ]

    def _score_stream(self, texts, encoded, streams: int = 1, warmup: int = 0) -> list[SentenceScore]:
        # each text's lines as one piece: encoding again is cheap, and keeps _iter_windows the only streamer
        def lines():
            for i, t in enumerate(texts):
                for j, line in enumerate(_split_text(t)):
                    yield line, f"text {i}" if j == 0 else f"text {i} line {j + 1}", True

        flat: list[float] = []
        for _, lp, _ in self._iter_windows(lines(), self.window, streams, warmup):
            flat.extend(lp.tolist())
        results, pos = [], 0
        for k, (t, (ids, positions, words)) in enumerate(zip(texts, encoded)):
            skip = self.eos_id is None and k == 0
            n = len(ids) - (1 if skip else 0)
            results.append(self._make_result(t, ids, positions, words, flat[pos : pos + n], skip))
            pos += n
        if not flat:
            raise ScoringError("the texts hold one token: this model has no end symbol, so nothing is left to score")
        return results

    def _document_lines(self, lines_or_path, progress: bool) -> tuple[Iterator[Part], str]:
        cut = getattr(self.tokenizer, "cut_at", None)
        if cut not in ("space", "char"):
            cut = None
        if isinstance(lines_or_path, (str, os.PathLike)):
            path = Path(lines_or_path)
            try:
                exists = path.exists()
            except (OSError, ValueError):  # e.g. a text passed by mistake: too long, or a NUL character
                exists = False
            if not exists and isinstance(lines_or_path, str) and ("\n" in lines_or_path or " " in lines_or_path):
                raise ScoringError(
                    f"no such file: {lines_or_path[:60]!r}; score_document takes a path or a list of lines "
                    "(use score() for a text)"
                )
            return _iter_file_lines(path, cut=cut, progress=progress), str(path)
        if isinstance(lines_or_path, bytes):
            raise ScoringError("score_document takes a path or an iterable of str lines, not bytes")
        try:
            it = iter(lines_or_path)
        except TypeError:
            raise ScoringError(
                f"score_document takes a path or an iterable of lines, got {type(lines_or_path).__name__}"
            ) from None
        return _iter_given_lines(it, cut), "<lines>"

    def _check_window(self, window: int | None) -> int:
        window = self.window if window is None else window
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ScoringError(f"window must be a positive integer, got {window!r}")
        return window

    @staticmethod
    def _check_streams(streams: int, warmup: int | None) -> tuple[int, int]:
        """``(streams, warmup)`` checked; ``warmup=None`` is :data:`DEFAULT_WARMUP`."""
        if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
            raise ScoringError(
                f"streams must be a positive integer (1: the exact single-stream score; more: that many pieces "
                f"scored side by side), got {streams!r}"
            )
        warmup = DEFAULT_WARMUP if warmup is None else warmup
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ScoringError(
                f"warmup must be a non-negative integer (tokens read before each piece of the parallel mode, "
                f"default {DEFAULT_WARMUP}), got {warmup!r}"
            )
        return streams, warmup

    def iter_token_scores(
        self,
        lines_or_path,
        *,
        window: int | None = None,
        progress: bool = False,
        streams: int = 1,
        warmup: int | None = None,
    ) -> Iterator[tuple[str, float]]:
        """Yield ``(token, logprob)`` for every token of a document (a path or an iterable of lines), in
        order, streamed as :meth:`score_document` does (``streams`` / ``warmup`` too); nothing is kept
        once yielded."""
        window = self._check_window(window)
        streams, warmup = self._check_streams(streams, warmup)
        lines, _ = self._document_lines(lines_or_path, progress)
        symbols = self._symbols
        for targets, lp, _ in self._iter_windows(lines, window, streams, warmup):
            yield from zip((symbols[i] for i in targets), lp.tolist())

    def score_document(
        self,
        lines_or_path,
        *,
        per_token: bool = False,
        window: int | None = None,
        progress: bool = False,
        on_token: Callable[[str, float], None] | None = None,
        streams: int = 1,
        warmup: int | None = None,
    ) -> DocumentScore:
        """Score a document (a path to a UTF-8 text file, read lazily, or an iterable of lines) as one
        stream with carried state, ``window`` tokens per forward pass (default: the scorer's).

        The numbers equal one pass over the whole document (to float round-off); memory does not grow
        with its length: only float64 running sums are kept, unless ``per_token=True`` asks for every
        token's symbol and log-probability. ``on_token(token, logprob)``, if given, is called for every
        token as it is scored (per-token output without holding it). ``progress`` shows a bar on stderr
        for long files (tqdm, when installed).

        ``streams=S`` (> 1) is the parallel mode: the document's tokens are cut into ``S`` contiguous
        pieces scored side by side, as the ``S`` rows of one batch, each row's state carried across
        its windows. Each piece but the first starts from the zero state ``warmup`` tokens earlier (default
        :data:`DEFAULT_WARMUP`): those tokens are read, their predictions not counted (they belong to the
        piece before). Every token is counted exactly once; only the first ``warmup`` tokens of each
        piece see a shorter history than in the exact mode. Documents longer than :data:`STREAM_BLOCK`
        tokens are cut block by block. The default ``streams=1`` is the exact single-stream score.

        What each gives, with the bundled ``delta-rnn-ptb`` (perplexity of the parallel mode against the
        exact score; ``python -m benchmarks --only score-document``; the exact scores are 93.5024 and
        144.2069)::

            warmup W                     0         16        64        256
            PTB test (82,430 tokens)
                streams S = 16           +0.052%   -0.005%   -0.004%   -0.003%
                streams S = 32           +0.205%   +0.084%   +0.036%   -0.003%
                streams S = 64           +0.370%   +0.094%   -0.002%   -0.012%
            wikitext-2 test (217,095 tokens)
                streams S = 32           +0.008%             -0.039%
                streams S = 64           +0.063%             -0.062%

        So with the default warm-up the parallel score is within 0.07% of the exact one. On a CPU
        both modes spend most of their time in the softmax decoder's ``[N, 512] x [512, 10000]`` product,
        which the parallel mode does not shrink: it gains where the per-step loop at batch one is the
        cost (S = 32 ran 1.3x the exact mode's tokens/s here; docs/score.md, "Long documents", has the speeds).
        """
        window = self._check_window(window)
        streams, warmup = self._check_streams(streams, warmup)
        counting_lines = _Counter()
        lines, source = self._document_lines(lines_or_path, progress)
        total = 0.0
        n_tokens = n_oov = 0
        tokens: list[str] | None = [] if per_token else None
        logprobs: list[float] | None = [] if per_token else None
        for targets, lp, k in self._iter_windows(counting_lines.wrap(lines), window, streams, warmup):
            total += float(lp.sum())
            n_tokens += len(targets)
            n_oov += k
            if per_token or on_token is not None:
                symbols = [self._symbols[i] for i in targets]
                values = lp.tolist()
                if per_token:
                    tokens.extend(symbols)
                    logprobs.extend(values)
                if on_token is not None:
                    for pair in zip(symbols, values):
                        on_token(*pair)
        if n_tokens == 0:
            what = "no lines" if counting_lines.n == 0 else "no token to score"
            if counting_lines.n and self.normalizer is not None:
                what += f" after normalization ({self.normalizer.name!r}; normalize='none' / --normalize none scores it as it is)"
            raise ScoringError(f"empty text: document {source} has {what}")
        self._warn_oov(n_oov, n_tokens, f"document {source}")
        return DocumentScore(
            num_tokens=n_tokens,
            num_oov=n_oov,
            logprob=total,
            num_lines=counting_lines.n,
            source=source,
            char_level=self.char_level,
            tokens=tokens,
            logprobs=logprobs,
        )


    def generate(self, prompt: str = "", **options):
        """Generate text after ``prompt`` with the recurrent state carried (the prompt is read once):
        ``max_new_tokens``, ``temperature`` (0: greedy), ``top_k``, ``top_p``, ``seed``, ``num_samples``
        (one batch), ``ban_unk``, ``state`` / ``return_state`` (continue where a call stopped), ``on_token``
        (streaming). See :func:`dsf_lightning.scoring.generation.generate`."""
        return generate_text(self, prompt, **options)



def from_pretrained(name_or_path: str | os.PathLike, revision: str | None = None, **options) -> Scorer:
    """A :class:`Scorer` for a hub model name, a hub repo id or a local pretrained folder
    (``dsf_lightning.hub.registry.resolve`` + ``dsf_lightning.model.pretrained.load_pretrained``). ``options``:
    huggingface_hub's ``cache_dir``, ``force_download``, ``local_files_only``, ``token``; ``dtype``;
    ``device``, ``batch_size``, ``window``, ``normalize`` (see :meth:`Scorer.from_pretrained`)."""
    return Scorer.from_pretrained(name_or_path, revision, **options)
