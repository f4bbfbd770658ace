"""Issue 35: what the library imports is declared in pyproject.toml (core dependencies or an extra), and a
dependency whose private modules are imported is bounded from above."""

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _imports() -> dict[str, set[str]]:
    """Top-level module -> the dotted names imported from it, over every library file."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "dsf_lightning").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                names = [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(name)
    return found


def test_every_imported_distribution_is_declared():
    declared = {_name(r) for r in PROJECT["dependencies"]} | {_name(r) for extra in PROJECT["optional-dependencies"].values() for r in extra}
    distributions = importlib.metadata.packages_distributions()
    missing = []
    for module in _imports():
        if module in sys.stdlib_module_names or module in ("dsf_lightning", "__future__"):
            continue
        names = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
        if not names & declared:
            missing.append(f"{module} ({', '.join(sorted(names))})")
    assert missing == [], f"imported but not declared in pyproject.toml: {missing}"


def test_every_declared_core_dependency_is_imported():
    """Nothing declares a package it does not use (torchmetrics was: the metrics here are exact float64 sums
    reduced over processes once per epoch); a distribution counts as imported under any of its module names
    (PyYAML as ``yaml``)."""
    modules_of: dict[str, set[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(dist.lower().replace("_", "-"), set()).add(module)
    imported = set(_imports())
    unused = [r for r in PROJECT["dependencies"] if not modules_of.get(_name(r), {_name(r)}) & imported]
    assert unused == [], f"declared in pyproject.toml but never imported by dsf_lightning: {unused}"


def test_numpy_and_pyyaml_are_core_dependencies():
    core = {_name(r) for r in PROJECT["dependencies"]}
    assert {"numpy", "pyyaml", "tokenizers", "filelock"} <= core


def test_jsonargparse_whose_private_modules_are_imported_is_bounded():
    private = {name for name in _imports().get("jsonargparse", ()) if any(part.startswith("_") for part in name.split(".")[1:])}
    assert private, "no private jsonargparse module is imported any more: the upper bound (and this test) can go"
    (requirement,) = [r for r in PROJECT["dependencies"] if _name(r) == "jsonargparse"]
    assert "<" in requirement, f"{requirement}: {sorted(private)} are private modules, so bound it from above"
