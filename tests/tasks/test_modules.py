"""SequenceClassifier / SequenceTagger: padding never leaks, the end token skips the stochastic
component, readouts, metrics per test set, and short Lightning runs."""

import lightning as L
import pytest
import torch

from dsf_lightning.tasks import (
    BalancedParenthesesDataModule,
    CopyingMemoryDataModule,
    SequenceClassifier,
    SequenceTagger,
    TomitaDataModule,
    Vocabulary,
    collate,
)


def quiet_trainer(**kwargs):
    options = dict(
        accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    )
    options.update(kwargs)
    return L.Trainer(**options)


def batch_of(vocab, strings):
    items = [{"inputs": torch.tensor(vocab.encode(s)), "label": torch.tensor(0)} for s in strings]
    return collate(items, vocab.pad_id)


@pytest.mark.parametrize(
    "cell, readout",
    [("sr-gru", "hidden"), ("sr-lstm-p", "hidden+cell"), ("sr-lstm", "cell"), ("lstm", "hidden"), ("delta-rnn", "hidden")],
)
def test_padded_batches_give_the_same_logits_as_single_sequences(cell, readout):
    torch.manual_seed(0)
    vocab = Vocabulary("01")
    model = SequenceClassifier(vocab_size=len(vocab), cell=cell, hidden_size=8, readout=readout).double().eval()
    strings = ["", "1", "0110", "10101010101"]
    batch = batch_of(vocab, strings)
    together = model(batch["inputs"], batch["lengths"])
    for i, s in enumerate(strings):
        alone = batch_of(vocab, [s])
        torch.testing.assert_close(together[i], model(alone["inputs"], alone["lengths"])[0])


def test_the_end_token_is_applied_without_the_stochastic_component():
    torch.manual_seed(0)
    vocab = Vocabulary("01")
    model = SequenceClassifier(vocab_size=len(vocab), cell="sr-gru", hidden_size=6, cell_options={"k": 4}).double().eval()
    ids = torch.tensor([vocab.encode("011")])
    x = model.encode(ids)
    state = None
    for t in range(x.shape[1] - 1):  # <s> 0 1 1 with the stochastic component
        _, state = model.cell.step(x[:, t], state)
    h_end, _ = model.cell.base.step(x[:, -1], state)  # </s>: the plain GRU
    expected = model.classifier(h_end)
    torch.testing.assert_close(model(ids, torch.tensor([ids.shape[1]])), expected)
    alpha = model.transition_trace(ids, torch.tensor([ids.shape[1]]))
    assert alpha.shape == (1, 4, 4) and torch.allclose(alpha.sum(-1), torch.ones(1, 4, dtype=torch.float64))


def test_without_end_token_the_last_regularized_output_is_read():
    torch.manual_seed(0)
    vocab = Vocabulary("01", start_end_tokens=False)
    model = SequenceClassifier(vocab_size=len(vocab), cell="sr-gru", hidden_size=6, end_token=False).double().eval()
    ids = torch.tensor([vocab.encode("0110")])
    out, _ = model.cell(model.encode(ids))
    torch.testing.assert_close(model(ids, torch.tensor([4])), model.classifier(out[:, -1]))


def test_invalid_options_are_refused():
    with pytest.raises(ValueError, match="readout"):
        SequenceClassifier(vocab_size=5, cell="sr-gru", readout="cell")
    with pytest.raises(ValueError, match="vocab_size"):
        SequenceClassifier(cell="gru")
    with pytest.raises(ValueError, match="input_mode"):
        SequenceClassifier(vocab_size=5, input_mode="pixels")
    with pytest.raises(TypeError, match="state-regularized"):
        SequenceClassifier(vocab_size=5, cell="gru").centroid_decisions(2)
    with pytest.raises(TypeError, match="memory-less"):
        SequenceClassifier(vocab_size=5, cell="sr-lstm").centroid_decisions(2)


def test_values_input_for_pixel_sequences():
    torch.manual_seed(0)
    model = SequenceClassifier(num_classes=10, input_mode="values", input_size=3, cell="sr-lstm-p", hidden_size=8,
                               readout="hidden+cell")
    x = torch.rand(2, 12, 3)
    assert model(x, torch.tensor([12, 9])).shape == (2, 10)


def test_model_and_data_must_agree_on_start_and_end_tokens():
    data = TomitaDataModule(1, start_end_tokens=False)
    model = SequenceClassifier(vocab_size=data.vocab_size, cell="sr-gru", hidden_size=4, end_token=True)
    with pytest.raises(ValueError, match="start_end_tokens"):
        quiet_trainer(max_epochs=1).fit(model, data)


