"""Padded-sentence batches (``dsf_lightning.data.sentences``, the DSF paper's "mini-batches of 64 (padded)
sequences", Ororbia II, Mikolov & Reitter 2017, sec. 4.2): every sentence once a pass, inputs and targets as the
definition says, padding ignored, a batch's windows continuing one another, DDP shares, and an exact resume."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

from dsf_lightning.data.sentences import IGNORE_INDEX, SentenceBatches, SentenceLayoutError
from dsf_lightning.training.datamodule import LanguageModelDataModule

EOS = 0


def split_tokens(seed: int = 3, sentences: int = 23, end_with_eos: bool = True) -> torch.Tensor:
    """Sentences of 1..9 word ids (1..11) each followed by EOS (one empty sentence included)."""
    rng = random.Random(seed)
    ids: list[int] = []
    for k in range(sentences):
        ids += [] if k == 5 else [rng.randint(1, 11) for _ in range(rng.randint(1, 9))]
        ids.append(EOS)
    if not end_with_eos:
        ids += [4, 7]
    return torch.tensor(ids)


def definition(tokens: torch.Tensor) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(inputs, targets) of every sentence, written from the definition: inputs the <eos> before it and its
    words, targets its words and its <eos>."""
    out, previous, words = [], EOS, []
    for token in tokens.tolist():
        words.append(token)
        if token == EOS:
            out.append(((previous, *words[:-1]), tuple(words)))
            words = []
    if words:  # an unterminated last sentence
        out.append(((previous, *words[:-1]), tuple(words)))
    return out


def read_pass(windows) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The (inputs, targets) of every row of every batch a pass reads, padding stripped; checks on the way that
    a batch's windows continue it (reset only at its first) and that padding is at the end of a row."""
    rows: list[tuple[list[int], list[int]]] = []
    current: list[tuple[list[int], list[int]]] | None = None
    for index, (inputs, targets, window, reset) in enumerate(windows):
        assert int(window) == index and inputs.shape == targets.shape and reset.shape == (inputs.shape[0],)
        assert reset.dtype == torch.bool and (reset.all() or not reset.any())
        if reset.all():
            rows += current or []
            current = [([], []) for _ in range(inputs.shape[0])]
        assert current is not None, "a pass starts with a batch's first window"
        for row, (i, t) in enumerate(zip(inputs.tolist(), targets.tolist())):
            current[row][0].extend(i)
            current[row][1].extend(t)
    rows += current or []
    sentences = []
    for inputs, targets in rows:
        real = [t != IGNORE_INDEX for t in targets]
        n = sum(real)
        assert all(real[:n]) and not any(real[n:]), "padding only at the end of a row"
        assert all(i == EOS for i in inputs[n:]), "padded inputs are a valid id (<eos>)"
        if n:
            assert inputs[1:n] == targets[: n - 1], "targets are the inputs shifted by one"
            sentences.append((tuple(inputs[:n]), tuple(targets[:n])))
    return sentences


@pytest.mark.parametrize("end_with_eos", [True, False])
def test_every_sentence_once_a_pass_in_corpus_order_for_evaluation(end_with_eos):
    tokens = split_tokens(end_with_eos=end_with_eos)
    loader = SentenceBatches(tokens, EOS, batch_size=4, bptt=3)
    assert read_pass(loader) == definition(tokens)  # corpus order, nothing left out, nothing twice
    assert loader.num_sentences == len(definition(tokens))


def test_training_passes_shuffle_every_sentence_once_by_seed_and_epoch():
    tokens = split_tokens()
    loader = SentenceBatches(tokens, EOS, batch_size=4, bptt=3, shuffle=True, seed=7)
    want = Counter(definition(tokens))
    orders = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        seen = read_pass(loader)
        assert Counter(seen) == want and len(seen) == len(definition(tokens))
        orders.append(seen)
    assert orders[0] != orders[1] != orders[2]  # another order every epoch
    again = SentenceBatches(tokens, EOS, batch_size=4, bptt=3, shuffle=True, seed=7)
    again.set_epoch(1)
    assert read_pass(again) == orders[1]  # the same (seed, epoch): the same order


