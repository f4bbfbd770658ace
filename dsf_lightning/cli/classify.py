"""``dsf classify``: labels and probabilities of texts from a pretrained text classifier.

    dsf classify "A great movie!" "Dull and far too long."      # a table: label, p(label) for each label, tokens
    dsf classify --file reviews.txt                              # one text per line
    cat reviews.txt | dsf classify --file -                      # the same from stdin
    dsf classify --file review.txt --whole-file --json           # the whole file as one text, JSON
    dsf classify --model ./my-classifier --max-length 200 "..."  # read at most 200 words of each text

Texts are read as the model's training data was (the folder's normalizer and tokenizer); each is cut at the
model's ``max_length`` symbols (``truncated`` in the JSON, ``+`` after the token count in the table). An empty
text (or empty line) is classified as the model's reading of no words (0 tokens).

Errors (no text, an unreadable file, a language-model folder, a symbol a closed vocabulary lacks) are one
line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from ..classification import ClassificationError
from .errors import report_errors, standalone_main
from .score import add_model_arguments

DEFAULT_MODEL = "sr-lstm-p-imdb"
TEXT_WIDTH = 60  # characters of each text shown in the table


def add_classify_parser(subparsers, help: str | None = None) -> argparse.ArgumentParser:
    """Add the ``classify`` subcommand to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p = subparsers.add_parser(
        "classify",
        help=help,
        description="Classify texts with a pretrained text classifier (e.g. the sr-LSTM-p IMDB sentiment model): "
        "for each text the most probable label and the probability of every label. Each TEXT is one text; "
        "--file reads one text per line (--whole-file: the file is one text; '-': stdin).",
    )
    p.add_argument("texts", nargs="*", metavar="TEXT", help="texts to classify")
    p.add_argument("--file", "-f", metavar="PATH", help="a UTF-8 file of texts, one per line ('-': standard input)")
    p.add_argument("--whole-file", action="store_true", help="with --file: the whole file is one text")
    add_model_arguments(p)
    p.set_defaults(model=DEFAULT_MODEL)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default 32)")
    p.add_argument("--max-length", type=int, default=None, metavar="N",
                   help="read at most N symbols of each text (default: the model's own rule, in its card)")
    p.set_defaults(handler=classify_command)
    return p


def classify_command(args: argparse.Namespace) -> int:
    return report_errors("classify", lambda: _classify(args, sys.stdout), ClassificationError)


def _read_texts(args: argparse.Namespace) -> list[str]:
    if args.file and args.texts:
        raise ClassificationError("give either TEXT arguments or --file, not both")
    if args.whole_file and not args.file:
        raise ClassificationError("--whole-file reads the --file as one text: give --file PATH")
    if not args.file:
        if not args.texts:
            raise ClassificationError('nothing to classify: give a TEXT (dsf classify "some text") or --file PATH (- for stdin)')
        return list(args.texts)
    if args.file == "-":
        content = sys.stdin.read()
    else:
        try:
            with open(args.file, encoding="utf-8") as f:
                content = f.read()
        except (OSError, UnicodeDecodeError) as err:
            raise ClassificationError(f"cannot read {args.file}: {getattr(err, 'strerror', None) or err}") from None
    return [content] if args.whole_file else content.splitlines()


def _classify(args: argparse.Namespace, out: TextIO) -> int:
    from ..classification import TextClassifier

    texts = _read_texts(args)
    options = {} if args.max_length is None else {"max_length": args.max_length}
    classifier = TextClassifier.from_pretrained(args.model, revision=args.revision, device=args.device,
                                                batch_size=args.batch_size, **options)
    results = classifier.classify(texts)
    if args.json:
        json.dump({"model": args.model, "labels": classifier.labels, "max_length": classifier.max_length,
                   "results": [r.to_dict() for r in results]}, out, ensure_ascii=False, indent=2)
        out.write("\n")
    else:
        _table(results, classifier.labels, out)
    out.flush()
    return 0


def _shown(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TEXT_WIDTH else line[: TEXT_WIDTH - 3] + "..."


def _table(results, labels: Sequence[str], out: TextIO) -> None:
    head = ["#", "label", *(f"p({label})" for label in labels), "tokens", "text"]
    rows = [[str(i), r.label, *(f"{r.probabilities[label]:.4f}" for label in labels),
             f"{r.num_tokens}{'+' if r.truncated else ''}", _shown(r.text)] for i, r in enumerate(results)]
    widths = [max(len(row[c]) for row in [head, *rows]) for c in range(len(head) - 1)]
    for row in [head, *rows]:
        cells = [row[c].ljust(widths[c]) if c in (1,) else row[c].rjust(widths[c]) for c in range(len(widths))]
        out.write("  ".join(cells) + "  " + row[-1] + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dsf_lightning.cli.classify ...`` (the same as ``dsf classify ...``)."""
    return standalone_main("classify", add_classify_parser, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