def test_training_on_tomita_lowers_the_loss_and_logs_metrics():
    L.seed_everything(0, verbose=False)
    data = TomitaDataModule(4, batch_size=64)
    model = SequenceClassifier(**data.model_options(), cell="sr-gru", hidden_size=32, embedding_size=4, lr=0.003)
    (before,) = quiet_trainer().validate(model, data, verbose=False)
    trainer = quiet_trainer(max_epochs=3)
    trainer.fit(model, data)
    metrics = trainer.callback_metrics
    assert {"train_acc", "val_acc", "val_loss", "val_error"} <= set(metrics)
    assert float(metrics["val_loss"]) < 0.7 * before["val_loss"] and float(metrics["val_acc"]) > 0.8
    trainer.test(model, data, verbose=False)
    assert "test_acc" in trainer.callback_metrics


def test_metrics_are_logged_per_named_test_set():
    L.seed_everything(0, verbose=False)
    data = BalancedParenthesesDataModule(
        size="small", test_sets=[("d5_l200", (5, 5), 200), ("d10_l200", (10, 10), 200)], test_size=16, batch_size=32
    )
    model = SequenceClassifier(**data.model_options(), cell="sr-lstm-p", hidden_size=8, cell_options={"k": 5})
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1)
    trainer.fit(model, data)
    trainer.test(model, data, verbose=False)
    assert {"test_acc/d5_l200", "test_acc/d10_l200", "test_error/d10_l200"} <= set(trainer.callback_metrics)


def test_tagger_on_copying_memory():
    L.seed_everything(0, verbose=False)
    data = CopyingMemoryDataModule(lag=5, n=3, train_size=64, valid_size=32, test_size=32, batch_size=16)
    model = SequenceTagger(**data.model_options(), cell="sr-lstm-p", hidden_size=8, score_last=3,
                           cell_options={"k": 5}, lr=0.01)
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(model, data)
    assert {"train_loss", "train_last_acc", "val_loss", "val_acc", "val_last_acc"} <= set(trainer.callback_metrics)
    trainer.test(model, data, verbose=False)
    assert {"test_loss", "test_acc", "test_last_acc"} <= set(trainer.callback_metrics)
    batch = next(iter(data.test_dataloader()))
    assert model(batch["inputs"], batch["lengths"]).shape == (16, 11, 10)


@pytest.mark.parametrize("cell", ["lstm", "sr-lstm-p"])
def test_bptt_window_carries_the_state_but_stops_the_gradient_at_every_window(cell):
    """Truncated BPTT over a whole sequence (windows of 4 here, 10 in the IMDB rows): the logits are those of
    the untruncated model (the state is carried across windows), but only the last window's inputs (and the end
    token) get a gradient from the loss at the end; every sequence of a batch starts from a fresh state."""
    torch.manual_seed(0)
    vocab = Vocabulary("01")
    full = SequenceClassifier(vocab_size=len(vocab), cell=cell, hidden_size=6).double()
    windowed = SequenceClassifier(vocab_size=len(vocab), cell=cell, hidden_size=6, bptt_window=4).double()
    windowed.load_state_dict(full.state_dict())
    batch = batch_of(vocab, ["0110100110", "101"])  # 12 and 5 positions: <s> 10 symbols </s>; <s> 3 symbols </s>

    def input_grads(model):
        seen = []

        def keep(_module, _inputs, out):
            out.retain_grad()
            seen.append(out)

        hook = model.embedding.register_forward_hook(keep)
        model(batch["inputs"], batch["lengths"])[:, 1].sum().backward()
        hook.remove()
        return seen[0].grad.abs().sum(-1)  # [B, T]: the gradient at each embedded input

    logits = full(batch["inputs"], batch["lengths"])
    assert torch.allclose(windowed(batch["inputs"], batch["lengths"]), logits)  # the state carried: same values
    assert torch.allclose(windowed(batch["inputs"][:1], batch["lengths"][:1]), logits[:1])  # reset per sequence
    g_full, g_win = input_grads(full), input_grads(windowed)
    # review 0: steps 0-10 run the cell (the 12th position, </s>, is the end step); windows 0-3, 4-7, 8-10
    assert (g_full[0, :8] > 0).all() and (g_win[0, :8] == 0).all()
    assert (g_win[0, 8:12] > 0).all()
    # review 1 is shorter than a window: nothing truncated; its padding gets no gradient
    assert (g_win[1, :5] > 0).all() and (g_win[1, 5:] == 0).all()


def test_bptt_window_must_be_positive():
    with pytest.raises(ValueError, match="bptt_window must be >= 1"):
        SequenceClassifier(vocab_size=3, cell="lstm", bptt_window=0)
