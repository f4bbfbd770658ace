"""Plain-text corpora: any folder of ``{train,valid,test}.txt``, and Tiny Shakespeare.

``text-folder`` options:

- ``path``: the folder (absolute, or relative to the data root, else to the current folder; default: the
  data root itself).
  Loads the splits whose files exist unless ``splits=`` is given. ``path`` may also name ONE text
  file: it is split by lines, the first 80% train, the next 10% valid, the last 10% test (option
  ``fractions``, default ``[0.8, 0.1, 0.1]``; each split gets at least one line).
- ``tokenizer``: ``"word"``, ``"char"`` or ``"subword"`` (or a :class:`Tokenizer`, e.g. the fitted
  one of another corpus), with ``tokenizer_options`` (e.g. ``{"min_count": 5}`` for subwords).
- ``unk`` (default ``"<unk>"``), ``min_count`` (default 1), ``max_size`` (default: no limit): the
  vocabulary is built from train and is open: a symbol of valid/test (or of text scored later) that
  train lacks, or that ``min_count`` / ``max_size`` drop, becomes ``unk``. ``unk: null`` makes it
  closed (an unseen symbol is then an error naming this option). Pass ``vocab=`` to
  :func:`load_corpus` instead to reuse a fixed vocabulary: with a closed one (no unk), a token
  outside it raises :class:`~dsf_lightning.data.vocab.VocabularyError` naming the token, the file and the line.

``tinyshakespeare``: Karpathy's ``input.txt`` (1,115,394 characters), character level (space ->
``_``, newline -> ``<eos>``: 65 symbols), split at the line boundaries nearest after 90% and 95%
of the characters (option ``fractions``); the vocabulary is built from all loaded splits.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import accumulate
from pathlib import Path

from ..tokenizers import CharTokenizer, Tokenizer, get_tokenizer, tokenizer_from_json
from .base import CorpusSpec, Line, register_corpus
from .files import CorpusError, FileSpec, read_lines


class TextFolder(CorpusSpec):
    name = "text-folder"
    description = "your own text: a folder of train.txt / valid.txt / test.txt, or one file split 80/10/10 by lines"
    folder = ""
    howto = "give the folder with path=... (absolute, or relative to the data root, else to the current folder)"
    defaults = {
        "path": None,
        "tokenizer": "word",
        "tokenizer_options": {},
        "unk": "<unk>",
        "min_count": 1,
        "max_size": None,
        "fractions": (0.8, 0.1, 0.1),
    }
    optional_splits = True
    version = 2  # 2: open vocabulary (unk "<unk>") by default; path may name one file
    vocab_fix = "or give the corpus option unk: '<unk>' (--data.corpus_options '{path: ..., unk: <unk>}')"

    def options(self, given: dict) -> dict:
        opts = super().options(given)
        if (opts["min_count"] > 1 or opts["max_size"]) and opts["unk"] is None:
            raise CorpusError("text-folder: min_count/max_size drop symbols, so they need unk='<unk>' (or similar)")
        for key in ("min_count", "max_size"):
            value = opts[key]
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise CorpusError(f"text-folder: the corpus option {key} must be a positive integer, got {value!r}")
        fr = opts["fractions"]
        if (not isinstance(fr, (list, tuple)) or len(fr) != 3
                or not all(isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0 for f in fr)
                or abs(sum(fr) - 1) > 1e-6):
            raise CorpusError(f"text-folder: the corpus option fractions must be 3 positive numbers summing to 1 "
                              f"(train, valid, test shares of one file's lines), got {fr!r}")
        opts["fractions"] = tuple(float(f) for f in fr)
        return opts

    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        path = str(opts["path"]).rstrip("/") if opts["path"] else ""
        # a relative path is looked for under the data root, then under the current folder
        here = str(Path.cwd() / path) if path and not Path(path).expanduser().is_absolute() else None

        def specs(split: str) -> list[FileSpec]:
            folder = [f"{p}/{split}.txt" for p in (path, here) if p] or [f"{split}.txt"]
            one = [p for p in (path, here) if p]  # a path naming one file: every split reads it (split by lines)
            first, *rest = (FileSpec(p) for p in (*folder, *one))
            return [FileSpec(first.path, alternatives=tuple(rest))]

        return {split: specs(split) for split in self.splits}

    @staticmethod
    def one_file(path: Path, opts: dict) -> bool:
        """Whether ``path`` (a split's resolved file) is the one file ``path=`` names, split by lines."""
        if not opts["path"]:
            return False
        given, path = Path(str(opts["path"])), Path(str(path))
        return path.name == given.name and path.parent.name != given.name  # not GIVEN/<split>.txt

    def lines(self, split: str, paths: list[Path], opts: dict) -> Iterator[Line]:
        if not self.one_file(paths[0], opts):
            yield from super().lines(split, paths, opts)
            return
        # one file: consecutive blocks of lines (first 80% train, next 10% valid, last 10% test by default)
        lines = list(read_lines(paths[0]))
        if len(lines) < 3:
            raise CorpusError(f"text-folder: {paths[0]} has {len(lines)} line(s); splitting one file into "
                              "train/valid/test needs at least 3 (or give a folder of train.txt/valid.txt/test.txt)")
        n = len(lines)
        n_valid = max(1, round(opts["fractions"][1] * n))
        n_test = max(1, round(opts["fractions"][2] * n))
        n_train = max(1, n - n_valid - n_test)
        cuts = [0, n_train, min(n - 1, n_train + n_valid), n]
        k = self.splits.index(split)
        for i in range(cuts[k], cuts[k + 1]):
            yield paths[0], i + 1, lines[i]

    def tokenizer(self, opts: dict) -> Tokenizer:
        tok = opts["tokenizer"]
        if isinstance(tok, Tokenizer):
            return tokenizer_from_json(tok.to_json())  # a private copy
        return get_tokenizer(tok, **opts["tokenizer_options"])

    def unk_symbol(self, opts: dict) -> str | None:
        return opts["unk"]


class TinyShakespeare(CorpusSpec):
    name = "tinyshakespeare"
    description = "Tiny Shakespeare (char-rnn input.txt), character level"
    url = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
    folder = "tinyshakespeare"
    defaults = {"fractions": (0.9, 0.05, 0.05)}
    vocab_from_all = True
    dataset_id, language = "tiny_shakespeare", "en"
    SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"

    def options(self, given: dict) -> dict:
        opts = super().options(given)
        fr = opts["fractions"]
        if len(fr) != 3 or min(fr) <= 0 or abs(sum(fr) - 1) > 1e-9:
            raise CorpusError(f"tinyshakespeare: fractions must be 3 positive numbers summing to 1, got {fr!r}")
        return opts

    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        spec = FileSpec("tinyshakespeare/input.txt", sha256=self.SHA256, url=self.url)
        return {split: [spec] for split in self.splits}

    def tokenizer(self, opts: dict) -> Tokenizer:
        return CharTokenizer(mode="plain")

    def lines(self, split: str, paths: list[Path], opts: dict) -> Iterator[Line]:
        lines = list(read_lines(paths[0]))
        ends = list(accumulate(len(line) + 1 for line in lines))  # characters up to each line's end
        cuts = [0]
        for frac in accumulate(opts["fractions"][:2]):
            cuts.append(next(i + 1 for i, e in enumerate(ends) if e >= frac * ends[-1]))
        cuts.append(len(lines))
        k = self.splits.index(split)
        for i in range(cuts[k], cuts[k + 1]):
            yield paths[0], i + 1, lines[i]


for _spec in (TextFolder(), TinyShakespeare()):
    register_corpus(_spec)
