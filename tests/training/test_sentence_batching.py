"""``--data.batching sentences`` (the DSF paper's padded-sentence mini-batches, Ororbia II, Mikolov & Reitter
2017, "Learning Simpler Language Models with the Differential State Framework", sec. 4.2) trained and evaluated
by the real Lightning Trainer: the losses equal a reference written from the definition (every sentence run from
a zero state through the cells' step function, the NLL of its real targets over their number), a sentence longer
than a window continues its state across windows, a run resumed mid-epoch ends with the weights of one that
never stopped, and the options that cannot work with padded sentences are refused."""

from __future__ import annotations

import random

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint

from dsf_lightning.data.sentences import IGNORE_INDEX, SentenceBatches
from dsf_lightning.training import LanguageModelModule
from dsf_lightning.training.datamodule import LanguageModelDataModule
from dsf_lightning.training.resume import ResumeMismatchError

from .conftest import quiet_trainer
from .test_lightning_training import CrashAt, RecordLosses, assert_two_ranks_equal_one


@pytest.fixture
def text(tmp_path, monkeypatch):
    """A text folder of seeded word salad: sentences of 1..11 words (some longer than the windows below)."""
    monkeypatch.setenv("DSF_CACHE_DIR", str(tmp_path / "cache"))
    rng = random.Random(42)
    words = [f"w{i}" for i in range(14)]
    folder = tmp_path / "text"
    folder.mkdir()
    for split, lines in (("train", 30), ("valid", 11), ("test", 7)):
        body = "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(1, 11))) for _ in range(lines))
        (folder / f"{split}.txt").write_text(body + "\n", encoding="utf-8")
    return folder


def modules(text, batch_size=4, bptt=4, eval_batch_size=3, seed=0, **model):
    data = LanguageModelDataModule("text-folder", corpus_options={"path": str(text)}, batch_size=batch_size, bptt=bptt,
                                   eval_batch_size=eval_batch_size, batching="sentences", seed=seed)
    options = dict(vocab_size=data.vocab_size, cell="lstm", hidden_sizes=[6], embedding_size=5)
    options.update(model)
    torch.manual_seed(0)
    return LanguageModelModule(**options), data


def stepwise_nll(model, inputs: list[int], targets: list[int]) -> torch.Tensor:
    """-log p of every target of one sentence, run from the zero state one step at a time (``RecurrentCell.step``)."""
    with torch.no_grad():
        x = model.embed(torch.tensor([inputs]))
        for layer in model.layers:
            state, outputs = layer.init_state(1), []
            for t in range(x.shape[1]):
                out, state = layer.step(x[:, t], state)
                outputs.append(out)
            x = torch.stack(outputs, dim=1)
        return F.cross_entropy(model.decode(x)[0].double(), torch.tensor(targets), reduction="none")


def reference_loss(model, tokens: torch.Tensor, eos: int) -> tuple[float, int]:
    """The split's mean NLL per target from the definition: sentence k reads [<eos>, w1 .. wn], predicts
    [w1 .. wn, <eos>]."""
    total, count, previous, words = 0.0, 0, eos, []
    for token in tokens.tolist():
        words.append(token)
        if token == eos:
            total += float(stepwise_nll(model, [previous, *words[:-1]], words).sum())
            count, words = count + len(words), []
    assert not words
    return total / count, count


class Windows(L.Callback):
    """Every training window and its loss."""

    def __init__(self):
        self.seen = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.seen.append((float(outputs["loss"]), [t.clone() for t in batch]))
        self.epochs = [*getattr(self, "epochs", []), trainer.current_epoch]


