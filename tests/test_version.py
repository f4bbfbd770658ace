"""The package version lives in one place, ``dsf_lightning/_version.py`` (issue 36): pyproject.toml reads it
(a dynamic version), the package root, the folders' config.json and the cards import it."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import dsf_lightning

ROOT = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib")


def test_pyproject_reads_the_version_from_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"], "pyproject.toml writes the version itself: make it dynamic"
    assert "version" in project["project"].get("dynamic", [])
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "dsf_lightning._version.__version__"}


def test_only_version_py_assigns_the_version():
    places = []
    for path in sorted((ROOT / "dsf_lightning").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
                places.append(str(path.relative_to(ROOT)))
    assert places == ["dsf_lightning/_version.py"]


def test_the_built_metadata_carries_the_packages_version(tmp_path):
    """setuptools' metadata (what pip installs) says ``dsf_lightning.__version__``."""
    code = ("import os, sys; from setuptools.build_meta import prepare_metadata_for_build_wheel as prepare; "
            "out = sys.argv[1]; d = prepare(out); print(open(os.path.join(out, d, 'METADATA')).read())")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"\nVersion: {dsf_lightning.__version__}\n" in done.stdout
