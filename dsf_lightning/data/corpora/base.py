"""The corpus contract (:class:`Corpus`, :class:`CorpusSpec`), the registry and :func:`load_corpus`.

Loading a corpus: resolve the data root, find the split files (an informative :class:`CorpusError`
when one is missing), verify their sha256, then either read the tokenized result from the cache
(keyed by the files' sha256 + every option) or read lines, fit the tokenizer if it learns (subwords,
on train), build the vocabulary and encode every split into one 1-D int64 tensor.

Vocabulary rule (word and character corpora): built from the train split; when train is not loaded
(``splits=("valid", "test")`` on WikiText-2 or WMT, whose train files are missing here) it is built
from the splits that are loaded, and a warning is logged: ids are then not comparable with a model
trained on the official train split. Pass ``vocab=`` (a :class:`Vocabulary` or a path to its JSON)
to encode with a fixed vocabulary instead.
"""

from __future__ import annotations

import abc
import json
import logging
import os
import time
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from ..normalize import NormalizerError, get_normalizer
from ..tokenizers import SubwordTokenizer, Tokenizer
from ..vocab import Vocabulary, VocabularyError
from . import cache as _cache
from .files import (
    DATA_ROOT_ENV,
    CorpusError,
    FileSpec,
    FrozenFile,
    check_digests,
    default_cache_dir,
    file_digests,
    read_lines,
    resolve_data_root,
    verify_file,
)
from .files import (
    download as fetch_url,
)

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")
Line = tuple[Path, int, str]  # (file, 1-based line number, text)
_REGISTRY: dict[str, CorpusSpec] = {}


@dataclass
class Corpus:
    """A tokenized corpus: one 1-D int64 tensor of token ids per split present.

    ``tokenizer`` is the (fitted) tokenizer that produced the ids, ``info`` says where they came
    from (data root, files with sha256, options, cache file, whether it was a cache hit, seconds).
    """

    name: str
    vocab: Vocabulary
    tokenizer_name: str
    splits: dict[str, torch.Tensor]
    tokenizer: Tokenizer | None = field(default=None, repr=False, compare=False)
    info: dict = field(default_factory=dict, repr=False, compare=False)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={v.numel():,}" for k, v in self.splits.items())
        return f"Corpus({self.name!r}, vocab={len(self.vocab):,}, tokenizer={self.tokenizer_name!r}, {sizes})"


