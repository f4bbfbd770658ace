"""Hostile and broken inputs at the public entry points end in a documented error with a message, never a
hang, an interpreter crash or a memory blow-up (property tests with hypothesis; every call runs under a
time limit; the number of cases per entry point is printed in pytest's summary).

Documented outcomes: ScoringError (scoring), TokenizerError (tokenizers), ModelConfigError /
CellOptionError / UnknownCellError (model configs), CorpusError / VocabularyError / StreamLayoutError
(data), UnsafeRecipeError or jsonargparse's usage error (exit code 2) for recipes.
"""

from __future__ import annotations

import json
import math
import random
import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsf_lightning.cells import CellOptionError
from dsf_lightning.cells.registry import UnknownCellError
from dsf_lightning.data.tokenizers import TokenizerError, get_tokenizer, tokenizer_from_json
from dsf_lightning.data.vocab import Vocabulary, VocabularyError
from dsf_lightning.model import LMConfig, ModelConfigError, RecurrentLM
from dsf_lightning.scoring import DocumentScore, Scorer, ScoringError, SentenceScore

from .conftest import peak_rss_mb, raised_in, tiny_pretrained, within

PROFILE = settings.get_profile("reliability")


def examples(n: int):
    return settings(PROFILE, max_examples=n)




# any code point, lone surrogates and control characters included
ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=())
ANY_TEXT = st.text(ANY_CHAR, max_size=120)
# text made mostly of the toy vocabulary, with hostile pieces mixed in
WORDS = "the cat sat on a mat and dog ran far".split()
MIXED_TEXT = st.lists(
    st.one_of(st.sampled_from(WORDS), st.sampled_from([" ", "\n", "\r\n", "\t", "\x00", "\u2028", "\ufeff", "\x85"]), ANY_TEXT),
    max_size=12,
).map(" ".join)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def scorers():
    return {kind: Scorer(tiny_pretrained(kind), window=16, batch_size=4) for kind in ("word", "char", "char-ptb")}


def check_sentence(result: SentenceScore) -> None:
    assert isinstance(result, SentenceScore)
    assert len(result.tokens) == len(result.logprobs) == result.num_tokens > 0
    assert all(math.isfinite(lp) and lp <= 0 for lp in result.logprobs)
    assert result.ppl >= 1.0


# ----------------------------------------------------------------------------------------------- Scorer
@examples(250)
@given(text=st.one_of(ANY_TEXT, MIXED_TEXT), kind=st.sampled_from(["word", "char", "char-ptb"]))
def test_score_any_text(scorers, hostile_counts, text, kind):
    hostile_counts[f"Scorer.score (str, {kind} model)"] += 1
    with within(10):
        try:
            result = scorers[kind].score(text)
        except ScoringError as err:
            assert str(err)
            if text == "":
                assert "empty text" in str(err)
            else:
                assert kind != "word", "an open vocabulary scores every non-empty text"
                assert "not in the model's closed vocabulary" in str(err)
            return
    check_sentence(result)
    assert result.num_oov == len(result.oov_words)


ITEM = st.one_of(ANY_TEXT, MIXED_TEXT, st.integers(), st.none(), st.binary(max_size=8), st.lists(st.text(max_size=3), max_size=2))


@examples(120)
@given(items=st.one_of(st.lists(ITEM, max_size=6), st.tuples(ITEM, ITEM), st.integers(), st.none(), st.binary(max_size=5)),
       carry=st.booleans())
def test_score_any_list(scorers, hostile_counts, items, carry):
    hostile_counts["Scorer.score (list / junk, word model)"] += 1
    with within(10):
        try:
            results = scorers["word"].score(items, carry_state=carry)
        except ScoringError as err:
            assert str(err)
            return
    assert isinstance(results, list)
    assert all(isinstance(t, str) and t for t in items) and len(results) == len(items)
    for result in results:
        check_sentence(result)


@examples(120)
@given(lines=st.lists(st.one_of(ANY_TEXT, MIXED_TEXT, st.integers(), st.none()), max_size=8),
       kind=st.sampled_from(["word", "char"]), window=st.integers(1, 40))
