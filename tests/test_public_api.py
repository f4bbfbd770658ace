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
