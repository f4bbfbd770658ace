"""Scoring long documents fast (issue 18): the exact single-stream mode's cheaper loop, and the parallel
mode (``streams=S``, ``warmup=W``) that scores a document as S contiguous pieces side by side.

Every number is checked in float64 against a plain step-by-step implementation written here from the
paper's equations (DSF eqs 5, 8, 11 for the Delta-RNN step, ``tests/cells/test_variational_dropout.py``;
the tied softmax decoder, eq. 14): one token at a time from the zero state, ``-log p`` summed.
"""

from __future__ import annotations

import collections
import json
import math

import pytest
import torch

from dsf_lightning import scoring
from dsf_lightning.cells import get_cell
from dsf_lightning.cli import score as score_command
from dsf_lightning.data.tokenizers import WordTokenizer
from dsf_lightning.data.vocab import Vocabulary
from dsf_lightning.model import LMConfig, RecurrentLM
from dsf_lightning.scoring import Scorer, ScoringError

from .cells.test_variational_dropout import delta_step, scrn_step
from .test_scoring import TRAIN, make_pretrained, toy_lines

F64 = torch.float64
TOL = 1e-10


def _fill(module, seed=0, scale=0.5):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
    return module


@pytest.fixture(scope="module")
def pre():
    """A tiny tied Delta-RNN LM (the bundled model's architecture) in float64, random weights."""
    tok = WordTokenizer()
    vocab = Vocabulary.build(
        (tok.tokenize_line(line) for line in TRAIN), specials=("<eos>", "<unk>"), eos="<eos>", unk="<unk>"
    )
    config = LMConfig(vocab_size=len(vocab), cell="delta-rnn", hidden_sizes=[12], embedding_size=12,
                      tie_weights=True, cell_options={"dropout": 0.3})
    model = _fill(RecurrentLM(config)).double().eval()
    return make_pretrained(model, vocab, tok, corpus="toy")


@pytest.fixture(scope="module")
def doc_lines():
    return toy_lines(9, seed=3) + ["the zebra sat on the quux"] + toy_lines(4, seed=4)  # two OOV words


def _ids(pre, lines):
    ids = []
    for line in lines:
        ids += pre.vocab.encode(pre.tokenizer.tokenize_line(line))
    return ids


def plain_logprobs(pre, inputs, targets):
    """``log p(targets[i] | inputs[:i + 1])`` from the zero state, one token at a time (DSF eqs 5, 8, 11;
    the decoder tied to the embedding: logits = E h + b)."""
    model = pre.model
    cell, E, bias = model.layers[0], model.embedding.weight, model.decoder_bias
    h = torch.zeros(1, cell.hidden_size, dtype=F64)
    ones = torch.ones(1, cell.hidden_size, dtype=F64)
    out = []
    with torch.no_grad():
        for x, y in zip(inputs, targets):
            h, _ = delta_step(cell, E[x][None], (h,), ones)
            out.append(torch.log_softmax(h @ E.t() + bias, -1)[0, y].item())
    return out


