"""Every recipe under recipes/ is parsed and instantiated through the real ``dsf`` LightningCLI.

Where the recipe's corpus is on disk (``DSF_DATA_ROOT``, default ../shared/data) it is loaded for real;
otherwise a tiny text folder stands in, so the recipe's model, trainer and callbacks are still built.
"""

import os
from pathlib import Path

import pytest
import yaml

from dsf_lightning.cli import lightning_cli
from dsf_lightning.data.corpora import CorpusError
from dsf_lightning.training import LanguageModelModule

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "recipes").rglob("*.yaml"))
DATA_ROOT = os.environ.get("DSF_DATA_ROOT", str(ROOT.parent / "shared" / "data"))


def test_there_are_recipes():
    assert RECIPES, "no recipes found under recipes/"


def test_every_recipe_opens_with_a_teaching_header():
    for path in RECIPES:
        head = path.read_text().split("\n")[:15]
        text = "\n".join(head)
        for word in ("What:", "Run:", "Override example:", "Paper:"):
            assert word in text, f"{path.relative_to(ROOT)} header lacks {word!r}"


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_corpus")
    text = "the cat sat on the mat\nthe dog sat on the log\n" * 40
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text(text)
    return folder


@pytest.fixture(scope="module")
def stand_in_stage1(tmp_path_factory, tiny_folder):
    """A tiny pretrained Delta-RNN folder standing in for a recipe's earlier stage (``model.init_from``)."""
    from dsf_lightning.data.corpora import load_corpus
    from dsf_lightning.hub.format import Pretrained, save_pretrained
    from dsf_lightning.model import LMConfig, RecurrentLM

    corpus = load_corpus("text-folder", data_root=str(tiny_folder), cache=False, unk="<unk>")
    config = LMConfig(vocab_size=len(corpus.vocab), cell="delta-rnn", hidden_sizes=[8], embedding_size=8, tie_weights=True)
    folder = tmp_path_factory.mktemp("stage1") / "stage1"
    return save_pretrained(Pretrained(RecurrentLM(config), corpus.vocab, corpus.tokenizer, {"corpus": "text-folder"}), folder)


def _init_from(recipe):
    model = (yaml.safe_load(recipe.read_text()) or {}).get("model") or {}
    return model.get("init_from")


@pytest.mark.parametrize("recipe", RECIPES, ids=[str(p.relative_to(ROOT / "recipes")) for p in RECIPES])
def test_recipe_instantiates_through_the_cli(recipe, tiny_folder, stand_in_stage1, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs/ folders land here
    args = ["--config", str(recipe), "--data.data_root", DATA_ROOT]
    if _init_from(recipe):  # the earlier stage's output (a run folder) is not part of a checkout
        args += ["--model.init_from", str(stand_in_stage1)]
    try:
        cli = lightning_cli(args, run=False)
    except (CorpusError, SystemExit):
        cli = lightning_cli(args + ["--data.corpus", "text-folder", "--data.data_root", str(tiny_folder),
                                    "--data.corpus_options", "{}"], run=False)
    assert isinstance(cli.model, LanguageModelModule)
    assert cli.model.hparams.vocab_size == cli.datamodule.vocab_size > 0  # linked, not from the YAML
    assert cli.trainer.max_epochs >= 1
    assert cli.model.num_parameters > 0
