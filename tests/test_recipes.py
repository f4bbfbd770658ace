"""Every recipe under recipes/ is parsed and instantiated through the real ``dsf`` LightningCLI.

Language-model recipes (plain ``model:`` / ``data:`` keys): where the recipe's corpus is on disk
(``DSF_DATA_ROOT``, default ../shared/data) it is loaded for real; otherwise a tiny text folder stands in,
so the recipe's model, trainer and callbacks are still built.

Task recipes (``model:`` / ``data:`` with a ``class_path``: the sr-RNN paper's tasks) run the CLI in
subclass mode. Their data is generated (Tomita, parentheses, palindromes, copying: nothing is generated
at instantiation) or read from the data root (pixel MNIST reads nothing until ``setup``); IMDB reads its
training reviews to build the vocabulary the model needs, so a tiny IMDB folder stands in (the real
reviews take ~10 s per recipe; the IMDB DataModule has its own corpus tests).
"""

import json
import lzma
import os
from pathlib import Path

import pytest
import torch
import yaml

from dsf_lightning.cli import is_task_recipe, lightning_cli
from dsf_lightning.data.corpora import CorpusError
from dsf_lightning.tasks.data import SequenceDataModule
from dsf_lightning.tasks.modules import SequenceClassifier, _RecurrentSequenceModule
from dsf_lightning.training import LanguageModelModule

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "recipes").rglob("*.yaml"))
TASK_RECIPES = [p for p in RECIPES if is_task_recipe(["--config", str(p)])]
LM_RECIPES = [p for p in RECIPES if p not in TASK_RECIPES]
DATA_ROOT = os.environ.get("DSF_DATA_ROOT", str(ROOT.parent / "shared" / "data"))
TASK_FOLDERS = ("copying", "imdb_sentiment", "mnist", "palindromes", "parentheses", "tomita")


def _ids(paths):
    return [str(p.relative_to(ROOT / "recipes")) for p in paths]


def test_there_are_recipes():
    assert RECIPES, "no recipes found under recipes/"
    assert LM_RECIPES and TASK_RECIPES


def test_task_recipes_are_recognized_by_folder():
    """Every recipe of the sr-RNN task folders is in the class_path (task) form; no LM recipe is."""
    for path in RECIPES:
        assert (path in TASK_RECIPES) == (path.relative_to(ROOT / "recipes").parts[0] in TASK_FOLDERS), path


def test_every_recipe_opens_with_a_teaching_header():
    for path in RECIPES:
        head = path.read_text().split("\n")[:15]
        text = "\n".join(head)
        for word in ("What:", "Run:", "Override example:", "Paper:"):
            assert word in text, f"{path.relative_to(ROOT)} header lacks {word!r}"


@pytest.fixture(scope="module")
def tiny_imdb(tmp_path_factory):
    """A data root with a 40-review ``imdb/{train,test}.jsonl.xz`` (checksums off: ``verify: false``)."""
    root = tmp_path_factory.mktemp("tiny_imdb")
    (root / "imdb").mkdir()
    reviews = [{"text": f"a {'great' if i % 2 else 'terrible'} film number {i}", "label": i % 2} for i in range(40)]
    for split in ("train", "test"):
        with lzma.open(root / "imdb" / f"{split}.jsonl.xz", "wt", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in reviews)
    return root


@pytest.fixture(scope="module")
def stand_in_stage1(tmp_path_factory, tiny_folder):
    """A tiny pretrained Delta-RNN folder standing in for a recipe's earlier stage (``model.init_from``)."""
    from dsf_lightning.data.corpora import load_corpus
    from dsf_lightning.model import LMConfig, RecurrentLM
    from dsf_lightning.model.pretrained import Pretrained, save_pretrained

    corpus = load_corpus("text-folder", data_root=str(tiny_folder), cache=False, unk="<unk>")
    config = LMConfig(vocab_size=len(corpus.vocab), cell="delta-rnn", hidden_sizes=[8], embedding_size=8, tie_weights=True)
    folder = tmp_path_factory.mktemp("stage1") / "stage1"
    return save_pretrained(Pretrained(RecurrentLM(config), corpus.vocab, corpus.tokenizer, {"corpus": "text-folder"}), folder)


def _init_from(recipe):
    model = (yaml.safe_load(recipe.read_text()) or {}).get("model") or {}
    return model.get("init_from")


@pytest.mark.parametrize("recipe", LM_RECIPES, ids=_ids(LM_RECIPES))
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


