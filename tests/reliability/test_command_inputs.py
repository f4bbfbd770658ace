"""Issue 38 items 4, 5, 7 (the commands' side): every command that reads a file reads it in bounded memory
through the one streaming reader (:mod:`dsf_lightning.data.textfile`), and what is not text (``/dev/zero``,
invalid UTF-8) or too long is one line on stderr with exit 2, never a MemoryError or a traceback.

Memory is measured in a subprocess running the real ``dsf`` entry point in-process after a warm-up of the same
command on a small input (:mod:`tests.rss_watch`: peak RSS, and a watchdog that stops the process past a ceiling,
so a regression cannot eat the machine's memory).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dsf_lightning.cli import main

from .conftest import write_text_folder

ROOT = Path(__file__).resolve().parents[2]
#: peak RSS growth allowed for a command reading any file (after a warm-up of the same command): reading
#: /dev/zero whole, or holding a 32 MB text and its tokens, is hundreds of MiB
RSS_CEILING_MIB = 64

MEASURE = textwrap.dedent(
    r"""
    import contextlib, io, json, os, sys, time
    from dsf_lightning.cli import main
    from tests.rss_watch import growth_mib, start_watch

    argv, warm, ceiling = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])

    def run(args):
        err = io.StringIO()
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(err):
            try:
                rc = main(args)
            except SystemExit as exit_:
                rc = exit_.code
        return rc, err.getvalue()

    rc, err = run(warm)  # imports, the model, allocators
    assert rc == 0, err

    base = start_watch(ceiling)
    start = time.process_time()
    rc, err = run(argv)
    print(json.dumps({"rc": rc, "stderr": err, "cpu_s": time.process_time() - start,
                      "rss_growth_mib": growth_mib(base)}), flush=True)
    """
)


def measure(argv: list[str], warm: list[str], cwd: Path, timeout: int = 300) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT),
           "DSF_CACHE_DIR": str(cwd / "dsf-cache")}
    done = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(argv), json.dumps(warm), str(RSS_CEILING_MIB)],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_error_line(stderr: str, command: str) -> str:
    """The one line a command's error is (Lightning's tips aside), checked to be the policy's."""
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith("dsf ")]
    assert len(lines) == 1 and lines[0].startswith(f"dsf {command}: error: "), stderr[-3000:]
    return lines[0]


