"""``dsf classify``: labels and probabilities of texts from a pretrained text classifier.

    dsf classify "A great movie!" "Dull and far too long."      # a table: label, p(label) for each label, tokens
    dsf classify --file reviews.txt                              # one text per line
    cat reviews.txt | dsf classify --file -                      # the same from stdin
    dsf classify --file review.txt --whole-file --json           # the whole file as one text, a JSON line
    dsf classify --model ./my-classifier --max-length 200 "..."  # read at most 200 words of each text

Texts are read as the model's training data was (the folder's normalizer and tokenizer); each is cut at the
model's ``max_length`` symbols (``truncated`` in the JSON, ``+`` after the token count in the table). An empty
text (or empty line) is classified as the model's reading of no words (0 tokens).

A --file is read as it is classified, :data:`BLOCK_TEXTS` texts at a time (memory does not grow with the file);
a text (a line, or the whole file with --whole-file) longer than :data:`MAX_TEXT_BYTES` (1 MiB) is refused.

Errors (no text, an unreadable file, binary data or invalid UTF-8 (with the byte offset), a text too long, a
language-model folder, a symbol a closed vocabulary lacks) are one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import io
import itertools
import sys
from collections.abc import Iterator, Sequence
from typing import TextIO

from .._machine import check_device
from ..classification import ClassificationError
from ..data.textfile import LineTooLongError, TextFileError, iter_file_parts
from .errors import report_errors, standalone_main
from .jsonlines import write_json_line
from .score import add_model_arguments

DEFAULT_MODEL = "sr-lstm-p-imdb"
TEXT_WIDTH = 60  # characters of each text shown in the table
#: the longest text read (a line of --file, or the whole file with --whole-file): IMDB's longest review is 14 KB
MAX_TEXT_BYTES = 1 << 20
#: texts classified and printed at a time (and about this many characters of them): memory does not grow with the file
BLOCK_TEXTS = 1024
BLOCK_BYTES = 1 << 23


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
    p.add_argument("--file", "-f", metavar="PATH",
                   help=f"a UTF-8 file of texts, one per line ('-': standard input), read as it is classified; "
                   f"a text longer than {MAX_TEXT_BYTES:,} bytes is refused")
    p.add_argument("--whole-file", action="store_true", help="with --file: the whole file is one text")
    add_model_arguments(p, default=DEFAULT_MODEL)
    p.add_argument("--json", action="store_true", help="print JSON lines instead of a table: one object a line, a line per text")
    p.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default 32)")
    p.add_argument("--max-length", type=int, default=None, metavar="N",
                   help="read at most N symbols of each text (default: the model's own rule, in its card)")
    p.set_defaults(handler=classify_command)
    return p


def classify_command(args: argparse.Namespace) -> int:
    return report_errors("classify", lambda: _classify(args, sys.stdout), ClassificationError)


def _file_texts(args: argparse.Namespace) -> Iterator[str]:
    """The --file's texts, lazily: one per line (a whole-file text: all of them), each at most
    :data:`MAX_TEXT_BYTES`, read by the one streaming reader (NUL bytes and invalid UTF-8 are one-line errors)."""
    source = args.file
    if source == "-":  # standard input's bytes (a test's in-memory text stream has none)
        source = getattr(sys.stdin, "buffer", None) or io.BytesIO(sys.stdin.read().encode("utf-8"))
    try:
        parts = iter_file_parts(source, cut=None, max_line=MAX_TEXT_BYTES)
        if not args.whole_file:
            for text, _, _ in parts:
                yield text
            return
        lines, size = [], 0
        for text, _, _ in parts:
            size += len(text.encode("utf-8")) + 1
            if size > MAX_TEXT_BYTES:
                raise ClassificationError(
                    f"{args.file} is longer than {MAX_TEXT_BYTES:,} bytes, the longest text dsf classify reads; "
                    "cut it, or give one text per line (without --whole-file)"
                )
            lines.append(text)
        yield "\n".join(lines)
    except LineTooLongError as err:
        raise ClassificationError(
            f"{err.path} line {err.lineno} is longer than {MAX_TEXT_BYTES:,} bytes, the longest text dsf classify "
            "reads; cut it, or split it into texts (one per line)"
        ) from None
    except TextFileError as err:
        raise ClassificationError(str(err)) from None


def _read_texts(args: argparse.Namespace) -> Iterator[list[str]]:
    """The texts to classify in blocks of at most :data:`BLOCK_TEXTS` texts and about :data:`BLOCK_BYTES`
    characters: memory does not grow with the file."""
    if args.file and args.texts:
        raise ClassificationError("give either TEXT arguments or --file, not both")
    if args.whole_file and not args.file:
        raise ClassificationError("--whole-file reads the --file as one text: give --file PATH")
    if not args.file:
        if not args.texts:
            raise ClassificationError('nothing to classify: give a TEXT (dsf classify "some text") or --file PATH (- for stdin)')
        texts = list(args.texts)
        for i in range(0, len(texts), BLOCK_TEXTS):
            yield texts[i : i + BLOCK_TEXTS]
        return
    block, size = [], 0
    for text in _file_texts(args):
        block.append(text)
        size += len(text)
        if len(block) >= BLOCK_TEXTS or size >= BLOCK_BYTES:
            yield block
            block, size = [], 0
    if block:
        yield block


def _classify(args: argparse.Namespace, out: TextIO) -> int:
    from ..classification import TextClassifier

    blocks = _read_texts(args)
    first = next(blocks, [])  # a missing or unreadable file is reported before the model is loaded
    check_device(args.device, ClassificationError)
    options = {} if args.max_length is None else {"max_length": args.max_length}
    classifier = TextClassifier.from_pretrained(args.model, revision=args.revision, device=args.device,
                                                batch_size=args.batch_size, **options)
    widths: list[int] = []
    n = 0
    for block in itertools.chain([first], blocks):
        results = classifier.classify(block)
        if args.json:  # one JSON line per text (.jsonlines), as it is classified
            for r in results:
                write_json_line(out, {**r.to_dict(), "model": args.model, "max_length": classifier.max_length})
                n += 1
        else:
            widths = _table(results, classifier.labels, out, start=n, widths=widths)
            n += len(results)
    out.flush()
    return 0


def _shown(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TEXT_WIDTH else line[: TEXT_WIDTH - 3] + "..."


def _table(results, labels: Sequence[str], out: TextIO, start: int = 0, widths: list[int] | None = None) -> list[int]:
    """Rows ``start``, ... of the table (the header too when ``start`` is 0); the columns as wide as this block
    needs and at least ``widths`` (the earlier blocks'); returns the widths used."""
    head = ["#", "label", *(f"p({label})" for label in labels), "tokens", "text"]
    rows = [[str(i), r.label, *(f"{r.probabilities[label]:.4f}" for label in labels),
             f"{r.num_tokens}{'+' if r.truncated else ''}", _shown(r.text)] for i, r in enumerate(results, start)]
    shown = [head, *rows] if start == 0 else rows
    widths = [max([len(row[c]) for row in shown] + (widths or [0] * len(head))[c : c + 1]) for c in range(len(head) - 1)]
    for row in shown:
        cells = [row[c].ljust(widths[c]) if c in (1,) else row[c].rjust(widths[c]) for c in range(len(widths))]
        out.write("  ".join(cells) + "  " + row[-1] + "\n")
    return widths


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dsf_lightning.cli.classify ...`` (the same as ``dsf classify ...``)."""
    return standalone_main("classify", add_classify_parser, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
