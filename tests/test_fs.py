"""The one atomic file writer (``dsf_lightning._fs.write_atomic``): bytes, text and streamed content, the
previous file kept on failure, no temporary left behind, permissions."""

import os
import stat

import pytest

from dsf_lightning._fs import write_atomic


def test_bytes_text_and_a_callback_write_the_same_file(tmp_path):
    path = tmp_path / "sub" / "out.txt"
    assert write_atomic(path, b"caf\xc3\xa9\r\n") == path
    assert path.read_bytes() == b"caf\xc3\xa9\r\n"
    write_atomic(path, "café\r\n")  # UTF-8, newlines untouched
    assert path.read_bytes() == b"caf\xc3\xa9\r\n"
    write_atomic(path, lambda f: (f.write(b"a"), f.write(b"b")))
    assert path.read_bytes() == b"ab"
    assert os.listdir(tmp_path / "sub") == ["out.txt"]


def test_a_failing_write_keeps_the_previous_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "out.bin"
    write_atomic(path, b"old")

    def half_then_fail(f):
        f.write(b"ne")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, half_then_fail)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["out.bin"]


def test_permissions_are_those_asked_for_else_those_of_the_file_replaced(tmp_path):
    path = tmp_path / "out.bin"
    write_atomic(path, b"x", mode=0o640)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    write_atomic(path, b"y")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
