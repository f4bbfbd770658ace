"""Issue 35 through the real ``dsf`` commands, one fix each: a ``max_steps`` run that ends mid-epoch still writes
``best.ckpt``; a corpus the user must fix is one line and exit 2 in ``dsf fit`` / ``dsf test``; a text-folder of
ONE file is split by lines and ``dsf export --evaluate`` scores that file's test block."""

import json
from pathlib import Path

import pytest

from dsf_lightning.cli import main

pytestmark = pytest.mark.slow

QUIET = ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--model.hidden_sizes", "[8]", "--model.embedding_size", "8", "--data.batch_size", "2", "--data.bptt", "6",
         "--data.eval_batch_size", "2"]


def write_lines(path: Path, n: int, start: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"Line {i}: the cat sat, the dog ran.\n" for i in range(start, start + n)), encoding="utf-8")
    return path


def test_max_steps_run_ending_mid_epoch_writes_best_ckpt(tmp_path):
    folder = tmp_path / "text"
    write_lines(folder / "train.txt", 200)
    write_lines(folder / "valid.txt", 10, 500)
    ckpts = tmp_path / "ckpts"
    callback = json.dumps({"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                           "init_args": {"dirpath": str(ckpts), "filename": "best", "monitor": "val_loss", "save_last": True}})
    argv = ["fit", "--data.corpus", "text-folder", "--data.corpus_options", json.dumps({"path": str(folder)}),
            "--trainer.max_steps", "3", "--trainer.callbacks+", callback, "--trainer.default_root_dir", str(tmp_path), *QUIET]
    assert main(argv) == 0
    assert (ckpts / "best.ckpt").is_file() and (ckpts / "last.ckpt").is_file()


def test_closed_vocabulary_is_one_line_naming_the_option_in_fit_and_test(tmp_path, capsys):
    folder = tmp_path / "text"
    write_lines(folder / "train.txt", 20)
    (folder / "valid.txt").write_text("the naught cat\n", encoding="utf-8")
    options = json.dumps({"path": str(folder), "unk": None})
    for command in ("fit", "test"):
        code = main([command, "--data.corpus", "text-folder", "--data.corpus_options", options, "--trainer.max_steps", "1",
                     "--trainer.default_root_dir", str(tmp_path), *QUIET])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2, err[-5:]
        assert err[-1].startswith(f"dsf {command}: error: ") and "'naught'" in err[-1] and "unk: '<unk>'" in err[-1]
        assert not any("Traceback" in line for line in err)
    bad_tokenizer = json.dumps({"path": str(folder), "tokenizer": "bpe"})
    assert main(["fit", "--data.corpus", "text-folder", "--data.corpus_options", bad_tokenizer, *QUIET]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("dsf fit: error: unknown tokenizer 'bpe'")


def test_one_file_folder_trains_and_export_evaluates_its_test_block(tmp_path, monkeypatch):
    mine = write_lines(tmp_path / "novel" / "all_of_it.txt", 100)
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "run"
    assert main(["fit", "--data.corpus", "text-folder", "--data.corpus_options", json.dumps({"path": str(mine)}),
                 "--trainer.max_steps", "2", "--trainer.default_root_dir", str(root), *QUIET]) == 0
    (ckpt,) = sorted(root.rglob("*.ckpt"))
    assert main(["export", str(ckpt), str(tmp_path / "model"), "--evaluate", "valid,test"]) == 0
    metrics = json.loads((tmp_path / "model" / "config.json").read_text())["info"]["metrics"]
    per_line = 9  # "Line", "81:" (an <unk>), "the", "cat", "sat,", "the", "dog", "ran.", <eos>
    assert metrics["valid_tokens"] == metrics["test_tokens"] == 10 * per_line  # lines 81-90 and 91-100, not the file
