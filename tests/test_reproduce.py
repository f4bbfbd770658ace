"""``dsf reproduce``: the table registry, a tiny end-to-end run, resuming, missing corpora, parameter budgets."""

import csv
import functools
import json
import os
from pathlib import Path

import pytest

from dsf_lightning.cli import lightning_cli, main
from dsf_lightning.cli.row import CHILD_ENTRY
from dsf_lightning.model import LMConfig, RecurrentLM, count_parameters
from dsf_lightning.model.budget import hidden_size_for_budget, lm_parameter_count, resolve_budget
from dsf_lightning.reproduce import runner
from dsf_lightning.reproduce.tables import TABLES, default_recipes_dir, get_table, list_recipes
from dsf_lightning.training import LanguageModelModule

from .test_time_to_quality import time_to_quality_recipes

#: the runner sits below the CLI: tests hand it the CLI's row builder and child entry, as `dsf reproduce` does
run_table = functools.partial(runner.run_table, build_cli=lightning_cli, child_entry=CHILD_ENTRY)

ROOT = Path(__file__).resolve().parents[1]
DATA_ROOT = os.environ.get("DSF_DATA_ROOT", str(ROOT.parent / "shared" / "data"))
HAVE_PTB = (Path(DATA_ROOT) / "ptb" / "ptb.train.txt").is_file()


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ----------------------------------------------------------------------------------------- registry
def test_every_row_names_an_existing_recipe_and_every_recipe_is_in_a_table():
    recipes = default_recipes_dir()
    assert recipes == ROOT / "recipes"
    used = set()
    for table in TABLES.values():
        keys = [r.key for r in table.rows]
        assert len(keys) == len(set(keys)), table.id
        for row in table.rows:
            if row.recipe:
                assert (recipes / row.recipe).is_file(), (table.id, row.key, row.recipe)
                used.add(row.recipe)
            if row.evaluation:
                assert table.row(row.parent).recipe, (table.id, row.key)
    bundled_model_recipes = {"ptb/delta_rnn_small.yaml", "ptb/delta_rnn_medium.yaml", "ptb/delta_rnn_hub.yaml",
                             "ptb/lstm_hub.yaml", "ptb_char/delta_rnn_hub.yaml"}
    benchmark_recipes = set(time_to_quality_recipes())  # benchmarks/time_to_quality.py's, by their Bench line
    assert len(benchmark_recipes) >= 5
    unused = {str(p) for p in list_recipes(recipes)} - used - bundled_model_recipes - benchmark_recipes
    assert not unused, f"recipes no table runs: {sorted(unused)}"


def _lm_override_rows():
    """One table row per distinct set of overrides on a language-model recipe (the SCRN Table 7 alphas: one)."""
    seen, rows = set(), []
    for table in TABLES.values():
        for row in table.rows:
            if row.overrides and row.recipe and not runner.is_task_recipe(runner.load_recipe(default_recipes_dir() / row.recipe)):
                keys = tuple(sorted(row.overrides))
                if (row.recipe, keys) not in seen:
                    seen.add((row.recipe, keys))
                    rows.append(pytest.param(table.id, row.key, id=f"{table.id}:{row.key}"))
    return rows


@pytest.mark.parametrize(("table_id", "key"), _lm_override_rows())
def test_every_rows_overrides_reach_the_model_data_and_trainer_the_cli_builds(table_id, key, tiny_folder, tmp_path,
                                                                              monkeypatch):
    """A row's override is an option the CLI accepts and what the built objects hold (a misspelt or ignored
    option would leave the recipe's value)."""
    monkeypatch.chdir(tmp_path)
    row = get_table(table_id).row(key)
    recipe_path = default_recipes_dir() / row.recipe
    overrides = runner.merged_overrides(runner.load_recipe(recipe_path), row, "paper")
    args = runner.cli_arguments(recipe_path, overrides, str(tiny_folder), ["--data.corpus", "text-folder",
                                                                           "--data.corpus_options", "{}"])
    cli = lightning_cli(args, run=False)
    for dotted, value in row.overrides.items():
        section, *path = dotted.split(".")
        if section == "model":
            got = cli.model.hparams
            for part in path:
                got = got[part]
        else:
            got = getattr(cli.datamodule if section == "data" else cli.trainer, path[0])
        assert got == value, (dotted, got, value)


