"""Issue 13 item 6: loading a pretrained folder stays bounded and says which file is at fault.

Forged folders (checksums in config.json rehashed, as a forger would): a sparse multi-hundred-MB
``model.safetensors`` must be refused from its size before it is read; JSON nested 100k deep or holding
a 5000-digit number gives a clear error naming the file (and the key), never a RecursionError traceback;
a ``tokenizer.json`` (or ``vocab.json``) swapped for another one is refused because config.json records
which tokenizer and vocabulary the model was trained with. Folders written before those records existed
(the bundled model) still load, and what can be inferred is checked.
"""

from __future__ import annotations

import hashlib
import json
import tracemalloc

import pytest

from dsf_lightning.data.tokenizers import SubwordTokenizer, get_tokenizer
from dsf_lightning.data.vocab import Vocabulary
from dsf_lightning.hub import PretrainedFormatError
from dsf_lightning.model.pretrained import load_pretrained, save_pretrained

from .conftest import edit_config, rehash, tiny_pretrained

DEEP = 100_000


def _peak_allocation(fn) -> tuple[BaseException | None, int]:
    tracemalloc.start()
    try:
        fn()
        err = None
    except BaseException as exc:  # noqa: BLE001 - returned to the test
        err = exc
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return err, peak


# ------------------------------------------------------------------------------ weights size
@pytest.mark.parametrize("recorded", ["honest", "stale"])
def test_a_sparse_huge_weights_file_is_refused_before_it_is_read(folder, recorded):
    big = 768 * 2**20
    with open(folder / "model.safetensors", "r+b") as f:
        f.truncate(big)  # sparse: costs no disk, but reading it whole allocates 768 MB
    if recorded == "honest":  # the forger records the size (and any sha256: checking it would read the file)
        edit_config(folder, lambda c: c["files"]["model.safetensors"].update(size=big, sha256="0" * 64))
    err, peak = _peak_allocation(lambda: load_pretrained(folder))
    assert isinstance(err, PretrainedFormatError), err
    assert "model.safetensors" in str(err) and f"{big:,}" in str(err)
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB allocated to refuse it"
    if recorded == "honest":
        assert "config.json" in str(err) and "at most" in str(err)


def test_weights_size_bound_holds_for_real_folders(tmp_path):
    """float32 and float16, tied and untied, several cells: the bound never refuses an honest folder."""
    for i, (cell, tie, dtype) in enumerate([("delta-rnn", True, "float32"), ("lstm", False, "float16"),
                                            ("scrn", False, "float32"), ("ran", True, "float16")]):
        folder = save_pretrained(tiny_pretrained(cell, tie=tie), tmp_path / f"m{i}", dtype=dtype)
        load_pretrained(folder)


# ------------------------------------------------------------------------------ hostile JSON
def _deep(n: int) -> str:
    return "[" * n + "]" * n


@pytest.mark.parametrize("name", ["config.json", "vocab.json", "dsf_tokenizer.json"])
def test_json_nested_100k_deep_is_a_clear_error_naming_the_file(folder, name):
    (folder / name).write_text(_deep(DEEP) if name == "config.json" else '{"format": ' + _deep(DEEP) + "}")
    if name != "config.json":
        rehash(folder)
    with pytest.raises(PretrainedFormatError, match=rf"{name}: .*nested") as info:
        load_pretrained(folder)
    assert "Recursion" not in str(info.value)


def test_nested_safetensors_metadata_is_a_clear_error(folder):
    from dsf_lightning.hub import _safetensors

    data = (folder / "model.safetensors").read_bytes()
    tensors, meta = _safetensors.parse(data)
    meta["aliases"] = _deep(DEEP)
    (folder / "model.safetensors").write_bytes(_safetensors.serialize(tensors, meta))
    rehash(folder)
    with pytest.raises(PretrainedFormatError, match=r"model.safetensors: .*nested"):
        load_pretrained(folder)