def newline_free(path: Path, megabytes: int) -> Path:
    block = ("a great movie and i loved it " * 4000).encode()
    with open(path, "wb") as f:
        for _ in range(-(-megabytes * 10**6 // len(block))):
            f.write(block)
    return path


# ------------------------------------------------------------------------------------------- dsf classify
@pytest.mark.slow
def test_dsf_classify_dev_zero_is_one_line_in_bounded_memory(tmp_path):
    """Before: the file was read whole (``f.read()`` of /dev/zero: MemoryError or the watchdog)."""
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    (tmp_path / "ok.txt").write_text("a fine movie\n", encoding="utf-8")
    out = measure(["classify", "--file", "/dev/zero"], ["classify", "--file", "ok.txt"], tmp_path, timeout=120)
    assert out["rc"] == 2, out
    line = one_error_line(out["stderr"], "classify")
    assert line == ("dsf classify: error: /dev/zero: NUL byte at byte offset 0 (line 1): this is binary data, "
                    "not text; give a UTF-8 text file"), line
    assert out["rss_growth_mib"] < RSS_CEILING_MIB, out


@pytest.mark.slow
def test_dsf_classify_a_newline_free_file_is_refused_in_bounded_memory_whatever_its_size(tmp_path):
    """2 MB and 32 MB of text without a newline (one text each, and the whole file with --whole-file): refused
    at the 1 MiB text cap with the same peak RSS growth, under the ceiling (before: read whole, normalized and
    tokenized: the 32 MB file took the watchdog)."""
    (tmp_path / "ok.txt").write_text("a fine movie\n", encoding="utf-8")
    growth = {}
    for mb in (2, 32):
        path = newline_free(tmp_path / f"doc{mb}.txt", mb)
        for extra in ([], ["--whole-file"]):
            out = measure(["classify", "--file", path.name, "--json", *extra], ["classify", "--file", "ok.txt"],
                          tmp_path)
            assert out["rc"] == 2, out
            line = one_error_line(out["stderr"], "classify")
            assert "longer than 1,048,576 bytes, the longest text dsf classify reads" in line, line
            assert out["rss_growth_mib"] < RSS_CEILING_MIB, out
            growth[mb, bool(extra)] = out["rss_growth_mib"]
        path.unlink()
    for whole in (False, True):  # no growth with the file's size: 16x the text, about the same peak
        assert max(growth[32, whole], 4) < 2 * max(growth[2, whole], 4), growth


def test_dsf_classify_reads_a_file_in_blocks_with_the_same_results(tmp_path, capsys, monkeypatch):
    """Texts are classified and printed a block at a time: blocks of 2 give the same results as one block,
    blank lines and all (a text per line), in JSON and in the table."""
    from dsf_lightning.cli import classify

    reviews = tmp_path / "reviews.txt"
    texts = ["A great movie!", "", "Boring, awful plot.", "fine", "the worst film i have seen", "a gem"]
    reviews.write_text("\n".join(texts) + "\n", encoding="utf-8")
    outputs = {}
    for block in (1024, 2):
        monkeypatch.setattr(classify, "BLOCK_TEXTS", block)
        assert main(["classify", "--file", str(reviews), "--json"]) == 0
        outputs[block, "json"] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]  # a line per text
        assert main(["classify", "--file", str(reviews)]) == 0
        outputs[block, "table"] = [line.split() for line in capsys.readouterr().out.splitlines()]
    blocked, whole = outputs[2, "json"], outputs[1024, "json"]
    assert [r["text"] for r in blocked] == texts
    for a, b in zip(blocked, whole, strict=True):  # batched otherwise: float round-off
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-5)
        assert {k: v for k, v in a.items() if "probabilit" not in k} == {k: v for k, v in b.items() if "probabilit" not in k}
    rows, ref = outputs[2, "table"], outputs[1024, "table"]
    assert len(rows) == len(ref) == 1 + len(texts) and rows[0] == ref[0]
    for a, b in zip(rows[1:], ref[1:]):
        assert a[:2] + a[4:] == b[:2] + b[4:] and [float(x) for x in a[2:4]] == pytest.approx([float(x) for x in b[2:4]], abs=2e-4)


def test_dsf_classify_invalid_utf8_names_the_byte_offset(tmp_path, capsys):
    path = tmp_path / "latin1.txt"
    path.write_bytes("a great movie\nun film génial\n".encode("latin-1"))
    assert main(["classify", "--file", str(path)]) == 2
    line = one_error_line(capsys.readouterr().err, "classify")
    assert f"{path}: not valid UTF-8 at byte offset 23 (line 2, byte 0xe9" in line, line


# ------------------------------------------------------------------------------------------- dsf predict
def _predict_args(corpus: Path) -> list[str]:
    return ["predict", "--data.corpus", "text-folder", "--data.data_root", str(corpus), "--model.hidden_sizes", "[8]",
            "--model.embedding_size", "8", "--data.bptt", "6", "--data.eval_batch_size", "1", "--trainer.logger",
            "false", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


@pytest.mark.slow
def test_dsf_predict_dev_zero_is_one_line_in_bounded_memory(tmp_path):
    """Before: ``read_lines`` iterated a text stream of /dev/zero, one endless line: MemoryError (or the watchdog)."""
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    corpus = write_text_folder(tmp_path / "corpus")
    (tmp_path / "ok.txt").write_text("the cat sat\n", encoding="utf-8")
    base = _predict_args(corpus)
    warm = [*base, "--data.predict_file", "ok.txt", "--predict_output", "ok.jsonl"]
    out = measure([*base, "--data.predict_file", "/dev/zero", "--predict_output", "zero.jsonl"], warm, tmp_path,
                  timeout=180)
    assert out["rc"] == 2, out
    line = one_error_line(out["stderr"], "predict")
    assert line.startswith("dsf predict: error: /dev/zero: NUL byte at byte offset 0 (line 1)"), line
    assert out["rss_growth_mib"] < RSS_CEILING_MIB, out
    assert not (tmp_path / "zero.jsonl").exists()


def test_dsf_predict_invalid_utf8_is_one_line_with_the_byte_offset(tmp_path):
    """The installed command in a process of its own (in-process, Lightning's log handlers outlive pytest's
    captured streams). Before: a UnicodeDecodeError traceback (exit 1)."""
    corpus = write_text_folder(tmp_path / "corpus", lines=40)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"the cat sat\nthe dog \xff\xfe ran\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "DSF_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "dsf_lightning.cli", *_predict_args(corpus), "--data.predict_file",
                           str(bad), "--predict_output", str(tmp_path / "p.jsonl")],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    line = one_error_line(done.stderr, "predict")
    assert done.returncode == 2 and not (tmp_path / "p.jsonl").exists()
    assert line == (f"dsf predict: error: {bad}: not valid UTF-8 at byte offset 20 (line 2, byte 0xff: invalid start "
                    "byte); convert the file to UTF-8 first"), line


