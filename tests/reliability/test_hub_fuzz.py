"""Property-based fuzzing of the strict hub loader (tests/hub/test_strict_loading.py has the named cases):
forged safetensors header bytes, header lengths and header JSON, truncations, and invalid config.json
documents. With the checksums recomputed (as a forger would), every case either loads the very same
weights or raises PretrainedFormatError naming the file; never another exception, a hang, or an
allocation the file does not justify."""

from __future__ import annotations

import json
import shutil
import struct

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dsf_lightning.hub import PretrainedFormatError
from dsf_lightning.model.pretrained import load_pretrained, save_pretrained
from tests.hub.conftest import rehash

from .conftest import peak_rss_mb, tiny_pretrained, within

PROFILE = settings.get_profile("reliability")
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    folder = save_pretrained(tiny_pretrained("word"), tmp_path_factory.mktemp("hub") / "model")
    weights = {k: v.clone() for k, v in load_pretrained(folder).model.state_dict().items()}
    return folder, weights


@pytest.fixture
def fresh(template, tmp_path_factory):
    """A function that gives a fresh copy of the template folder (hypothesis calls it once per example)."""

    def make():
        target = tmp_path_factory.mktemp("case") / "model"
        shutil.copytree(template[0], target)
        return target

    return make


def header_parts(data: bytes) -> tuple[int, bytes, bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return n, data[8 : 8 + n], data[8 + n :]


def outcome(folder, original_weights, counts, name):
    counts[name] += 1
    before = peak_rss_mb()
    with within(10):
        try:
            loaded = load_pretrained(folder)
        except PretrainedFormatError as err:
            message = str(err)
            assert "Traceback" not in message
            # the file is named, with its folder
            assert str(folder) in message, message
            assert any(name in message for name in ("config.json", "model.safetensors", "vocab.json", "tokenizer.json")), message
            return "refused"
    assert peak_rss_mb() - before < 300
    for key, value in original_weights.items():  # a forgery that loads must load the very same weights
        assert torch.equal(loaded.model.state_dict()[key], value), key
    return "loaded"


@settings(PROFILE, max_examples=150)
@given(edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=6))
def test_flipped_bytes_in_the_safetensors_header(fresh, template, hostile_counts, edits):
    folder = fresh()
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    n, _, _ = header_parts(bytes(data))
    for position, value in edits:
        data[position % (8 + n)] = value  # anywhere in the length field or the JSON header
    path.write_bytes(bytes(data))
    rehash(folder)
    outcome(folder, template[1], hostile_counts, "load_pretrained (flipped safetensors header bytes)")


@settings(PROFILE, max_examples=100)
@given(length=st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 4096), st.sampled_from([0, 1, 7, 8, 2**63, 2**64 - 1, 100 * 2**20 + 1])))
def test_forged_header_length(fresh, template, hostile_counts, length):
    folder = fresh()
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(struct.pack("<Q", length) + data[8:])
    rehash(folder)
    outcome(folder, template[1], hostile_counts, "load_pretrained (forged header length)")


TENSOR_ENTRY = st.fixed_dictionaries(
    {"dtype": st.sampled_from(["F32", "F16", "I64", "BOOL", "F8_E4M3", "X99"]) | JSON,
     "shape": st.lists(st.integers(-2, 2**40), max_size=3) | JSON,
     "data_offsets": st.lists(st.integers(-5, 2**62), min_size=0, max_size=3) | JSON},
)


@st.composite
def forged_headers(draw, names):
    header = {}
    for name in draw(st.lists(st.sampled_from(names) | st.text(max_size=8), max_size=5, unique=True)):
        header[name] = draw(TENSOR_ENTRY | JSON)
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.dictionaries(st.text(max_size=6), st.text(max_size=6) | JSON, max_size=3) | JSON)
    return header


