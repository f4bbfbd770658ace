"""Every command's foreseeable bad input is ONE line on stderr and exit 2 (dsf_lightning/cli/errors.py), run as a
new user would run it: a subprocess of the real `dsf` entry, no traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def dsf(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsf_lightning.cli", *args], capture_output=True, text=True, env=ENV,
                          cwd=cwd, timeout=300)


def one_line_error(done: subprocess.CompletedProcess, command: str) -> str:
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr
    errors = [line for line in lines if line.startswith(f"dsf {command}: error: ")]
    assert len(errors) == 1, done.stderr
    return errors[0]


@pytest.mark.parametrize("content, expected", [
    (b"hello\n", "not a readable PyTorch Lightning checkpoint"),          # a text file: torch.load's KeyError: 101
    (bytes(range(256)) * 4, "not a readable PyTorch Lightning checkpoint"),  # random bytes, not a torch.save file
])
def test_export_of_a_file_that_is_no_checkpoint_says_so(tmp_path, content, expected):
    (tmp_path / "notes.ckpt").write_bytes(content)
    line = one_line_error(dsf("export", str(tmp_path / "notes.ckpt"), str(tmp_path / "out")), "export")
    assert expected in line and "notes.ckpt" in line and "holds Python objects" not in line
    assert not (tmp_path / "out").exists()


def test_export_of_a_folder_says_it_is_a_folder(tmp_path):
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "best.ckpt").write_bytes(b"")
    line = one_line_error(dsf("export", str(tmp_path / "run"), str(tmp_path / "out")), "export")
    assert "is a folder" in line and "checkpoints/best.ckpt" in line


@pytest.mark.parametrize("source", ["sr-lstm-p-imdb", "FOLDER"])
def test_onnx_export_of_a_classifier_says_onnx_is_for_language_models(tmp_path, source):
    import dsf_lightning

    if source == "FOLDER":
        source = str(Path(dsf_lightning.__file__).parent / "pretrained" / "sr-lstm-p-imdb")
    line = one_line_error(dsf("export", "--format", "onnx", source, str(tmp_path / "c.onnx")), "export")
    assert "--format onnx exports language models only" in line, line
    assert not (tmp_path / "c.onnx").exists()


def test_classify_help_names_the_default_it_uses():
    from dsf_lightning.cli.classify import DEFAULT_MODEL

    done = dsf("classify", "--help")
    assert done.returncode == 0
    assert f"(default: {DEFAULT_MODEL})" in " ".join(done.stdout.split()), done.stdout
    assert "delta-rnn-ptb" not in done.stdout  # the language model score uses is no default of classify


def test_export_of_a_pretrained_folder_says_it_is_one_already(tmp_path):
    import dsf_lightning

    folder = Path(dsf_lightning.__file__).parent / "pretrained" / "delta-rnn-ptb"
    line = one_line_error(dsf("export", str(folder), str(tmp_path / "out")), "export")
    assert "pretrained model folder already" in line and "--format onnx" in line, line


@pytest.mark.parametrize("args, expected", [
    (["fit", "--config", "BAD"], "Problems parsing config"),          # a YAML syntax error: jsonargparse's 3-line message
    (["test", "--model.bogus", "1"], "unrecognized arguments: --model.bogus 1"),
])
def test_a_parse_error_of_a_lightning_command_is_one_line_without_the_usage_block(tmp_path, args, expected):
    (tmp_path / "bad.yaml").write_text("model:\n  cell: [delta-rnn\n")
    args = [str(tmp_path / "bad.yaml") if a == "BAD" else a for a in args]
    done = dsf(*args)
    line = one_line_error(done, args[0])
    assert expected in line and f"dsf {args[0]} --help" in line
    assert [x for x in done.stderr.splitlines() if x.strip()] == [line]  # no usage block, no tip


def test_a_class_the_recipe_policy_refuses_is_one_line_naming_it_and_what_is_allowed():
    # nested in init_args: jsonargparse's message names the inner class as given, the policy's the classes allowed
    done = dsf("fit", "--trainer.plugins", "[{class_path: lightning.pytorch.plugins.AsyncCheckpointIO, "
               "init_args: {checkpoint_io: {class_path: torch.serialization.io.FileIO}}}]")
    line = one_line_error(done, "fit")
    assert "torch.serialization.io.FileIO" in line and "may name only these classes" in line, line
    assert [x for x in done.stderr.splitlines() if x.strip()] == [line]  # no usage block, not twice