@pytest.mark.parametrize("recipe", TASK_RECIPES, ids=_ids(TASK_RECIPES))
def test_task_recipe_instantiates_through_the_cli(recipe, tiny_imdb, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data_class = yaml.safe_load(recipe.read_text())["data"]["class_path"]
    args = ["--config", str(recipe)]
    if data_class.endswith("IMDBSentimentDataModule"):
        args += ["--data.init_args.data_root", str(tiny_imdb), "--data.init_args.verify", "false"]
    elif data_class.endswith("PixelMNISTDataModule"):
        args += ["--data.init_args.data_root", DATA_ROOT]
    cli = lightning_cli(args, run=False)
    model, data = cli.model, cli.datamodule
    assert isinstance(model, _RecurrentSequenceModule) and isinstance(data, SequenceDataModule)
    assert type(model).__name__ == yaml.safe_load(recipe.read_text())["model"]["class_path"].rsplit(".", 1)[1]
    options = data.model_options()  # what the data decides is linked into the model, not read from the YAML
    assert model.hparams.num_classes == options["num_classes"] == data.num_classes
    if model.hparams.input_mode == "values":
        assert model.hparams.input_size == options["input_size"] > 0
    else:
        assert model.hparams.vocab_size == options["vocab_size"] == data.vocab_size > 0
    if isinstance(model, SequenceClassifier):
        assert model.hparams.end_token == data.start_end_tokens
    assert cli.trainer.max_epochs >= 1
    assert sum(p.numel() for p in model.parameters()) > 0


def test_a_task_recipe_fits_and_tests_through_dsf(tmp_path, monkeypatch, capsys):
    """`dsf fit` then `dsf test` of the Tomita-1 recipe, shrunk to a few steps: checkpoints and metrics."""
    from dsf_lightning.cli import main

    monkeypatch.chdir(tmp_path)
    recipe = str(ROOT / "recipes" / "tomita" / "sr_gru_g1.yaml")
    small = ["--model.init_args.hidden_size", "8", "--model.init_args.cell_options", "{k: 3}",
             "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    assert main(["fit", "--config", recipe, *small, "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3",
                 "--trainer.limit_val_batches", "2"]) == 0
    ckpt = tmp_path / "runs" / "tomita" / "sr_gru_g1" / "checkpoints" / "best.ckpt"
    assert ckpt.is_file() and (ckpt.parent / "last.ckpt").is_file()
    assert main(["test", "--config", recipe, *small, "--ckpt_path", str(ckpt), "--trainer.limit_test_batches", "2"]) == 0
    assert "test_acc" in capsys.readouterr().out


def test_task_recipe_class_paths_are_guarded(tmp_path):
    from dsf_lightning.training.guards import UnsafeRecipeError

    recipe = tmp_path / "evil.yaml"
    recipe.write_text("model:\n  class_path: os.system\ndata:\n  class_path: dsf_lightning.tasks.TomitaDataModule\n")
    assert is_task_recipe(["--config", str(recipe)])
    with pytest.raises(UnsafeRecipeError):
        lightning_cli(["--config", str(recipe)], run=False)


def test_the_task_form_is_detected_from_the_command_line_too(tmp_path):
    lm = ROOT / "recipes" / "ptb" / "lstm.yaml"
    assert not is_task_recipe(["fit", "--config", str(lm), "--model.cell", "gru"])
    assert is_task_recipe(["fit", "--model", "dsf_lightning.tasks.SequenceClassifier", "--data=dsf_lightning.tasks.TomitaDataModule"])
    assert is_task_recipe(["--model.class_path", "dsf_lightning.tasks.SequenceTagger"])


# DSF paper Table 2 (Ororbia II, Mikolov & Reitter 2017, "Learning Simpler Language Models with the Differential
# State Framework"), PTB-SW column: # Params per row
DSF_TABLE2_PTB_PARAMS = {
    "elman": 1_272_464, "scrn": 1_268_604, "mgu": 1_278_692, "mi_rnn": 1_267_904,
    "gru": 1_272_404, "lstm": 1_274_804, "delta_rnn": 1_268_154,
}


@pytest.mark.parametrize("name", sorted(DSF_TABLE2_PTB_PARAMS))
def test_ptb_subword_recipes_have_the_papers_table2_parameter_counts(name, tmp_path, monkeypatch):
    """Each ``recipes/ptb_subword/`` model, built through the real CLI on the real PTB-SW vocabulary, has
    the parameter count of its DSF Table 2 row within 0.3%; the LSTM row is exactly the matrix-peephole
    LSTM of eqs 16-17 at H = 100 (7H^2 + 5HV + 4H + V)."""
    monkeypatch.chdir(tmp_path)
    recipe = ROOT / "recipes" / "ptb_subword" / f"{name}.yaml"
    try:
        cli = lightning_cli(["--config", str(recipe), "--data.data_root", DATA_ROOT], run=False)
    except (CorpusError, SystemExit):
        pytest.skip(f"the PTB corpus is not under {DATA_ROOT}")
    V = cli.datamodule.vocab_size
    assert V == 2404  # the V that makes every Table 2 count an integer solution of its formula
    n = cli.model.num_parameters
    paper = DSF_TABLE2_PTB_PARAMS[name]
    assert abs(n - paper) / paper <= 0.003, f"{name}: {n:,} parameters, the paper's row has {paper:,}"
    if name == "lstm":
        H = cli.model.hparams.hidden_sizes[0]
        assert H == 100 and n == 7 * H * H + 5 * H * V + 4 * H + V == paper


