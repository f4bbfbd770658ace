"""Paths and URLs in recipes and options are checked like class names (issue 38, items 1-3).

* **Code**: a ``ckpt_path`` given as a URL (``file://``, ``http://``, through Lightning's plain
  ``TorchCheckpointIO`` too, with ``weights_only: false``) is refused before anything is read; with
  ``--allow-remote-paths`` the checkpoint is fetched but still loaded weights-only: the pickle payload
  (unpickling it creates a marker file) never runs.
* **Network**: a URL in any path-valued option (``ModelCheckpoint.dirpath``, a logger's ``save_dir``,
  ``default_root_dir``, a profiler's ``dirpath``, ``TokenLogprobWriter.output``, ``data_root``) or a config
  include by URL (``trainer: http://...``, ``--config http://...``) exits 2 with one line naming the option and
  the value; a loopback listener proves no connection was opened.
* **Writes**: a recipe file cannot name a write location outside its run directory (absolute, ``~``, ``..``);
  the same value on the command line is accepted.
"""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from dsf_lightning.cli import main

# the genuine checkpoint with a pickle payload (unpickling it creates a marker file) of the first round's tests
from tests.reliability.test_no_code_execution import evil_checkpoint, real_checkpoint, recipe  # noqa: F401 - fixtures

pytestmark = pytest.mark.filterwarnings("ignore")