class CorpusSpec(abc.ABC):
    """How to find, read and tokenize one corpus. Subclass, set the attributes, register an instance."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    url: ClassVar[str] = ""  # canonical download (archive or page)
    folder: ClassVar[str] = ""  # folder under the data root
    howto: ClassVar[str] = ""  # layout / unpacking instructions for the missing-file message
    splits: ClassVar[tuple[str, ...]] = SPLITS
    defaults: ClassVar[dict[str, Any]] = {}  # corpus options and their defaults
    version: ClassVar[int] = 1  # bump when the tokenized output of this spec changes
    unk: ClassVar[str | None] = None  # unknown symbol of a built word vocabulary
    vocab_from_all: ClassVar[bool] = False  # build the vocabulary from every loaded split
    optional_splits: ClassVar[bool] = False  # by default load the splits whose files exist
    vocab_fix: ClassVar[str] = ""  # the option that opens a built vocabulary, named when it is closed and a symbol is unseen
    # What the rest of the library knows about the corpus reads these (model cards, text normalization):
    dataset_id: ClassVar[str | None] = None  # the data set's Hugging Face Hub id: a card's `datasets:` and model-index
    language: ClassVar[str | None] = None  # the text's language code: a card's `language:` (None: not one language)
    normalizer: ClassVar[str | None] = None  # the normalizer that writes raw text in this corpus's form (data.normalize)
    aliases: ClassVar[tuple[str, ...]] = ()  # other names the same data is recorded under (a task's: "imdb")

    @abc.abstractmethod
    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        """Split -> the files it is read from (paths relative to the data root)."""

    @abc.abstractmethod
    def tokenizer(self, opts: dict) -> Tokenizer:
        """The tokenizer this corpus is read with, given its options."""

    def lines(self, split: str, paths: list[Path], opts: dict) -> Iterator[Line]:
        for path in paths:
            for i, line in enumerate(read_lines(path), 1):
                yield path, i, line

    def check_supported(self, root: Path, opts: dict) -> None:
        """Raise :class:`CorpusError` if the files are present but cannot be loaded by this library."""

    def vocabulary(self, tokenizer: Tokenizer, tokenized: dict[str, list], opts: dict) -> Vocabulary:
        """Build the vocabulary from tokenized lines (see the module docstring for the rule)."""
        source = ["train"] if "train" in tokenized and not self.vocab_from_all else list(tokenized)
        if "train" not in tokenized:
            logger.warning("%s: no train split loaded, vocabulary built from %s", self.name, source)
        unk = self.unk_symbol(opts)
        return Vocabulary.build(
            (toks for split in source for _, _, toks in tokenized[split]),
            specials=tuple(s for s in (tokenizer.eos, unk) if s is not None),
            eos=tokenizer.eos,
            unk=unk,
            min_count=opts.get("min_count", 1),
            max_size=opts.get("max_size"),
        )

    def unk_symbol(self, opts: dict) -> str | None:
        return self.unk

    def options(self, given: dict) -> dict:
        unknown = sorted(set(given) - set(self.defaults))
        if unknown:
            accepted = ", ".join(sorted(self.defaults)) or "none"
            raise CorpusError(f"corpus {self.name!r}: unknown option(s) {unknown}; accepted: {accepted}")
        return {**self.defaults, **given}

    def missing_files(
        self, data_root: str | os.PathLike | None = None, *, splits: Sequence[str] | None = None, **options
    ) -> list[Path]:
        """Where the files :func:`load_corpus` would read for ``splits`` (default: as it chooses) are expected,
        for those that are not there; ``[]`` when every one is. Raises :class:`CorpusError` for an unknown
        option or split, or files present that this library cannot load (:meth:`check_supported`)."""
        opts = self.options(options)
        root, _ = resolve_data_root(data_root)
        all_files = self.files(opts)
        missing = _missing(root, self._splits(root, all_files, splits), all_files)
        if not missing:
            self.check_supported(root, opts)
        return list(dict.fromkeys(root / fs.path for _, fs in missing))

    def _splits(self, root: Path, all_files: dict, splits: Sequence[str] | None) -> list[str]:
        """The splits to read: those asked for (checked), else all, else (``optional_splits``) those present."""
        if splits is None:
            splits = self.splits
            if self.optional_splits:
                splits = [s for s in self.splits if not _missing(root, [s], all_files)] or list(self.splits)
        splits = list(dict.fromkeys(splits))
        bad = [s for s in splits if s not in self.splits]
        if bad:
            raise CorpusError(f"corpus {self.name!r} has no split(s) {bad}; it has {list(self.splits)}")
        return splits


def register_corpus(spec: CorpusSpec) -> CorpusSpec:
    """Make ``spec`` loadable by name with :func:`load_corpus`, and its facts (dataset id, language,
    normalizer, files) known to every part of the library that asks for them by the corpus's name."""
    if spec.name in _REGISTRY and type(_REGISTRY[spec.name]) is not type(spec):
        raise CorpusError(f"corpus name {spec.name!r} is already registered")
    taken = [n for n in (spec.name, *spec.aliases) if _owner(n) not in (None, spec.name)]
    if taken:
        raise CorpusError(f"corpus {spec.name!r}: name or alias(es) {taken} already name another corpus")
    try:
        get_normalizer(spec.normalizer)  # a misspelt name fails here, not when a card or a text is written
    except NormalizerError as err:
        raise CorpusError(f"corpus {spec.name!r}: {err} (its normalizer attribute)") from None
    _REGISTRY[spec.name] = spec
    return spec


def list_corpora() -> list[str]:
    return sorted(_REGISTRY)


def get_corpus_spec(name: str) -> CorpusSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise CorpusError(f"unknown corpus {name!r}; known: {', '.join(list_corpora())}") from None


def _owner(name: str) -> str | None:
    """The registered corpus called ``name`` or having it as an alias."""
    if name in _REGISTRY:
        return name
    return next((spec.name for spec in _REGISTRY.values() if name in spec.aliases), None)


def find_corpus_spec(name: object) -> CorpusSpec | None:
    """The spec of the corpus a model records it was trained on (its name, or an alias such as a task's
    ``imdb``), or None for an unknown name (a corpus of another library, a generated task)."""
    owner = _owner(name) if isinstance(name, str) else None
    return _REGISTRY[owner] if owner is not None else None


def normalizer_for_corpus(corpus: str) -> str | None:
    """The normalizer that writes raw text in corpus ``corpus``'s form (its spec's ``normalizer``), or None."""
    spec = find_corpus_spec(corpus)
    return spec.normalizer if spec is not None else None


