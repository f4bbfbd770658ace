"""A resume with another corpus, stream layout or model options is a clear error naming what differs
(issue 13, item 4); the same settings resume, and so may another number of processes (documented)."""

from __future__ import annotations

import re

import lightning as L
import pytest
import torch

from dsf_lightning.training.resume import ResumeMismatchError, check_data_fingerprint, data_fingerprint

from .conftest import make_toy_corpus, quiet_trainer, toy_modules


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A checkpoint written mid-epoch (step 4 of 86) by a run with batch_size 4, bptt 7, eval_batch_size 2."""
    path = tmp_path_factory.mktemp("layout") / "mid.ckpt"
    L.seed_everything(0, verbose=False)
    module, data = toy_modules(make_toy_corpus(), dropout_input=0.1)
    trainer = quiet_trainer(max_steps=4)
    trainer.fit(module, data)
    trainer.save_checkpoint(path)
    return path


def resume(path, corpus=None, **changes):
    data_keys = {"batch_size", "bptt", "eval_batch_size"}
    data_options = {k: changes.pop(k) for k in list(changes) if k in data_keys}
    module, data = toy_modules(corpus or make_toy_corpus(), **{"dropout_input": 0.1, **changes}, **data_options)
    trainer = quiet_trainer(max_steps=6)
    trainer.fit(module, data, ckpt_path=str(path))
    return trainer


def test_the_same_settings_resume(checkpoint):
    position = torch.load(checkpoint, weights_only=True)["dsf_position"]
    # max_steps ended the fit (Lightning ran the epoch's end, current_epoch is 1): the windows were epoch 0's
    assert (position["epoch"], position["trained"], position["windows"]) == (0, 4, 86)
    assert resume(checkpoint).global_step == 6


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"bptt": 5}, r"data\.bptt is 5 but the checkpoint was written with 7 \(the saved position is a window index"),
        ({"batch_size": 2}, r"data\.batch_size is 2 but the checkpoint was written with 4 \(the streams are cut"),
        ({"eval_batch_size": 4}, r"data\.eval_batch_size is 4 but the checkpoint was written with 2"),
    ],
    ids=["bptt", "batch_size", "eval_batch_size"],
)
def test_another_stream_layout_is_a_clear_error(checkpoint, changes, message):
    with pytest.raises(ResumeMismatchError, match=message) as err:
        resume(checkpoint, **changes)
    assert "start a fresh run" in str(err.value)


def test_another_corpus_is_a_clear_error(checkpoint):
    other = make_toy_corpus(seed=1)  # same name, sizes and vocabulary, other tokens
    expected = r"the 'train' split of corpus 'toy' is not the one the checkpoint was trained on: 2,400 tokens, sha256 [0-9a-f]{12}\.\.\. now"
    with pytest.raises(ResumeMismatchError, match=expected):
        resume(checkpoint, corpus=other)


@pytest.mark.parametrize("split", ["valid", "test"])
def test_another_valid_or_test_split_is_a_clear_error(checkpoint, split):
    """The fingerprint covers every split, not only the training stream: validation perplexities logged before
    and after the resume would otherwise come from different text (issue 38, a mutation that survived)."""
    corpus = make_toy_corpus()
    corpus.splits[split] = make_toy_corpus(seed=5).splits[split]  # same size, other tokens; train unchanged
    expected = rf"the '{split}' split of corpus 'toy' is not the one the checkpoint was trained on: 400 tokens"
    with pytest.raises(ResumeMismatchError, match=expected):
        resume(checkpoint, corpus=corpus)
    saved = data_fingerprint(make_toy_corpus(), 4, 7, 2, 1)
    del corpus.splits[split]  # a split that is gone is named too
    with pytest.raises(ResumeMismatchError, match=rf"the corpus has no '{split}' split now"):
        check_data_fingerprint(saved, data_fingerprint(corpus, 4, 7, 2, 1))


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"dropout_input": 0.3}, "model.dropout_input: 0.3 now, 0.1 in the checkpoint"),
        ({"hidden_sizes": [12]}, "model.hidden_sizes: [12] now, [16] in the checkpoint"),
        ({"lr": 1e-2}, "model.lr: 0.01 now, 0.003 in the checkpoint"),
    ],
    ids=["dropout", "hidden_sizes", "lr"],
)
def test_other_model_options_are_a_clear_error(checkpoint, changes, message):
    with pytest.raises(ResumeMismatchError, match=re.escape(message)) as err:
        resume(checkpoint, **changes)
    assert "init_from" in str(err.value)


def test_the_fingerprint_names_changed_files_and_ignores_the_number_of_processes():
    corpus = make_toy_corpus()
    corpus.info = {"files": {"toy/train.txt": "a" * 64}}
    saved = data_fingerprint(corpus, batch_size=4, bptt=7, eval_batch_size=2, world_size=2)
    check_data_fingerprint(saved, data_fingerprint(corpus, 4, 7, 2, world_size=1))  # streams are global
    changed = make_toy_corpus(seed=3)
    changed.info = {"files": {"toy/train.txt": "b" * 64}}
    with pytest.raises(ResumeMismatchError, match=r"files changed: toy/train\.txt"):
        check_data_fingerprint(saved, data_fingerprint(changed, 4, 7, 2, 1))
    check_data_fingerprint(None, data_fingerprint(changed, 4, 7, 2, 1))  # an old checkpoint: nothing to check


@pytest.mark.slow
def test_the_dsf_cli_refuses_a_resume_with_other_options(tmp_path, monkeypatch, capsys):
    from dsf_lightning.cli import main
    from tests.reliability.conftest import write_text_folder

    monkeypatch.setenv("DSF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    corpus = write_text_folder(tmp_path / "corpus", lines=40)
    base = ["--data.corpus", "text-folder", "--data.data_root", str(corpus), "--model.hidden_sizes", "[8]",
            "--model.embedding_size", "8", "--data.batch_size", "2", "--data.bptt", "6", "--trainer.logger", "false",
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--trainer.default_root_dir", str(tmp_path / "run"), "--model.dropout_input", "0.2"]
    assert main(["fit", *base, "--trainer.max_epochs", "1"]) == 0
    (written,) = (tmp_path / "run").rglob("*.ckpt")
    ckpt = tmp_path / "epoch0.ckpt"  # a copy: the resumed runs' ModelCheckpoint replaces its own files
    ckpt.write_bytes(written.read_bytes())
    resume = ["fit", *base, "--trainer.max_epochs", "2", "--ckpt_path", str(ckpt)]
    capsys.readouterr()

    assert main([*resume, "--model.dropout_input", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "model.dropout_input: 0.5 now, 0.2 in" in err and "start a fresh run" in err, err

    assert main([*resume, "--data.bptt", "5"]) == 2
    err = capsys.readouterr().err
    assert "data.bptt is 5 but" in err and "written with 6" in err, err

    assert main(resume) == 0  # the same options (given again, or left to the checkpoint) resume
    assert main(["fit", *base[:-2], "--trainer.max_epochs", "2", "--ckpt_path", str(ckpt)]) == 0
    assert torch.load(ckpt, weights_only=True)["global_step"] > 0


@pytest.mark.slow
def test_another_number_of_processes_continues_the_same_streams(tmp_path):
    """A checkpoint of 1 process resumes on 2 (DDP on CPU, ``ddp_fork``): every rank takes its block of the
    global carried state and streams, and the run ends as the uninterrupted 1-process run does (to float
    tolerance: without dropout, see docs/train.md, "Several GPUs and nodes")."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from .test_lightning_training import read, run

    corpus = make_toy_corpus()
    save = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=40, save_top_k=-1, filename="{step}")
    run(tmp_path / "straight", corpus, trainer_kwargs={"max_epochs": 1, "enable_checkpointing": True}, callbacks=[save])
    _, straight, straight_metrics = read(tmp_path / "straight")
    run(tmp_path / "resumed", corpus, trainer_kwargs={"max_epochs": 1, "devices": 2, "strategy": "ddp_fork"},
        ckpt_path=str(tmp_path / "ckpt" / "step=40.ckpt"))  # (the forked ranks warn that dropout masks would differ)
    (rank0, rank1), resumed, metrics = read(tmp_path / "resumed")
    assert len(rank0) == len(rank1) == 86 - 40
    for name in straight:
        torch.testing.assert_close(resumed[name], straight[name], rtol=1e-4, atol=1e-5, msg=name)
    assert metrics["val_tokens"] == straight_metrics["val_tokens"]
    assert metrics["val_loss"] == pytest.approx(straight_metrics["val_loss"], rel=1e-5)
