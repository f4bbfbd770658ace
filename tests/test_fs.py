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


def test_file_lock_makes_processes_take_turns_and_can_be_taken_again_while_held(tmp_path):
    """file_lock is filelock's (issue 35): two processes never hold it together, and a block already holding it
    takes it again (the hand-written fcntl lock deadlocked there: a second open file description waits forever)."""
    import subprocess
    import sys
    import threading

    from dsf_lightning._fs import file_lock

    log, lock = tmp_path / "log", tmp_path / "state.lock"
    script = (
        "import sys, time\nfrom dsf_lightning._fs import file_lock\n"
        "with file_lock(sys.argv[1]):\n"
        "    open(sys.argv[2], 'a').write('start\\n'); time.sleep(0.3); open(sys.argv[2], 'a').write('end\\n')\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(lock), str(log)]) for _ in range(2)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    assert log.read_text().split() == ["start", "end", "start", "end"]

    done = []

    def nested():
        with file_lock(lock), file_lock(lock):
            done.append(True)

    thread = threading.Thread(target=nested, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert done == [True], "taking the lock again while holding it deadlocked"
