"""Text generation with a pretrained recurrent LM: :meth:`Scorer.generate <dsf_lightning.scoring.Scorer.generate>`.

>>> scorer = from_pretrained("delta-rnn-ptb")                                  # doctest: +SKIP
>>> scorer.generate("the market", max_new_tokens=12, seed=0).text             # doctest: +SKIP
' rose N N in the first quarter <eos> ...'

How it runs (the recurrent model makes this cheap):

* The prompt is read **once**: ``<eos>`` (the context every sentence of the training stream follows) and
  the prompt's tokens go through the model in one forward pass (windows of ``scorer.window``), and the
  recurrent state is carried from there; every new token costs one recurrent step and one decoder row,
  never a re-read of the prefix. A prompt with newlines is several sentences (``<eos>`` between them).
* An **empty prompt** starts a new sentence: the model reads ``<eos>`` from the zero state, as at the
  start of every scored sentence (for PTB that is its sentence-boundary token). A model without an end
  symbol (text8's single stream) needs a prompt.
* ``num_samples`` samples are one batch: the prompt's state is computed once and repeated.
* Each step's distribution: the model's logits; ``ban_unk`` sets the unknown symbol's to -inf; divided
  by ``temperature`` (0: greedy, the argmax); ``top_k`` keeps the k most probable tokens, then
  ``top_p`` keeps the smallest most-probable set whose probability (after temperature and top-k) reaches
  p (nucleus sampling, Holtzman et al. 2020); a token is drawn from the renormalized rest.
* ``seed`` fixes a ``torch.Generator`` (on the scorer's device): the same seed gives the same text. The
  generator is part of :class:`GenerationState`, so generation continued from a returned state draws
  what one longer call would have drawn: ``N`` calls of one token equal one call of ``N`` tokens.
* ``logprobs`` of the result are each generated token's log-probability under the model itself
  (natural log, temperature 1, no filtering), the numbers ``score`` would give.

Detokenization (:class:`Detokenizer`): a word model's tokens are joined by spaces, a character model's
symbols are concatenated (its space symbol, ``_``, becomes a space), a subword model's pieces are joined
and its boundary symbol (when it has one) becomes a space; ``<eos>`` ends a line (``"\\n"``). A subword
model without a boundary symbol has no word boundaries to restore: its pieces are joined by spaces.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .results import ScoringError

if TYPE_CHECKING:  # pragma: no cover
    from .scorer import Scorer

__all__ = ["Detokenizer", "GeneratedText", "GenerationError", "GenerationState", "generate", "next_token_filter"]

logger = logging.getLogger(__name__)


class GenerationError(ScoringError):
    """Bad generation arguments (the message names the option and what it accepts)."""


@dataclass
class GenerationState:
    """Where generation stands: the model's recurrent state after every token but the last one, that
    last token (not yet read: the next step reads it and predicts what follows), the random generator,
    and the detokenizer's position (so the next text piece gets the right spacing). Pass it back with
    ``generate(..., state=state)`` to continue; ``generate(..., return_state=True)`` returns it. A state is
    not changed by continuing from it (its generator is copied): two calls from one state draw the same."""

    model_state: tuple
    last: Tensor  # [B] token ids, not yet read
    generator: torch.Generator
    line_start: list[bool]  # per sample: the text so far ends a line (no space before the next word)

    @property
    def batch_size(self) -> int:
        return int(self.last.shape[0])


@dataclass
class GeneratedText:
    """One sample: ``text`` is the continuation only (``prompt + text`` reads as the whole), ``tokens``
    the generated vocabulary symbols, ``logprobs`` their natural-log probabilities under the model."""

    prompt: str
    text: str
    tokens: list[str]
    ids: list[int]
    logprobs: list[float] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "text": self.text, "tokens": list(self.tokens), "ids": list(self.ids),
                "logprobs": list(self.logprobs)}


class Detokenizer:
    """Turns a model's symbols back into text, piece by piece (for streaming), as the tokenizer cut them."""

    def __init__(self, tokenizer: Any, eos: str | None) -> None:
        name = getattr(tokenizer, "name", "")
        self.eos = eos
        self.mode = "concat" if name == "char" else "word"
        self.space = getattr(tokenizer, "space", None) if name == "char" else None
        self.boundary = getattr(tokenizer, "boundary", None) if name == "subword" else None
        if self.boundary is not None:
            self.mode = "concat"

    def piece(self, token: str, line_start: bool) -> tuple[str, bool]:
        """The text of ``token`` following text that ends a line (``line_start``) or not; and whether the
        text now ends a line."""
        if token == self.eos:
            return "\n", True
        if self.mode == "concat":
            if token == self.space or token == self.boundary:
                return " ", False
            return token, False
        return (token if line_start else " " + token), False

    def text(self, tokens: list[str], line_start: bool = True) -> str:
        out = []
        for t in tokens:
            p, line_start = self.piece(t, line_start)
            out.append(p)
        return "".join(out)