def test_a_batch_is_padded_to_its_longest_sentence_and_read_in_windows():
    tokens = torch.tensor([5, 6, 7, 8, 9, 10, 11, 0, 3, 0, 4, 4, 0])  # 8, 2 and 3 targets
    loader = SentenceBatches(tokens, EOS, batch_size=2, bptt=3)
    windows = list(loader)
    assert len(loader) == len(windows) == 3 + 1  # batch 1: 8 steps in 3 windows; batch 2 (one row empty): 1
    assert [w[3].tolist() for w in windows] == [[True, True], [False, False], [False, False], [True, True]]
    assert windows[2][0].tolist() == [[10, 11], [0, 0]] and windows[2][1].tolist() == [[11, 0], [-100, -100]]
    assert windows[3][0].tolist() == [[0, 4, 4], [0, 0, 0]]  # the filling row: <eos> inputs, nothing to predict
    assert windows[3][1].tolist() == [[4, 4, 0], [-100, -100, -100]]


def test_ranks_read_contiguous_shares_of_every_batch():
    tokens = split_tokens()
    whole = list(SentenceBatches(tokens, EOS, batch_size=4, bptt=3, shuffle=True, seed=1))
    shares = [list(SentenceBatches(tokens, EOS, batch_size=4, bptt=3, rank=r, world_size=2, shuffle=True, seed=1))
              for r in range(2)]
    assert len(shares[0]) == len(shares[1]) == len(whole)
    for w, a, b in zip(whole, *shares):
        for k in (0, 1, 3):
            assert torch.equal(w[k], torch.cat((a[k], b[k])))


def test_a_pass_resumed_mid_epoch_reads_the_rest_of_the_same_order():
    tokens = split_tokens()
    loader = SentenceBatches(tokens, EOS, batch_size=4, bptt=3, shuffle=True, seed=2)
    loader.set_epoch(3)
    full = list(loader)
    it = iter(loader)
    for _ in range(5):
        window = next(it)
        loader.mark_trained(int(window[2]))
    state = loader.state_dict()
    assert state["epoch"] == 3 and state["trained"] == 5
    fresh = SentenceBatches(tokens, EOS, batch_size=4, bptt=3, shuffle=True, seed=2)  # at epoch 0
    fresh.load_state_dict(state)
    rest = list(fresh)
    assert len(rest) == len(full) - 5
    for a, b in zip(rest, full[5:]):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_impossible_layouts_are_one_clear_error():
    tokens = split_tokens(sentences=6)
    with pytest.raises(SentenceLayoutError, match="has 6 sentences, fewer than the batch size 8: use a smaller"):
        SentenceBatches(tokens, EOS, batch_size=8, bptt=3, split="valid")
    with pytest.raises(SentenceLayoutError, match="end-of-sentence symbol, and this corpus has none.*use data.batching streams"):
        SentenceBatches(tokens, None, batch_size=2, bptt=3)
    with pytest.raises(SentenceLayoutError, match="divisible by the number of processes"):
        SentenceBatches(tokens, EOS, batch_size=3, bptt=3, world_size=2)


def test_the_datamodule_refuses_an_unknown_batching_and_too_few_sentences(tmp_path):
    with pytest.raises(ValueError, match=r"batching \(data.batching\) must be one of streams, sentences, got 'sentence'"):
        LanguageModelDataModule("ptb", batching="sentence")
    with pytest.raises(ValueError, match="data.seed orders the sentences of data.batching sentences; with streams it does nothing"):
        LanguageModelDataModule("ptb", seed=3)  # an option that would do nothing is refused
    LanguageModelDataModule("ptb", batching="sentences", seed=3)
    folder = tmp_path / "text"
    folder.mkdir()
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text("a b c\nb c\nc a a b\n", encoding="utf-8")
    data = LanguageModelDataModule("text-folder", corpus_options={"path": str(folder)}, batch_size=4, bptt=5,
                                   eval_batch_size=2, batching="sentences")
    with pytest.raises(SentenceLayoutError, match="'train' split has 3 sentences, fewer than the batch size 4"):
        data.setup("fit")