def test_predict_file_read_in_parts_gives_the_tokens_of_the_whole_lines(tmp_path, monkeypatch):
    """A newline-free predict_file longer than the read buffer (and a word longer than it) is read in parts: the
    same ids as the lines read whole, the long word one <unk>, the words after it kept."""
    from dsf_lightning.data import textfile
    from dsf_lightning.training.datamodule import LanguageModelDataModule

    monkeypatch.setenv("DSF_CACHE_DIR", str(tmp_path / "cache"))
    corpus = write_text_folder(tmp_path / "corpus", lines=40)
    words = "the cat sat on a mat and the dog ran far away " * 40
    path = tmp_path / "mine.txt"
    path.write_text(f"{words}{'x' * 300} {words}\nthe dog\n", encoding="utf-8")
    options = {"unk": "<unk>"}
    dm = LanguageModelDataModule("text-folder", data_root=str(corpus), corpus_options=options, eval_batch_size=1,
                                 bptt=5, predict_file=str(path))
    vocab = dm.corpus.vocab
    whole = dm.predict_dataloader().streams.flatten().tolist()
    expected = vocab.encode(f"{words}zzz {words}".split() + ["<eos>", "the", "dog", "<eos>"])
    assert whole == expected
    monkeypatch.setattr(textfile, "READ_LIMIT", 64)
    monkeypatch.setattr(textfile.iter_file_parts, "__kwdefaults__",
                        {**textfile.iter_file_parts.__kwdefaults__, "limit": 64})
    dm = LanguageModelDataModule("text-folder", data_root=str(corpus), corpus_options=options, eval_batch_size=1,
                                 bptt=5, predict_file=str(path))
    assert dm.predict_dataloader().streams.flatten().tolist() == expected


# ------------------------------------------------------------------------------------------- dsf generate
@pytest.mark.parametrize(("args", "message"), [
    (["-n", "1000000000000"], "max_new_tokens is 1,000,000,000,000, more than the 100,000 one call generates"),
    (["--num-samples", "10000000"], "num_samples is 10,000,000, more than the 1,024 drawn as one batch"),
    (["--num-samples", "1000", "-n", "1001"], "num_samples * max_new_tokens is 1,001,000, more than the 1,000,000"),
    (["--device", "meta"], "device 'meta' holds shapes, not data"),
    (["--device", "nonsense"], "device 'nonsense' is not a torch device"),
    (["--device", "cuda:64"], "device 'cuda:64': "),
], ids=["n-1e12", "samples-1e7", "tokens-in-all", "meta", "nonsense", "cuda-64"])
def test_dsf_generate_sizes_and_devices_are_one_line_errors_before_anything_is_allocated(args, message, capsys):
    """Before: a 8 TB allocation error, a batch of 10M samples (killed), Lightning's 'META device type not an
    accelerator' and torch's AssertionError tracebacks (exit 1)."""
    assert main(["generate", "the market", *args]) == 2
    line = one_error_line(capsys.readouterr().err, "generate")
    assert message in line, line