# ------------------------------------------------------------------------------------------ checks
def _check_int(name: str, value: Any, low: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise GenerationError(f"{name} must be an integer >= {low} ({what}), got {value!r:.80}")
    return value


#: the most tokens one call generates per sample (its ids and logprobs are allocated up front)
MAX_NEW_TOKENS = 100_000
#: the most samples drawn as one batch (each step decodes num_samples rows of the vocabulary)
MAX_SAMPLES = 1_024
#: the most tokens one call generates over all its samples (num_samples * max_new_tokens)
MAX_GENERATED_TOKENS = 1_000_000


def check_options(max_new_tokens, temperature, top_k, top_p, seed, num_samples, ban_unk) -> None:
    """Raise :class:`GenerationError` naming the first bad option and what it accepts (sizes up to
    :data:`MAX_NEW_TOKENS`, :data:`MAX_SAMPLES` and :data:`MAX_GENERATED_TOKENS` in all), before anything is
    allocated."""
    _check_int("max_new_tokens", max_new_tokens, 0, "the number of tokens to generate")
    if max_new_tokens > MAX_NEW_TOKENS:
        raise GenerationError(f"max_new_tokens is {max_new_tokens:,}, more than the {MAX_NEW_TOKENS:,} one call "
                              "generates; continue from a returned state (return_state=True) for longer texts")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
        math.isfinite(temperature) and temperature >= 0
    ):
        raise GenerationError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r:.80}")
    if top_k is not None:
        _check_int("top_k", top_k, 1, "keep the k most probable tokens; None: all")
    if top_p is not None and (
        isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not (0 < top_p <= 1)
    ):
        raise GenerationError(f"top_p must be a number in (0, 1] (nucleus sampling; None or 1: off), got {top_p!r:.80}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise GenerationError(f"seed must be an integer or None, got {seed!r:.80}")
    _check_int("num_samples", num_samples, 1, "samples drawn as one batch")
    if num_samples > MAX_SAMPLES:
        raise GenerationError(f"num_samples is {num_samples:,}, more than the {MAX_SAMPLES:,} drawn as one batch; "
                              "draw them in several calls")
    if num_samples * max_new_tokens > MAX_GENERATED_TOKENS:
        raise GenerationError(f"num_samples * max_new_tokens is {num_samples * max_new_tokens:,}, more than the "
                              f"{MAX_GENERATED_TOKENS:,} tokens one call generates; ask for fewer, or in several calls")
    if not isinstance(ban_unk, bool):
        raise GenerationError(f"ban_unk must be true or false, got {ban_unk!r:.80}")


# ------------------------------------------------------------------------------------------ sampling
def next_token_filter(logits: Tensor, temperature: float, top_k: int | None, top_p: float | None) -> Tensor:
    """``logits`` [B, V] (fp32) -> the logits to sample from: divided by ``temperature`` (> 0), the
    tokens outside the top k and then outside the top-p nucleus set to -inf (the most probable token is
    always kept).

    The division is done on the logits less their maximum, in float64: a temperature as small as 1e-300 gives
    0 for the most probable token(s) and -inf (or a large negative number) for the rest, i.e. greedy
    decoding, instead of an overflow to inf and a NaN distribution."""
    logits = ((logits.double() - logits.amax(dim=-1, keepdim=True).double()) / temperature).to(logits.dtype)
    V = logits.shape[-1]
    if top_k is not None and top_k < V:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # [B, 1]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if top_p is not None and top_p < 1:
        probs, order = torch.sort(torch.softmax(logits, dim=-1), dim=-1, descending=True)
        before = torch.cumsum(probs, dim=-1) - probs  # probability of the more probable tokens
        drop_sorted = before >= top_p  # the set before this token already reaches p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, -math.inf)
    return logits


@torch.inference_mode()
def generate(
    scorer: Scorer,
    prompt: str = "",
    *,
    max_new_tokens: int = 20,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    num_samples: int = 1,
    ban_unk: bool = False,
    state: GenerationState | None = None,
    return_state: bool = False,
    on_token: Callable[[int, str, str], None] | None = None,
):
    """Generate text after ``prompt`` (see the module docstring); the implementation of
    :meth:`dsf_lightning.scoring.Scorer.generate`.

    Returns a :class:`GeneratedText` (``num_samples=1``) or a list of them; with ``return_state=True``
    a pair ``(result, GenerationState)``. ``state``: continue from a returned state (the prompt is then
    read after what the state has seen; it may be empty). ``on_token(sample, token, text_piece)`` is
    called for every generated token as it is drawn (streaming output).
    """
    check_options(max_new_tokens, temperature, top_k, top_p, seed, num_samples, ban_unk)
    if not isinstance(prompt, str):
        raise GenerationError(f"the prompt must be a str, got {type(prompt).__name__}")
    if state is not None and not isinstance(state, GenerationState):
        raise GenerationError(f"state must be a GenerationState returned by generate(..., return_state=True), "
                              f"got {type(state).__name__}")
    if state is not None and num_samples not in (1, state.batch_size):
        raise GenerationError(f"num_samples is {num_samples} but the state holds {state.batch_size} samples: "
                              "leave num_samples out when continuing from a state")
    model, device = scorer.model, scorer.device
    detok = Detokenizer(scorer.tokenizer, scorer.vocab.eos)
    symbols = scorer._symbols

    # -- read the prompt once: its ids, the last one left for the first step to read ------------------
    ids = _prompt_ids(scorer, prompt) if prompt else []
    if state is None:
        if scorer.eos_id is not None:
            ids = [scorer.eos_id, *ids]
        elif not ids:
            raise GenerationError("this model has no end symbol to start a sentence from: give a non-empty prompt")
        generator = torch.Generator(device=device)
        generator.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, (1,)).item()))
        model_state, last = None, torch.tensor(ids[-1:], dtype=torch.long, device=device)
        context = ids[:-1]
        line_start = not prompt or prompt.endswith("\n")
        batch = 1
    else:
        # a copy: a state is a value, so two calls from the same state draw the same tokens (branching)
        generator = torch.Generator(device=state.generator.device)
        generator.set_state(state.generator.get_state())
        if seed is not None:
            generator.manual_seed(seed)
        model_state, last = state.model_state, state.last
        context = []
        if ids:  # the state's pending token, then the new prompt but its last token
            context, last_id = ids[:-1], ids[-1]
            line_start = prompt.endswith("\n")
        batch = state.batch_size
        line_starts = list(state.line_start)
    if state is None or ids:
        model_state = _read(scorer, context, model_state, last if state is not None else None, batch)
        if state is not None:
            last = torch.full((batch,), last_id, dtype=torch.long, device=device)
            line_starts = [line_start] * batch
        else:
            line_starts = [line_start]
    if model_state is None:
        model_state = model.init_state(batch, device, _float_dtype(model))
    if batch == 1 and num_samples > 1:  # several samples: one batch from the prompt's state
        model_state = tuple(tuple(s.expand(num_samples, *s.shape[1:]).contiguous() for s in layer) for layer in model_state)
        last = last.expand(num_samples).contiguous()
        line_starts = line_starts * num_samples
        batch = num_samples

    # -- one recurrent step per new token -------------------------------------------------------------
    out_ids = torch.empty(batch, max_new_tokens, dtype=torch.long)
    out_lp = torch.empty(batch, max_new_tokens, dtype=torch.float64)
    pieces: list[list[str]] = [[] for _ in range(batch)]
    unk = scorer.unk_id if ban_unk else None
    for t in range(max_new_tokens):
        feats, model_state = model.features(last[:, None], model_state)  # [B, 1, D]
        logits = model.decode(feats[:, 0]).float()  # [B, V]
        logp = torch.log_softmax(logits, dim=-1)
        if unk is not None:
            logits[:, unk] = -math.inf
        if temperature == 0:
            nxt = logits.argmax(dim=-1)
        else:
            probs = torch.softmax(next_token_filter(logits, temperature, top_k, top_p), dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        out_ids[:, t] = nxt.cpu()
        out_lp[:, t] = logp.gather(-1, nxt[:, None]).squeeze(-1).double().cpu()
        last = nxt
        for b, i in enumerate(out_ids[:, t].tolist()):
            text, line_starts[b] = detok.piece(symbols[i], line_starts[b])
            pieces[b].append(text)
            if on_token is not None:
                on_token(b, symbols[i], text)
    results = [
        GeneratedText(prompt=prompt, text="".join(pieces[b]), tokens=[symbols[i] for i in out_ids[b].tolist()],
                      ids=out_ids[b].tolist(), logprobs=out_lp[b].tolist())
        for b in range(batch)
    ]
    result = results[0] if batch == 1 else results
    if return_state:
        return result, GenerationState(model_state, last, generator, line_starts)
    return result


def _float_dtype(model) -> torch.dtype:
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def _prompt_ids(scorer: Scorer, prompt: str) -> list[int]:
    """The prompt through the scorer's own text encoding (its tokenizer, vocabulary and any text
    normalization it applies), without the end symbol the tokenizer puts after the last line: the
    generated text continues that line."""
    ids, positions, words = scorer._encode_text(prompt, "the prompt")
    if words:
        logger.warning("the prompt has %d word(s) not in the vocabulary, read as %s: %s", len(words),
                       scorer.vocab.unk, " ".join(words[:10]))
    if prompt.endswith("\n"):
        return ids  # the prompt's last line is complete: the next token starts a new one
    if scorer.eos_id is not None and ids and ids[-1] == scorer.eos_id:
        ids = ids[:-1]
    return ids


def _read(scorer: Scorer, context: list[int], model_state, pending: Tensor | None, batch: int):
    """The model state after reading ``pending`` (a [B] token each sample has not read yet, or None) and
    then ``context`` (ids shared by every sample), in windows of ``scorer.window`` steps."""
    model, device = scorer.model, scorer.device
    if pending is not None:
        _, model_state = model.features(pending[:, None], model_state)
    for i in range(0, len(context), scorer.window):
        chunk = torch.tensor(context[i : i + scorer.window], dtype=torch.long, device=device)
        _, model_state = model.features(chunk.expand(batch, -1), model_state)
    return model_state
