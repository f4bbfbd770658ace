"""The sequence-task metrics under DDP (2 processes, ``ddp_fork``, gloo on CPU): every rank scores its own
batches of the validation / test sets (uneven counts, no sequence twice, none left out), and the logged
accuracy and loss are the exact ones of the whole set, as one process gets them; and the task DataModules
and modules pickle (``ddp_spawn``, DataLoader workers under spawn)."""

import json
import pickle

import lightning as L
import pytest
import torch

from dsf_lightning.tasks import (
    BalancedParenthesesDataModule,
    CopyingMemoryDataModule,
    PalindromeDataModule,
    SequenceClassifier,
    SequenceTagger,
    TomitaDataModule,
)


class Record(L.Callback):
    """Rank 0 writes the metrics logged by validate / test; every rank the number of sequences it scored."""

    def __init__(self, folder):
        self.folder, self.seen = folder, 0

    def _count(self, trainer, batch):
        self.seen += int(batch["labels"].shape[0])

    def on_validation_batch_end(self, trainer, module, outputs, batch, batch_idx, dataloader_idx=0):
        self._count(trainer, batch)

    def on_test_batch_end(self, trainer, module, outputs, batch, batch_idx, dataloader_idx=0):
        self._count(trainer, batch)

    def _write(self, trainer, stage):
        (self.folder / f"{stage}_seen_rank{trainer.global_rank}.json").write_text(json.dumps(self.seen))
        self.seen = 0
        if trainer.global_rank == 0:
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
            (self.folder / f"{stage}_metrics.json").write_text(json.dumps(metrics))

    def on_validation_end(self, trainer, module):
        self._write(trainer, "val")

    def on_test_end(self, trainer, module):
        self._write(trainer, "test")


def _task(kind):
    if kind == "classifier":  # 37 validation strings, two test sets of 15 and 13 (batches of 5: uneven per rank)
        splits = {"train": (40, 20, range(1, 8)), "valid": (37, None, range(1, 12)), "short": (15, None, range(1, 9)),
                  "long": (13, None, range(12, 16))}
        data = TomitaDataModule(3, splits=splits, batch_size=8, eval_batch_size=5)
        torch.manual_seed(0)
        return SequenceClassifier(**data.model_options(), cell="sr-gru", hidden_size=6, cell_options={"k": 3}), data
    data = CopyingMemoryDataModule(lag=5, n=3, train_size=32, valid_size=23, test_size=13, batch_size=16,
                                   eval_batch_size=4)
    torch.manual_seed(0)
    return SequenceTagger(**data.model_options(), cell="gru", hidden_size=6, score_last=3), data


def _run(folder, kind, devices):
    folder.mkdir(parents=True, exist_ok=True)
    L.seed_everything(0, verbose=False)
    model, data = _task(kind)
    options = dict(accelerator="cpu", devices=devices, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                   callbacks=[Record(folder)])
    if devices > 1:
        options["strategy"] = "ddp_fork"
    trainer = L.Trainer(**options)
    trainer.validate(model, data, verbose=False)
    trainer.test(model, data, verbose=False)
    return {stage: (json.loads((folder / f"{stage}_metrics.json").read_text()),
                    [json.loads(p.read_text()) for p in sorted(folder.glob(f"{stage}_seen_rank*.json"))])
            for stage in ("val", "test")}


@pytest.mark.parametrize("kind", ["classifier", "tagger"])
def test_ddp_metrics_equal_one_process_on_the_whole_sets(tmp_path, kind):
    one = _run(tmp_path / "one", kind, 1)
    two = _run(tmp_path / "two", kind, 2)
    for stage in ("val", "test"):
        (m1, (seen1,)), (m2, seen2) = one[stage], two[stage]
        assert len(seen2) == 2 and sum(seen2) == seen1  # every sequence once
        assert seen2[0] != seen2[1]  # odd sizes: uneven
        assert set(m1) == set(m2) and any("acc" in k for k in m1)
        for key in m1:
            assert m2[key] == pytest.approx(m1[key], rel=1e-5, abs=1e-6), (stage, key)


def test_ddp_training_gives_every_rank_the_same_number_of_batches(tmp_path):
    """Training batches are split between the ranks (each a different part of the epoch, the same count:
    DDP's gradient all-reduce needs every rank at every step)."""
    from dsf_lightning.tasks.data import BucketBatchSampler

    lengths = list(range(1, 100))
    whole = BucketBatchSampler(lengths, 8, shuffle=True, seed=3).batches(epoch=0)
    parts = [BucketBatchSampler(lengths, 8, shuffle=True, seed=3, num_replicas=2, rank=r).batches(epoch=0) for r in (0, 1)]
    assert len(parts[0]) == len(parts[1]) == len(whole) // 2
    flat = [i for part in parts for b in part for i in b]
    assert len(flat) == len(set(flat))  # no sequence twice
    assert set(map(tuple, parts[0] + parts[1])) <= set(map(tuple, whole))  # the same batches, split
    evaluation = [BucketBatchSampler(lengths, 8, shuffle=False, num_replicas=2, rank=r) for r in (0, 1)]
    assert sorted(i for s in evaluation for b in s for i in b) == list(range(99))  # all of them, once
    assert [sum(map(len, s)) for s in evaluation] == [50, 49]  # every other sequence of the length order
    assert [len(s) for s in evaluation] == [len(list(s)) for s in evaluation] == [7, 7]


@pytest.mark.parametrize("make", [
    lambda: TomitaDataModule(1),
    lambda: BalancedParenthesesDataModule(size="small", test_size=8),
    lambda: PalindromeDataModule(train=(20, 10, (2, 10)), valid=(10, 5, (12, 20)), test_size=8),
    lambda: CopyingMemoryDataModule(lag=5, n=3, train_size=16, valid_size=8, test_size=8),
], ids=["tomita", "parentheses", "palindromes", "copying"])
def test_task_datamodules_and_their_loaders_pickle(make):
    """What ddp_spawn (and DataLoader workers under spawn) send to another process: the DataModule with its
    datasets, and its loaders (the collate function and the datasets' transforms)."""
    data = make()
    data.setup("fit")
    data.setup("test")
    copy = pickle.loads(pickle.dumps(data))
    batch, again = next(iter(data.train_dataloader())), next(iter(copy.train_dataloader()))
    assert torch.equal(batch["inputs"], again["inputs"]) and torch.equal(batch["labels"], again["labels"])
    for loader in (data.train_dataloader(), data.val_dataloader()):
        loaded = pickle.loads(pickle.dumps(loader))
        assert torch.equal(next(iter(loaded))["inputs"], next(iter(loader))["inputs"])


def test_task_modules_pickle():
    model = SequenceTagger(vocab_size=12, num_classes=10, cell="sr-lstm-p", hidden_size=4, cell_options={"k": 3})
    copy = pickle.loads(pickle.dumps(model))
    x = torch.randint(0, 12, (2, 5))
    assert torch.equal(copy(x, torch.tensor([5, 3])), model(x, torch.tensor([5, 3])))
