"""``dsf score``: score text with a pretrained model from the command line.

    dsf score "the market rose sharply" "shares fell"      # a table: tokens, logprob, ppl per sentence
    dsf score --per-token "the market rose"               # every token with logprob and surprisal
    dsf score --file valid.txt                            # a whole document, streamed (carried state)
    dsf score --file valid.txt --per-token --json > out.jsonl   # JSON lines: a line per token, the summary last
    dsf score --model ./my-model --carry-state "first sentence" "second sentence"
    dsf score --normalize none "the market rose"          # text as it is (default: the model's normalizer)
    dsf score --file wiki.test.txt --streams 32           # the parallel mode: 32 pieces side by side

Text is normalized like the model's training data before it is scored (the model folder's ``normalize``,
e.g. ``ptb``: lowercase, punctuation dropped, numbers as N, ``it 's``); ``--normalize NAME`` picks one,
``--normalize none`` turns it off. The out-of-vocabulary rate is shown (``oov%``); above 5% a warning
is logged.

Errors (empty text, unknown symbol of a closed vocabulary, unreadable file, a model that cannot be
found or loaded) are printed as one line on stderr, with exit code 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import TextIO

from .. import scoring
from .._machine import check_device
from ..data.normalize import list_normalizers
from ..scoring import LN2, DocumentScore, ScoringError, SentenceScore
from .errors import report_errors, standalone_main
from .jsonlines import write_json_line

DEFAULT_MODEL = "delta-rnn-ptb"


def add_model_arguments(p: argparse.ArgumentParser, default: str = DEFAULT_MODEL) -> None:
    """``--model`` / ``--revision`` / ``--device``: which pretrained model a text command loads (``default`` when
    --model is not given, named in the help), and where."""
    p.add_argument("--model", "-m", default=default, metavar="NAME_OR_PATH",
                   help=f"hub model name, hub repo id or local folder (default: {default})")
    p.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    p.add_argument("--device", default="cpu",
                   help="torch device: cpu, cuda, cuda:N, mps (default cpu); one this machine lacks is an error")


def add_score_parser(subparsers, help: str | None = None) -> argparse.ArgumentParser:
    """Add the ``score`` subcommand to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p = subparsers.add_parser(
        "score",
        help=help,
        description="Score sentences or a document with a pretrained language model. Each TEXT is a "
        "sentence scored from a fresh state (after <eos>); --file streams a whole document with the "
        "state carried across lines. Log-probabilities are natural logs, surprisal is in bits.",
    )
    p.add_argument("texts", nargs="*", metavar="TEXT", help="sentences to score (one line each)")
    p.add_argument("--file", "-f", metavar="PATH", help="score a UTF-8 text file as one document")
    add_model_arguments(p)
    p.add_argument("--per-token", action="store_true", help="print every token's logprob and surprisal")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of a table: one object a line, a line per "
                   "sentence (--file: the document's summary; with --per-token a line per token before it)")
    p.add_argument("--carry-state", action="store_true",
                   help="score the TEXTs as one continuous stream, in order (a document)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass (default 32)")
    p.add_argument("--window", type=int, default=256, help="time steps per forward pass (default 256)")
    p.add_argument("--streams", type=int, default=1, metavar="S",
                   help="the parallel mode: cut the document (--file, or the TEXTs with --carry-state) into S "
                   "contiguous pieces scored side by side, each after a warm-up (default 1: the exact "
                   "single-stream score; see docs/score.md, 'Long documents', for what each gives)")
    p.add_argument("--warmup", type=int, default=None, metavar="W",
                   help=f"tokens read before each piece of the parallel mode, not counted (default "
                   f"{scoring.DEFAULT_WARMUP})")
    p.add_argument("--normalize", default=None, metavar="NAME",
                   help=f"text normalizer applied before tokenizing: {', '.join(list_normalizers())} "
                   "(default: the model's own, e.g. ptb for the PTB models; none: score the text as it is)")
    p.set_defaults(handler=score_command)
    return p


def score_command(args: argparse.Namespace) -> int:
    return report_errors("score", lambda: _score(args, sys.stdout), ScoringError)


def _score(args: argparse.Namespace, out: TextIO) -> int:
    if args.file and args.texts:
        raise ScoringError("give either TEXT arguments or --file, not both")
    if not args.file and not args.texts:
        raise ScoringError('nothing to score: give a TEXT (dsf score "some text") or --file PATH')
    check_device(args.device, ScoringError)  # before the model is loaded
    scorer = scoring.from_pretrained(
        args.model, revision=args.revision, device=args.device, batch_size=args.batch_size, window=args.window,
        normalize=args.normalize,
    )
    args.normalizer = scorer.normalizer.name if scorer.normalizer is not None else None
    if args.file:
        _score_file(scorer, args, out)
    else:
        results = scorer.score(list(args.texts), carry_state=args.carry_state, streams=args.streams,
                               warmup=args.warmup)
        if args.json:
            _sentences_json(results, args, out)
        else:
            _sentences_table(results, args, out)
    out.flush()
    return 0