DSF_TABLE2_IMDB_PARAMS = {  # IMDB-SW column; SCRN and LSTM: no size gives the count exactly
    "elman": (499_176, 0), "scrn": (496_196, 0.005), "mgu": (495_444, 0), "mi_rnn": (495_446, 0),
    "gru": (499_374, 0), "lstm": (503_664, 0.006), "delta_rnn": (495_570, 0),
}


@pytest.mark.parametrize("name", sorted(DSF_TABLE2_IMDB_PARAMS))
def test_imdb_subword_recipes_have_the_papers_table2_parameter_counts(name):
    """The IMDB-SW recipes' models at the paper's 1,926 symbols (built from the recipe's model section;
    the CLI path is checked above for PTB-SW and by test_recipe_instantiates_through_the_cli)."""
    from dsf_lightning.model import LMConfig, RecurrentLM, count_parameters

    model = yaml.safe_load((ROOT / "recipes" / "imdb_subword" / f"{name}.yaml").read_text())["model"]
    config = LMConfig(vocab_size=1926, cell=model["cell"], hidden_sizes=model["hidden_sizes"],
                      cell_options=model.get("cell_options") or {}, embedding_size=model["embedding_size"],
                      tie_weights=model["tie_weights"])
    n = count_parameters(RecurrentLM(config))
    paper, tolerance = DSF_TABLE2_IMDB_PARAMS[name]
    assert abs(n - paper) <= tolerance * paper, f"{name}: {n:,} parameters, the paper's row has {paper:,}"


SCRN_TABLE_RECIPES = sorted(p for folder in ("ptb", "wikitext2", "wmt_small")
                            for p in (ROOT / "recipes" / folder).glob("scrn_*.yaml"))


@pytest.mark.parametrize("recipe", SCRN_TABLE_RECIPES, ids=_ids(SCRN_TABLE_RECIPES))
def test_scrn_table_recipes_use_the_papers_uniform_initialization(recipe):
    """SCRN paper Tables 1 and 3: every weight U[-r, r], r = 0.3 (0.2 for d_h = 300, d_s = 40)."""
    model = yaml.safe_load(recipe.read_text())["model"]
    r = 0.2 if recipe.name == "scrn_h300_s40.yaml" else 0.3
    assert model["init"] == {"scheme": "uniform", "scale": r}


def test_an_scrn_recipe_builds_its_model_with_the_papers_initialization(tiny_folder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = lightning_cli(["--config", str(ROOT / "recipes" / "ptb" / "scrn_h300_s40.yaml"), "--data.corpus", "text-folder",
                         "--data.data_root", str(tiny_folder), "--data.corpus_options", "{}"], run=False)
    assert cli.model.hparams.init == {"scheme": "uniform", "scale": 0.2}
    values = torch.cat([p.detach().flatten() for p in cli.model.model.parameters()])
    assert values.abs().max() <= 0.2 and values.abs().max() > 0.19


SUBWORD_RECIPES = sorted(p for folder in ("ptb_subword", "imdb_subword") for p in (ROOT / "recipes" / folder).glob("*.yaml"))


@pytest.mark.parametrize("recipe", SUBWORD_RECIPES, ids=_ids(SUBWORD_RECIPES))
def test_subword_recipes_train_as_the_dsf_papers_sec_2_5_says(recipe, tiny_folder, tmp_path, monkeypatch):
    """DSF paper sec. 2.5: every subword model (baselines too) trains with one step of iterative inference
    on the carried state, lambda in {0.05, 0.1, 0.15}, and is evaluated with a Polyak average of its weights;
    the subword Delta-RNN's outer function is tanh. Checked on the model and trainer the CLI builds."""
    from dsf_lightning.training.callbacks import PolyakAveraging

    monkeypatch.chdir(tmp_path)
    cli = lightning_cli(["--config", str(recipe), "--data.corpus", "text-folder", "--data.data_root", str(tiny_folder),
                         "--data.corpus_options", "{}"], run=False)
    assert cli.model.hparams.iterative_inference_step in (0.05, 0.1, 0.15)
    assert any(isinstance(c, PolyakAveraging) for c in cli.trainer.callbacks)
    if recipe.stem == "delta_rnn":
        assert cli.model.model.layers[0].outer_activation == "tanh"
