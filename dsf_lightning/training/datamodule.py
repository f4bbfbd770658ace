"""The language-model DataModule: any corpus of :mod:`dsf_lightning.data.corpora`, laid out as
contiguous streams read in truncated-BPTT windows (:mod:`dsf_lightning.data.streams`).

``batch_size`` and ``eval_batch_size`` count streams over all processes: under DDP each rank reads
its own contiguous block of them (no sampler, no shuffling), so metrics do not depend on the number of
processes. Perplexity is reported at a fixed ``eval_batch_size`` (awd-lstm-lm's convention).

Its checkpoint state is a fingerprint of the data (corpus tokens' sha256 per split, the corpus files'
sha256, ``batch_size``, ``bptt``, ``eval_batch_size``, processes): resuming training with another corpus or
layout is a :class:`~dsf_lightning.training.resume.ResumeMismatchError` (:mod:`dsf_lightning.training.resume`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import lightning as L

from ..data.passes import ResumablePass
from ..data.streams import StreamWindows

BATCHINGS = ("streams", "sentences")


def _check_corpus(corpus: Any) -> None:
    """A corpus name, or a loaded corpus (a ``Corpus``, or any object with a string ``name``, a ``vocab``
    and a dict of ``splits``); anything else raises a ValueError saying what to pass."""
    if isinstance(corpus, str):
        if not corpus.strip():
            raise ValueError("corpus (data.corpus in a recipe) is empty: give a corpus name (`dsf list corpora`) or a loaded Corpus")
        return
    missing = [attr for attr in ("name", "vocab", "splits") if not hasattr(corpus, attr)]
    if missing or not isinstance(corpus.name, str) or not isinstance(corpus.splits, dict):
        from ..data.corpora import list_corpora

        raise ValueError(
            f"corpus (data.corpus in a recipe) must be a corpus name (a string: one of {', '.join(list_corpora())}) or a loaded Corpus, "
            f"got {type(corpus).__name__} {corpus!r:.80}; in a recipe or on the command line write the name, "
            "e.g. --data.corpus ptb"
        )


class LanguageModelDataModule(L.LightningDataModule):
    """Stream windows over a corpus.

    Args:
        corpus: a corpus name (``dsf list corpora``) or an already loaded ``Corpus``.
        data_root: where the corpus files are (else ``$DSF_DATA_ROOT``, else the user cache).
        corpus_options: passed to ``load_corpus`` (e.g. ``{"language": "fr"}`` for ``wmt-small``).
        batch_size: training streams (B), over all processes.
        bptt: window length T.
        eval_batch_size: validation / test streams, over all processes.
        vocab_from: encode the corpus with the vocabulary (and, for ``text-folder``, the tokenizer) of a
            pretrained model: a published name, Hub repo id or pretrained folder
            (:mod:`dsf_lightning.training.finetune`). Out-of-vocabulary words become the pretrained ``<unk>``.
            The CLI links it from ``model.init_from``.
        predict_split: the split ``dsf predict`` scores (``test``, ``valid`` or ``train``), laid out as the
            ``eval_batch_size`` streams that ``dsf test`` / ``dsf validate`` read.
        predict_file: score this UTF-8 text file instead (normalized by :meth:`text_normalizer`, then read
            with the corpus's tokenizer and vocabulary,
            ``<eos>`` after every line; ``eval_batch_size`` streams: set it to 1 to score every token after
            the first in one stream). See :mod:`dsf_lightning.training.prediction`.
        normalize: a text normalizer (:mod:`dsf_lightning.data.normalize`: ``none``, ``ptb``, ...) applied
            to the corpus's lines before tokenizing (``--data.normalize ptb``): for raw text of your own read
            by a model of a normalized corpus. Default: with ``vocab_from``, the pretrained model's own
            normalizer (config.json's ``normalize``) unless the corpus is already in that form (``ptb``
            for a PTB model); without, none. ``none`` turns it off. A ``predict_file`` (your text) is
            normalized by :meth:`text_normalizer`.
        batching: ``"streams"`` (default): contiguous streams read in windows, the state carried through the
            whole split. ``"sentences"``: the DSF paper's padded-sentence mini-batches
            (:mod:`dsf_lightning.data.sentences`): ``batch_size`` (``eval_batch_size``) sentences a batch,
            padded to its longest, read in ``bptt`` windows, the state starting from zeros at every batch; the
            loss and the metrics count only real (not padded) targets. Training draws a new order of the
            sentences every epoch (from ``seed`` and the epoch); the trainer then reloads the training loader
            every epoch (its number of windows follows the order). ``dsf predict`` still reads streams.
        seed: the seed of the sentence order (``batching: sentences``).
    """

    PREDICT_SPLITS = ("test", "valid", "train")

    def __init__(
        self,
        corpus: Any = "ptb",
        data_root: str | None = None,
        corpus_options: dict[str, Any] | None = None,
        batch_size: int = 20,
        bptt: int = 35,
        eval_batch_size: int = 10,
        vocab_from: str | None = None,
        predict_split: Literal["test", "valid", "train"] = "test",
        predict_file: str | None = None,
        normalize: str | None = None,
        batching: Literal["streams", "sentences"] = "streams",
        seed: int = 0,
    ) -> None:
        super().__init__()
        _check_corpus(corpus)
        if batching not in BATCHINGS:
            raise ValueError(f"batching (data.batching) must be one of {', '.join(BATCHINGS)}, got {batching!r:.80}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed (data.seed) must be an integer, got {seed!r:.80}")
        if batching == "streams" and seed != 0:  # streams have no order to draw: the option would do nothing
            raise ValueError(f"data.seed orders the sentences of data.batching sentences; with streams it does nothing "
                             f"(got {seed}): drop it or set data.batching sentences")
        self.batching, self.seed = batching, seed
        if normalize is not None:
            from ..data.normalize import get_normalizer

            get_normalizer(normalize)  # an unknown name fails here, naming the known ones
        self.normalize = normalize
        if predict_split not in self.PREDICT_SPLITS:
            raise ValueError(f"predict_split must be one of {self.PREDICT_SPLITS}, got {predict_split!r:.80}")
        self.predict_split, self.predict_file = predict_split, predict_file
        self.vocab_from = vocab_from
        self.corpus_name = corpus if isinstance(corpus, str) else corpus.name
        self._corpus = None if isinstance(corpus, str) else corpus
        self.data_root = data_root
        self.corpus_options = dict(corpus_options or {})
        self.batch_size, self.bptt, self.eval_batch_size = batch_size, bptt, eval_batch_size
        self._windows: dict[str, ResumablePass] = {}
        # fail early on impossible layouts, before any corpus is read
        for name, value in (("batch_size", batch_size), ("bptt", bptt), ("eval_batch_size", eval_batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    @property
    def corpus(self):
        """The loaded corpus (read, tokenized and cached on first use)."""
        if self._corpus is None:
            from ..data.corpora import load_corpus

            if self.vocab_from is not None:
                self._corpus = self._load_with_pretrained_vocab(load_corpus)
            else:
                self._corpus = load_corpus(
                    self.corpus_name, data_root=self.data_root, normalize=self.normalize, **self.corpus_options
                )
        elif self.vocab_from is not None and not getattr(self, "_vocab_checked", False):
            pretrained = self._pretrained()
            if list(self._corpus.vocab.symbols) != list(pretrained.vocab.symbols):
                raise ValueError(
                    f"vocab_from {self.vocab_from}: the corpus object given was encoded with another vocabulary; "
                    "pass the corpus by name so it is encoded with the pretrained one"
                )
            self._vocab_checked = True
        return self._corpus

    def missing_data(self) -> list[Path]:
        """Where the corpus files this DataModule reads are expected, for those that are not there (``[]``: all
        are, or a loaded corpus was given); reads nothing. An unknown corpus or option, or files this library
        cannot load, raise :class:`~dsf_lightning.data.corpora.CorpusError`."""
        if self._corpus is not None:
            return []
        from ..data.corpora import get_corpus_spec

        return get_corpus_spec(self.corpus_name).missing_files(self.data_root, **self.corpus_options)

    def _pretrained(self):
        from .finetune import load_for_finetuning

        return load_for_finetuning(self.vocab_from)

    def _load_with_pretrained_vocab(self, load_corpus):
        from ..data.corpora import normalizer_for_corpus
        from .finetune import check_corpus_tokenizer, corpus_options_for

        pretrained = self._pretrained()
        options = corpus_options_for(self.corpus_name, self.corpus_options, pretrained)
        normalize = self.normalize
        own = getattr(pretrained, "normalize", None)
        if normalize is None and own and normalizer_for_corpus(self.corpus_name) != own:
            normalize = own  # the user's text, written as the pretrained model's training data was
        corpus = load_corpus(
            self.corpus_name, data_root=self.data_root, vocab=pretrained.vocab, normalize=normalize, **options
        )
        check_corpus_tokenizer(corpus, pretrained, self.vocab_from)
        return corpus

    def text_normalizer(self):
        """The normalizer for a text file of your own read with this corpus's vocabulary (``predict_file``):
        ``normalize`` when given (``none``: None), else the pretrained model's (``vocab_from``), else the one
        that writes text in the corpus's form (``ptb`` for ``ptb``)."""
        from ..data.corpora import normalizer_for_corpus
        from ..data.normalize import get_normalizer

        if self.normalize is not None:
            return get_normalizer(self.normalize)
        own = getattr(self._pretrained(), "normalize", None) if self.vocab_from is not None else None
        return get_normalizer(own or normalizer_for_corpus(self.corpus_name))

    @property
    def vocab_size(self) -> int:
        return len(self.corpus.vocab)

    def prepare_data(self) -> None:
        self.corpus  # noqa: B018  (download / tokenize / cache once, on the main process)

    def setup(self, stage: str | None = None) -> None:
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
        for split, streams in (("train", self.batch_size), ("valid", self.eval_batch_size), ("test", self.eval_batch_size)):
            if split in self.corpus.splits and split not in self._windows:
                self._windows[split] = self._loader(split, streams, rank, world)

    def _loader(self, split: str, batch_size: int, rank: int, world: int) -> ResumablePass:
        tokens = self.corpus.splits[split]
        if self.batching == "streams":
            return StreamWindows(tokens, batch_size, self.bptt, rank, world)
        from ..data.sentences import SentenceBatches

        return SentenceBatches(tokens, getattr(self.corpus.vocab, "eos_id", None), batch_size, self.bptt, rank, world,
                               shuffle=split == "train", seed=self.seed, split=split)

    def _split(self, split: str) -> ResumablePass:
        self.setup()
        if split not in self._windows:
            have = ", ".join(sorted(self.corpus.splits)) or "none"
            raise ValueError(f"corpus {self.corpus_name!r} has no {split!r} split (it has: {have})")
        return self._windows[split]

    # -- checkpoints: what a resume must find unchanged (training/resume.py) ----------------------------
    def _fingerprint(self) -> dict[str, Any]:
        from .resume import data_fingerprint

        world = self.trainer.world_size if self.trainer is not None else 1
        key = (id(self.corpus), world)
        if getattr(self, "_fingerprint_cache", (None,))[0] != key:  # hashing the splits once per corpus
            self._fingerprint_cache = (key, data_fingerprint(self.corpus, self.batch_size, self.bptt, self.eval_batch_size, world,
                                                             batching=self.batching, seed=self.seed))
        return self._fingerprint_cache[1]

    def state_dict(self) -> dict[str, Any]:
        """The fingerprint, and what the model reads text with (vocabulary, tokenizer, normalizer) so that
        ``dsf export`` writes a checkpoint's folder from the checkpoint alone, never rebuilding the vocabulary."""
        corpus = self.corpus
        state: dict[str, Any] = {"fingerprint": self._fingerprint()}
        tokenizer = getattr(corpus, "tokenizer", None)
        if hasattr(corpus.vocab, "to_dict") and hasattr(tokenizer, "to_dict"):  # a Corpus (not a stand-in object)
            normalize = (getattr(corpus, "info", None) or {}).get("normalize")
            state["reader"] = {"vocab": corpus.vocab.to_dict(), "tokenizer": tokenizer.to_dict(), "normalize": normalize}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Refuse (:class:`~dsf_lightning.training.resume.ResumeMismatchError`) to resume training from a
        checkpoint written with another corpus or stream layout; another number of processes is allowed."""
        if self.trainer is None or self.trainer.state.fn != "fit":
            return  # validate / test a checkpoint on any data
        from .resume import check_data_fingerprint

        saved, now = state.get("fingerprint"), self._fingerprint()
        check_data_fingerprint(saved, now)
        if saved and saved.get("world_size") not in (None, now["world_size"]):
            from lightning.pytorch.utilities import rank_zero_warn

            rank_zero_warn(
                f"resuming a run of {saved['world_size']} processes on {now['world_size']}: the streams and the "
                "carried state continue exactly, but dropout masks are drawn per process, so with dropout the "
                "run is no longer bit-identical to one that never stopped"
            )

    def train_dataloader(self) -> ResumablePass:
        loader = self._split("train")
        if self.batching == "sentences" and self.trainer is not None:
            # the pass of the epoch the trainer is in (Lightning's sampler epoch); its order decides its number
            # of windows, which the trainer reads again only when it reloads the loader: every epoch
            loader.set_epoch(self.trainer.fit_loop.epoch_progress.current.processed)
            self.trainer.reload_dataloaders_every_n_epochs = 1
        return loader

    def val_dataloader(self) -> ResumablePass:
        return self._split("valid")

    def test_dataloader(self) -> ResumablePass:
        return self._split("test")

    def predict_dataloader(self) -> StreamWindows:
        """``predict_file`` (encoded with the corpus's tokenizer and vocabulary), else ``predict_split``; read
        as streams whatever ``batching`` says."""
        if self.predict_file is None and self.batching == "streams":
            return self._split(self.predict_split)
        if self.predict_file is None:
            key = f"predict-{self.predict_split}"
            if key not in self._windows:
                self._split(self.predict_split)  # an absent split: the usual error
                rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
                self._windows[key] = StreamWindows(self.corpus.splits[self.predict_split], self.eval_batch_size,
                                                   self.bptt, rank, world)
            return self._windows[key]
        if "predict_file" not in self._windows:
            import torch

            corpus = self.corpus
            tokenizer = getattr(corpus, "tokenizer", None)
            if tokenizer is None:
                raise ValueError(f"predict_file: corpus {self.corpus_name!r} has no tokenizer to read a text file with")
            ids = _read_predict_file(self.predict_file, tokenizer, corpus.vocab, self.text_normalizer())
            rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
            self._windows["predict_file"] = StreamWindows(
                torch.frombuffer(ids, dtype=torch.long).clone() if ids else torch.zeros(0, dtype=torch.long),
                self.eval_batch_size, self.bptt, rank, world,
            )
        return self._windows["predict_file"]


def _read_predict_file(path: str, tokenizer: Any, vocab: Any, normalizer: Any):
    """A text file's token ids (8 bytes each) through the one streaming reader
    (:func:`dsf_lightning.data.textfile.iter_file_parts`): lines in parts of at most 64 KiB whatever the file
    holds, your text normalized sentence by sentence (``normalizer``, None: as it is), ``<eos>`` after every
    line; a word longer than 64 KiB is one unknown word. NUL bytes (binary data, ``/dev/zero``) and invalid
    UTF-8 are a :class:`~dsf_lightning.data.textfile.TextFileError` naming the file and the byte offset (one line,
    exit 2, under ``dsf predict``), as is a symbol a closed vocabulary lacks."""
    from array import array

    from ..data.textfile import LongWord, TextFileError, iter_file_parts, normalized_parts
    from ..data.vocab import VocabularyError

    cut = getattr(tokenizer, "cut_at", None)
    cut = cut if cut in ("space", "char") else None
    boundary = getattr(tokenizer, "boundary", None)
    ids = array("q")
    continued = False  # earlier parts of the current line gave symbols
    parts = iter_file_parts(path, cut=cut, decompress=True, desc="reading")
    for text, where, last in normalized_parts(parts, normalizer):
        if isinstance(text, LongWord):
            if vocab.unk is None:
                raise TextFileError(f"{where}: a word longer than 64 KiB, and the vocabulary is closed (no unknown "
                                    "symbol to read it as); split or remove it")
            symbols = ([boundary] if continued and boundary is not None else []) + [vocab.unk]
        elif last and not continued:
            symbols = tokenizer.tokenize_line(text)
        else:
            symbols = tokenizer.tokenize_part(text, continued=continued, last=last)
        continued = not last and (continued or bool(symbols))
        try:
            ids.extend(vocab.encode(symbols, source=f"predict_file {where}"))
        except VocabularyError as err:  # a symbol of your text that a closed vocabulary lacks: your file's
            raise TextFileError(str(err)) from None
    return ids