def describe_missing(what: str, paths: Sequence[Path], data_root: str | os.PathLike | None = None) -> str:
    """One line naming missing files: ``WHAT needs A, B, C, D and N more under ROOT (data root from HOW)``;
    a path under the data root is named relative to it."""
    root, how = resolve_data_root(data_root)

    def shown(path: Path) -> str:
        return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)

    names = [shown(Path(p)) for p in dict.fromkeys(paths)]
    more = f" and {len(names) - 4} more" if len(names) > 4 else ""
    return f"{what} needs {', '.join(names[:4])}{more} under {root} (data root from {how})"


def _find(root: Path, spec: FileSpec) -> tuple[Path, FileSpec] | None:
    """The first candidate present (a path ending in "/" names a non-empty folder)."""
    for cand in spec.candidates():
        path = root / cand.path
        if path.is_file() or (cand.path.endswith("/") and path.is_dir() and any(path.iterdir())):
            return path, cand
    return None


def _missing_message(spec: CorpusSpec, root: Path, how: str, missing: list, present: list[str]) -> str:
    lines = [f"corpus {spec.name!r} ({spec.description}): missing file(s):"]
    grouped: dict[str, tuple[list[str], FileSpec]] = {}
    for split, fs in missing:
        grouped.setdefault(fs.path, ([], fs))[0].append(split)
    entries = list(grouped.values())
    firsts = {id(next(e for e in entries if split in e[0])) for split in dict.fromkeys(s for s, _ in missing)}
    shown = [e for i, e in enumerate(entries) if id(e) in firsts or i < 3]  # 3 files + each split's first
    for splits, fs in shown:
        check = f"sha256 {fs.sha256}" if fs.sha256 else f"git blob {fs.git_blob}" if fs.git_blob else ""
        check = f" ({check})" if check else ""
        lines.append(f"  [{', '.join(splits)}] {fs.path} -> expected at {root / fs.path}{check}")
        lines += [f"        or {root / alt.path}" for alt in fs.alternatives]
    if len(entries) > len(shown):
        lines.append(f"  ... and {len(entries) - len(shown)} more file(s) of the same layout")
    lines.append(f"data root: {root} (from {how})")
    if spec.url:
        lines.append(f"download: {spec.url}")
    if spec.howto:
        lines.append(spec.howto)
    lines.append(
        f"to use a local copy, pass data_root=... or set {DATA_ROOT_ENV} to a folder holding "
        f"{spec.folder + '/' if spec.folder else 'these files'}"
    )
    if present:
        lines.append(f"splits available here: {present}; load them with splits={tuple(present)!r}")
    return "\n".join(lines)


def _missing(root: Path, splits: Iterable[str], all_files: dict[str, list[FileSpec]]) -> list[tuple[str, FileSpec]]:
    """``(split, file)`` of every required file of ``splits`` that is not under ``root``: the one presence check."""
    return [(split, fs) for split in splits for fs in all_files[split] if _find(root, fs) is None]


def _resolve_files(spec, root, how, splits, all_files, fetch) -> dict[str, list[tuple[Path, FileSpec]]]:
    if fetch:
        for _, fs in _missing(root, splits, all_files):
            if fs.url and _find(root, fs) is None:  # a file two splits share is fetched once
                fetch_url(fs.url, root / fs.path, fs.sha256)
    missing = _missing(root, splits, all_files)
    if missing:
        present = [s for s in spec.splits if s in all_files and not _missing(root, [s], all_files)]
        raise CorpusError(_missing_message(spec, root, how, missing, present))
    return {split: [_find(root, fs) for fs in all_files[split]] for split in splits}