def test_score_document_any_lines(scorers, hostile_counts, lines, kind, window):
    hostile_counts[f"Scorer.score_document (lines, {kind} model)"] += 1
    with within(10):
        try:
            result = scorers[kind].score_document(lines, window=window)
        except ScoringError as err:
            assert str(err)
            return
    assert isinstance(result, DocumentScore) and result.num_tokens > 0
    assert math.isfinite(result.logprob) and result.logprob <= 0


@examples(150)
@given(data=st.one_of(
    st.binary(max_size=600),
    MIXED_TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.tuples(MIXED_TEXT, st.binary(min_size=1, max_size=4)).map(lambda p: p[0].encode("utf-8", "surrogatepass") + p[1]),
), kind=st.sampled_from(["word", "char"]))
def test_score_document_any_file(scorers, hostile_counts, tmp_path_factory, data, kind):
    hostile_counts[f"Scorer.score_document (file bytes, {kind} model)"] += 1
    path = tmp_path_factory.mktemp("doc") / "doc.txt"
    path.write_bytes(data)
    with within(10):
        try:
            result = scorers[kind].score_document(path)
        except ScoringError as err:
            message = str(err)
            assert message
            if b"\0" in data:  # NUL bytes: binary data, refused before decoding (issue 13 item 7)
                assert "NUL byte at byte offset" in message and str(path) in message
                return
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:  # streamed: an earlier line's unknown symbol may be met first
                assert "not valid UTF-8 at byte offset" in message or "closed vocabulary" in message
                assert str(path) in message
            return
    assert isinstance(result, DocumentScore) and result.num_tokens > 0 and result.source == str(path)
    data.decode("utf-8")  # a file that is not UTF-8 is never scored
    assert b"\0" not in data  # nor one holding NUL bytes


def test_huge_inputs_end_quickly_within_bounded_memory(scorers, tmp_path, hostile_counts):
    """1 MB inputs: one enormous word, a 1 MB line of an unknown character, a 1 MB non-UTF-8 file,
    1 MB of blank lines; each ends in a result or a ScoringError within seconds."""
    word, char = scorers["word"], scorers["char"]
    before = peak_rss_mb()
    big = "x" * (1 << 20)
    path = tmp_path / "binary.txt"
    # 1 MB of random bytes >= 128 after a 0xFF (never valid in UTF-8), made before the clock starts
    path.write_bytes(b"\xff" + random.Random(0).randbytes((1 << 20) - 1).translate(bytes(range(128, 256)) * 2))
    with within(30):
        result = word.score(big)  # one out-of-vocabulary word
        assert result.tokens == ["<unk>", "<eos>"] and result.num_oov == 1
        with pytest.raises(ScoringError, match="'z'.*not in the model's closed vocabulary"):
            char.score("z" * (1 << 20))
        with pytest.raises(ScoringError, match="not valid UTF-8 at byte offset 0"):
            word.score_document(path)
        path.write_bytes(b" \t" * (1 << 19) + b"\n")  # a 1 MB line of blanks: no word, one <eos>
        assert word.score_document(path).num_tokens == 1
    hostile_counts["Scorer 1 MB inputs"] += 4
    assert peak_rss_mb() - before < 800


def test_a_megabyte_of_real_words_is_streamed_in_bounded_memory(scorers, tmp_path, hostile_counts):
    rng = random.Random(0)
    path = tmp_path / "words.txt"
    lines, size = [], 0
    while size < (1 << 20):
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30)))
        lines.append(line)
        size += len(line) + 1
    path.write_text("\n".join(lines) + "\n")
    before = peak_rss_mb()
    with within(180):
        result = scorers["word"].score_document(path, window=512)
    hostile_counts["Scorer 1 MB inputs"] += 1
    assert result.num_tokens == sum(len(line.split()) + 1 for line in lines)
    assert result.num_oov == 0 and math.isfinite(result.ppl)
    assert peak_rss_mb() - before < 300  # running sums only


