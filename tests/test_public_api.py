"""The package's public face: every name in __all__ resolves, lazily."""

import subprocess
import sys

import dsf_lightning


def test_every_public_name_resolves():
    for name in dsf_lightning.__all__:
        assert getattr(dsf_lightning, name) is not None, name


def test_unknown_attribute_is_an_attribute_error():
    try:
        dsf_lightning.no_such_thing  # noqa: B018
    except AttributeError as err:
        assert "no_such_thing" in str(err)
    else:
        raise AssertionError("expected AttributeError")


def test_importing_the_package_does_not_import_lightning():
    code = "import sys, dsf_lightning; print('lightning' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


#: what ``dsf_lightning.model`` and ``dsf_lightning.scoring`` defined before their code moved into modules (issue 36)
PACKAGE_NAMES = {
    "dsf_lightning.model": ["INIT_SCHEMES", "LMConfig", "MAX_PARAMETERS_ENV", "ModelConfigError", "ModelState",
                            "RecurrentLM", "check_init", "count_parameters", "detach_state", "initialize",
                            "max_parameters", "recurrent_dropout_cells"],
    "dsf_lightning.scoring": ["DECODE_ELEMENTS", "DEFAULT_WARMUP", "DocumentScore", "LN2", "MAX_LINE_BYTES",
                              "OOV_WARN_RATE", "READ_LIMIT", "STREAM_BLOCK", "Scorer", "ScoringError", "SentenceScore",
                              "from_pretrained"],
}


def test_the_split_packages_still_give_every_name_they_had():
    import importlib

    missing = [f"{package}.{name}" for package, names in PACKAGE_NAMES.items()
               for name in names if not hasattr(importlib.import_module(package), name)]
    assert not missing, f"no longer importable from where they were: {missing}"


def test_the_split_packages_init_files_only_re_export():
    """``model/__init__.py`` and ``scoring/__init__.py`` hold a docstring, imports and ``__all__``: no code."""
    import ast
    from pathlib import Path

    root = Path(dsf_lightning.__file__).parent
    for package in ("model", "scoring"):
        tree = ast.parse((root / package / "__init__.py").read_text(encoding="utf-8"))
        code = [f"{package}/__init__.py:{node.lineno} {type(node).__name__}" for node in tree.body[1:]
                if not isinstance(node, (ast.Import, ast.ImportFrom))
                and not (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"])]
        assert not code, f"code in a package __init__ (move it to a module named for what it holds): {code}"
