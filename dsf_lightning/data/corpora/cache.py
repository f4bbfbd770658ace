"""On-disk cache of tokenized corpora: one ``.safetensors`` file per entry, no pickle.

An entry holds one int64 tensor per split and, in the safetensors metadata, JSON for the vocabulary,
the tokenizer (with learned state), the cache key and a sha256 of the tensors' bytes. Entries are
written through ``_fs.write_atomic`` (a temp file ``os.replace``-d into place), so readers see either nothing or a whole
file, and two processes building the same entry at once each replace it with identical content.
An entry that fails to parse or whose checksum does not match is reported as corrupted (``None``)
and rebuilt by the caller.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save as safetensors_save

from ..._fs import write_atomic
from ..tokenizers import Tokenizer, tokenizer_from_json
from ..vocab import Vocabulary
from .files import FILE_MODE

logger = logging.getLogger(__name__)

FORMAT = "dsf_lightning.tokenized/1"


def cache_key(payload: dict) -> str:
    """sha256 of a canonical JSON rendering of everything the tokenized result depends on."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def entry_path(cache_dir: str | Path, name: str, key: str) -> Path:
    return Path(cache_dir) / f"{name}-{key[:24]}.safetensors"


def _checksum(splits: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for split in sorted(splits):
        digest.update(split.encode() + b"\0")
        digest.update(splits[split].contiguous().numpy().tobytes())
    return digest.hexdigest()


def save_entry(
    path: Path, key: str, splits: dict[str, torch.Tensor], vocab: Vocabulary, tokenizer: Tokenizer
) -> None:
    tensors = {split: t.to(torch.int64).contiguous() for split, t in splits.items()}
    metadata = {
        "format": FORMAT,
        "key": key,
        "checksum": _checksum(tensors),
        "vocab": vocab.to_json(),
        "tokenizer": tokenizer.to_json(),
    }
    write_atomic(path, safetensors_save(tensors, metadata=metadata), mode=FILE_MODE)
    logger.info("cached tokenized corpus at %s", path)


def load_entry(path: Path, key: str) -> tuple[dict[str, torch.Tensor], Vocabulary, Tokenizer] | None:
    """The cached (splits, vocab, tokenizer), or ``None`` if absent or corrupted (logged)."""
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("format") != FORMAT or meta.get("key") != key:
                raise ValueError("format or key does not match")
            splits = {name: f.get_tensor(name).clone() for name in f.keys()}
        if _checksum(splits) != meta["checksum"]:
            raise ValueError("tensor checksum mismatch")
        vocab = Vocabulary.from_json(meta["vocab"])
        tokenizer = tokenizer_from_json(meta["tokenizer"])
    except Exception as err:  # any parse failure means the entry is unusable
        logger.warning("corrupted corpus cache entry %s (%s): rebuilding it", path, err)
        return None
    return splits, vocab, tokenizer
