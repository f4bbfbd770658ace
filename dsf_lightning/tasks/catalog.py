"""What sequence tasks the library has (``dsf list tasks``): each task DataModule with the sr-RNN paper's
section, its classes, its default split sizes (read from the generators' constants and the DataModules'
defaults, so the table cannot drift from them) and the recipes that train it."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

from . import datamodules as dm
from . import languages as lang

__all__ = ["TaskInfo", "list_tasks", "task_recipes"]


@dataclass(frozen=True)
class TaskInfo:
    name: str
    datamodule: type
    what: str  # the task and where the paper has it
    classes: str
    sizes: str  # default split sizes


def _default(cls: type, name: str):
    return inspect.signature(cls).parameters[name].default


def _n(x: int) -> str:
    return f"{x:,}"


def list_tasks() -> list[TaskInfo]:
    """Every task DataModule of :mod:`dsf_lightning.tasks.datamodules`, in the paper's order."""
    tomita = [(s["train"].size, s["valid"].size) for s in lang.TOMITA_SPLITS.values()]
    test_size = {s["test"].size for s in lang.TOMITA_SPLITS.values()}
    bp = lang.BP_SIZES
    pal = lang.PALINDROME_SPLITS
    copy_lag, copy_n = _default(dm.CopyingMemoryDataModule, "lag"), _default(dm.CopyingMemoryDataModule, "n")
    every = _default(dm.IMDBSentimentDataModule, "valid_every")
    mnist_valid = _default(dm.PixelMNISTDataModule, "valid_size")
    return [
        TaskInfo("tomita", dm.TomitaDataModule, "Tomita grammars 1-7 over {0, 1}, accept / reject (sr-RNN sec. 4.1, "
                 "Tables 2-3; DFA extraction)", "2",
                 f"train {_n(min(t for t, _ in tomita))}-{_n(max(t for t, _ in tomita))} / valid "
                 f"{_n(min(v for _, v in tomita))}-{_n(max(v for _, v in tomita))} by grammar, test "
                 f"{'/'.join(_n(s) for s in sorted(test_size))}"),
        TaskInfo("parentheses", dm.BalancedParenthesesDataModule, "balanced parentheses over a-z ( ), train depth 1-5, "
                 "valid 6-10 (sr-RNN sec. 4.2, Table 1)", "2",
                 f"large {_n(bp['large']['train'][0])} / {_n(bp['large']['valid'][0])} (small {_n(bp['small']['train'][0])}"
                 f" / {_n(bp['small']['valid'][0])}), {len(lang.BP_TEST_SETS)} test sets of {_n(lang.BP_TEST_SIZE)}"),
        TaskInfo("palindromes", dm.PalindromeDataModule, "palindromes w w^-1 over a-z, accept / reject (sr-RNN sec. 4.2, "
                 "Figure 8)", "2",
                 f"{_n(pal['train'][0])} / {_n(pal['valid'][0])}, {len(lang.PALINDROME_TEST_SETS)} test sets of "
                 f"{_n(lang.PALINDROME_TEST_SIZE)}"),
        TaskInfo("copying", dm.CopyingMemoryDataModule, f"copying memory: repeat {copy_n} symbols after a lag T = {copy_lag} "
                 "(sr-RNN appendix C)", f"{lang.COPY_SYMBOLS} per step",
                 f"{_n(_default(dm.CopyingMemoryDataModule, 'train_size'))} / {_n(_default(dm.CopyingMemoryDataModule, 'valid_size'))}"
                 f" / {_n(_default(dm.CopyingMemoryDataModule, 'test_size'))}"),
        TaskInfo("imdb", dm.IMDBSentimentDataModule, "IMDB review sentiment, words (sr-RNN sec. 4.3, Table 12, "
                 "Figure 9; needs imdb/ under the data root)", "2",
                 f"25,000 train (every {every}th held out: {_n(25000 - 25000 // every)} / {_n(25000 // every)}), "
                 "25,000 test"),
        TaskInfo("pixel-mnist", dm.PixelMNISTDataModule, "pixel-by-pixel (permuted) MNIST and Fashion-MNIST, 784 steps "
                 "(sr-RNN sec. 4.3, appendix G.3; needs mnist/ under the data root)", "10",
                 f"{_n(60000 - mnist_valid)} / {_n(mnist_valid)} / 10,000"),
    ]


def task_recipes(recipes_dir: Path | None = None) -> dict[type, list[str]]:
    """The recipes (paths relative to the recipes folder) whose ``data.class_path`` names each task DataModule."""
    import yaml

    from ..training.recipe_files import default_recipes_dir, list_recipes

    root = Path(recipes_dir) if recipes_dir is not None else default_recipes_dir()
    by_name = {info.datamodule.__name__: info.datamodule for info in list_tasks()}
    found: dict[type, list[str]] = {cls: [] for cls in by_name.values()}
    if not root.is_dir():
        return found
    for rel in list_recipes(root):
        try:
            data = (yaml.safe_load((root / rel).read_text(encoding="utf-8")) or {}).get("data")
        except (OSError, yaml.YAMLError):
            continue
        path = data.get("class_path") if isinstance(data, dict) else None
        cls = by_name.get(str(path).rsplit(".", 1)[-1]) if path else None
        if cls is not None:
            found[cls].append(str(rel))
    return found
