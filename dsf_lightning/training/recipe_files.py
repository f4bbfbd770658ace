"""The recipe files (``recipes/**/*.yaml``): where they are, which there are, and what their headers say
(``# Title`` on the first line, ``# Paper: ...``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

RECIPES_ENV = "DSF_RECIPES_DIR"


def default_recipes_dir() -> Path:
    """``$DSF_RECIPES_DIR``, else the ``recipes/`` folder of a source checkout, else ``./recipes``."""
    if os.environ.get(RECIPES_ENV):
        return Path(os.environ[RECIPES_ENV]).expanduser()
    checkout = Path(__file__).resolve().parents[2] / "recipes"
    return checkout if checkout.is_dir() else Path.cwd() / "recipes"


def recipe_title(path: Path) -> str:
    """The first header line of a recipe (``# Title``)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") and line.strip("# ").strip():
            return line.lstrip("#").strip()
    return ""


def recipe_published(path: Path) -> str:
    """The recipe's ``Paper:`` header line(s), joined."""
    lines, grab = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text.startswith("Paper:"):
            grab, text = True, text[len("Paper:"):].strip()
        elif re.match(r"^[A-Z][A-Za-z ]*:", text) or not text:
            grab = False
        if grab:
            lines.append(text)
    return " ".join(lines)


def list_recipes(recipes_dir: Path | None = None) -> list[Path]:
    """Every recipe (``*.yaml``) under the recipes folder, sorted, relative to it."""
    root = Path(recipes_dir) if recipes_dir is not None else default_recipes_dir()
    return sorted(p.relative_to(root) for p in root.rglob("*.yaml"))
