"""``dsf predict``: per-token log-probabilities of a split (or a text file) as JSON lines, through the Trainer.

The check is against ``dsf test`` on the same checkpoint: the tokens written are the tokens the test
scores (the same streams), and the sum of their ``-logprob`` is ``test_loss * test_tokens``.
"""

import json
import math
import os
from pathlib import Path

import pytest
import torch

from dsf_lightning.cli import lightning_cli, main

from .conftest import make_toy_corpus, quiet_trainer, toy_modules

LN2 = math.log(2.0)
QUIET = ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def check_against_test(rows: list[dict], tokens: torch.Tensor, symbols, streams: int, loss: float, count: float):
    """One row per token the test scores, in stream order, with the test's summed loss."""
    n = tokens.numel() // streams  # batchify: contiguous streams of n tokens, the first of each is context only
    expected_positions = [s * n + t for s in range(streams) for t in range(1, n)]
    assert [r["position"] for r in rows] == expected_positions
    assert len(rows) == count
    for r in rows[:50] + rows[-50:]:
        assert r["id"] == int(tokens[r["position"]])
        assert r["token"] == symbols[r["id"]]
        assert r["surprisal"] == pytest.approx(-r["logprob"] / LN2, rel=1e-12)
        assert r["logprob"] <= 0
    total = math.fsum(-r["logprob"] for r in rows)
    assert total == pytest.approx(loss * count, rel=1e-6)


def _fit_tiny(tmp_path, base) -> Path:
    assert main(["fit", *base, "--trainer.max_steps", "3", "--trainer.default_root_dir", str(tmp_path / "run")]) == 0
    (ckpt,) = (tmp_path / "run").rglob("*.ckpt")
    return ckpt


def _test_metrics(base, ckpt):
    cli = lightning_cli(["test", *base, "--ckpt_path", str(ckpt)])
    m = cli.trainer.callback_metrics
    return float(m["test_loss"]), float(m["test_tokens"])