# ----------------------------------------------------------------------------------------------- tokenizers
TOKENIZERS = {
    "word": get_tokenizer("word"),
    "word-lower-no-eos": get_tokenizer("word", lowercase=True, eos=None),
    "char": get_tokenizer("char"),
    "char-ptb": get_tokenizer("char", mode="ptb"),
    "subword": get_tokenizer("subword", min_count=2).fit(["the banknote street", "the street banknote"] * 3),
    "subword-unfitted-boundary": get_tokenizer("subword", boundary="|"),
}


@examples(300)
@given(line=st.one_of(ANY_TEXT, MIXED_TEXT), name=st.sampled_from(sorted(TOKENIZERS)))
def test_tokenize_any_line(hostile_counts, line, name):
    hostile_counts[f"Tokenizer.tokenize_line ({name.split('-')[0]})"] += 1
    tok = TOKENIZERS[name]
    with within(5):
        tokens = tok.tokenize_line(line)
    assert isinstance(tokens, list) and all(isinstance(t, str) and t for t in tokens)
    if tok.eos is not None:
        assert tokens[-1] == tok.eos
    if name == "char":
        assert len(tokens) == len(line) + 1


VALID_TOKENIZER_DOCS = [tok.to_dict() for tok in TOKENIZERS.values()]


def mutate(doc: dict, draw) -> dict:
    doc = json.loads(json.dumps(doc))
    path = draw(st.sampled_from([("name",), ("options",), ("state",), ("format",), ("options", "eos"), ("options", "mode"),
                                 ("options", "space"), ("options", "min_count"), ("options", "vowels"), ("options", "boundary"),
                                 ("state", "subwords"), ("state", "chars"), ("options", "unknown_option")]))
    target = doc
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    if draw(st.booleans()):
        target[path[-1]] = draw(JSON)
    else:
        target.pop(path[-1], None)
    return doc


@st.composite
def tokenizer_documents(draw):
    kind = draw(st.sampled_from(["mutated", "mutated", "json", "text"]))
    if kind == "mutated":
        return json.dumps(mutate(draw(st.sampled_from(VALID_TOKENIZER_DOCS)), draw))
    if kind == "json":
        return json.dumps(draw(JSON))
    return draw(st.text(max_size=60))


@examples(300)
@given(text=tokenizer_documents())
def test_tokenizer_from_any_json(hostile_counts, text):
    hostile_counts["tokenizer_from_json"] += 1
    with within(5):
        try:
            tok = tokenizer_from_json(text)
        except TokenizerError as err:
            assert str(err)
            return
        tokens = tok.tokenize_line("the street")  # a tokenizer that loads works
    assert isinstance(tokens, list) and all(isinstance(t, str) and t for t in tokens)


@pytest.mark.parametrize(
    "doc",
    [
        {"format": "dsf_lightning.tokenizer/1", "name": [1]},
        {"format": "dsf_lightning.tokenizer/1"},
        {"format": "dsf_lightning.tokenizer/1", "name": "word", "options": [1]},
        {"format": "dsf_lightning.tokenizer/1", "name": "subword", "options": {"vowels": {}}},
        {"format": "dsf_lightning.tokenizer/1", "name": "subword", "state": {"subwords": []}},
        {"format": "dsf_lightning.tokenizer/1", "name": "word", "options": None},
    ],
    ids=["name-list", "no-name", "options-list", "vowels-dict", "state-without-chars", "options-null"],
)
def test_tokenizer_from_json_reproducers(doc):
    with pytest.raises(TokenizerError):
        tokenizer_from_json(json.dumps(doc)).tokenize_line("a b")


def test_a_tokenizer_json_with_wrong_types_in_a_hub_folder_is_a_format_error(tmp_path):
    from dsf_lightning.hub import PretrainedFormatError
    from dsf_lightning.model.pretrained import load_pretrained, save_pretrained
    from tests.hub.conftest import rehash

    folder = save_pretrained(tiny_pretrained(), tmp_path / "m")
    doc = {"format": "dsf_lightning.tokenizer/1", "name": "subword", "options": {"vowels": {}, "eos": "<eos>"}}
    (folder / "dsf_tokenizer.json").write_text(json.dumps(doc))
    rehash(folder)
    with pytest.raises(PretrainedFormatError):
        load_pretrained(folder)