def load_corpus(
    name: str,
    data_root: str | os.PathLike | None = None,
    *,
    splits: Sequence[str] | None = None,
    vocab: Vocabulary | str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    cache: bool = True,
    verify: bool = True,
    download: bool = False,
    normalize: str | None = None,
    **options,
) -> Corpus:
    """Load corpus ``name`` (see :func:`list_corpora`) as token-id tensors.

    ``data_root``: folder holding the corpus folders (else ``DSF_DATA_ROOT``, else the user cache).
    ``splits``: which splits to load (default: all of the corpus's). ``vocab``: a fixed vocabulary
    (or path to its JSON) to encode with. ``cache_dir``: where tokenized results are cached
    (default ``DSF_CACHE_DIR`` or ``~/.cache/dsf_lightning/tokenized``); ``cache=False`` disables it.
    ``verify``: check files against their known sha256. ``download``: fetch missing files that have
    a direct URL. ``normalize``: a text normalizer (:mod:`dsf_lightning.data.normalize`, e.g. ``"ptb"``)
    applied to every line before tokenizing, for raw text read by a model trained on a normalized
    corpus (a ``text-folder`` of your own text; the benchmark corpora are already in their form).
    Other keyword arguments are the corpus's options (e.g. ``language`` for wmt-small).
    """
    start = time.perf_counter()
    try:
        normalizer = get_normalizer(normalize)
    except NormalizerError as err:
        raise CorpusError(f"corpus {name!r}: {err} (the normalize option)") from None
    spec = get_corpus_spec(name)
    opts = spec.options(options)
    root, how = resolve_data_root(data_root)
    all_files = spec.files(opts)
    splits = spec._splits(root, all_files, splits)
    resolved = _resolve_files(spec, root, how, splits, all_files, download)
    spec.check_supported(root, opts)
    digests: dict[str, str] = {}
    for split in splits:
        for path, fs in resolved[split]:
            if path.is_dir():
                continue
            if path.stat().st_size == 0:
                raise CorpusError(f"corpus {name!r}: file {path} is empty (split {split!r})")
            if str(path) not in digests:
                digests[str(path)] = verify_file(path, fs) if verify else file_digests(path)[0]
    if vocab is not None and not isinstance(vocab, Vocabulary):
        vocab = Vocabulary.load(vocab)
    tokenizer = spec.tokenizer(opts)

    def key_of(digests: dict[str, str]) -> str:
        return _cache.cache_key({
            "corpus": name, "spec_version": spec.version, "format": _cache.FORMAT, "splits": splits,
            "files": {split: [digests[str(p)] for p, _ in resolved[split]] for split in splits},
            "options": json.loads(json.dumps(opts, default=_jsonable)),
            "tokenizer": tokenizer.to_dict(), "vocab": vocab.to_dict() if vocab is not None else None,
            **({"normalize": normalizer.name} if normalizer is not None else {}),  # absent: keys as before
        })

    key = key_of(digests)
    cache_root = cache_dir or default_cache_dir()
    entry = _cache.entry_path(cache_root, name, key) if cache else None
    hit = _cache.load_entry(entry, key) if entry is not None else None
    if hit is not None:
        tensors, vocab, tokenizer = hit
        tensors = {s: tensors[s] for s in splits}
    else:
        # Tokenize the very bytes that are hashed: each file is read once more, into memory, and the key
        # is recomputed from that copy, so a file replaced after the check above cannot leave an entry
        # keyed by the old content holding the new tokens (issue 13, item 5).
        frozen, digests = _freeze(name, resolved, splits, verify)
        if key_of(digests) != key:
            logger.warning("%s: a file changed while the corpus was being loaded; using its content as read now", name)
            key = key_of(digests)
            entry = _cache.entry_path(cache_root, name, key) if cache else None
        tensors, vocab = _build(spec, splits, frozen, opts, tokenizer, vocab, normalizer)
        _check_unread(name, frozen, digests)
        del frozen
        if entry is not None:
            try:
                _cache.save_entry(entry, key, tensors, vocab, tokenizer)
            except OSError as err:  # a read-only cache must not stop training
                logger.warning("could not write the corpus cache %s: %s", entry, err)
    info = {"data_root": str(root), "files": dict(digests), "options": opts, "key": key,
            "normalize": normalizer.name if normalizer is not None else None}
    info.update(cache=str(entry) if entry else None, cached=hit is not None, seconds=time.perf_counter() - start)
    logger.info("loaded %s in %.2fs (%s)", name, info["seconds"], "cache hit" if hit else "built")
    return Corpus(name, vocab, tokenizer.name, tensors, tokenizer=tokenizer, info=info)


def verify_corpus(
    name: str, data_root: str | os.PathLike | None = None, *, splits: Sequence[str] | None = None, **options
) -> dict[str, str]:
    """Check that corpus ``name``'s files are present and match their known checksums.

    Returns ``{path: sha256}``; raises :class:`CorpusError` naming what is missing or mismatched.
    """
    spec = get_corpus_spec(name)
    opts = spec.options(options)
    root, how = resolve_data_root(data_root)
    resolved = _resolve_files(spec, root, how, list(splits or spec.splits), spec.files(opts), False)
    return {
        str(path): verify_file(path, fs)
        for files in resolved.values()
        for path, fs in files
        if path.is_file()
    }


