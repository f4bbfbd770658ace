"""Fine-tuning a pretrained model on a new plain-text folder through the real CLI (``--model.init_from``)."""

import json
import random
from pathlib import Path

import lightning as L
import pytest

from dsf_lightning.auto import PUBLISHED
from dsf_lightning.cli import lightning_cli
from dsf_lightning.model import LMConfig
from dsf_lightning.model.pretrained import Pretrained, save_pretrained
from dsf_lightning.training import LanguageModelModule
from dsf_lightning.training.datamodule import LanguageModelDataModule
from dsf_lightning.training.finetune import FinetuneConfigError, merge_architecture

VERBS = "sees likes chases finds".split()


def write_folder(folder: Path, make_line, sizes=(("train", 300), ("valid", 60), ("test", 60))) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in sizes:
        (folder / f"{split}.txt").write_text("\n".join(make_line() for _ in range(n)) + "\n")
    return folder


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A toy LM trained a little on corpus A and saved as a pretrained folder, plus a different corpus B."""
    tmp = tmp_path_factory.mktemp("finetune")
    rng = random.Random(0)
    a_nouns, b_nouns = "cat dog bird fish horse".split(), "cat dog robot lamp".split()

    def a_line():
        return f"the {rng.choice(a_nouns)} {rng.choice(VERBS)} the {rng.choice(a_nouns)}"

    def b_line():  # other word order, and "a", "near", "robot", "lamp" are not in A's vocabulary
        noun = rng.choice(b_nouns)
        return f"a {noun} near the {rng.choice(b_nouns)} {rng.choice(VERBS)} a {noun}"

    a = write_folder(tmp / "a", a_line, (("train", 400), ("valid", 50), ("test", 50)))
    b = write_folder(tmp / "b", b_line)
    L.seed_everything(0, verbose=False)
    data = LanguageModelDataModule("text-folder", data_root=str(tmp), corpus_options={"path": str(a), "unk": "<unk>"},
                                   batch_size=4, bptt=8, eval_batch_size=2)
    module = LanguageModelModule(vocab_size=data.vocab_size, cell="delta-rnn", hidden_sizes=[24], embedding_size=16, lr=0.01)
    trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(module, data)
    corpus = data.corpus
    folder = save_pretrained(Pretrained(model=module.model, vocab=corpus.vocab, tokenizer=corpus.tokenizer,
                                        info={"corpus": "toy-a"}), tmp / "pretrained")
    return {"tmp": tmp, "a": a, "b": b, "pretrained": folder, "vocab": corpus.vocab}


def cli_args(init_from, folder: Path, root: Path, epochs: int = 2, lr: float = 0.01) -> list[str]:
    return [
        "--model.init_from", str(init_from), "--model.lr", str(lr),
        "--data.corpus", "text-folder", "--data.corpus_options", json.dumps({"path": str(folder)}),
        "--data.data_root", str(root), "--data.batch_size", "4", "--data.bptt", "8", "--data.eval_batch_size", "2",
        "--trainer.max_epochs", str(epochs), "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.num_sanity_val_steps", "0", "--trainer.default_root_dir", str(root / "runs"),
    ]


def test_fine_tuning_through_the_cli_lowers_the_new_folders_perplexity(toy, monkeypatch):
    monkeypatch.chdir(toy["tmp"])
    args = cli_args(toy["pretrained"], toy["b"], toy["tmp"])
    before = float(lightning_cli(["validate", *args]).trainer.callback_metrics["val_ppl"])
    cli = lightning_cli(["fit", *args])
    after = float(cli.trainer.callback_metrics["val_ppl"])
    assert after < before / 5, (before, after)  # ~95 -> ~2 on this toy
    # the architecture and the vocabulary are the pretrained ones; words unseen in A became <unk>
    assert cli.model.hparams.hidden_sizes == [24] and cli.model.hparams.cell == "delta-rnn"
    assert cli.datamodule.corpus.vocab == toy["vocab"]
    assert int((cli.datamodule.corpus.splits["valid"] == toy["vocab"].unk_id).sum()) > 0


def test_the_weights_are_the_pretrained_ones_before_training(toy):
    from dsf_lightning.model.pretrained import load_pretrained

    pretrained = load_pretrained(toy["pretrained"])
    module = LanguageModelModule(vocab_size=len(toy["vocab"]), init_from=str(toy["pretrained"]))
    for name, tensor in pretrained.model.state_dict().items():
        assert module.model.state_dict()[name].equal(tensor), name


def test_a_conflicting_architecture_argument_is_an_error(toy, monkeypatch):
    monkeypatch.chdir(toy["tmp"])
    args = cli_args(toy["pretrained"], toy["b"], toy["tmp"])
    with pytest.raises(FinetuneConfigError, match=r"hidden_sizes=\[32\] \(pretrained: \[24\]\)"):
        lightning_cli(["validate", *args, "--model.hidden_sizes", "[32]"])
    with pytest.raises(FinetuneConfigError, match="cell='lstm'"):
        LanguageModelModule(vocab_size=len(toy["vocab"]), init_from=str(toy["pretrained"]), cell="lstm")


def test_the_data_must_use_the_pretrained_vocabulary(toy):
    with pytest.raises(FinetuneConfigError, match="data.vocab_from"):
        LanguageModelModule(vocab_size=len(toy["vocab"]) + 3, init_from=str(toy["pretrained"]))


def test_merge_architecture_keeps_regularization_free():
    pretrained = LMConfig(vocab_size=10, cell="delta-rnn", hidden_sizes=[8], cell_options={"dropout": 0.5}, embedding_size=4)
    merged = merge_architecture(pretrained, {"cell_options": {"dropout": 0.1}}, vocab_size=10)
    assert merged == dict(cell="delta-rnn", hidden_sizes=[8], cell_options={"dropout": 0.1}, embedding_size=4, tie_weights=False)
    # an option the pretrained cell ran with by default is not a conflict
    merge_architecture(pretrained, {"cell_options": {"inner": "general"}}, vocab_size=10)
    with pytest.raises(FinetuneConfigError, match="cell_options"):
        merge_architecture(pretrained, {"cell_options": {"inner": "simple"}}, vocab_size=10)
    with pytest.raises(FinetuneConfigError, match="parameter_budget"):
        merge_architecture(pretrained, {}, vocab_size=10, parameter_budget="lstm:10")


@pytest.mark.slow
@pytest.mark.skipif(not PUBLISHED["delta-rnn-ptb"].is_bundled, reason="delta-rnn-ptb is not bundled in this checkout")
def test_the_fast_or_reference_path_may_be_chosen_when_fine_tuning_any_cell():
    """``implementation`` picks a code path, not an architecture: fine-tuning may set it for every cell."""
    for cell, options in (("scrn", {"context_size": 4}), ("irlm", {}), ("lstm", {}), ("delta-rnn", {})):
        pretrained = LMConfig(vocab_size=10, cell=cell, hidden_sizes=[8], cell_options=options)
        merged = merge_architecture(pretrained, {"cell_options": {"implementation": "reference"}}, vocab_size=10)
        assert merged["cell_options"] == {**options, "implementation": "reference"}, cell


def test_fine_tuning_the_bundled_delta_rnn_ptb(tmp_path, monkeypatch):
    from dsf_lightning.auto import load

    vocab = load("delta-rnn-ptb").vocab
    words = [w for w in vocab.symbols[2:400] if w.isalpha()]
    rng = random.Random(0)
    subjects, objects = words[:20], words[20:60]

    def line():  # a narrow new "domain" in PTB words, with a few words PTB does not have
        return f"{rng.choice(subjects)} {rng.choice(VERBS)} the {rng.choice(objects)} of zorblax"

    folder = write_folder(tmp_path / "domain", line, (("train", 200), ("valid", 40), ("test", 40)))
    monkeypatch.chdir(tmp_path)
    args = cli_args("delta-rnn-ptb", folder, tmp_path, epochs=1, lr=0.001)
    before = float(lightning_cli(["validate", *args]).trainer.callback_metrics["val_ppl"])
    after = float(lightning_cli(["fit", *args]).trainer.callback_metrics["val_ppl"])
    assert after < before, (before, after)


def test_the_architecture_defaults_are_the_models_and_the_modules():
    """merge_architecture takes LMConfig's defaults as 'not given' (finetune does not import the module, issue 36):
    LanguageModelModule's arguments must default to the same architecture, or an argument left at the module's
    default would be read as a contradiction of the pretrained config."""
    import inspect

    from dsf_lightning.training.finetune import ARCHITECTURE, _defaults

    params = inspect.signature(LanguageModelModule.__init__).parameters
    ours = {name: params[name].default for name in ARCHITECTURE}
    pretrained = LMConfig(vocab_size=10, cell="lstm", hidden_sizes=[5], embedding_size=5, tie_weights=True)
    # the module's defaults, given explicitly, are 'not given': the pretrained architecture wins, nothing conflicts
    merged = merge_architecture(pretrained, ours, vocab_size=10)
    assert (merged["cell"], merged["hidden_sizes"], merged["embedding_size"], merged["tie_weights"]) == ("lstm", [5], 5, True)
    assert set(_defaults()) == set(ARCHITECTURE)