@settings(PROFILE, max_examples=150)
@given(data=st.data())
def test_forged_header_json(fresh, template, hostile_counts, data):
    folder = fresh()
    path = folder / "model.safetensors"
    n, header, body = header_parts(path.read_bytes())
    names = sorted(k for k in json.loads(header) if k != "__metadata__")
    forged = data.draw(forged_headers(names))
    text = json.dumps(forged).encode()
    text += b" " * (-len(text) % 8)
    keep = data.draw(st.sampled_from(["all", "none", "some"]))
    tail = body if keep == "all" else b"" if keep == "none" else body[: data.draw(st.integers(0, len(body)))]
    path.write_bytes(struct.pack("<Q", len(text)) + text + tail)
    rehash(folder)
    outcome(folder, template[1], hostile_counts, "load_pretrained (forged safetensors header JSON)")


@settings(PROFILE, max_examples=80)
@given(cut=st.integers(0, 10**6), junk=st.binary(max_size=16))
def test_truncated_or_extended_weights(fresh, template, hostile_counts, cut, junk):
    folder = fresh()
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: cut % len(data)] + junk)
    rehash(folder)
    outcome(folder, template[1], hostile_counts, "load_pretrained (truncated / extended weights)")


CONFIG_FIELDS = ["format", "format_version", "library_version", "model", "info", "weights", "files", "extra"]
MODEL_FIELDS = ["vocab_size", "cell", "hidden_sizes", "cell_options", "embedding_size", "tie_weights",
                "dropout_input", "dropout_hidden", "variational", "nope"]


@st.composite
def broken_configs(draw, original):
    kind = draw(st.sampled_from(["text", "json", "field", "model-field", "model-field"]))
    if kind == "text":
        return draw(st.binary(max_size=200))
    if kind == "json":
        return json.dumps(draw(JSON)).encode()
    config = json.loads(original)
    if kind == "field":
        config[draw(st.sampled_from(CONFIG_FIELDS))] = draw(JSON)
    else:
        value = draw(JSON | st.integers(10**6, 10**13) | st.lists(st.integers(10**6, 10**13), max_size=2))
        config["model"][draw(st.sampled_from(MODEL_FIELDS))] = value
    return json.dumps(config).encode()


@settings(PROFILE, max_examples=150)
@given(data=st.data())
def test_invalid_config_json(fresh, template, hostile_counts, data):
    folder = fresh()
    path = folder / "config.json"
    path.write_bytes(data.draw(broken_configs(path.read_text())))
    outcome(folder, template[1], hostile_counts, "load_pretrained (invalid config.json)")


def _edit(folder, change):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))


def test_unknown_cell_in_config_json_is_a_format_error(fresh):
    folder = fresh()
    _edit(folder, lambda c: c["model"].update(cell="no-such-cell"))
    with pytest.raises(PretrainedFormatError) as info:
        load_pretrained(folder)
    message = str(info.value)
    assert str(folder / "config.json") in message and "'no-such-cell'" in message and "delta-rnn" in message, message


def test_a_list_as_dtype_in_the_safetensors_header_is_a_format_error(fresh):
    folder = fresh()
    path = folder / "model.safetensors"
    n, header, body = header_parts(path.read_bytes())
    forged = json.loads(header)
    name = next(k for k in forged if k != "__metadata__")
    forged[name]["dtype"] = []
    text = json.dumps(forged).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + body)
    rehash(folder)
    with pytest.raises(PretrainedFormatError, match=r"model\.safetensors.*dtype must be a string"):
        load_pretrained(folder)


def test_absurd_sizes_in_config_json_are_refused_before_allocating(fresh, hostile_counts):
    folder = fresh()
    _edit(folder, lambda c: c["model"].update(hidden_sizes=[10**6], tie_weights=False))  # 10^12 parameters
    before = peak_rss_mb()
    # refused by the first check that sees it: the size matches no dimension of the weights file (issue 38)
    with within(20), pytest.raises(PretrainedFormatError, match=r"hidden_sizes\[0\]=1,000,000 but no tensor"):
        load_pretrained(folder)
    assert peak_rss_mb() - before < 300
    hostile_counts["load_pretrained (absurd sizes in config.json)"] += 1