@examples(200)
@given(text=st.one_of(st.text(max_size=60), JSON.map(json.dumps),
                      st.fixed_dictionaries({"symbols": st.lists(st.text(max_size=4) | st.integers(), max_size=5)},
                                            optional={"eos": JSON, "unk": JSON}).map(json.dumps)))
def test_vocabulary_from_any_json(hostile_counts, text):
    hostile_counts["Vocabulary.from_json"] += 1
    with within(5):
        try:
            vocab = Vocabulary.from_json(text)
        except VocabularyError as err:
            assert str(err)
            return
    assert len(vocab) == len(set(vocab.symbols))


# ----------------------------------------------------------------------------------------------- model configs
SIZES = st.one_of(st.integers(-3, 40), st.integers(10**6, 10**15))
ANY_VALUE = st.one_of(SIZES, st.floats(), st.text(max_size=6), st.none(), st.booleans(),
                      st.lists(SIZES, max_size=3), st.dictionaries(st.text(max_size=5), st.integers(-1, 3), max_size=2))
CONFIG_KEYS = ["cell", "hidden_sizes", "cell_options", "embedding_size", "tie_weights", "dropout_embedding",
               "dropout_input", "dropout_hidden", "dropout_output", "variational", "unknown_field"]
CELLS = st.sampled_from(["delta-rnn", "lstm", "scrn", "ran-simple", "sr-lstm", "irlm", "no-such-cell"])


@st.composite
def well_typed_configs(draw):
    """Configs whose fields have the documented types, with hostile values (sizes up to 10**15,
    probabilities outside [0, 1), unknown cells, options the cell does not take)."""
    config = {"vocab_size": draw(SIZES), "cell": draw(CELLS)}
    if draw(st.booleans()):
        config["hidden_sizes"] = draw(st.lists(SIZES, min_size=0, max_size=3))
    if draw(st.booleans()):
        config["embedding_size"] = draw(st.none() | SIZES)
    if draw(st.booleans()):
        config["tie_weights"] = draw(st.booleans())
    for name in ("dropout_input", "dropout_hidden", "dropout_output", "dropout_embedding"):
        if draw(st.booleans()):
            config[name] = draw(st.floats(-1, 2) | st.sampled_from([math.nan, math.inf]))
    if draw(st.booleans()):
        config["variational"] = draw(st.booleans())
    if draw(st.booleans()):
        config["cell_options"] = draw(st.dictionaries(st.sampled_from(["dropout", "inner", "gate", "context_size", "bogus"]),
                                                      st.one_of(st.floats(-1, 2), st.integers(-2, 10**9), st.text(max_size=5)), max_size=2))
    return config


@pytest.fixture
def small_limit(monkeypatch):
    """Models above 50M parameters are refused, so that no accepted hostile config allocates much."""
    monkeypatch.setenv("DSF_MAX_PARAMETERS", str(50_000_000))


def build(config: dict):
    with within(10):
        before = peak_rss_mb()
        try:
            model = RecurrentLM(LMConfig.from_dict(config))
        except (ModelConfigError, CellOptionError, UnknownCellError) as err:
            assert str(err)
            return None
        finally:
            assert peak_rss_mb() - before < 1000, "a refused configuration must not allocate"
    return model


@examples(300)
@given(config=well_typed_configs())
def test_model_config_with_hostile_values(hostile_counts, small_limit, config):
    hostile_counts["LMConfig.from_dict + RecurrentLM (typed, hostile values)"] += 1
    model = build(config)
    if model is not None:
        assert sum(p.numel() for p in model.parameters()) == model.config.num_parameters()


@examples(200)
@given(config=st.dictionaries(st.sampled_from(["vocab_size", *CONFIG_KEYS]), ANY_VALUE | CELLS, max_size=8))
def test_model_config_with_any_types(hostile_counts, small_limit, config):
    hostile_counts["LMConfig.from_dict + RecurrentLM (any types)"] += 1
    build(config)


