"""``dsf generate``: generate text with a pretrained model from the command line.

    dsf generate "the market"                                 # 30 new tokens, streamed as they are drawn
    dsf generate "the market" -n 50 --temperature 0.8 --top-p 0.9 --seed 1
    dsf generate "" --temperature 0 --ban-unk                 # greedy, from a sentence start (<eos>)
    dsf generate "the market" --num-samples 4 --seed 1        # 4 samples in one batch: "[i] text" each
    dsf generate "the market" --num-samples 4 --json          # one JSON line per sample

One sample is written to stdout token by token (flushed after each, so it streams through a pipe): the
prompt, then the continuation, then a newline. Several samples are one batch and finish together: each
is written when done as ``[i] prompt + continuation``, samples separated by a blank line. ``--json``
writes one JSON object per sample (``sample``, ``prompt``, ``text``, ``tokens``, ``ids``, ``logprobs``).
See :mod:`dsf_lightning.scoring.generation` for what the options do. Errors (bad options, a model that cannot be
loaded, a device this machine does not have) are one line on stderr, with exit code 2, before anything is
allocated: sizes are capped (``--max-new-tokens`` 100,000, ``--num-samples`` 1,024, 1,000,000 tokens in all).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from .. import scoring
from .._machine import check_device
from ..scoring import ScoringError
from ..scoring.generation import MAX_GENERATED_TOKENS, MAX_NEW_TOKENS, MAX_SAMPLES, check_options
from .errors import report_errors, standalone_main
from .jsonlines import write_json_line
from .score import add_model_arguments


def add_generate_parser(subparsers, help: str | None = None) -> argparse.ArgumentParser:
    """Add the ``generate`` subcommand to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p = subparsers.add_parser(
        "generate",
        help=help,
        description="Generate text after PROMPT with a pretrained language model: the prompt is read once "
        "and the recurrent state carried, one step per new token. An empty PROMPT starts a sentence (after "
        "the model's <eos>).",
    )
    p.add_argument("prompt", nargs="?", default="", metavar="PROMPT", help="the text to continue (default: empty)")
    add_model_arguments(p)
    p.add_argument("--max-new-tokens", "-n", type=int, default=30,
                   help=f"tokens to generate (default 30, at most {MAX_NEW_TOKENS:,}; with --num-samples, at most "
                   f"{MAX_GENERATED_TOKENS:,} in all)")
    p.add_argument("--temperature", "-t", type=float, default=1.0,
                   help="softmax temperature, a finite number >= 0; 0: greedy, and a tiny one (1e-40) samples as "
                   "greedy does (default 1)")
    p.add_argument("--top-k", type=int, default=None, help="sample from the k most probable tokens only")
    p.add_argument("--top-p", type=float, default=None, help="nucleus sampling: the smallest set with probability >= p")
    p.add_argument("--seed", type=int, default=None, help="random seed (the same seed gives the same text)")
    p.add_argument("--num-samples", type=int, default=1,
                   help=f"samples drawn as one batch (default 1, at most {MAX_SAMPLES:,})")
    p.add_argument("--ban-unk", action="store_true", help="never generate the unknown symbol (<unk>)")
    p.add_argument("--json", action="store_true", help="one JSON line per sample instead of text")
    p.add_argument("--normalize", default=None, metavar="NAME",
                   help="text normalizer applied to the prompt, as `dsf score --normalize` (default: the model's "
                   "own; none: the prompt as it is)")
    p.set_defaults(handler=generate_command)
    return p


def generate_command(args: argparse.Namespace) -> int:
    return report_errors("generate", lambda: _generate(args, sys.stdout), ScoringError)


def _generate(args: argparse.Namespace, out: TextIO) -> int:
    options = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                   top_p=args.top_p, seed=args.seed, num_samples=args.num_samples, ban_unk=args.ban_unk)
    check_options(**options)  # before the model is loaded
    check_device(args.device, ScoringError)
    extra = {} if args.normalize is None else {"normalize": args.normalize}  # the scorer's prompt encoding
    scorer = scoring.from_pretrained(args.model, revision=args.revision, device=args.device, **extra)
    stream = args.num_samples == 1 and not args.json
    on_token = None
    if stream:
        out.write(args.prompt)
        out.flush()

        def on_token(sample: int, token: str, piece: str) -> None:
            out.write(piece)
            out.flush()

    result = scorer.generate(args.prompt, on_token=on_token, **options)
    samples = result if isinstance(result, list) else [result]
    if args.json:
        for i, s in enumerate(samples):
            write_json_line(out, {"sample": i, **s.to_dict()})  # the JSON lines of every dsf command (.jsonlines)
    elif stream:
        out.write("\n")
    else:
        for i, s in enumerate(samples):
            out.write(("\n" if i else "") + f"[{i}] {args.prompt}{s.text}\n")
    out.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dsf_lightning.cli.generate ...`` (the same as ``dsf generate ...``)."""
    return standalone_main("generate", add_generate_parser, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