def test_list_tables_and_recipes(capsys):
    assert main(["list", "tables"]) == 0
    out = capsys.readouterr().out
    for table_id in ("dsf-table1-word", "dsf-table1-char", "dsf-table2", "scrn-table7", "ran-table1", "irlm-table2"):
        assert table_id in out
    assert main(["list", "recipes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(list_recipes()) and any(line.startswith("ptb/delta_rnn.yaml") for line in lines)


def test_tiny_scale_shrinks_every_recipe_through_overrides():
    recipes = default_recipes_dir()
    tasks = 0
    for path in list_recipes(recipes):
        recipe = runner.load_recipe(recipes / path)
        row = runner.Row("x", "x", 1.0, recipe=str(path))
        over = runner.merged_overrides(recipe, row, "tiny")
        assert over["trainer.max_epochs"] == 1 and over["trainer.limit_train_batches"] == 6, path
        if runner.is_task_recipe(recipe):  # model / data by class_path: scaled through init_args
            tasks += 1
            assert over["model.init_args.hidden_size"] == 16, path
            assert over["data.init_args.batch_size"] == 8 and "model.hidden_sizes" not in over, path
            k = (recipe["model"]["init_args"].get("cell_options") or {}).get("k")
            assert k is None or over["model.init_args.cell_options"]["k"] == 4, path
            assert runner.merged_overrides(recipe, row, "paper") == {}, path
            continue
        layers = recipe["model"].get("hidden_sizes", [256])
        assert over["model.hidden_sizes"] == [16] * len(layers if isinstance(layers, list) else [layers]), path
        assert "model.parameter_budget" not in over or over["model.parameter_budget"] is None
    assert tasks >= 20
    assert runner.merged_overrides(recipe, row, "paper") == {}


def test_task_recipes_scale_their_data_and_keep_the_rows_overrides():
    recipes = default_recipes_dir()
    table = get_table("srnn-table1")
    row = table.row("small-sr-lstm-p-d20_l1000")
    recipe = runner.load_recipe(recipes / row.recipe)
    tiny = runner.merged_overrides(recipe, row, "tiny")
    assert tiny["data.init_args.size"] == "small" and tiny["data.init_args.test_size"] == 32
    assert tiny["model.init_args.cell_options"] == {"k": 4, "tau": 1.0}
    assert recipe["model"]["init_args"]["cell_options"] == {"k": 5, "tau": 1.0}  # the recipe is untouched
    args = runner.cli_arguments(recipes / row.recipe, tiny, None, [], runner.task_data_root_key(recipe), raw_strings=True)
    assert "--data.init_args.size=small" in args and not any(a.startswith("--data.init_args.data_root") for a in args)
    assert runner.merged_overrides(recipe, row, "paper") == {"data.init_args.size": "small"}
    # small: sizes capped, a few epochs (many for the tiny Tomita data), big generated data sets shrunk
    small = runner.merged_overrides(runner.load_recipe(recipes / "palindromes/lstm.yaml"), row, "small")
    assert small["data.init_args.train"] == [23_000, 11_500, [1, 25]] and small["trainer.max_epochs"] == 5
    small = runner.merged_overrides(runner.load_recipe(recipes / "copying/lstm.yaml"), row, "small")
    assert small["data.init_args.train_size"] == 10_000 and "data.init_args.lag" not in small
    tomita = runner.load_recipe(recipes / "tomita/sr_gru_g3.yaml")
    assert runner.merged_overrides(tomita, row, "small")["trainer.max_epochs"] == 100
    assert runner.merged_overrides(runner.load_recipe(recipes / "copying/lstm.yaml"), row, "tiny")["data.init_args.lag"] == 10
    # the rows read their own test set; IMDB and MNIST take the data root, the generated tasks do not
    assert runner.metric_key(row) == "test_error/d20_l1000"
    assert runner.metric_key(get_table("srnn-imdb").row("lstm-full")) == "test_error/full"
    assert runner.metric_key(get_table("srnn-copying").row("lstm-t100")) == "test_loss"
    assert runner.task_data_root_key(runner.load_recipe(recipes / "mnist/lstm_pixel.yaml")) == "data.init_args.data_root"
    assert runner.task_data_root_key(tomita) is None
    for table_id in ("srnn-tomita", "srnn-table1", "srnn-palindromes", "srnn-copying", "srnn-imdb", "srnn-mnist"):
        assert not [r.key for r in get_table(table_id).rows if r.pending], table_id


def test_the_imdb_last_words_rows_train_and_test_on_the_last_words(tmp_path):
    """The `trunc10-last` rows pass keep_words: last to the DataModule that LightningCLI builds (the other rows
    keep the first words), with the sr-LSTM / LSTM-p cell changes kept."""
    from dsf_lightning.cli.lightning import lightning_cli
    from tests.tasks.conftest import write_numbered_imdb

    write_numbered_imdb(tmp_path)  # a two-review stand-in (verify off): the vocabulary is built from it
    recipes, table = default_recipes_dir(), get_table("srnn-imdb")
    for key, keep in (("sr-lstm-trunc10-last-l200", "last"), ("sr-lstm-trunc10-l200", "first")):
        row = table.row(key)
        recipe = runner.load_recipe(recipes / row.recipe)
        over = runner.merged_overrides(recipe, row, "paper")
        args = runner.cli_arguments(recipes / row.recipe, over, str(tmp_path), ["--data.init_args.verify=false"],
                                    runner.task_data_root_key(recipe), raw_strings=True)
        cli = lightning_cli(args, run=False)
        assert cli.datamodule.keep_words == keep and cli.model.hparams.cell == "sr-lstm"
    last = [r for r in table.rows if "trunc10-last-l" in r.key]
    assert len(last) == 8 and all(r.overrides["data.init_args.keep_words"] == "last" for r in last)
    assert {r.published for r in last} == {r.published for r in table.rows if "trunc10-l" in r.key}


def test_the_imdb_readings_of_issue_34_reach_the_model_and_data_the_cli_builds(tmp_path):
    """Figure 9's last readings: truncated BPTT over 100 words (bptt_window 10), Keras' front padding, test sets of
    the reviews that fit, k = 2 and 5 centroids; each row's overrides reach what LightningCLI builds."""
    from dsf_lightning.cli.lightning import lightning_cli
    from tests.tasks.conftest import write_numbered_imdb

    write_numbered_imdb(tmp_path)
    recipes, table = default_recipes_dir(), get_table("srnn-imdb")

    def built(key):
        row = table.row(key)
        recipe = runner.load_recipe(recipes / row.recipe)
        args = runner.cli_arguments(recipes / row.recipe, runner.merged_overrides(recipe, row, "paper"), str(tmp_path),
                                    ["--data.init_args.verify=false"], runner.task_data_root_key(recipe), raw_strings=True)
        cli = lightning_cli(args, run=False)
        return cli.model, cli.datamodule, runner.metric_key(row)

    model, data, metric = built("sr-lstm-p-tbptt10-l200")
    assert model.bptt_window == 10 and metric == "test_error/l200"
    assert (data.train_max_length, data.valid_max_length, data.test_max_lengths) == (200, 200, (200,))
    model, data, _ = built("lstm-trunc10-pre-l100")
    assert (data.keep_words, data.pad_to_cut, data.pad_side) == ("last", True, "front") and model.bptt_window is None
    _, data, _ = built("lstm-p-trunc10-last-upto-l100")
    assert (data.keep_words, data.test_over_length, data.pad_to_cut) == ("last", "drop", False)
    for key, cell, k in (("sr-lstm-trunc10-last-k2-l100", "sr-lstm", 2), ("sr-lstm-p-trunc10-last-k5-l200", "sr-lstm-p", 5)):
        model, data, _ = built(key)
        assert model.hparams.cell == cell and model.cell.centroids.shape[0] == k and data.keep_words == "last"
    keys = [r.key for r in table.rows]
    assert len(keys) == len(set(keys)) == 18 + 8 + 8 + 8 + 8


def test_task_rows_whose_data_is_missing_are_skipped_and_named(tmp_path):
    summary = run_table("srnn-imdb", scale="tiny", data_root=tmp_path / "empty", out=tmp_path / "out",
                               rows=["lstm-full"], log=lambda _: None)
    assert summary["skipped"] == ["lstm-full"] and not summary["failed"]
    row = next(r for r in read_csv(tmp_path / "out" / "srnn-imdb.csv") if r["row"] == "lstm-full")
    assert row["status"] == "skipped" and "imdb/train.jsonl.xz" in row["message"]
    assert row["message"].count("\n") == 0 and "imdb/test.jsonl.xz" in row["message"]
    # the runner asks the row's DataModule (missing_data()), built from the recipe: no IMDB / MNIST branch of its own
    recipe = runner.load_recipe(default_recipes_dir() / "mnist/lstm_pixel.yaml")
    why = runner._missing_data(recipe, runner.Row("r", "r", 1.0, "error", "mnist/lstm_pixel.yaml"), str(tmp_path))
    assert why.startswith("data missing: mnist needs ") and "mnist/train-images-idx3-ubyte.gz" in why
    assert "mnist/t10k-labels-idx1-ubyte.gz" in why and str(tmp_path) in why
    wrong = runner.Row("r", "r", 1.0, "error", "mnist/lstm_pixel.yaml", overrides={"data.init_args.dataset": "nope"})
    assert runner._missing_data(recipe, wrong, str(tmp_path)) is None  # a wrong argument: the row's fit names it


def test_row_overrides_merge_into_the_recipes_cell_options():
    table = get_table("scrn-table7")
    row = table.row("ptb-alpha0.85")
    recipe = runner.load_recipe(default_recipes_dir() / row.recipe)
    assert runner.merged_overrides(recipe, row, "paper") == {"model.cell_options": {"context_size": 120, "alpha": 0.85}}
    assert recipe["model"]["cell_options"]["alpha"] == 0.9  # the recipe itself is untouched


# ----------------------------------------------------------------------------------------- running
@pytest.mark.corpus
@pytest.mark.skipif(not HAVE_PTB, reason=f"PTB not under {DATA_ROOT}")
def test_tiny_table1_word_end_to_end_then_resume(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    code = main(["reproduce", "dsf-table1-word", "--scale", "tiny", "--data-root", DATA_ROOT, "--out", str(out)])
    assert code == 0
    table = get_table("dsf-table1-word")
    rows = read_csv(out / "dsf-table1-word.csv")
    assert [r["row"] for r in rows] == [r.key for r in table.rows]
    for r in rows:
        assert r["status"] == "done", r
        measured, published = float(r["measured"]), float(r["published"])
        assert measured > 1 and abs(float(r["difference"]) - (measured - published)) < 1e-3
        assert float(r["wall_seconds"]) > 0 and float(r["tokens_per_second"]) > 0 and int(r["parameters"]) > 0
    markdown = (out / "dsf-table1-word.md").read_text()
    for row in table.rows:
        assert f"(`{row.key}`)" in markdown
    assert "torchrun" in markdown and "srun" in markdown
    state = json.loads((out / "dsf-table1-word.state.json").read_text())
    checkpoint = Path(state["rows"]["delta-rnn"]["checkpoint"])
    stamp = checkpoint.stat().st_mtime_ns

    # the second run trains nothing: every row is skipped as done
    def no_training(spec, *_):
        raise AssertionError("a finished row was run again")

    monkeypatch.setattr(runner, "run_row", no_training)
    monkeypatch.setattr(runner, "run_dynamic", no_training)
    summary = run_table("dsf-table1-word", scale="tiny", data_root=DATA_ROOT, out=out, log=lambda _: None)
    assert summary["ran"] == [] and summary["skipped_done"] == [r.key for r in table.rows]
    assert checkpoint.stat().st_mtime_ns == stamp

    # a crashed row is retried (and only that row)
    state["rows"]["elman"]["status"] = "failed"
    (out / "dsf-table1-word.state.json").write_text(json.dumps(state))
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    summary = run_table("dsf-table1-word", scale="tiny", data_root=DATA_ROOT, out=out, log=lambda _: None)
    assert summary["ran"] == ["elman"]
    assert read_csv(out / "dsf-table1-word.csv")[0]["status"] == "done"


def test_tiny_task_row_end_to_end_then_shared_and_resumed(tmp_path, monkeypatch):
    """One Tomita row through fit + test of the real CLI (tiny data, ~3 s), a row of the same model reusing it."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    summary = run_table("srnn-tomita", scale="tiny", out=out, rows=["g2"], log=lambda _: None)
    assert summary["ran"] == ["g2"] and not summary["failed"] and not summary["pending"]
    rows = {r["row"]: r for r in read_csv(out / "srnn-tomita.csv")}
    done = rows["g2"]
    assert done["status"] == "done" and done["split"] == "test" and done["scale"] == "tiny"
    assert 0.0 <= float(done["measured"]) <= 1.0 and float(done["difference"]) == pytest.approx(float(done["measured"]))
    assert float(done["wall_seconds"]) > 0 and float(done["tokens_per_second"]) > 0 and int(done["parameters"]) > 0
    assert rows["g1"]["status"] == "not run"
    markdown = (out / "srnn-tomita.md").read_text()
    assert "| sr-GRU, Tomita 2 (`g2`) | error | 0.000 | " in markdown and "| done |" in markdown
    state = json.loads((out / "srnn-tomita.state.json").read_text())
    entry = state["rows"]["g2"]
    assert entry["metrics"]["test_error"] == pytest.approx(1 - entry["metrics"]["test_acc"])
    assert "--model.init_args.hidden_size=16" in entry["args"] and any("splits" in a for a in entry["args"])
    assert Path(entry["checkpoint"]).is_file()

    # a second row training the same model (here: the same recipe under another key) reads the same run
    from dsf_lightning.reproduce import tables

    real = tables.get_table("srnn-tomita")
    twin = tables.Row("g2-again", "the g2 model, again", 0.0, "error", real.row("g2").recipe)
    table = tables.Table("srnn-tomita", real.title, real.paper, (*real.rows, twin), real.notes)
    monkeypatch.setitem(tables.TABLES, table.id, table)

    def no_training(spec, *_):
        raise AssertionError("a run was repeated")

    monkeypatch.setattr(runner, "run_row", no_training)
    summary = run_table("srnn-tomita", scale="tiny", out=out, rows=["g2", "g2-again"], log=lambda _: None)
    assert summary["skipped_done"] == ["g2"] and summary["ran"] == ["g2-again"]
    again = {r["row"]: r for r in read_csv(out / "srnn-tomita.csv")}["g2-again"]
    assert again["measured"] == done["measured"] and "run of row g2" in again["message"]


def test_rows_whose_corpus_is_missing_are_skipped_and_named(tmp_path):
    summary = run_table("scrn-table6", scale="tiny", data_root=tmp_path / "empty", out=tmp_path / "out",
                               rows=["fr-scrn", "de-lstm"], log=lambda _: None)
    assert summary["skipped"] == ["fr-scrn", "de-lstm"] and not summary["ran"] and not summary["failed"]
    rows = {r["row"]: r for r in read_csv(tmp_path / "out" / "scrn-table6.csv")}
    assert rows["fr-scrn"]["status"] == "skipped"
    assert "corpus missing" in rows["fr-scrn"]["message"]
    assert "wmt_botha2014_small/fr/train.txt" in rows["fr-scrn"]["message"]
    assert rows["es-scrn"]["status"] == "not run"  # filtered out by --rows, still listed
    assert "skipped: corpus missing" in (tmp_path / "out" / "scrn-table6.md").read_text()


def test_pending_rows_are_listed_with_their_reason(tmp_path, monkeypatch):
    from dsf_lightning.reproduce import tables

    real = tables.get_table("irlm-table2")
    waiting = tables.Row("waits", "A row waiting for a feature", 1.0, "ppl", pending="needs a feature X")
    table = tables.Table("with-pending", "a table with a pending row", real.paper, (*real.rows, waiting))
    monkeypatch.setitem(tables.TABLES, table.id, table)
    summary = run_table(table.id, scale="tiny", data_root=tmp_path, out=tmp_path / "out",
                               rows=["waits"], log=lambda _: None)
    assert summary["pending"] == ["waits"]
    row = next(r for r in read_csv(tmp_path / "out" / "with-pending.csv") if r["row"] == "waits")
    assert row["status"] == "pending" and "feature X" in row["message"]


def test_unknown_table_or_row_is_a_clear_error(tmp_path):
    with pytest.raises(KeyError, match="dsf-table1-word"):
        run_table("no-such-table", out=tmp_path)
    with pytest.raises(KeyError, match="no row"):
        run_table("dsf-table1-word", out=tmp_path, rows=["nope"])


# ----------------------------------------------------------------------------------------- budgets
def real_count(cell, hidden, vocab, embedding_size=0, layers=1, tie_weights=False, **options):
    config = LMConfig(vocab_size=vocab, cell=cell, hidden_sizes=[hidden] * layers, embedding_size=embedding_size,
                      tie_weights=tie_weights, cell_options=options)
    return count_parameters(RecurrentLM(config))


@pytest.mark.parametrize("cell", ["lstm", "gru", "delta-rnn"])
@pytest.mark.parametrize("vocab,reference", [(2404, 100), (1926, 50), (50, 30)])
def test_the_budget_picks_the_size_whose_counted_parameters_are_closest(cell, vocab, reference):
    budget = real_count("lstm", reference, vocab)
    assert lm_parameter_count("lstm", reference, vocab, embedding_size=0) == budget  # meta count == real count
    h = hidden_size_for_budget(cell, budget, vocab, embedding_size=0)
    gap = abs(real_count(cell, h, vocab) - budget)
    assert gap <= abs(real_count(cell, h - 1, vocab) - budget)
    assert gap <= abs(real_count(cell, h + 1, vocab) - budget)
    assert h == hidden_size_for_budget(cell, f"lstm:{reference}", vocab, embedding_size=0)


def test_budget_reproduces_the_dsf_papers_imdb_parameter_counts():
    # DSF Table 2, IMDB-SW: 1,926 symbols, the budget of an LSTM with 50 units
    budget = resolve_budget("lstm:50", 1926, embedding_size=0)
    for cell, paper in (("mgu", 495_444), ("mi-rnn", 495_446), ("delta-rnn", 495_570)):
        h = hidden_size_for_budget(cell, budget, 1926, embedding_size=0)
        assert lm_parameter_count(cell, h, 1926, embedding_size=0) == paper


def test_budget_with_embeddings_layers_and_tying():
    budget = 200_000
    h = hidden_size_for_budget("scrn", budget, 500, layers=2, embedding_size=None, tie_weights=True,
                               cell_options={"context_size": 8})
    counts = {d: real_count("scrn", h + d, 500, embedding_size=None, layers=2, tie_weights=True, context_size=8)
              for d in (-1, 0, 1)}
    assert abs(counts[0] - budget) == min(abs(c - budget) for c in counts.values())


def test_module_parameter_budget_overrides_hidden_sizes():
    module = LanguageModelModule(vocab_size=2404, cell="gru", hidden_sizes=[7], parameter_budget="lstm:100",
                                 embedding_size=0)
    h = hidden_size_for_budget("gru", "lstm:100", 2404, embedding_size=0)
    assert module.hparams.hidden_sizes == [h] == module.budget_hidden_sizes
    assert module.model.config.hidden_sizes == [h]
    assert abs(module.num_parameters - resolve_budget("lstm:100", 2404, embedding_size=0)) < 5_000


def test_lr_decay_after_epoch_is_zarembas_schedule():
    module = LanguageModelModule(vocab_size=11, hidden_sizes=[4], optimizer="sgd", lr=1.0, lr_decay_factor=0.5,
                                 lr_decay_after_epoch=2)
    config = module.configure_optimizers()
    scheduler = config["lr_scheduler"]["scheduler"]
    rates = []
    for _ in range(4):
        rates.append(config["optimizer"].param_groups[0]["lr"])
        config["optimizer"].step()
        scheduler.step()
    assert rates == [1.0, 1.0, 0.5, 0.25]
    with pytest.raises(ValueError, match="two schedules"):
        LanguageModelModule(vocab_size=11, hidden_sizes=[4], lr_decay_after_epoch=2, lr_halving_patience=0)


def test_a_recipes_comments_do_not_restart_its_rows_and_older_text_fingerprints_still_match(tmp_path, monkeypatch):
    """A row's fingerprint reads the parsed recipe: an edited comment keeps a finished row finished (it reran
    before: the text was hashed), a changed value reruns it, and a state that holds the text fingerprint of
    the same recipe (written before) is still that row's."""
    import shutil

    monkeypatch.chdir(tmp_path)
    recipes, out = tmp_path / "recipes", tmp_path / "out"
    shutil.copytree(runner.default_recipes_dir(), recipes)
    table = get_table("srnn-tomita")
    recipe = recipes / table.row("g2").recipe
    run = dict(scale="tiny", out=out, rows=["g2"], recipes_dir=recipes, log=lambda _: None)
    assert run_table("srnn-tomita", **run)["ran"] == ["g2"]

    def no_training(spec, *_):
        raise AssertionError("a finished row was run again")

    with monkeypatch.context() as m:
        m.setattr(runner, "run_row", no_training)
        recipe.write_text("# Reproduced: a header line added after the run\n" + recipe.read_text() + "\n# and a footer\n")
        assert run_table("srnn-tomita", **run)["skipped_done"] == ["g2"]

        # a state from before: the row's fingerprint and its run's key hashed the recipe's text
        state_path = out / "srnn-tomita.state.json"
        state = json.loads(state_path.read_text())
        entry = state["rows"]["g2"]
        text, parsed = recipe.read_text(), runner.load_recipe(recipe)
        new, both = runner._fingerprints(table, table.row("g2"), "tiny", parsed, text, [], None)
        assert entry["fingerprint"] == new and len(both) == 2
        (old,) = both - {new}
        entry["fingerprint"] = old
        state["runs"] = {runner.run_fingerprint(text, entry["args"][2:], "tiny"): state["runs"][entry["run"]]}
        state_path.write_text(json.dumps(state))
        from dsf_lightning.reproduce import tables

        twin = tables.Row("g2-again", "the g2 model, again", 0.0, "error", table.row("g2").recipe)
        m.setitem(tables.TABLES, table.id, tables.Table(table.id, table.title, table.paper, (*table.rows, twin),
                                                         table.notes))
        summary = run_table("srnn-tomita", **{**run, "rows": ["g2", "g2-again"]})
        assert summary["skipped_done"] == ["g2"] and summary["ran"] == ["g2-again"]  # its run found by the old key
        after = json.loads(state_path.read_text())
        assert after["rows"]["g2"]["fingerprint"] == new  # brought up to date
        assert after["rows"]["g2-again"]["measured"] == entry["measured"]
        assert list(after["runs"]) == [entry["run"]]

    recipe.write_text(text.replace("seed_everything: ", "seed_everything: 1") if "seed_everything: " in text
                      else "seed_everything: 12345\n" + text)
    assert run_table("srnn-tomita", **run)["ran"] == ["g2"]  # a value changed: the row runs again


def test_a_row_read_from_another_rows_run_is_measured_when_that_run_ends(tmp_path):
    """A table stopped during a later fit (Ctrl-C in the second fit here) keeps the rows read from the first
    row's run (the same model on another test set): they no longer wait for every fit and stay "not run"."""
    table = get_table("srnn-table1")
    first, shared = [row.key for row in table.rows if row.key.startswith("large-lstm-")][:2]
    other = next(row.key for row in table.rows if row.key.startswith("large-sr-lstm-p-"))
    fitted = []

    def build_cli(args, run=False):
        if any("sr_lstm_p" in arg for arg in args):
            raise KeyboardInterrupt  # the user stops the table during its second fit
        fitted.append(args)
        return lightning_cli(args, run=run)

    with pytest.raises(KeyboardInterrupt):
        runner.run_table(table.id, scale="tiny", out=tmp_path, rows=[first, other, shared], log=lambda _: None,
                         build_cli=build_cli, child_entry=CHILD_ENTRY)
    rows = json.loads((tmp_path / f"{table.id}.state.json").read_text())["rows"]
    assert len(fitted) == 1 and rows[first]["status"] == "done"  # one model trained for the two rows
    assert rows[shared]["status"] == "done" and rows[shared]["shared_with"] == first
    assert 0.0 <= rows[shared]["measured"] <= 1.0 and rows[other]["status"] != "done"
