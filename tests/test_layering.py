"""The package's imports go one way (issue 14): every import between top-level units, function-level ones
included, points down the layering written in the README's "Layout" section, so there is no import cycle.

The imports are read from the source (``ast``), not from ``sys.modules``: an import hidden inside a function
counts as much as one at the top of a file.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dsf_lightning"

#: bottom to top; a unit may import units of its own layer listed before it, and any unit of a lower layer
LAYERS: list[tuple[str, ...]] = [
    ("_fs", "_json", "_machine", "_version", "_checks", "_modes", "_plotting", "_keep"),
    ("ops",),
    ("cells",),
    ("data",),
    ("hub",),
    ("model",),
    ("regularizers",),
    ("training",),
    ("tasks",),
    ("scoring", "classification", "evaluation"),
    ("auto",),
    ("analysis",),
    ("export",),
    ("reproduce",),
    ("cli",),
    ("__init__",),
]
RANK = {unit: (layer, position) for layer, units in enumerate(LAYERS) for position, unit in enumerate(units)}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    """``dsf_lightning.hub.format`` -> ``hub``; the package root itself, and a name it defines (such as
    ``dsf_lightning.__version__``) -> ``__init__``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    is_module = (PACKAGE / parts[1]).is_dir() or (PACKAGE / f"{parts[1]}.py").is_file()
    return parts[1] if is_module else "__init__"


def imported_modules(path: Path) -> list[tuple[str, int]]:
    """Every ``dsf_lightning`` module ``path`` imports, anywhere in the file, with its line."""
    module = module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if target == "dsf_lightning":  # ``from dsf_lightning import x``: x is a unit (or a name of the root)
                found += [(f"dsf_lightning.{alias.name}", node.lineno) for alias in node.names]
            else:
                found.append((target, node.lineno))
    return [(name, line) for name, line in found if name == "dsf_lightning" or name.startswith("dsf_lightning.")]


def unit_edges() -> list[tuple[str, str, str]]:
    """(importing unit, imported unit, where) for every import that crosses units."""
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source_unit = unit_of(module_name(path))
        for target, line in imported_modules(path):
            target_unit = unit_of(target)
            if target_unit != source_unit:
                edges.append((source_unit, target_unit, f"{path.relative_to(PACKAGE.parent)}:{line}"))
    return edges


def test_every_top_level_unit_has_a_layer():
    units = {unit_of(module_name(p)) for p in PACKAGE.rglob("*.py")}
    missing = sorted(units - set(RANK))
    assert not missing, f"top-level units without a layer: {missing}; add them to LAYERS here and to the README's Layout"


def test_imports_only_go_down_the_layering():
    upward = [f"{where}: {a} imports {b}" for a, b, where in unit_edges()
              if a in RANK and b in RANK and RANK[b] >= RANK[a]]
    assert not upward, "imports against the layering (README, Layout):\n" + "\n".join(upward)


def test_no_import_cycle_between_top_level_units():
    graph: dict[str, set[str]] = {}
    for a, b, _ in unit_edges():
        graph.setdefault(a, set()).add(b)
    seen: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(unit: str, path: list[str]) -> list[str] | None:
        seen[unit] = 1
        for nxt in sorted(graph.get(unit, ())):
            if seen.get(nxt) == 1:
                return path + [unit, nxt]
            if nxt not in seen:
                cycle = visit(nxt, path + [unit])
                if cycle:
                    return cycle
        seen[unit] = 2
        return None

    for unit in sorted(graph):
        if unit not in seen:
            cycle = visit(unit, [])
            assert cycle is None, f"import cycle between top-level units: {' -> '.join(cycle)}"


def test_the_checker_sees_function_level_imports(tmp_path, monkeypatch):
    """The reader is not blind to an import inside a function (the kind that held the old cycle together)."""
    fake = tmp_path / "dsf_lightning"
    (fake / "cells").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "model.py").write_text("RecurrentLM = object\n")
    (fake / "cells" / "__init__.py").write_text("def f():\n    from ..model import RecurrentLM\n    return RecurrentLM\n")
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    assert ("cells", "model", "dsf_lightning/cells/__init__.py:2") in unit_edges()
    with pytest.raises(AssertionError, match="cells imports model"):
        test_imports_only_go_down_the_layering()