@pytest.mark.parametrize("cell", ["lstm", "delta-rnn"])
def test_training_and_validation_losses_equal_the_definition(text, cell):
    # lr 0: every window is trained with the initial weights, which the reference then reads
    module, data = modules(text, cell=cell, optimizer="sgd", lr=0.0)
    windows = Windows()
    trainer = quiet_trainer(max_epochs=2, limit_val_batches=0, callbacks=[windows])
    trainer.fit(module, data)
    model, eos = module.model.eval(), data.corpus.vocab.eos_id
    batches = []  # the windows of each batch: a batch starts where reset is set
    for loss, (inputs, targets, _index, reset) in windows.seen:
        assert reset.all() or not reset.any()
        if reset.all():
            batches.append([])
        batches[-1].append((loss, inputs, targets))
    assert any(len(b) > 1 for b in batches), "some sentence must span windows"
    sentences, checked = 0, 0
    for batch in batches:
        inputs, targets = torch.cat([w[1] for w in batch], 1), torch.cat([w[2] for w in batch], 1)
        per_row = []
        for row_in, row_t in zip(inputs, targets):
            n = int((row_t != IGNORE_INDEX).sum())
            per_row.append(stepwise_nll(model, row_in[:n].tolist(), row_t[:n].tolist()) if n else torch.zeros(0))
            sentences += n > 0
        lo = 0
        for loss, _, window_targets in batch:
            hi = lo + window_targets.shape[1]
            nll = torch.cat([p[lo:hi] for p in per_row])
            assert nll.numel() == int((window_targets != IGNORE_INDEX).sum()) > 0
            assert loss == pytest.approx(float(nll.sum() / nll.numel()), rel=1e-5, abs=1e-6)
            checked, lo = checked + 1, hi
    assert checked == len(windows.seen) == trainer.global_step and sentences == 2 * 30

    metrics = quiet_trainer().validate(module, data, verbose=False)[0]
    want, count = reference_loss(model, data.corpus.splits["valid"], eos)
    assert metrics["val_tokens"] == count == data.corpus.splits["valid"].numel()
    assert metrics["val_loss"] == pytest.approx(want, rel=1e-5)


def test_every_epoch_of_a_fit_reads_every_sentence_once_in_a_new_order(text):
    module, data = modules(text, optimizer="sgd", lr=0.0)
    windows = Windows()
    trainer = quiet_trainer(max_epochs=3, limit_val_batches=0, callbacks=[windows])
    trainer.fit(module, data)
    eos, per_epoch = data.corpus.vocab.eos_id, {}
    for epoch, (_, (_, targets, _, reset)) in zip(windows.epochs, windows.seen):
        rows = per_epoch.setdefault(epoch, [])
        if reset.all():
            rows += [[] for _ in range(targets.shape[0])]
        for row, t in zip(rows[-targets.shape[0]:], targets.tolist()):
            row += [x for x in t if x != IGNORE_INDEX]
    split, want, words = data.corpus.splits["train"].tolist(), [], []
    for token in split:
        words.append(token)
        if token == eos:
            want, words = [*want, tuple(words)], []
    orders = [[tuple(r) for r in per_epoch[e] if r] for e in range(3)]
    for order in orders:
        assert sorted(order) == sorted(want)  # every sentence once an epoch
    assert orders[0] != orders[1] != orders[2] != orders[0]  # drawn again every epoch
    # each epoch trains all the windows of its own order (their number follows the order)
    loader = SentenceBatches(data.corpus.splits["train"], eos, 4, 4, shuffle=True, seed=0)
    lengths = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        lengths.append(len(loader))
    assert [windows.epochs.count(e) for e in range(3)] == lengths and len(set(lengths)) > 1


def test_a_sentence_longer_than_the_window_continues_its_state(text):
    module, short = modules(text, bptt=2)
    _, whole = modules(text, bptt=64)
    eos = short.corpus.vocab.eos_id
    lengths = [len(s.split()) + 1 for s in (text / "test.txt").read_text().splitlines()]
    assert max(lengths) > 2 * 2  # some test sentence spans three windows and more
    trainer = quiet_trainer()
    (by_windows,), (at_once,) = trainer.test(module, short, verbose=False), trainer.test(module, whole, verbose=False)
    want, count = reference_loss(module.model.eval(), short.corpus.splits["test"], eos)
    assert by_windows["test_tokens"] == at_once["test_tokens"] == count
    assert by_windows["test_loss"] == pytest.approx(at_once["test_loss"], rel=1e-6)
    assert by_windows["test_loss"] == pytest.approx(want, rel=1e-5)


