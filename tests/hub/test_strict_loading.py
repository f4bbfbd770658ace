"""load_pretrained refuses every broken folder with a PretrainedFormatError naming the file; it never
returns random weights and never unpickles anything."""

import json
import pickle
import struct

import pytest
import torch

from dsf_lightning.hub import PretrainedFormatError
from dsf_lightning.hub._safetensors import serialize
from dsf_lightning.model.pretrained import load_pretrained

from .conftest import Boom, boom_bytes, edit_config, rehash


def _tensors_and_meta(folder):
    from safetensors import safe_open

    with safe_open(folder / "model.safetensors", "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def _rewrite_weights(folder, change):
    tensors, meta = _tensors_and_meta(folder)
    change(tensors)
    (folder / "model.safetensors").write_bytes(serialize(tensors, meta))
    rehash(folder)


def _refused(folder, *fragments):
    with pytest.raises(PretrainedFormatError) as info:
        load_pretrained(folder)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "Traceback" not in message
    return message


def test_the_error_is_a_value_error():
    assert issubclass(PretrainedFormatError, ValueError)


def test_missing_folder(tmp_path):
    _refused(tmp_path / "nope", "nope", "no such folder")


def test_folder_without_weights(folder):
    (folder / "model.safetensors").unlink()
    _refused(folder, "model.safetensors", "missing file")


@pytest.mark.parametrize("name", ["config.json", "vocab.json", "dsf_tokenizer.json", "tokenizer.json"])
def test_folder_without_another_file(folder, name):
    (folder / name).unlink()
    _refused(folder, name, "missing file")


def test_empty_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    _refused(tmp_path / "empty", "config.json", "missing file")


def test_truncated_safetensors_is_caught_by_the_recorded_size(folder):
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    _refused(folder, "model.safetensors", "truncated")


def test_truncated_safetensors_is_caught_structurally_even_with_forged_checksums(folder):
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    rehash(folder)
    _refused(folder, "model.safetensors", "outside", "data section")
    path.write_bytes(data[:5])
    rehash(folder)
    _refused(folder, "model.safetensors", "truncated")


def test_a_flipped_byte_is_caught_by_the_checksum(folder):
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    _refused(folder, "model.safetensors", "sha256", "corrupted")


def test_forged_header_length(folder):
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(struct.pack("<Q", 2**60) + data[8:])
    rehash(folder)
    _refused(folder, "model.safetensors", "header length")
    path.write_bytes(struct.pack("<Q", len(data)) + data[8:])  # just past the end of the file
    rehash(folder)
    _refused(folder, "model.safetensors", "header length")


def test_forged_header_that_is_not_json(folder):
    path = folder / "model.safetensors"
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    path.write_bytes(data[:8] + b"{" + b"\xff" * (n - 1) + data[8 + n :])
    rehash(folder)
    _refused(folder, "model.safetensors", "not valid UTF-8 JSON")
    path.write_bytes(data[:8] + b"[" + b" " * (n - 2) + b"]" + data[8 + n :])
    rehash(folder)
    _refused(folder, "model.safetensors", "not an object")


def test_forged_offsets_that_overlap(folder):
    path = folder / "model.safetensors"
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    assert header["layers.0.W"]["shape"] == header["layers.0.V"]["shape"]
    header["layers.0.W"]["data_offsets"] = header["layers.0.V"]["data_offsets"]  # two tensors on the same bytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n :])
    rehash(folder)
    _refused(folder, "model.safetensors", "overlaps")


def test_extra_tensor(folder):
    _rewrite_weights(folder, lambda t: t.update(extra=torch.zeros(3)))
    _refused(folder, "model.safetensors", "unexpected tensor(s) ['extra']", "config.json")


def test_missing_tensor(folder):
    _rewrite_weights(folder, lambda t: t.pop("layers.0.W"))
    _refused(folder, "model.safetensors", "missing tensor(s) ['layers.0.W']")


def test_renamed_tensor_never_leaves_random_weights(folder):
    _rewrite_weights(folder, lambda t: t.update({"layers.0.W_renamed": t.pop("layers.0.W")}))
    _refused(folder, "model.safetensors", "missing tensor(s) ['layers.0.W']", "unexpected tensor(s) ['layers.0.W_renamed']")


def test_shape_mismatch_between_config_and_weights(folder):
    edit_config(folder, lambda c: c["model"].update(hidden_sizes=[9], embedding_size=9))  # tied: E == H
    _refused(folder, "model.safetensors", "shape", "hidden_sizes=[9]", "do not belong together")


def test_wrong_dtype_and_non_finite_weights(folder):
    _rewrite_weights(folder, lambda t: t.update({"layers.0.W": t["layers.0.W"].to(torch.int32)}))
    _refused(folder, "layers.0.W", "int32")


def test_nan_weights(folder):
    def poison(t):
        t["layers.0.W"][0, 0] = float("nan")

    _rewrite_weights(folder, poison)
    _refused(folder, "model.safetensors", "NaN")


def test_unknown_format_version(folder):
    edit_config(folder, lambda c: c.update(format_version=99))
    message = _refused(folder, "config.json", "format_version 99", "upgrade")
    assert "pip install -U dsf-lightning" in message


def test_not_a_dsf_lightning_config(folder):
    edit_config(folder, lambda c: c.update(format="transformers"))
    _refused(folder, "config.json", "not a dsf-lightning model folder")


def test_config_that_is_not_json(folder):
    (folder / "config.json").write_text('{"format": "dsf-lightning", ')
    _refused(folder, "config.json", "not valid JSON", "line 1")


def test_config_with_a_bad_model_section(folder):
    edit_config(folder, lambda c: c["model"].update(hidden_size=3))
    _refused(folder, "config.json", "unknown model config field", "hidden_size")


def test_vocab_that_does_not_match_the_config(folder):
    edit_config(folder, lambda c: c["model"].update(vocab_size=12))
    _refused(folder, "vocab.json", "13 symbols", "vocab_size=12")


def test_tie_recorded_in_weights_must_match_config(folder):
    edit_config(folder, lambda c: c["model"].update(tie_weights=False))
    _refused(folder, "model.safetensors", "tie_weights=False")


def test_vocab_json_that_is_not_a_vocabulary(folder):
    (folder / "vocab.json").write_text('{"hello": 1}')
    rehash(folder)
    _refused(folder, "vocab.json", "not a valid vocabulary")


def test_a_pickle_renamed_model_safetensors_is_refused_and_never_unpickled(folder, tmp_path):
    proof, marker = tmp_path / "proof", tmp_path / "marker"
    pickle.loads(boom_bytes(proof))  # the payload is live: unpickling it creates its marker file
    assert proof.exists()
    payload = boom_bytes(marker)
    (folder / "model.safetensors").write_bytes(payload)
    _refused(folder, "model.safetensors", "config.json records")  # the recorded size catches the swap first...
    rehash(folder)
    _refused(folder, "model.safetensors", "pickle", "never unpickles")  # ...and so does the format check
    assert not marker.exists()


def test_a_torch_save_zip_renamed_model_safetensors_is_refused(folder, tmp_path):
    marker = tmp_path / "marker"
    torch.save({"state_dict": Boom(marker)}, folder / "model.safetensors")
    rehash(folder)
    _refused(folder, "model.safetensors", "zip archive", "never unpickles")
    assert not marker.exists()


def test_a_pickle_as_config_json_is_refused(folder, tmp_path):
    marker = tmp_path / "marker"
    (folder / "config.json").write_bytes(boom_bytes(marker))
    _refused(folder, "config.json", "pickle")
    assert not marker.exists()