# ------------------------------------------------------------------------------------------- output
def _fmt(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.{digits}f}"


def _json_number(x: float | None):
    return None if x is None or math.isnan(x) or math.isinf(x) else x


def _clean(d: dict) -> dict:
    return {k: (_json_number(v) if isinstance(v, float) else v) for k, v in d.items()}


def _sentences_json(results: list[SentenceScore], args, out: TextIO) -> None:
    """One JSON line per sentence (:mod:`.jsonlines`), with the model and normalizer it was scored with."""
    for r in results:
        write_json_line(out, {**_clean(r.to_dict(per_token=args.per_token)), "model": args.model,
                              "normalize": args.normalizer, "carry_state": bool(args.carry_state)})


def _sentences_table(results: list[SentenceScore], args, out: TextIO) -> None:
    char = any(r.char_level for r in results)
    if args.per_token:
        for i, r in enumerate(results):
            if i:
                out.write("\n")
            out.write(f"[{i}] {r.text}\n")
            _token_rows(zip(r.tokens, r.logprobs), out)
            out.write(f"    {_summary(r.num_tokens, r.num_oov, r.logprob, r.ppl, r.bpc if char else None)}\n")
        return
    head = ["#", "tokens", "oov", "oov%", "logprob", "ppl"] + (["bpc"] if char else []) + ["text"]
    rows = []
    for i, r in enumerate(results):
        row = [str(i), str(r.num_tokens), str(r.num_oov), f"{100 * r.oov_rate:.1f}", _fmt(r.logprob), _fmt(r.ppl, 3)]
        if char:
            row.append(_fmt(r.bpc))
        rows.append(row + [r.text])
    widths = [max(len(row[c]) for row in [head, *rows]) for c in range(len(head) - 1)]
    for row in [head, *rows]:
        cells = [row[c].rjust(widths[c]) if c else row[c].ljust(widths[c]) for c in range(len(widths))]
        out.write("  ".join(cells) + "  " + row[-1] + "\n")


def _token_rows(pairs, out: TextIO, width: int = 16) -> None:
    out.write(f"    {'token':<{width}} {'logprob':>10} {'surprisal(bits)':>16}\n")
    for token, lp in pairs:
        out.write(f"    {token:<{width}} {lp:>10.4f} {-lp / LN2:>16.4f}\n")


def _summary(n: int, oov: int, logprob: float, ppl: float, bpc: float | None) -> str:
    text = f"{n} tokens, {oov} oov ({100 * oov / n if n else 0:.1f}%), logprob {_fmt(logprob)}, ppl {_fmt(ppl, 3)}"
    return text + (f", bpc {_fmt(bpc)}" if bpc is not None else "")


def _score_file(scorer, args, out: TextIO) -> None:
    """A document, streamed: with --per-token every token is written as it is scored."""
    on_token = None
    if args.per_token and args.json:  # a JSON line per token as it is scored, the document's summary line last

        def on_token(token: str, lp: float) -> None:
            write_json_line(out, {"token": token, "logprob": lp, "surprisal": -lp / LN2})

    elif args.per_token:
        out.write(f"{args.file}\n")
        out.write(f"    {'token':<16} {'logprob':>10} {'surprisal(bits)':>16}\n")

        def on_token(token: str, lp: float) -> None:
            out.write(f"    {token:<16} {lp:>10.4f} {-lp / LN2:>16.4f}\n")

    doc: DocumentScore = scorer.score_document(args.file, window=args.window, progress=True, on_token=on_token,
                                               streams=args.streams, warmup=args.warmup)
    if args.json:
        summary = _clean(doc.to_dict(per_token=False))
        summary.pop("source", None)
        summary.update(_mode(args))
        write_json_line(out, {"source": args.file, "model": args.model, "normalize": args.normalizer, **summary})
        return
    if not args.per_token:
        out.write(f"{args.file}\n")
    mode = _mode(args)
    how = f" (parallel mode: {mode['streams']} streams, warm-up {mode['warmup']})" if mode["streams"] > 1 else ""
    out.write(f"    {doc.num_lines} lines, {_summary(doc.num_tokens, doc.num_oov, doc.logprob, doc.ppl, doc.bpc)}{how}\n")


def _mode(args) -> dict:
    """How a document was scored: ``streams`` (1: exact) and the parallel mode's ``warmup`` (None: exact)."""
    if args.streams == 1:
        return {"streams": 1, "warmup": None}
    return {"streams": args.streams, "warmup": scoring.DEFAULT_WARMUP if args.warmup is None else args.warmup}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dsf_lightning.cli.score ...`` (the same as ``dsf score ...``)."""
    return standalone_main("score", add_score_parser, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