def test_a_temperature_too_small_for_floats_samples_greedily(capsys):
    """``-t 1e-40`` divided the logits to inf and drew from NaN probabilities (a RuntimeError traceback): the
    logits less their maximum are divided in float64, so any positive temperature is a distribution, the
    tiniest ones the greedy one."""
    from dsf_lightning import scoring

    assert main(["generate", "the market", "-n", "12", "-t", "0", "--json"]) == 0
    greedy = json.loads(capsys.readouterr().out)
    for t in ("1e-40", "1e-300", "5e-324"):
        assert main(["generate", "the market", "-n", "12", "-t", t, "--seed", "1", "--json"]) == 0, t
        assert json.loads(capsys.readouterr().out)["ids"] == greedy["ids"], t
    scorer = scoring.from_pretrained("delta-rnn-ptb")
    out = scorer.generate("the market", max_new_tokens=5, temperature=1e-40, seed=0, num_samples=3)
    assert [s.ids for s in out] == [greedy["ids"][:5]] * 3


def test_the_library_refuses_a_device_this_machine_lacks(tmp_path):
    """``device="cuda"`` on a CPU build (torch's AssertionError) and ``meta`` (weights without data): the
    scorer's and the classifier's own one-line errors."""
    import torch

    from dsf_lightning import scoring
    from dsf_lightning.classification import ClassificationError, TextClassifier

    lacking = ["meta", "cuda:64"] + ([] if torch.cuda.is_available() else ["cuda"])
    for device in lacking:
        with pytest.raises(scoring.ScoringError, match=f"device '{device}'"):
            scoring.from_pretrained("delta-rnn-ptb", device=device)
        with pytest.raises(ClassificationError, match=f"device '{device}'"):
            TextClassifier.from_pretrained("sr-lstm-p-imdb", device=device)


