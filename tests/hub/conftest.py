"""Tiny models, folders and helpers shared by the hub tests."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dsf_lightning.data.tokenizers import get_tokenizer
from dsf_lightning.data.vocab import Vocabulary
from dsf_lightning.model import LMConfig, RecurrentLM
from dsf_lightning.model.pretrained import Pretrained, save_pretrained

V = 13
ROOT = Path(__file__).parents[2]


def tiny_pretrained(cell: str = "delta-rnn", *, tie: bool = True, tokenizer: str = "word", seed: int = 0, **config) -> Pretrained:
    """A randomly initialised tiny model (weights perturbed so every tensor matters)."""
    torch.manual_seed(seed)
    options = dict(vocab_size=V, cell=cell, hidden_sizes=[8], embedding_size=8, tie_weights=tie)
    options.update(config)
    model = RecurrentLM(LMConfig(**options))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.eval()
    symbols = ["<eos>"] + [f"w{i}" for i in range(V - 1)] if tokenizer != "char" else ["<eos>", "_"] + [chr(97 + i) for i in range(V - 2)]
    vocab = Vocabulary(symbols, eos="<eos>")
    info = {"corpus": "toy", "metrics": {"valid_ppl": 6.5, "test_ppl": 6.25, "valid_bpc": 1.5, "test_bpc": 1.45}}
    return Pretrained(model=model, vocab=vocab, tokenizer=get_tokenizer(tokenizer), info=info)


def logits_of(model: RecurrentLM, tokens: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(tokens)[0]


@pytest.fixture
def tokens() -> torch.Tensor:
    return torch.randint(0, V, (3, 11), generator=torch.Generator().manual_seed(1))


@pytest.fixture
def pretrained() -> Pretrained:
    return tiny_pretrained()


@pytest.fixture
def folder(tmp_path, pretrained) -> Path:
    return save_pretrained(pretrained, tmp_path / "tiny")


@pytest.fixture
def isolated_hub(tmp_path, monkeypatch) -> Path:
    """No bundled copies (they go to ``tmp_path / "bundled"``), an empty Hub cache and offline mode (read by
    huggingface_hub at call time)."""
    import huggingface_hub.constants as constants

    from dsf_lightning.hub import registry

    monkeypatch.setattr(registry, "BUNDLED_ROOT", tmp_path / "bundled")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf_cache"))
    return tmp_path


def rehash(folder: Path) -> None:
    """Make config.json's checksums agree with the files again (a forger would do the same), so a
    test reaches the structural checks behind the checksum."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    for name in config["files"]:
        data = (folder / name).read_bytes()
        config["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    path.write_text(json.dumps(config))


def edit_config(folder: Path, change) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))


class Boom:
    """A pickle payload: unpickling it creates ``marker`` (proof that something was unpickled)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def boom_bytes(marker: Path) -> bytes:
    return pickle.dumps({"state_dict": Boom(marker)})


def write_text_corpus(root: Path, seed: int = 0) -> Path:
    """A tiny word-level text-folder corpus (train/valid/test.txt) with some structure to learn."""
    rng = random.Random(seed)
    words = "the cat sat on a mat and the dog ran far away from home".split()
    root.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 200), ("valid", 30), ("test", 30)):
        lines = []
        for _ in range(n):
            start = rng.randrange(len(words))
            lines.append(" ".join(words[(start + i) % len(words)] for i in range(rng.randint(3, 9))))
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def fit_tiny_lm(tmp: Path, callbacks: list, **module_kwargs):
    """Two epochs of the real Trainer on a tiny text-folder corpus (written under ``tmp``) with a ModelCheckpoint
    saving ``tmp/checkpoints/last.ckpt``; returns the corpus root, the trained module and the DataModule."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from dsf_lightning.training import LanguageModelModule
    from dsf_lightning.training.datamodule import LanguageModelDataModule

    root = write_text_corpus(tmp / "corpus")
    L.seed_everything(0, verbose=False)
    data = LanguageModelDataModule("text-folder", data_root=str(root), batch_size=4, bptt=7, eval_batch_size=2)
    module = LanguageModelModule(vocab_size=data.vocab_size, **module_kwargs)
    trainer = L.Trainer(
        accelerator="cpu", devices=1, logger=False, max_epochs=2, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, use_distributed_sampler=False,
        callbacks=[*callbacks, ModelCheckpoint(dirpath=tmp / "checkpoints", monitor="val_loss", save_last=True)],
    )
    trainer.fit(module, data)
    return root, module, data