@pytest.mark.parametrize(
    "config",
    [{}, {"vocab_size": 13, "hidden_sizes": None}, {"vocab_size": 13, "cell_options": 5},
     {"vocab_size": 13, "cell": "delta-rnn", "cell_options": {"context_size": 4}}],
    ids=["no-vocab-size", "hidden-sizes-null", "cell-options-int", "option-of-another-cell"],
)
def test_model_config_type_reproducers(config):
    with pytest.raises(ModelConfigError):
        RecurrentLM(LMConfig.from_dict(config))


@pytest.mark.parametrize(
    "config",
    [
        {"vocab_size": 13, "hidden_sizes": [10**12]},
        {"vocab_size": 10**12, "hidden_sizes": [8]},
        {"vocab_size": 13, "hidden_sizes": [8], "embedding_size": 10**12},
        {"vocab_size": 10000, "hidden_sizes": [100_000]},  # 22 billion parameters: overflows nothing, fits nowhere
        {"vocab_size": 13, "hidden_sizes": [8] * 2000 + [10**9]},
        {"vocab_size": 10**9, "hidden_sizes": [10**5], "cell": "lstm"},
    ],
    ids=["hidden-1e12", "vocab-1e12", "embedding-1e12", "22e9-params", "2001-layers-last-1e9", "lstm-1e9-vocab"],
)
def test_absurd_sizes_fail_fast_before_allocating(config, hostile_counts):
    import time

    hostile_counts["absurd model sizes"] += 1
    start, before = time.perf_counter(), peak_rss_mb()
    with within(20), pytest.raises(ModelConfigError) as info:
        RecurrentLM(LMConfig.from_dict(config))
    assert time.perf_counter() - start < 15 and peak_rss_mb() - before < 500
    message = str(info.value)
    assert "parameters" in message or "overflow" in message
    assert "hidden_sizes" in message