# ------------------------------------------------------------------------------------------- writes (item 3)
def _dsf(args: list[str], cwd: Path, preexec=None, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "dsf_lightning.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd, preexec_fn=preexec)


def _full_disk_at(size: int):
    """In the child: files it writes cannot grow past ``size`` bytes (EFBIG, as a full disk's ENOSPC)."""
    import resource
    import signal

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


@pytest.mark.slow
def test_dsf_export_onnx_never_leaves_a_broken_file_where_a_good_one_was(tmp_path):
    """The bundled model exported to ONNX, then exported again onto it with the disk full after 1 MB (exit 2, one
    line), and once more with a check that fails: the first file byte-identical and no temporary left (before:
    the graph was saved in place, leaving a truncated .onnx, or one that failed its check)."""
    pytest.importorskip("onnxscript")
    done = _dsf(["export", "delta-rnn-ptb", "model.onnx", "--format", "onnx", "--no-check"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    good = (tmp_path / "model.onnx").read_bytes()
    assert len(good) > 10**7
    done = _dsf(["export", "delta-rnn-ptb", "model.onnx", "--format", "onnx", "--no-check"], tmp_path,
                preexec=_full_disk_at(10**6))
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_error_line(done.stderr, "export")
    assert "File too large" in line, line
    assert (tmp_path / "model.onnx").read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    pytest.importorskip("onnxruntime")
    from dsf_lightning.export.onnx import ExportError, to_onnx

    with pytest.raises(ExportError, match="onnxruntime differs from PyTorch"):  # a graph that fails its check
        to_onnx("delta-rnn-ptb", tmp_path / "model.onnx", atol=-1.0)
    assert (tmp_path / "model.onnx").read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


def test_dsf_export_refuses_an_output_that_would_replace_its_source(tmp_path, capsys):
    """An ONNX output inside the source model folder (it replaced the weights), onto the source checkpoint, or a
    folder output holding the checkpoint (replaced whole): refused before anything is read or written, the
    files byte-identical."""
    import shutil

    from dsf_lightning.hub.registry import resolve

    folder = tmp_path / "model"
    shutil.copytree(resolve("delta-rnn-ptb"), folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    run = tmp_path / "run"
    run.mkdir()
    ckpt = run / "last.ckpt"
    ckpt.write_bytes(b"a checkpoint of the user's")
    cases = [
        (["export", str(folder), str(folder / "model.safetensors"), "--format", "onnx"], "is inside the source model folder"),
        (["export", str(folder), str(folder), "--format", "onnx"], "is the source"),
        (["export", "delta-rnn-ptb", str(resolve("delta-rnn-ptb") / "model.safetensors"), "--format", "onnx"],
         "is inside the source model folder"),
        (["export", str(ckpt), str(ckpt), "--format", "onnx"], "is the source"),
        (["export", str(ckpt), str(run)], "holds the source"),
        (["export", str(ckpt), str(tmp_path)], "holds the source"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        line = one_error_line(capsys.readouterr().err, "export")
        assert message in line and "write it elsewhere" in line, (argv, line)
    assert main(["export", str(folder), str(run), "--format", "onnx"]) == 2  # a folder where the .onnx file goes
    line = one_error_line(capsys.readouterr().err, "export")
    assert f"the output {run} is a folder: give the .onnx file to write" in line, line
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert ckpt.read_bytes() == b"a checkpoint of the user's" and sorted(p.name for p in run.iterdir()) == ["last.ckpt"]


def test_the_prediction_writer_replaces_only_a_file_it_was_told_to(tmp_path):
    """``TokenLogprobWriter(output)`` (a recipe's callback, or the default predictions.jsonl) onto an existing
    file: refused before anything is scored, the file byte-identical (before: replaced); with ``overwrite=True``
    (dsf predict --predict_output on the command line) it is replaced, through a temporary sibling."""
    import lightning as L
    import torch

    from dsf_lightning.training.prediction import PredictionOutputError, TokenLogprobWriter
    from tests.training.conftest import make_toy_corpus, toy_modules

    corpus = make_toy_corpus()
    out = tmp_path / "mine.txt"
    out.write_bytes(b"the user's own file\n")

    def predict(writer):
        torch.manual_seed(0)
        module, data = toy_modules(corpus, eval_batch_size=2)
        trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, callbacks=[writer],
                            default_root_dir=str(tmp_path / "run"))
        trainer.predict(module, data, return_predictions=False)

    with pytest.raises(PredictionOutputError, match=r"mine\.txt exists and is not replaced: name it on the command line"):
        predict(TokenLogprobWriter(out))
    assert out.read_bytes() == b"the user's own file\n"
    (tmp_path / "run").mkdir()
    default = tmp_path / "run" / "predictions.jsonl"
    default.write_bytes(b"kept\n")
    with pytest.raises(PredictionOutputError):
        predict(TokenLogprobWriter())
    assert default.read_bytes() == b"kept\n"
    predict(TokenLogprobWriter(out, overwrite=True))
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 2 * (400 // 2 - 1) and set(rows[0]) == {"token", "id", "logprob", "surprisal", "position"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt", "run"]  # no temporary left beside it
    with pytest.raises(ValueError, match="overwrite must be true or false"):
        TokenLogprobWriter(out, overwrite="yes")


def test_the_line_cap_of_a_reader_that_cannot_cut_is_exact(tmp_path):
    """``cut=None`` (classify's texts): a line of ``max_line`` bytes passes, one byte more is refused, whether the
    newline arrives in the same read as the line's end or later (before: up to ``max_line + limit`` passed)."""
    from dsf_lightning.data.textfile import LineTooLongError, iter_file_parts

    path = tmp_path / "lines.txt"
    for size, limit in ((100, 64), (100, 1000), (130, 64)):
        path.write_bytes(b"ok\n" + b"a" * size + b"\r\nok\n")
        assert [t for t, _, _ in iter_file_parts(path, cut=None, limit=limit, max_line=size)] == ["ok", "a" * size, "ok"]
        with pytest.raises(LineTooLongError, match=f"line 2 is longer than {size - 1} bytes") as err:
            list(iter_file_parts(path, cut=None, limit=limit, max_line=size - 1))
        assert (err.value.lineno, err.value.limit) == (2, size - 1)
