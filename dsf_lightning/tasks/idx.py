"""IDX files (the MNIST / Fashion-MNIST format), read with gzip + struct + NumPy.

An IDX file is a big-endian header -- two zero bytes, a type code, the number of dimensions ``n`` --
then ``n`` uint32 sizes and the data in C order. ``.gz`` files are decompressed transparently.
"""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import numpy as np

from ..data.corpora.files import CorpusError, resolve_data_root

#: IDX type code -> big-endian NumPy dtype
IDX_TYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

#: folder under the data root, and other folders tried when a file is absent there
MNIST_FOLDERS = {
    "mnist": ("mnist", ()),
    # Debian's dataset-fashion-mnist package holds the full set
    "fashion_mnist": ("fashion_mnist", ("/usr/share/datasets/fashion-mnist",)),
}
MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
MNIST_SIZES = {"train": 60000, "test": 10000}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The array stored in an IDX file (``.gz`` or raw), with its native dtype and shape."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4:
        raise CorpusError(f"{path}: too short for an IDX header")
    zero, code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or code not in IDX_TYPES:
        raise CorpusError(f"{path}: not an IDX file (magic bytes {raw[:4].hex()})")
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    dtype = IDX_TYPES[code]
    offset = 4 + 4 * ndim
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(raw) - offset != expected:
        raise CorpusError(f"{path}: header says {dims} x {dtype} ({expected} bytes), file has {len(raw) - offset}")
    return np.frombuffer(raw, dtype=dtype, offset=offset).reshape(dims).astype(dtype.newbyteorder("="))


def find_mnist_file(dataset: str, name: str, data_root: str | os.PathLike | None = None) -> Path:
    """The path of ``name`` (``.gz`` or raw) for ``dataset`` under the data root (or the fallbacks)."""
    if dataset not in MNIST_FOLDERS:
        raise CorpusError(f"dataset must be one of {sorted(MNIST_FOLDERS)}, got {dataset!r}")
    root, how = resolve_data_root(data_root)
    folder, fallbacks = MNIST_FOLDERS[dataset]
    places = [root / folder, *map(Path, fallbacks)]
    for place in places:
        for candidate in (place / f"{name}.gz", place / name):
            if candidate.is_file():
                return candidate
    hint = " (the full Fashion-MNIST: apt-get install dataset-fashion-mnist)" if dataset == "fashion_mnist" else ""
    raise CorpusError(
        f"{dataset}: {name}(.gz) not found in {', '.join(map(str, places))} (data root from {how}){hint}"
    )


def load_mnist(
    dataset: str = "mnist", split: str = "train", data_root: str | os.PathLike | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(images uint8 [N, 28, 28], labels uint8 [N])`` of MNIST or Fashion-MNIST's ``train`` / ``test``."""
    if split not in MNIST_FILES:
        raise CorpusError(f"split must be 'train' or 'test', got {split!r}")
    image_name, label_name = MNIST_FILES[split]
    images = read_idx(find_mnist_file(dataset, image_name, data_root))
    labels = read_idx(find_mnist_file(dataset, label_name, data_root))
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise CorpusError(f"{dataset} {split}: images {images.shape} do not match labels {labels.shape}")
    return images, labels


def missing_mnist_files(
    dataset: str, splits: tuple[str, ...] = ("train", "test"), data_root: str | os.PathLike | None = None
) -> list[Path]:
    """Where the files of ``splits`` are expected under the data root (``.gz``), for those found nowhere
    (:func:`find_mnist_file`: neither there nor in the fallback folders)."""
    root, _ = resolve_data_root(data_root)
    missing = []
    for split in splits:
        for name in MNIST_FILES[split]:
            try:
                find_mnist_file(dataset, name, data_root)
            except CorpusError:
                missing.append(root / MNIST_FOLDERS[dataset][0] / f"{name}.gz")
    return missing


def mnist_available(dataset: str, split: str, data_root: str | os.PathLike | None = None) -> bool:
    return not missing_mnist_files(dataset, (split,), data_root)