def test_absurd_sizes_through_the_training_module_and_the_cli(tmp_path, monkeypatch, text_folder, capsys):
    from dsf_lightning.cli import main
    from dsf_lightning.training import LanguageModelModule

    with within(20), pytest.raises(ModelConfigError, match="parameters"):
        LanguageModelModule(vocab_size=10000, hidden_sizes=[100_000])
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    with within(60):  # the CLI prints one line naming the sizes and exits 2, no traceback
        code = main(["fit", "--data.corpus", "text-folder", "--data.data_root", str(text_folder),
                     "--model.hidden_sizes", "[1000000000000]", "--trainer.logger", "false"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert re.search("overflow|parameters", err) and "hidden_sizes" in err and "Traceback" not in err, err


def test_the_size_limit_can_be_set(monkeypatch):
    config = LMConfig(vocab_size=13, hidden_sizes=[8])
    n = config.num_parameters()
    monkeypatch.setenv("DSF_MAX_PARAMETERS", str(n - 1))
    with pytest.raises(ModelConfigError, match=f"{n:,} parameters.*DSF_MAX_PARAMETERS"):
        RecurrentLM(config)
    monkeypatch.setenv("DSF_MAX_PARAMETERS", str(n))
    assert sum(p.numel() for p in RecurrentLM(config).parameters()) == n
    monkeypatch.setenv("DSF_MAX_PARAMETERS", "lots")
    with pytest.raises(ModelConfigError, match="DSF_MAX_PARAMETERS='lots'"):
        RecurrentLM(config)


# ----------------------------------------------------------------------------------------------- recipes via the CLI
RECIPE_KEYS = {
    "data": ["corpus", "data_root", "corpus_options", "batch_size", "bptt", "eval_batch_size", "no_such_key"],
    "model": ["cell", "hidden_sizes", "cell_options", "embedding_size", "dropout_input", "dropout_hidden", "lr",
              "optimizer", "param_group_lr", "sampled_loss", "nce_log_z", "no_such_key"],
    "trainer": ["max_epochs", "max_steps", "precision", "gradient_clip_val", "devices", "callbacks", "no_such_key"],
    "no_such_section": ["x"],
}
RECIPE_VALUES = st.one_of(
    st.integers(-2, 3), st.integers(10**9, 10**13), st.floats(allow_nan=True), st.text(string.printable, max_size=8),
    st.none(), st.booleans(), st.lists(st.integers(-1, 4), max_size=3),
    st.dictionaries(st.text(string.ascii_lowercase, min_size=1, max_size=5), st.integers(0, 3) | st.text(max_size=3), max_size=2),
    st.sampled_from(["text-folder", "ptb", "no-such-corpus", "lstm", "delta-rnn", "adam", "bf16-mixed", "[8]"]),
)


@st.composite
def recipes(draw, folder):
    if draw(st.integers(0, 5)) == 0:  # not YAML at all, or not a mapping
        return draw(st.one_of(st.text(max_size=80), st.sampled_from(["data: [", "{{{", "- a\n- b", "model: !!python/name:os.system", "\t:"])))
    recipe = {
        "data": {"corpus": "text-folder", "data_root": str(folder), "batch_size": 2, "eval_batch_size": 2, "bptt": 5},
        "model": {"hidden_sizes": [8], "embedding_size": 8},
        "trainer": {"logger": False, "max_epochs": 1},
    }
    for _ in range(draw(st.integers(1, 3))):
        section = draw(st.sampled_from(sorted(RECIPE_KEYS)))
        key = draw(st.sampled_from(RECIPE_KEYS[section]))
        recipe.setdefault(section, {})
        if isinstance(recipe[section], dict):
            recipe[section][key] = draw(RECIPE_VALUES)
    import yaml

    return yaml.safe_dump(recipe)


# what a recipe may end in besides success: the library's documented errors
RECIPE_ERRORS = (ModelConfigError, CellOptionError, UnknownCellError, VocabularyError, TokenizerError, ScoringError)


def _recipe_errors():
    from dsf_lightning.data.corpora import CorpusError
    from dsf_lightning.data.streams import StreamLayoutError
    from dsf_lightning.training.guards import UnsafeRecipeError

    return (*RECIPE_ERRORS, CorpusError, StreamLayoutError, UnsafeRecipeError)


@examples(80)
@given(data=st.data())
def test_recipes_with_broken_yaml_wrong_types_and_unknown_keys(text_folder, tmp_path, monkeypatch, capsys, hostile_counts, data):
    from dsf_lightning.cli import lightning_cli

    monkeypatch.chdir(tmp_path)
    text = data.draw(recipes(text_folder))
    path = tmp_path / "recipe.yaml"
    path.write_text(text, encoding="utf-8")
    hostile_counts["dsf fit recipe (broken YAML / wrong types / unknown keys)"] += 1
    with within(60):
        try:
            lightning_cli(["--config", str(path)], run=False)
        except SystemExit as exit_:
            assert exit_.code == 2
            assert "error:" in capsys.readouterr().err
        except (*_recipe_errors(), ValueError) as err:
            assert str(err)
        except (TypeError, AttributeError) as err:
            if "/lightning/" in raised_in(err) and str(err):  # the Trainer's own argument checks
                hostile_counts["recipe refused by Lightning's Trainer argument checks"] += 1
                return
            raise


def test_a_recipe_with_a_number_as_corpus_is_a_clear_error(text_folder, tmp_path, monkeypatch):
    from dsf_lightning.cli import lightning_cli
    from dsf_lightning.data.corpora import CorpusError

    monkeypatch.chdir(tmp_path)
    with pytest.raises((ValueError, CorpusError, SystemExit)):
        lightning_cli(["--data.corpus", "0", "--data.data_root", str(text_folder), "--trainer.logger", "false"], run=False)


def test_absurd_device_counts_are_refused_before_lightning_lists_them(text_folder, tmp_path, monkeypatch):
    from dsf_lightning.cli import lightning_cli

    monkeypatch.chdir(tmp_path)
    before = peak_rss_mb()
    with within(30), pytest.raises(ValueError, match=r"trainer.devices=23,998,401,767 is not a plausible count"):
        lightning_cli(["--data.corpus", "text-folder", "--data.data_root", str(text_folder),
                       "--trainer.devices", "23998401767", "--trainer.logger", "false"], run=False)
    assert peak_rss_mb() - before < 300