def test_iterative_inference_steps_the_state_along_the_summed_nll_of_the_real_targets(text):
    """DSF sec. 2.5, eq. 15 with padded rows: the carried state moves by lambda times the gradient of the window's
    NLL summed over its real targets (the loss is their mean: the padding must not enter the scale)."""
    step = 0.1
    module, data = modules(text, bptt=64, optimizer="sgd", lr=0.0, iterative_inference_step=step)
    seen = []

    class Carried(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            seen.append(([t.clone() for t in batch], [s.clone() for layer in module._carried["train"] for s in layer]))

    quiet_trainer(max_steps=1, limit_val_batches=0, callbacks=[Carried()]).fit(module, data)
    (inputs, targets, _, reset), carried = seen[0]
    real = targets != IGNORE_INDEX
    assert reset.all() and (~real).any()  # a batch's first window, with padding
    y, final = module.model.features(inputs, module.model.init_state(inputs.shape[0]))
    for layer in final:
        for s in layer:
            s.retain_grad()
    F.cross_entropy(module.model.decode(y)[real], targets[real], reduction="sum").backward()
    want = [s.detach() - step * s.grad if s.grad is not None else s.detach() for layer in final for s in layer]
    assert any(s.grad is not None and s.grad.abs().sum() > 0 for layer in final for s in layer)
    for got, expected in zip(carried, want, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", ["sampled_softmax", "nce"])
def test_a_sampled_loss_reads_only_the_real_targets(text, kind):
    from dsf_lightning.training.sampled_softmax import decoder_parameters

    module, data = modules(text, bptt=64, sampled_loss=kind, sampled_loss_samples=5, sampled_loss_noise="uniform")
    data.setup("fit")
    inputs, targets, _, reset = next(iter(data.train_dataloader()))
    real = targets != IGNORE_INDEX
    assert reset.all() and (~real).any()
    state = module.model.init_state(inputs.shape[0])
    torch.manual_seed(3)
    loss, _ = module._training_loss(inputs, targets, state, padded=True)
    y, _ = module.model.features(inputs, state)
    torch.manual_seed(3)  # the same noise words
    want = module.sampled_loss(y[real], targets[real], *decoder_parameters(module.model))
    assert torch.isfinite(loss) and float(loss) == pytest.approx(float(want), rel=1e-6)


def test_two_processes_equal_one_with_the_same_sentence_batches(tmp_path, text):
    """Each rank reads its half of every batch's rows, whose real targets differ in number: its loss is its sum over
    the mean count of the ranks, so DDP's average of the gradients is the one of the global mean."""
    for folder, devices in (("one", 1), ("two", 2)):
        (tmp_path / folder).mkdir()
        module, data = modules(text, eval_batch_size=2, lr=3e-3)
        trainer = quiet_trainer(max_epochs=1, devices=devices, strategy="ddp_fork" if devices > 1 else "auto",
                                callbacks=[RecordLosses(tmp_path / folder)])
        trainer.fit(module, data)
    m1, m2 = assert_two_ranks_equal_one(tmp_path / "one", tmp_path / "two", min_steps=5)
    # the valid split's tokens, every one counted once
    assert m1["val_tokens"] == m2["val_tokens"] == data.corpus.splits["valid"].numel()
    assert m1["val_loss"] == pytest.approx(m2["val_loss"], rel=1e-5)


def fit(folder, text, callbacks=(), ckpt_path=None):
    folder.mkdir(parents=True, exist_ok=True)
    L.seed_everything(0, verbose=False)
    module, data = modules(text, seed=5, dropout_output=0.2, lr=3e-3)
    trainer = quiet_trainer(max_epochs=3, enable_checkpointing=True, callbacks=list(callbacks))
    trainer.fit(module, data, ckpt_path=ckpt_path)
    return module, trainer


@pytest.mark.parametrize("where", ["mid-epoch", "epoch-end"])
def test_a_resumed_run_ends_with_the_weights_of_one_that_never_stopped(tmp_path, text, where):
    straight, trainer = fit(tmp_path / "straight", text)
    steps = trainer.global_step
    ckpts = tmp_path / "ckpts"
    save = dict(dirpath=ckpts, every_n_train_steps=1, save_top_k=-1, save_last=True)
    _, data = modules(text, seed=5)
    data.setup("fit")
    first = len(data.train_dataloader())  # epoch 0's windows
    # inside epoch 1 (a shuffled order other than epoch 0's), or after epoch 0's last window, its validation due
    crash = steps // 2 + 2 if where == "mid-epoch" else first + 1
    with pytest.raises(BaseException):
        fit(tmp_path / "crashed", text, callbacks=[ModelCheckpoint(**save), CrashAt(crash)])
    last = torch.load(ckpts / "last.ckpt", weights_only=False)
    loader = last["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    if where == "mid-epoch":
        assert last["epoch"] == 1 and 0 < loader["trained"] < loader["windows"] and loader["epoch"] == 1
    else:
        assert last["global_step"] == first and last["dsf_position"]["trained"] == first
    resumed, trainer = fit(tmp_path / "resumed", text, callbacks=[ModelCheckpoint(**save)],
                           ckpt_path=str(ckpts / "last.ckpt"))
    assert trainer.global_step == steps
    for name, weight in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], weight), name


def test_resuming_with_another_batching_or_seed_is_refused(tmp_path, text):
    from dsf_lightning.training.resume import check_data_fingerprint, data_fingerprint

    _, data = modules(text)
    corpus = data.corpus
    saved = data_fingerprint(corpus, 4, 4, 3, 1, batching="sentences", seed=5)
    with pytest.raises(ResumeMismatchError, match="data.batching is streams but the checkpoint was written with sentences"):
        check_data_fingerprint(saved, data_fingerprint(corpus, 4, 4, 3, 1))
    with pytest.raises(ResumeMismatchError, match="data.seed is 6 but the checkpoint was written with 5"):
        check_data_fingerprint(saved, data_fingerprint(corpus, 4, 4, 3, 1, batching="sentences", seed=6))
    assert "batching" not in data_fingerprint(corpus, 4, 4, 3, 1)  # a stream run's fingerprint as it always was


@pytest.mark.parametrize("option, value", [("sobolev_weight", 0.1), ("state_reset_prob", 0.1),
                                           ("carry_state_after_step", 2)])
def test_options_that_cannot_work_with_padded_sentences_are_refused(text, option, value):
    module, data = modules(text, **{option: value})
    with pytest.raises(ValueError, match=f"model.{option} cannot be used with data.batching sentences .*: leave"):
        quiet_trainer(max_steps=1, limit_val_batches=0).fit(module, data)


def test_the_table_row_passes_the_batching_as_a_word_the_cli_accepts():
    """``dsf reproduce``'s arguments: ``--data.batching=sentences`` (a Literal refuses JSON's quotes), while the
    strings other rows pass keep theirs (their run keys are digests of the arguments)."""
    from dsf_lightning.reproduce import runner
    from dsf_lightning.reproduce.tables import default_recipes_dir, get_table

    row = get_table("dsf-table1-word").row("delta-rnn-sentences")
    recipe = default_recipes_dir() / row.recipe
    args = runner.cli_arguments(recipe, runner.merged_overrides(runner.load_recipe(recipe), row, "paper"), None, [], None)
    assert args[2:] == ["--data.batching=sentences"]
    kept = runner.cli_arguments(recipe, {"trainer.max_time": "00:00:30:00", "model.x": "true", "model.y": "a b"}, None, [])
    assert kept[2:] == ['--trainer.max_time="00:00:30:00"', '--model.x="true"', '--model.y="a b"']


def test_predict_reads_streams_whatever_the_batching(text):
    from dsf_lightning.data.streams import StreamWindows

    module, data = modules(text, eval_batch_size=1)
    loader = data.predict_dataloader()
    assert isinstance(loader, StreamWindows) and loader.streams.shape[0] == 1
    out = quiet_trainer().predict(module, data)
    assert sum(int((batch["targets"] >= 0).sum()) for batch in out) == data.corpus.splits["test"].numel() - 1