def _freeze(name: str, resolved: dict, splits: list[str], verify: bool) -> tuple[dict, dict[str, str]]:
    """``resolved`` with every file replaced by a :class:`FrozenFile` (read once, shared by the splits
    that read the same file), and ``{path: sha256}`` of those bytes (checked against the specs when
    ``verify``)."""
    frozen: dict[str, FrozenFile] = {}
    digests: dict[str, str] = {}
    out: dict[str, list] = {}
    for split in splits:
        out[split] = []
        for path, fs in resolved[split]:
            if path.is_dir():
                out[split].append((path, fs))
                continue
            key = str(path)
            if key not in frozen:
                frozen[key] = FrozenFile.read(path)
                if not frozen[key].content:
                    raise CorpusError(f"corpus {name!r}: file {path} is empty (split {split!r})")
                sha, blob = frozen[key].digests()
                digests[key] = check_digests(path, fs, sha, blob) if verify else sha
            out[split].append((frozen[key], fs))
    return out, digests


def _check_unread(name: str, frozen: dict, digests: dict[str, str]) -> None:
    """A spec that read a file by another route than its frozen bytes read the disk: make sure it read
    the bytes that were hashed (a narrower check than the frozen copy, for custom specs)."""
    for files in frozen.values():
        for path, _ in files:
            if isinstance(path, FrozenFile) and not path.opened:
                now = file_digests(Path(path))[0]
                if now != digests[str(path)]:
                    raise CorpusError(
                        f"corpus {name!r}: {path} changed while it was being tokenized (sha256 "
                        f"{digests[str(path)][:16]}... when read, {now[:16]}... now); nothing was cached. "
                        "Load it again once the file no longer changes."
                    )


def _jsonable(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return str(value)


def _build(spec, splits, resolved, opts, tokenizer, vocab, normalizer=None):
    raw: dict[str, list[Line]] = {}
    for split in splits:
        paths = [p for p, _ in resolved[split]]
        raw[split] = list(spec.lines(split, paths, opts))
        if normalizer is not None:  # one line per sentence; lines left empty (blank, punctuation only) dropped
            raw[split] = [(p, i, s) for p, i, line in raw[split] for s in normalizer.normalize_line(line)]
        if not raw[split]:
            where = ", ".join(map(str, paths))
            raise CorpusError(f"corpus {spec.name!r}: split {split!r} is empty (no lines in {where})")
    if tokenizer.needs_fit and not tokenizer.state():
        if "train" not in raw:
            raise CorpusError(
                f"corpus {spec.name!r}: the {tokenizer.name} tokenizer learns from the train split; load it too"
            )
        tokenizer.fit(line for _, _, line in raw["train"])
    if vocab is None and isinstance(tokenizer, SubwordTokenizer):
        unk = spec.unk_symbol(opts)
        symbols = [s for s in (tokenizer.eos, unk) if s is not None] + tokenizer.symbols()
        vocab = Vocabulary(list(dict.fromkeys(symbols)), eos=tokenizer.eos, unk=unk)
    built = vocab is None
    if vocab is None:
        tokenized = {s: [(p, i, tokenizer.tokenize_line(line)) for p, i, line in raw[s]] for s in splits}
        vocab = spec.vocabulary(tokenizer, tokenized, opts)
        items = tokenized
    else:
        items = {s: ((p, i, tokenizer.tokenize_line(line)) for p, i, line in raw[s]) for s in splits}
    try:
        tensors = {split: _encode(vocab, items[split]) for split in splits}
    except VocabularyError as err:
        if built and spec.vocab_fix:  # the corpus's own option opens the vocabulary: name it
            raise CorpusError(f"corpus {spec.name!r}: {err}; {spec.vocab_fix}") from None
        raise
    for split, t in tensors.items():
        if t.numel() == 0:
            raise CorpusError(f"corpus {spec.name!r}: split {split!r} produced no tokens (empty file?)")
    return tensors, vocab


def _encode(vocab: Vocabulary, items: Iterable[tuple[Path, int, list[str]]]) -> torch.Tensor:
    ids = array("q")
    for path, lineno, tokens in items:
        try:
            ids.extend(vocab.encode(tokens))
        except VocabularyError:
            vocab.encode(tokens, source=f"{path} line {lineno}")  # raises, naming file and line
    return torch.frombuffer(ids, dtype=torch.int64).clone() if len(ids) else torch.zeros(0, dtype=torch.int64)
