"""The package's imports go one way (issue 14): every import between top-level units, function-level ones
included, points down the layering written in the "Layout" section of docs/contributing.md, so there is no import cycle.

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
    ("_fs", "_json", "_machine", "_version", "_checks", "_modes", "_plotting", "_keep", "_progress"),
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


#: calls that import a module named by a string: ``importlib.import_module(name, package)``, ``__import__(name)``
IMPORT_CALLS = {"import_module", "__import__"}


def _literal_prefix(node: ast.expr | None) -> str | None:
    """A string literal's value, or an f-string's leading literal text (``f"dsf_lightning.cells.{x}"`` ->
    ``"dsf_lightning.cells."``); None for anything computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)
    return None


def called_import(node: ast.Call, module: str, package: list[str]) -> str | None:
    """The module a call of ``import_module`` / ``__import__`` with a literal name imports (a relative name resolved
    against ``__name__`` / ``__package__``), or None. Of an f-string only the literal head counts, up to its last
    complete dotted part."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in IMPORT_CALLS or not node.args:
        return None
    text = _literal_prefix(node.args[0])
    if text is None:
        return None
    if isinstance(node.args[0], ast.JoinedStr):
        text = text.rsplit(".", 1)[0] if "." in text.lstrip(".") else text[: len(text) - len(text.lstrip("."))]
    if not text.startswith("."):
        return text
    anchor = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "package"), None)
    if name != "import_module" or not isinstance(anchor, ast.Name) or anchor.id not in ("__name__", "__package__"):
        return None
    base = module if anchor.id == "__name__" else ".".join(package)
    level = len(text) - len(text.lstrip("."))
    base = base.rsplit(".", level - 1)[0] if level > 1 else base
    rest = text[level:]
    return f"{base}.{rest}" if rest else base


def imported_modules(path: Path) -> list[tuple[str, int]]:
    """Every ``dsf_lightning`` module ``path`` imports, anywhere in the file, with its line: import statements
    and calls of ``importlib.import_module`` / ``__import__`` with a literal module name."""
    module = module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            target = called_import(node, module, package)
            if target is not None:
                found.append((target, node.lineno))
        elif isinstance(node, ast.Import):
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
    assert not missing, f"top-level units without a layer: {missing}; add them to LAYERS here and to the Layout of docs/contributing.md"


def test_imports_only_go_down_the_layering():
    upward = [f"{where}: {a} imports {b}" for a, b, where in unit_edges()
              if a in RANK and b in RANK and RANK[b] >= RANK[a]]
    assert not upward, "imports against the layering (docs/contributing.md, Layout):\n" + "\n".join(upward)


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


@pytest.mark.parametrize(
    "call",
    [
        'importlib.import_module("dsf_lightning.model")',
        'import_module("dsf_lightning.model.pretrained")',
        '__import__("dsf_lightning.model")',
        'importlib.import_module("..model", __package__)',
        'importlib.import_module("..model", package=__name__)',
        'importlib.import_module(f"dsf_lightning.model.{name}")',
    ],
)
def test_the_checker_sees_imports_by_a_literal_module_name(tmp_path, monkeypatch, call):
    """``importlib.import_module`` / ``__import__`` with a literal name are imports too (issue 38: an upward one
    passed unseen); a computed name (``import_module(name)``) cannot be read and is not counted."""
    fake = tmp_path / "dsf_lightning"
    (fake / "cells").mkdir(parents=True)
    (fake / "model").mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "model" / "__init__.py").write_text("RecurrentLM = object\n")
    (fake / "model" / "pretrained.py").write_text("")
    (fake / "cells" / "__init__.py").write_text(
        f"import importlib\nfrom importlib import import_module\n\n\ndef f(name):\n    return {call}\n"
    )
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    assert ("cells", "model", "dsf_lightning/cells/__init__.py:6") in unit_edges()
    with pytest.raises(AssertionError, match="cells imports model"):
        test_imports_only_go_down_the_layering()
    (fake / "cells" / "__init__.py").write_text("from importlib import import_module\n\n\ndef f(name):\n    return import_module(name)\n")
    assert unit_edges() == []


def test_relative_literal_imports_resolve_against_the_module():
    """The package's own lazy imports (``import_module(".language_model", __name__)``) resolve inside their unit."""
    names = [name for name, _ in imported_modules(PACKAGE / "training" / "__init__.py")]
    assert "dsf_lightning.training.language_model" in names
