"""save_pretrained -> load_pretrained: exact round trips, float16 storage, tied weights stored once."""

import json

import pytest
import torch
from safetensors import safe_open

from dsf_lightning.cells import list_cells
from dsf_lightning.hub import FORMAT, FORMAT_VERSION
from dsf_lightning.model import LMConfig, RecurrentLM, count_parameters
from dsf_lightning.model.pretrained import Pretrained, load_pretrained, save_pretrained, weights_for_saving

from .conftest import logits_of, tiny_pretrained


def _cell_options(cell):
    return {"hidden_sizes": [6], "embedding_size": 6} if cell == "ran-simple" else {}


@pytest.mark.parametrize("cell", list_cells())
def test_float32_round_trip_is_bit_identical_for_every_cell(tmp_path, tokens, cell):
    original = tiny_pretrained(cell, tie=False, **_cell_options(cell))
    loaded = load_pretrained(save_pretrained(original, tmp_path / cell))
    assert torch.equal(logits_of(original.model, tokens), logits_of(loaded.model, tokens))
    for (name, a), (name_b, b) in zip(original.model.state_dict().items(), loaded.model.state_dict().items()):
        assert name == name_b and torch.equal(a, b) and a.dtype == b.dtype
    assert loaded.config == original.config
    assert loaded.vocab == original.vocab
    assert loaded.tokenizer.to_dict() == original.tokenizer.to_dict()
    assert loaded.info == original.info
    assert not loaded.model.training


def test_folder_layout_and_config(folder, pretrained):
    assert sorted(p.name for p in folder.iterdir()) == [
        "README.md", "config.json", "dsf_tokenizer.json", "model.safetensors", "tokenizer.json", "vocab.json"]
    config = json.loads((folder / "config.json").read_text())
    assert config["format"] == FORMAT == "dsf-lightning" and config["format_version"] == FORMAT_VERSION == 2
    assert config["model"] == pretrained.config.to_dict()
    assert config["info"] == pretrained.info
    assert set(config["files"]) == {"model.safetensors", "vocab.json", "dsf_tokenizer.json", "tokenizer.json"}
    import dsf_lightning

    assert config["library_version"] == dsf_lightning.__version__


def test_float16_storage_halves_the_weights_and_loads_back_as_float32(tmp_path, tokens, pretrained):
    f32 = save_pretrained(pretrained, tmp_path / "f32")
    f16 = save_pretrained(pretrained, tmp_path / "f16", dtype="float16")
    loaded = load_pretrained(f16)
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())
    expected, got = logits_of(pretrained.model, tokens), logits_of(loaded.model, tokens)
    assert not torch.equal(expected, got)  # it really was rounded...
    torch.testing.assert_close(got, expected, rtol=1e-2, atol=2e-3)  # ...within fp16 tolerance
    with safe_open(f16 / "model.safetensors", "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F16"}
        assert f.metadata()["dtype"] == "float16"
    n = count_parameters(pretrained.model)
    s32, s16 = (f32 / "model.safetensors").stat().st_size, (f16 / "model.safetensors").stat().st_size
    assert s32 - 4 * n == pytest.approx(s16 - 2 * n, abs=64) and s32 - 4 * n < 2048  # only the header differs


def test_tied_weights_are_stored_once_and_the_tie_survives(tmp_path, tokens, pretrained):
    assert pretrained.config.tie_weights
    folder = save_pretrained(pretrained, tmp_path / "tied")
    with safe_open(folder / "model.safetensors", "pt") as f:
        keys, meta = set(f.keys()), f.metadata()
    assert "embedding.weight" in keys and not any(k.startswith("decoder.") for k in keys)
    assert json.loads(meta["tied_weights"]) == {"decoder.weight": "embedding.weight"}
    loaded = load_pretrained(folder).model
    with torch.no_grad():  # the decoder still *is* the embedding: change one, the logits follow
        before = logits_of(loaded, tokens)
        loaded.embedding.weight[3] += 1.0
    after = logits_of(loaded, tokens)
    assert not torch.equal(before[..., 3], after[..., 3])


def test_shared_tensors_in_a_state_dict_are_stored_once():
    model = tiny_pretrained(tie=False).model
    model.register_buffer("alias_of_embedding", model.embedding.weight, persistent=True)
    tensors, meta = weights_for_saving(model)
    assert "alias_of_embedding" not in tensors
    assert json.loads(meta["aliases"]) == {"alias_of_embedding": "embedding.weight"}


def test_size_of_a_5_66m_parameter_model_folder(tmp_path):
    """The pytorch/examples-sized model: 10k words, one 512-unit Delta-RNN layer, tied 512 embedding."""
    torch.manual_seed(0)
    model = RecurrentLM(LMConfig(vocab_size=10000, hidden_sizes=[512], embedding_size=512, tie_weights=True))
    n = count_parameters(model)
    assert n == 5_656_848
    from dsf_lightning.data.tokenizers import get_tokenizer
    from dsf_lightning.data.vocab import Vocabulary

    vocab = Vocabulary(["<eos>", "<unk>"] + [f"w{i}" for i in range(9998)], unk="<unk>")
    pretrained = Pretrained(model, vocab, get_tokenizer("word"), {"corpus": "ptb"})
    sizes = {}
    for dtype in ("float32", "float16"):
        folder = save_pretrained(pretrained, tmp_path / dtype, dtype=dtype)
        sizes[dtype] = {p.name: p.stat().st_size for p in folder.iterdir()}
    assert 4 * n < sizes["float32"]["model.safetensors"] < 4 * n + 2048  # embedding stored once
    assert 2 * n < sizes["float16"]["model.safetensors"] < 2 * n + 2048
    total32, total16 = sum(sizes["float32"].values()), sum(sizes["float16"].values())
    print(f"\n5.66M-parameter folder: float32 {total32:,} B ({sizes['float32']}), float16 {total16:,} B ({sizes['float16']})")


def test_float16_refuses_values_beyond_its_range(tmp_path, pretrained):
    with torch.no_grad():
        pretrained.model.embedding.weight[0, 0] = 1e6
    with pytest.raises(ValueError, match="beyond float16"):
        save_pretrained(pretrained, tmp_path / "f16", dtype="float16")
    assert not (tmp_path / "f16").exists()


def test_save_refuses_bad_inputs(tmp_path, pretrained):
    with pytest.raises(ValueError, match="dtype"):
        save_pretrained(pretrained, tmp_path / "a", dtype="int8")
    with pytest.raises(ValueError, match="plain JSON"):
        save_pretrained(Pretrained(pretrained.model, pretrained.vocab, pretrained.tokenizer, {"x": object()}), tmp_path / "b")
    with pytest.raises(ValueError, match="vocab_size"):
        small = tiny_pretrained(vocab_size=7)
        save_pretrained(Pretrained(small.model, pretrained.vocab, pretrained.tokenizer, {}), tmp_path / "c")
    with torch.no_grad():
        pretrained.model.embedding.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        save_pretrained(pretrained, tmp_path / "d")
    assert not any(tmp_path.iterdir())


def test_method_form_and_reloading_a_reloaded_model(tmp_path, tokens, pretrained):
    first = load_pretrained(pretrained.save_pretrained(tmp_path / "one"))
    second = load_pretrained(first.save_pretrained(tmp_path / "two"))
    assert torch.equal(logits_of(pretrained.model, tokens), logits_of(second.model, tokens))
    assert (tmp_path / "one" / "model.safetensors").read_bytes() == (tmp_path / "two" / "model.safetensors").read_bytes()