def test_a_5000_digit_vocab_size_names_the_file_and_the_key(folder):
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text.replace('"vocab_size": 13', '"vocab_size": ' + "9" * 5000, 1))
    with pytest.raises(PretrainedFormatError, match=r"config.json: .*model\.vocab_size.*5,000-digit"):
        load_pretrained(folder)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "1e400", "-5", "13.0", "true"])
def test_non_integer_vocab_sizes_name_the_file_and_the_key(folder, value):
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text.replace('"vocab_size": 13', f'"vocab_size": {value}', 1))
    with pytest.raises(PretrainedFormatError, match=r"config.json: .*vocab_size"):
        load_pretrained(folder)


# ------------------------------------------------------------------------------ tokenizer identity
def _swap_tokenizer(folder, tokenizer) -> None:
    (folder / "dsf_tokenizer.json").write_text(tokenizer.to_json())
    rehash(folder)


@pytest.mark.parametrize("other", ["char", "subword", "word-lowercase"])
def test_a_swapped_tokenizer_is_refused(folder, other):
    tok = {"char": get_tokenizer("char"), "subword": SubwordTokenizer(min_count=1).fit(["w1 w2 w3"]),
           "word-lowercase": get_tokenizer("word", lowercase=True)}[other]
    _swap_tokenizer(folder, tok)
    with pytest.raises(PretrainedFormatError, match=r"tokenizer.json: .*trained with"):
        load_pretrained(folder)


def test_a_swapped_vocabulary_of_the_same_size_is_refused(folder):
    vocab = Vocabulary.from_json((folder / "vocab.json").read_text())
    symbols = list(vocab.symbols)
    symbols[1], symbols[2] = symbols[2], symbols[1]  # same symbols, other ids: garbage scores
    (folder / "vocab.json").write_text(Vocabulary(symbols, eos=vocab.eos, unk=vocab.unk).to_json())
    rehash(folder)
    with pytest.raises(PretrainedFormatError, match=r"vocab.json: .*trained with"):
        load_pretrained(folder)


def test_config_records_the_tokenizer_and_vocabulary(folder, pretrained):
    config = json.loads((folder / "config.json").read_text())
    assert config["tokenizer"]["name"] == "word"
    assert config["vocabulary"]["size"] == len(pretrained.vocab)
    assert len(config["tokenizer"]["fingerprint"]) == 64 == len(config["vocabulary"]["fingerprint"])


def _make_legacy(folder) -> None:
    edit_config(folder, lambda c: (c.pop("tokenizer", None), c.pop("vocabulary", None)))


def test_a_legacy_folder_without_the_records_still_loads(folder, tokens):
    _make_legacy(folder)
    assert load_pretrained(folder).tokenizer.name == "word"


def test_a_legacy_folder_with_a_swapped_tokenizer_is_refused_by_what_can_be_inferred(folder, tmp_path):
    _make_legacy(folder)
    _swap_tokenizer(folder, get_tokenizer("char"))  # a word vocabulary a char tokenizer can never produce
    with pytest.raises(PretrainedFormatError, match=r"tokenizer.json: .*'char'.*vocab.json"):
        load_pretrained(folder)
    # info["tokenizer"] (written by the export since the first version) names the kind
    char_model = save_pretrained(tiny_pretrained(tokenizer="char"), tmp_path / "char")
    edit_config(char_model, lambda c: c["info"].update(tokenizer="char"))
    _make_legacy(char_model)
    load_pretrained(char_model)
    _swap_tokenizer(char_model, get_tokenizer("word"))
    with pytest.raises(PretrainedFormatError, match=r"tokenizer.json: .*'word'.*info.tokenizer.*'char'"):
        load_pretrained(char_model)


def test_every_record_mismatch_is_named_even_when_checksums_are_rehashed(folder):
    edit_config(folder, lambda c: c["tokenizer"].update(fingerprint=hashlib.sha256(b"x").hexdigest()))
    with pytest.raises(PretrainedFormatError, match=r"tokenizer.json"):
        load_pretrained(folder)