def plain_streams(pre, ids, streams, warmup, block=None):
    """The parallel mode written plainly: the targets in blocks of ``block``, each block cut into
    ``streams`` contiguous pieces of ceil(n / streams); each piece scored from the zero state after the
    ``warmup`` tokens before it (fewer at the document start, where the start is the exact start)."""
    toks = [pre.vocab.eos_id] + ids  # toks[i] is the input that predicts ids[i]
    n, out = len(ids), [None] * len(ids)
    block = block or n
    for b0 in range(0, n, block):
        b1 = min(b0 + block, n)
        size = -(-(b1 - b0) // streams)
        for a in range(b0, b1, size):
            b, st = min(a + size, b1), max(0, a - warmup)
            out[a:b] = plain_logprobs(pre, toks[st:b], toks[st + 1 : b + 1])[a - st :]
    return out


def _close(a, b, tol=TOL):
    assert len(a) == len(b)
    worst = max((abs(x - y) for x, y in zip(a, b)), default=0.0)
    assert worst <= tol, f"max abs difference {worst:.3g} > {tol}"


# ------------------------------------------------------------------------------------- the exact mode
def test_exact_mode_equals_a_plain_step_loop_in_float64(pre, doc_lines):
    ids = _ids(pre, doc_lines)
    ref = plain_logprobs(pre, [pre.vocab.eos_id] + ids[:-1], ids)
    for window in (7, 256):
        doc = Scorer(pre, window=window).score_document(doc_lines, per_token=True)
        assert doc.num_tokens == len(ids) and doc.num_oov == 2
        _close(doc.logprobs, ref)
        assert -doc.logprob == pytest.approx(-math.fsum(ref), rel=1e-12, abs=TOL)


@pytest.mark.parametrize("options", [
    {}, {"inner": "elman"}, {"inner": "second-order"}, {"gate": "fixed"}, {"outer_activation": "tanh"},
    {"outer_activation": "tanh", "gate": "fixed"},
    {"dropout": 0.3, "dropout_scaling": "test-time"},
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
def test_no_grad_recurrence_is_the_equations_in_float64(options, masked):
    """The inference loop (no autograd) against DSF eqs 3-5, 8, 10-12 step by step, over two chunks
    with carried state, at batch 1 and 3, with a variational-dropout mask on h where V reads it."""
    I, H = 5, 7
    cell = _fill(get_cell("delta-rnn")(I, H, **options).double()).eval()
    keep = 1 - cell.dropout if cell.dropout_scaling == "test-time" else 1.0
    for B in (1, 3):
        g = torch.Generator().manual_seed(B)
        x = torch.randn(B, 9, I, generator=g, dtype=F64)
        h0 = torch.randn(B, H, generator=g, dtype=F64)
        m = (torch.rand(B, H, generator=g, dtype=F64) > 0.3).to(F64) / 0.7 if masked else torch.ones(B, H, dtype=F64)
        masks = (m,) if masked else None
        with torch.no_grad():
            first, (h,) = cell(x[:, :4], (h0,), masks)
            second, (h_last,) = cell(x[:, 4:], (h,), masks)
        got = torch.cat((first, second), 1)
        h, want = h0, []
        for t in range(x.shape[1]):
            if keep != 1.0:  # eq. 12 at test time: the proposal z scaled by the keep probability
                h = _scaled_delta_step(cell, x[:, t], h, m, keep)
            else:
                h, _ = delta_step(cell, x[:, t], (h,), m)
            want.append(h)
        torch.testing.assert_close(got, torch.stack(want, 1), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(h_last, want[-1], rtol=1e-12, atol=1e-12)


def _scaled_delta_step(c, x, h, m, keep):  # DSF eqs 11, 5, 12 (test time: z * (1 - p)), 8
    Wx, Vh = x @ c.W.t(), (h * m) @ c.V.t()
    z = torch.tanh(c.alpha * Vh * Wx + c.beta1 * Vh + c.beta2 * Wx + c.b) * keep
    r = torch.sigmoid(Wx + c.b_r)
    return (1 - r) * z + r * h


def test_no_grad_recurrence_without_a_gate_is_the_scrn_in_float64():
    """The SCRN's fast state runs the same loop without the interpolation gate (SCRN eqs 1-2)."""
    cell = _fill(get_cell("scrn")(5, 6, context_size=3).double()).eval()
    x = torch.randn(2, 8, 5, dtype=F64)
    state = tuple(torch.randn(2, n, dtype=F64) for n in cell.state_sizes)
    with torch.no_grad():
        got, _ = cell(x, state)
    st, want = state, []
    for t in range(8):
        out, st = scrn_step(cell, x[:, t], st, torch.ones(2, cell.state_sizes[1], dtype=F64))
        want.append(out)
    torch.testing.assert_close(got, torch.stack(want, 1), rtol=1e-12, atol=1e-12)


class _CountOps(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def test_the_inference_loop_spends_few_ops_a_step():
    """At batch one a step's cost is mostly per-op overhead: without autograd the loop issues at most
    four ops a step (the recurrent product, eq. 11's pre-activation, tanh, eq. 8's interpolation as
    one lerp), and a product this small ([1, 512] x [512, 512], under fast_linear's min_work) goes
    through torch.mm, not oneDNN's inner product (about half as fast at batch one here)."""
    cell = get_cell("delta-rnn")(8, 512).eval()

    def count(T):
        with torch.no_grad(), _CountOps() as c:
            cell(torch.randn(1, T, 8))
        return c.ops

    short, long = count(2), count(34)
    per_step = {k: (long[k] - short.get(k, 0)) / 32 for k in long if long[k] != short.get(k, 0)}
    assert sum(per_step.values()) <= 4, per_step
    assert "mm" in per_step and not any("mkldnn" in k or "linear" in k for k in per_step), per_step


# ---------------------------------------------------------------------------------- the parallel mode
CASES = [(2, 0), (3, 5), (4, 2), (7, 3), (5, 1000), (500, 4)]  # (streams, warmup); 500 > the document


@pytest.mark.parametrize("streams,warmup", CASES)
def test_parallel_mode_counts_every_token_once(pre, doc_lines, streams, warmup):
    scorer = Scorer(pre, window=5)
    exact = scorer.score_document(doc_lines, per_token=True)
    par = scorer.score_document(doc_lines, per_token=True, streams=streams, warmup=warmup)
    n = exact.num_tokens
    assert n % 4 and n % 7  # pieces of ceil(n / S): the last one shorter
    assert (par.num_tokens, par.num_oov, par.num_lines, par.tokens) == (n, exact.num_oov, exact.num_lines, exact.tokens)
    ids = _ids(pre, doc_lines)
    _close(par.logprobs, plain_streams(pre, ids, streams, warmup))
    size = -(-n // streams)
    _close(par.logprobs[:size], exact.logprobs[:size])  # the first piece has no warm-up: it is exact
    assert par.logprob == pytest.approx(math.fsum(par.logprobs), abs=1e-9)
    if warmup >= n:  # every piece's warm-up reaches back to the document's start: all exact
        _close(par.logprobs, exact.logprobs)
    elif warmup < size:
        assert abs(par.logprob - exact.logprob) > 1e-6  # the warm-up really is cut off


def test_parallel_mode_carries_each_streams_state_across_windows(pre, doc_lines):
    one_window = Scorer(pre, window=10_000).score_document(doc_lines, per_token=True, streams=3, warmup=4)
    for window in (1, 4):
        _close(Scorer(pre, window=window).score_document(doc_lines, per_token=True, streams=3, warmup=4).logprobs,
               one_window.logprobs)


def test_parallel_mode_in_blocks(pre, doc_lines, monkeypatch):
    """A document longer than a block is scored block by block, each block cut into S pieces; the first
    piece of a later block warms up on the tokens before it like any other."""
    monkeypatch.setattr(scoring.scorer, "STREAM_BLOCK", 23)
    ids = _ids(pre, doc_lines)
    for streams, warmup in ((3, 2), (2, 0), (4, 1000)):
        par = Scorer(pre, window=6).score_document(doc_lines, per_token=True, streams=streams, warmup=warmup)
        assert par.num_tokens == len(ids) and par.num_oov == 2
        _close(par.logprobs, plain_streams(pre, ids, streams, warmup, block=23))


def test_one_stream_is_the_exact_mode(pre, doc_lines):
    scorer = Scorer(pre, window=6)
    exact = scorer.score_document(doc_lines, per_token=True)
    assert scorer.score_document(doc_lines, per_token=True, streams=1, warmup=50).logprobs == exact.logprobs


def test_parallel_mode_of_score_and_iter_token_scores(pre, doc_lines):
    scorer = Scorer(pre, window=4)
    texts = doc_lines[:6]
    exact = scorer.score(texts, carry_state=True)
    par = scorer.score(texts, carry_state=True, streams=3, warmup=2)
    assert [s.tokens for s in par] == [s.tokens for s in exact] and [s.text for s in par] == texts
    _close([x for s in par for x in s.logprobs], plain_streams(pre, _ids(pre, texts), 3, 2))
    pairs = list(scorer.iter_token_scores(doc_lines, streams=4, warmup=3))
    doc = scorer.score_document(doc_lines, per_token=True, streams=4, warmup=3)
    assert [t for t, _ in pairs] == doc.tokens
    _close([lp for _, lp in pairs], doc.logprobs)
    seen = []
    scorer.score_document(doc_lines, streams=4, warmup=3, on_token=lambda t, lp: seen.append((t, lp)))
    assert seen == pairs


def test_parallel_mode_options_are_checked(pre, doc_lines):
    scorer = Scorer(pre)
    for bad in (0, -2, 1.5, True, "4"):
        with pytest.raises(ScoringError, match="streams must be a positive integer"):
            scorer.score_document(doc_lines, streams=bad)
    for bad in (-1, 2.0, False):
        with pytest.raises(ScoringError, match="warmup must be a non-negative integer"):
            scorer.score_document(doc_lines, streams=2, warmup=bad)
    with pytest.raises(ScoringError, match="carry_state=True"):
        scorer.score(doc_lines[:3], streams=2)


def test_cli_streams_and_warmup(pre, doc_lines, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(scoring, "from_pretrained", lambda name, revision=None, **options: Scorer(pre, **options))
    path = tmp_path / "doc.txt"
    path.write_text("\n".join(doc_lines) + "\n", encoding="utf-8")
    assert score_command.main(["--file", str(path), "--json", "--streams", "3", "--warmup", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = Scorer(pre).score_document(path, streams=3, warmup=2)
    assert out["num_tokens"] == want.num_tokens and out["logprob"] == pytest.approx(want.logprob, abs=1e-9)
    assert out["streams"] == 3 and out["warmup"] == 2
    assert score_command.main(["--file", str(path), "--streams", "0"]) == 2
    err = capsys.readouterr().err
    assert "streams must be a positive integer" in err and len(err.strip().splitlines()) == 1