class Listener:
    """A TCP socket on 127.0.0.1 that records every connection it accepts (and closes it at once)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self):
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


def run(argv, capsys) -> tuple[int, list[str]]:
    """``main(argv)``: (exit code, the lines of stderr that are dsf's errors or a traceback)."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    return code, [line for line in err.splitlines() if "error" in line.lower()]


def assert_refused(code, lines, *named):
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("dsf "), lines  # one line, dsf's own
    for text in named:
        assert text in lines[0], lines[0]


# ------------------------------------------------------------------------------------------- 1. code
CKPT_CASES = {
    "file URL": ("file://{path}", ""),
    "file URL, weights_only false": ("file://{path}", "weights_only: false\n"),
    "file URL through TorchCheckpointIO": ("file://{path}", "weights_only: false\ntrainer:\n  plugins: "
                                           "lightning.pytorch.plugins.TorchCheckpointIO\n"),
    "http through TorchCheckpointIO": ("http://127.0.0.1:{port}/evil.ckpt", "trainer:\n  plugins: "
                                       "lightning.pytorch.plugins.TorchCheckpointIO\n"),
    "fsspec chain": ("simplecache::http://127.0.0.1:{port}/evil.ckpt", "weights_only: false\n"),
}


@pytest.mark.parametrize("case", sorted(CKPT_CASES))
@pytest.mark.parametrize("where", ["recipe", "command line"])
def test_a_url_checkpoint_is_refused_before_anything_is_read(case, where, evil_checkpoint, listener, tmp_path,  # noqa: F811
                                                            text_folder, monkeypatch, capsys, hostile_counts):
    path, marker = evil_checkpoint
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    url_form, extra = CKPT_CASES[case]
    url = url_form.format(path=path, port=listener.port)
    config = ["--config", str(recipe(tmp_path, text_folder, ""))]
    if extra:  # a second recipe file (a second `trainer:` key in one file would replace the first)
        (tmp_path / "override.yaml").write_text(extra)
        config += ["--config", str(tmp_path / "override.yaml")]
    if where == "recipe":
        (tmp_path / "ckpt.yaml").write_text(f"ckpt_path: {url}\n")
        argv = ["fit", *config, "--config", str(tmp_path / "ckpt.yaml")]
    else:
        argv = ["fit", *config, "--ckpt_path", url]
    code, lines = run(argv, capsys)
    hostile_counts["dsf fit ckpt_path URL"] += 1
    assert not marker.exists()
    assert listener.accepted == 0
    assert_refused(code, lines, "ckpt_path", url, "--allow-remote-paths")


class _Serve(http.server.SimpleHTTPRequestHandler):
    requests: list = []

    def do_GET(self):  # noqa: N802 - the handler's API
        type(self).requests.append(self.path)
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("plugin", ["lightning.pytorch.plugins.TorchCheckpointIO", None], ids=["TorchCheckpointIO", "default"])
def test_an_allowed_remote_checkpoint_is_still_loaded_weights_only(plugin, evil_checkpoint, tmp_path, text_folder,  # noqa: F811
                                                                   monkeypatch, capsys):
    """``--allow-remote-paths`` lets the checkpoint be fetched (the loopback server sees the request), and a
    recipe's ``weights_only: false`` is overridden: Lightning's ``_load`` would unpickle an ``http`` URL in full."""
    path, marker = evil_checkpoint
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    _Serve.requests = []
    handler = lambda *a, **k: _Serve(*a, directory=str(path.parent), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        (tmp_path / "override.yaml").write_text("weights_only: false\n" + (f"trainer:\n  plugins: {plugin}\n" if plugin else ""))
        url = f"http://127.0.0.1:{server.server_address[1]}/{path.name}"
        code = None
        try:
            code = main(["fit", "--config", str(recipe(tmp_path, text_folder, "")), "--config", str(tmp_path / "override.yaml"),
                         "--ckpt_path", url, "--allow-remote-paths"])
        except (SystemExit, Exception) as err:  # noqa: BLE001 - refused, one way or another: the marker is what counts
            code = getattr(err, "code", type(err).__name__)
    finally:
        server.shutdown()
        server.server_close()
    assert _Serve.requests and set(_Serve.requests) == {f"/{path.name}"}  # the flag allowed the fetch
    assert not marker.exists()  # ... and nothing was unpickled
    assert code != 0
    capsys.readouterr()


# ---------------------------------------------------------------------------------------- 2. network
def _callback(cls, **init_args) -> str:
    """A recipe's ``trainer.callbacks`` with one callback (block style: ``{port}`` can be filled in by format)."""
    args = "".join(f"        {k}: '{v}'\n" for k, v in init_args.items())
    return f"trainer:\n  callbacks:\n    - class_path: {cls}\n      init_args:\n{args}"


NETWORK_CASES = {
    "ModelCheckpoint.dirpath ftp": ("fit", _callback("lightning.pytorch.callbacks.ModelCheckpoint",
                                                     dirpath="ftp://127.0.0.1:{port}/ckpts"),
                                    "trainer.callbacks[0].init_args.dirpath"),
    "CSVLogger.save_dir ftp": ("fit", "trainer:\n  logger:\n    class_path: lightning.pytorch.loggers.CSVLogger\n"
                               "    init_args: {{save_dir: 'ftp://127.0.0.1:{port}/logs'}}\n", "trainer.logger.init_args.save_dir"),
    "default_root_dir ftp": ("fit", "trainer:\n  default_root_dir: ftp://127.0.0.1:{port}/root\n", "trainer.default_root_dir"),
    "profiler dirpath ftp": ("fit", "trainer:\n  profiler:\n    class_path: lightning.pytorch.profilers.SimpleProfiler\n"
                             "    init_args: {{dirpath: 'ftp://127.0.0.1:{port}/prof'}}\n", "trainer.profiler.init_args.dirpath"),
    "TokenLogprobWriter.output http": ("predict", _callback("dsf_lightning.training.prediction.TokenLogprobWriter",
                                                            output="http://127.0.0.1:{port}/out.jsonl"),
                                       "trainer.callbacks[0].init_args.output"),
    "data_root fsspec chain": ("fit", "data:\n  data_root: simplecache::http://127.0.0.1:{port}/corpus\n", "data.data_root"),
    "data_root hf": ("fit", "data:\n  data_root: hf://datasets/x/y\n", "data.data_root"),
    "default_root_dir s3": ("fit", "trainer:\n  default_root_dir: s3://bucket/root\n", "trainer.default_root_dir"),
    "config include trainer: http": ("fit", "trainer: http://127.0.0.1:{port}/trainer.yaml\n", "trainer"),
    "config include model: http": ("fit", "model: http://127.0.0.1:{port}/model.yaml\n", "model"),
    "config include data: ftp": ("fit", "data: ftp://127.0.0.1:{port}/data.yaml\n", "data"),
    "config include callbacks: http": ("fit", "trainer:\n  callbacks: http://127.0.0.1:{port}/callbacks.yaml\n",
                                       "trainer.callbacks"),
}


@pytest.mark.parametrize("case", sorted(NETWORK_CASES))
def test_a_url_in_a_recipe_opens_no_connection(case, listener, tmp_path, text_folder, monkeypatch, capsys, hostile_counts):
    monkeypatch.chdir(tmp_path)
    command, extra, option = NETWORK_CASES[case]
    text = extra.format(port=listener.port)
    override = tmp_path / "override.yaml"
    override.write_text(text)
    code, lines = run([command, "--config", str(recipe(tmp_path, text_folder, "")), "--config", str(override)], capsys)
    hostile_counts["dsf fit/predict URL in a recipe"] += 1
    assert listener.accepted == 0
    value = text.rsplit(": ", 1)[-1].strip().strip("'}{").strip("'")
    assert_refused(code, lines, f"{option}: ", value)


@pytest.mark.parametrize("form", ["--config", "--trainer"])
def test_a_config_file_given_by_url_on_the_command_line_is_not_fetched(form, listener, tmp_path, text_folder,
                                                                     monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    url = f"http://127.0.0.1:{listener.port}/x.yaml"
    code, lines = run(["fit", "--config", str(recipe(tmp_path, text_folder, "")), form, url], capsys)
    assert listener.accepted == 0
    assert_refused(code, lines, form.lstrip("-"), url)


def test_a_url_in_a_command_line_option_is_refused_too(listener, tmp_path, text_folder, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    url = f"ftp://127.0.0.1:{listener.port}/root"
    code, lines = run(["fit", "--config", str(recipe(tmp_path, text_folder, "")), "--trainer.default_root_dir", url], capsys)
    assert listener.accepted == 0
    assert_refused(code, lines, "trainer.default_root_dir", url)


def test_the_allow_flag_is_not_a_recipe_key(listener, tmp_path, text_folder, monkeypatch, capsys):
    """A recipe cannot turn URLs on: no key of any spelling allows them (the loopback listener sees nothing)."""
    monkeypatch.chdir(tmp_path)
    for key in ("allow_remote_paths", "allow-remote-paths", "fit: {allow_remote_paths"):
        line = f"{key}: true}}" if "{" in key else f"{key}: true"
        (tmp_path / "override.yaml").write_text(f"{line}\ntrainer:\n  default_root_dir: ftp://127.0.0.1:{listener.port}/x\n")
        code = run(["fit", "--config", str(recipe(tmp_path, text_folder, "")), "--config", str(tmp_path / "override.yaml")],
                   capsys)[0]
        assert code == 2 and listener.accepted == 0


# ------------------------------------------------------------------------------------------ 3. writes
@pytest.mark.parametrize("value", ["~/.bashrc", "{home}/.bashrc", "../../home/.bashrc"])
def test_a_recipe_cannot_name_a_prediction_output_outside_its_run_directory(value, tmp_path, text_folder, monkeypatch,
                                                                           capsys, hostile_counts):
    """``TokenLogprobWriter(output=~/.bashrc)`` in a recipe under ``dsf predict`` replaced that file."""
    home = tmp_path / "home"
    home.mkdir()
    bashrc = home / ".bashrc"
    bashrc.write_bytes(b"# the user's own file\nexport KEEP=1\n")
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    output = value.format(home=home)
    override = tmp_path / "override.yaml"
    override.write_text(_callback("dsf_lightning.training.prediction.TokenLogprobWriter", output=output))
    code, lines = run(["predict", "--config", str(recipe(tmp_path, text_folder, "")), "--config", str(override),
                       "--trainer.limit_predict_batches", "2"], capsys)
    hostile_counts["dsf predict recipe write outside its run directory"] += 1
    assert bashrc.read_bytes() == b"# the user's own file\nexport KEEP=1\n"
    assert_refused(code, lines, "trainer.callbacks[0].init_args.output", output, "command line")


WRITE_CASES = {
    "ModelCheckpoint dirpath absolute": (_callback("lightning.pytorch.callbacks.ModelCheckpoint", dirpath="{out}"),
                                         "trainer.callbacks[0].init_args.dirpath", "--trainer.callbacks"),
    "CSVLogger save_dir with ..": ("trainer:\n  logger:\n    class_path: lightning.pytorch.loggers.CSVLogger\n"
                                   "    init_args: {{save_dir: '{out}'}}\n", "trainer.logger.init_args.save_dir", "--trainer.logger"),
    "default_root_dir absolute": ("trainer:\n  default_root_dir: '{out}'\n", "trainer.default_root_dir", "--trainer.default_root_dir"),
}


@pytest.mark.parametrize("case", sorted(WRITE_CASES))
def test_a_recipe_write_location_outside_the_run_directory_must_come_from_the_command_line(
        case, tmp_path, text_folder, monkeypatch, capsys, hostile_counts):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    text, option, flag = WRITE_CASES[case]
    out = str(tmp_path / "elsewhere") if "absolute" in case else "../elsewhere"
    base = recipe(tmp_path, text_folder, "")
    override = tmp_path / "override.yaml"
    override.write_text(text.format(out=out))
    code, lines = run(["fit", "--config", str(base), "--config", str(override)], capsys)
    hostile_counts["dsf fit recipe write outside its run directory"] += 1
    assert_refused(code, lines, option, out, "command line")
    assert not (tmp_path / "elsewhere").exists()

    # the same location given on the command line is the user's choice
    if flag == "--trainer.callbacks":
        given = [flag, f"[{{class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {{dirpath: '{out}'}}}}]"]
    elif flag == "--trainer.logger":
        given = [flag, "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", out]
    else:
        given = [flag, out]
    code, lines = run(["fit", "--config", str(base), *given], capsys)
    assert code == 0, lines
    assert (tmp_path / "elsewhere").is_dir()


def test_a_command_line_value_does_not_vouch_for_a_different_recipe_value(tmp_path, text_folder, monkeypatch, capsys):
    """``--trainer.callbacks+=...`` on the command line does not let the recipe's own callbacks write anywhere."""
    monkeypatch.chdir(tmp_path)
    override = tmp_path / "override.yaml"
    override.write_text(_callback("lightning.pytorch.callbacks.ModelCheckpoint", dirpath="/tmp/dsf-x"))
    code, lines = run(["fit", "--config", str(recipe(tmp_path, text_folder, "")), "--config", str(override),
                       "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint", "--trainer.callbacks.dirpath", "ckpts"],
                      capsys)
    assert_refused(code, lines, "trainer.callbacks[0].init_args.dirpath", "/tmp/dsf-x")


def test_relative_write_locations_in_a_recipe_are_fine(tmp_path, text_folder, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    override = tmp_path / "override.yaml"
    override.write_text(_callback("lightning.pytorch.callbacks.ModelCheckpoint", dirpath="runs/x/ckpts", filename="last-{step}")
                        + "  default_root_dir: runs/x\n")
    code, lines = run(["fit", "--config", str(recipe(tmp_path, text_folder, "")), "--config", str(override)], capsys)
    assert code == 0, lines
    assert list((tmp_path / "runs" / "x" / "ckpts").glob("last-step=*.ckpt"))


def test_an_existing_output_file_named_on_the_command_line_is_the_users_choice(tmp_path, text_folder, monkeypatch, capsys):
    """``--predict_output /abs/out.jsonl`` names an existing file (a second run): it is the output, not a config file
    jsonargparse reads, so the command line gave it (whether the file is then replaced is the writer's rule)."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "elsewhere" / "out.jsonl"
    out.parent.mkdir()
    out.write_text("old\n")
    code, lines = run(["predict", "--config", str(recipe(tmp_path, text_folder, "")), "--trainer.limit_predict_batches", "2",
                       "--predict_output", str(out)], capsys)
    assert not [line for line in lines if "run directory" in line], lines