def client_env(tmp_path: Path, endpoint: str | None, offline: bool) -> dict:
    """Environment for a subprocess running the real huggingface_hub client (it reads these at import)."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("HF_", "HUGGINGFACE_", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"))}
    env.update(
        HF_HOME=str(tmp_path / "hf_home"),
        HF_HUB_CACHE=str(tmp_path / "hf_cache"),
        HF_HUB_OFFLINE="1" if offline else "0",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_DISABLE_IMPLICIT_TOKEN="1",
        HF_HUB_ETAG_TIMEOUT="5",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        OMP_NUM_THREADS="1",
    )
    if endpoint:
        env["HF_ENDPOINT"] = endpoint
    return env


def client_results(module: str, *args, env: dict) -> dict:
    """Run ``python -m tests.hub.<module> ARGS`` from the repository root in a fresh interpreter (huggingface_hub
    reads ``env``'s HF_* settings at import) and return the JSON line it prints last."""
    result = subprocess.run([sys.executable, "-m", f"tests.hub.{module}", *map(str, args)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------- classifiers
#: a tiny review vocabulary (words as the imdb normalizer writes them)
CLASSIFIER_WORDS = ["great", "good", "fun", "bad", "awful", "boring", "movie", "the", "a", "plot", ",", "!", "<num>"]


def tiny_classifier(cell: str = "sr-lstm-p", *, seed: int = 0, max_length: int | None = None, **options):
    """A randomly initialised tiny sentiment classifier (weights perturbed so every tensor matters), with the
    imdb normalizer and word tokenizer its folder records."""
    from dsf_lightning.data.tokenizers import get_tokenizer
    from dsf_lightning.tasks import SequenceClassifier, Vocabulary
    from dsf_lightning.tasks.pretrained import DEFAULT_MAX_LENGTH, PretrainedClassifier

    torch.manual_seed(seed)
    vocab = Vocabulary(CLASSIFIER_WORDS, unk=True)
    settings = dict(num_classes=2, vocab_size=len(vocab), cell=cell, hidden_size=8, embedding_size=6,
                    cell_options={"k": 3} if cell.startswith("sr") else {})
    settings.update(options)
    model = SequenceClassifier(**settings)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    model.eval()
    info = {"corpus": "imdb", "metrics": {"test_accuracy": 0.75, "test_error": 0.25}}
    return PretrainedClassifier(
        model=model, vocab=vocab, tokenizer=get_tokenizer("word", eos=None), labels=["negative", "positive"],
        info=info, normalize="imdb", max_length=DEFAULT_MAX_LENGTH if max_length is None else max_length,
    )


def classifier_logits(model, vocab, texts, max_length=None, keep="first") -> torch.Tensor:
    """The module's logits for ``texts``, each run alone (no padding, no batching): normalized with the
    imdb corpus's own ``normalize_review``, split on spaces, cut to the first (``keep="last"``: the last)
    ``max_length`` words."""
    from dsf_lightning.data.corpora.imdb import normalize_review

    rows = []
    with torch.no_grad():
        for text in texts:
            words = normalize_review(text).split()
            if max_length is not None:
                words = words[-max_length:] if keep == "last" else words[:max_length]
            ids = torch.tensor([vocab.encode(words)])
            rows.append(model(ids, torch.tensor([ids.shape[1]]))[0])
    return torch.stack(rows)
