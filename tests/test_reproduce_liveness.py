"""A row left ``running`` by a `dsf reproduce` process that is gone shows as ``stopped`` (reproduce.liveness)."""

import json
import socket
import subprocess
import sys

from dsf_lightning.reproduce import liveness
from dsf_lightning.reproduce.report import table_rows
from dsf_lightning.reproduce.tables import get_table


def a_finished_process() -> dict:
    """The identity a runner that has since exited recorded (a real child process, waited for)."""
    child = subprocess.run([sys.executable, "-c", "from dsf_lightning.reproduce.liveness import this_process as p; "
                            "import json; print(json.dumps(p()))"], capture_output=True, text=True, check=True)
    return json.loads(child.stdout)


def test_this_process_is_running_and_a_finished_one_is_not():
    me = liveness.this_process()
    assert me["host"] == socket.gethostname() and liveness.still_running(me) is True
    gone = a_finished_process()
    assert gone["pid"] != me["pid"] and liveness.still_running(gone) is False


def test_a_recycled_pid_a_restarted_machine_another_host_and_no_record():
    me = liveness.this_process()
    if me["start"] is not None:  # the pid is alive but started at another time: another process
        assert liveness.still_running(dict(me, start=me["start"] - 1)) is False
    if me["boot"] is not None:
        assert liveness.still_running(dict(me, boot="another-boot")) is False
    assert liveness.still_running(dict(me, host=me["host"] + "-elsewhere")) is None  # cannot be told from here
    assert liveness.still_running(None) is None and liveness.still_running({"pid": "7"}) is None


def _row(state, tmp_path, key="h40-s10"):
    return next(r for r in table_rows(get_table("scrn-table2"), state, "paper", tmp_path) if r["row"] == key)


def test_the_table_shows_a_row_whose_runner_is_gone_as_stopped(tmp_path):
    gone = a_finished_process()
    row = _row({"rows": {"h40-s10": {"status": "running", "runner": gone}}}, tmp_path)
    assert row["status"] == "stopped" and "process is gone; the same command resumes it from last.ckpt" in row["message"]
    row = _row({"rows": {"h40-s10": {"status": "queued", "runner": gone}}}, tmp_path)
    assert row["status"] == "stopped" and "the same command starts it" in row["message"]
    # alive, or not knowable (recorded before runners were, another host): as the state says
    assert _row({"rows": {"h40-s10": {"status": "running", "runner": liveness.this_process()}}}, tmp_path)["status"] == "running"
    assert _row({"rows": {"h40-s10": {"status": "running"}}}, tmp_path)["status"] == "running"