def test_dsf_predict_writes_one_line_per_test_token_summing_to_the_test_loss(tmp_path, monkeypatch):
    from tests.reliability.conftest import write_text_folder

    monkeypatch.setenv("DSF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    corpus_dir = write_text_folder(tmp_path / "corpus", lines=80)
    base = ["--data.corpus", "text-folder", "--data.data_root", str(corpus_dir), "--model.hidden_sizes", "[8]",
            "--model.embedding_size", "8", "--data.batch_size", "2", "--data.bptt", "6", "--data.eval_batch_size", "3",
            *QUIET]
    ckpt = _fit_tiny(tmp_path, base)
    loss, count = _test_metrics(base, ckpt)

    out = tmp_path / "pred.jsonl"
    assert main(["predict", *base, "--ckpt_path", str(ckpt), "--predict_output", str(out)]) == 0
    from dsf_lightning.data.corpora import load_corpus

    corpus = load_corpus("text-folder", data_root=str(corpus_dir))
    check_against_test(read_jsonl(out), corpus.splits["test"], corpus.vocab.symbols, 3, loss, count)

    # the validation split, and a text file of the user's (encoded with the corpus's tokenizer and vocabulary)
    out_valid = tmp_path / "valid.jsonl"
    assert main(["predict", *base, "--ckpt_path", str(ckpt), "--predict_output", str(out_valid),
                 "--data.predict_split", "valid"]) == 0
    cli = lightning_cli(["validate", *base, "--ckpt_path", str(ckpt)])
    m = cli.trainer.callback_metrics
    check_against_test(read_jsonl(out_valid), corpus.splits["valid"], corpus.vocab.symbols, 3,
                       float(m["val_loss"]), float(m["val_tokens"]))

    text = tmp_path / "mine.txt"
    text.write_text("the cat sat on a mat\nthe dog ran far away home\n", encoding="utf-8")
    out_file = tmp_path / "mine.jsonl"
    assert main(["predict", *base, "--ckpt_path", str(ckpt), "--predict_output", str(out_file),
                 "--data.predict_file", str(text), "--data.eval_batch_size", "1"]) == 0
    rows = read_jsonl(out_file)
    assert [r["token"] for r in rows] == "cat sat on a mat <eos> the dog ran far away home <eos>".split()
    assert [r["position"] for r in rows] == list(range(1, 14))

    # an existing output named by --predict_output on the command line is the user's choice: replaced
    assert main(["predict", *base, "--ckpt_path", str(ckpt), "--predict_output", str(out_file)]) == 0
    assert len(read_jsonl(out_file)) == count
    # the same name from a config file is not: the file stays byte-identical and the command says what to do
    before = out_file.read_bytes()
    recipe = tmp_path / "predict.yaml"
    recipe.write_text(f"predict_output: {out_file.name}\n", encoding="utf-8")
    assert main(["predict", *base, "--config", str(recipe), "--ckpt_path", str(ckpt)]) == 2
    assert out_file.read_bytes() == before


def test_predict_without_an_output_option_writes_to_the_run_folder(tmp_path, monkeypatch, capsys):
    from tests.reliability.conftest import write_text_folder

    monkeypatch.setenv("DSF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    corpus_dir = write_text_folder(tmp_path / "corpus", lines=40)
    base = ["--data.corpus", "text-folder", "--data.data_root", str(corpus_dir), "--model.hidden_sizes", "[8]",
            "--model.embedding_size", "8", "--data.batch_size", "2", "--data.bptt", "6", *QUIET]
    assert main(["predict", *base, "--trainer.default_root_dir", str(tmp_path / "run")]) == 0
    rows = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert rows and set(rows[0]) == {"token", "id", "logprob", "surprisal", "position"}
    # the writer as a recipe callback (it is on the recipe allowlist): used instead of the default one
    spec = json.dumps({"class_path": "dsf_lightning.training.prediction.TokenLogprobWriter",
                       "init_args": {"output": str(tmp_path / "cb.jsonl")}})
    assert main(["predict", *base, "--trainer.default_root_dir", str(tmp_path / "run2"), "--trainer.callbacks", f"[{spec}]"]) == 0
    assert read_jsonl(tmp_path / "cb.jsonl") == rows
    assert not (tmp_path / "run2" / "predictions.jsonl").exists()
    with pytest.raises(SystemExit) as exit_:
        main(["predict", *base, "--data.predict_split", "dev"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "predict_split" in err and "test" in err and "valid" in err, err


def test_ddp_two_processes_write_the_same_lines_as_one(tmp_path):
    """Each rank scores its contiguous block of streams; rank 0 joins the per-rank files in rank order."""
    from dsf_lightning.training.prediction import TokenLogprobWriter

    corpus = make_toy_corpus()
    outputs = {}
    for devices in (1, 2):
        torch.manual_seed(0)
        module, data = toy_modules(corpus, eval_batch_size=4)
        out = tmp_path / f"pred{devices}.jsonl"
        trainer = quiet_trainer(devices=devices, strategy="ddp_fork" if devices > 1 else "auto",
                                callbacks=[TokenLogprobWriter(out)])
        trainer.predict(module, data, return_predictions=False)
        outputs[devices] = read_jsonl(out)
        assert not list(tmp_path.glob(f"pred{devices}.jsonl.rank*")), "per-rank files are removed after the merge"
    one, two = outputs[1], outputs[2]
    assert [(r["position"], r["id"]) for r in one] == [(r["position"], r["id"]) for r in two]
    assert len(one) == 4 * (400 // 4 - 1)
    for a, b in zip(one, two):
        assert b["logprob"] == pytest.approx(a["logprob"], rel=1e-5, abs=1e-6)


@pytest.mark.corpus
@pytest.mark.slow
def test_dsf_predict_on_a_ptb_recipe_checkpoint(tmp_path, monkeypatch):
    """The PTB recipe (real PTB), shrunk and trained 2 steps: predict's lines sum to test's loss."""
    root = Path(os.environ.get("DSF_DATA_ROOT") or "/work/shared/data")
    if not (root / "ptb" / "ptb.test.txt").is_file():
        pytest.skip(f"no PTB under {root}")
    monkeypatch.setenv("DSF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "ptb" / "delta_rnn_small.yaml"
    base = ["--config", str(recipe), "--data.data_root", str(root), "--model.hidden_sizes", "[16]",
            "--model.embedding_size", "16", "--trainer.callbacks", "null", "--trainer.logger", "false",
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--trainer.limit_val_batches", "0"]
    assert main(["fit", *base, "--trainer.max_steps", "2", "--trainer.default_root_dir", str(tmp_path / "run"),
                 "--trainer.enable_checkpointing", "true"]) == 0
    (ckpt,) = (tmp_path / "run").rglob("*.ckpt")
    loss, count = _test_metrics(base, ckpt)
    out = tmp_path / "ptb.jsonl"
    assert main(["predict", *base, "--ckpt_path", str(ckpt), "--predict_output", str(out)]) == 0
    from dsf_lightning.data.corpora import load_corpus

    corpus = load_corpus("ptb", data_root=str(root))
    check_against_test(read_jsonl(out), corpus.splits["test"], corpus.vocab.symbols, 10, loss, count)
