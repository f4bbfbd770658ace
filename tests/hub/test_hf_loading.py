"""Loading as huggingface_hub users expect (issue 15 item 3): ``from_pretrained`` takes the Hub's download
keywords (``cache_dir``, ``force_download``, ``local_files_only``, ``token``, ``revision``), a ``dtype`` and
a ``device``; the model class itself has ``from_pretrained`` / ``save_pretrained`` / ``push_to_hub`` (the
shape of huggingface_hub's ``PyTorchModelHubMixin``, strict loading kept). The keywords are checked against
the loopback Hub server (tests/hub/hub_server.py) with the real client, in a subprocess."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import dsf_lightning as dsf
from dsf_lightning import RecurrentLM
from dsf_lightning.hub import PretrainedFormatError
from dsf_lightning.model.pretrained import save_pretrained

from .conftest import client_env, client_results, logits_of, tiny_pretrained

HUB_KEYWORDS = ("cache_dir", "force_download", "local_files_only", "revision", "token")


def test_hub_keywords_against_the_loopback_server(tmp_path, tokens):
    versions = {name: tiny_pretrained(seed=seed) for seed, name in enumerate(("v1", "v2"))}
    folders = {name: str(save_pretrained(p, tmp_path / name)) for name, p in versions.items()}
    save_file({"tokens": tokens, **{n: logits_of(p.model, tokens) for n, p in versions.items()}}, tmp_path / "expected.safetensors")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"folders": folders, "expected": str(tmp_path / "expected.safetensors"), "tmp": str(tmp_path)}))
    out = client_results("hf_loading_client", plan, env=client_env(tmp_path, None, offline=False))

    # RecurrentLM.from_pretrained returns the plain module with the folder's weights; push_to_hub publishes it
    assert out["v1_type"] == "RecurrentLM" and out["v1_matches"] == ["v1"]
    assert out["second_oid"] != out["first_oid"]
    # local_files_only without a cache: a clear error naming the keyword and the cache; no request made
    err = out["local_only_error"]
    assert err["type"] == "ModelDownloadError", err
    assert "local_files_only=True" in err["message"] and str(tmp_path / "empty") in err["message"], err
    assert out["local_only_requests"] == 0
    # cache_dir is where the files land, only the model's files are fetched, the default cache stays empty
    assert out["cache_matches"] == ["v2"] and out["cache_snapshots"] == [out["second_oid"]]
    assert out["cache_files"] == ["README.md", "config.json", "dsf_tokenizer.json", "model.safetensors", "tokenizer.json", "vocab.json"]
    assert out["cache_gets"] == len(out["cache_files"]) and out["default_cache_has_repo"] is False
    # a cached model is not downloaded again; force_download fetches (and rewrites) every file
    assert out["cached_gets"] == 0
    assert out["forced_gets"] == len(out["cache_files"]) and out["forced_matches"] == ["v2"]
    assert out["forced_rewritten"] == out["blobs"] and len(out["blobs"]) == len(out["cache_files"])
    assert out["local_only_cached_matches"] == ["v2"] and out["local_only_cached_requests"] == 0
    # revision picks the commit
    assert out["revision_matches"] == ["v1"] and out["main_matches"] == ["v2"]
    # token reaches the server; without it no Authorization header is sent
    assert out["token_headers"] == ["Bearer hf_loopback_test_token"] and out["no_token_headers"] == []
    # dtype casts the weights (after strict loading), by torch dtype or by name; device is honoured
    assert out["dtype_bf16"] == ["torch.bfloat16"] and out["dtype_bf16_name"] == ["torch.bfloat16"]
    assert out["dtype_f16_name"] == ["torch.float16"]
    assert out["scorer_dtype"] == ["torch.bfloat16"] and out["scorer_device"] == ["cpu"]
    assert out["scorer_bf16_logprob"] == pytest.approx(out["scorer_f32_logprob"], rel=0.05)
    assert out["scorer_bf16_logprob"] != out["scorer_f32_logprob"]
    # save_pretrained -> from_pretrained: bit-identical logits, the folder `dsf export` writes
    assert out["saved_equal"] is True
    assert out["saved_files"] == ["README.md", "config.json", "dsf_tokenizer.json", "model.safetensors", "tokenizer.json", "vocab.json"]
    assert isinstance(out["saved_loads_as_scorer"], float)
    assert out["unhandled"] == []


@pytest.mark.parametrize("owner", [dsf, dsf.Scorer, RecurrentLM])
def test_unknown_keyword_is_a_type_error_listing_the_accepted_ones(owner):
    with pytest.raises(TypeError) as info:
        owner.from_pretrained("delta-rnn-ptb", trust_remote_code=True)  # (torch_dtype is dtype's alias since issue 35)
    message = str(info.value)
    assert "'trust_remote_code'" in message
    for keyword in (*HUB_KEYWORDS, "dtype", "torch_dtype", "device"):
        assert keyword in message, message


def test_model_class_loads_the_bundled_model_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = RecurrentLM.from_pretrained("delta-rnn-ptb")
    assert type(model) is RecurrentLM and isinstance(model, torch.nn.Module) and not model.training
    assert model.vocab is not None and model.tokenizer is not None  # kept so save_pretrained writes the same folder
    scorer = dsf.from_pretrained("delta-rnn-ptb")
    reference = scorer.model.state_dict()
    assert all(torch.equal(t, reference[name]) for name, t in model.state_dict().items())
    model.requires_grad_(False)  # as the Scorer's (oneDNN picks its kernel by requires_grad)
    x = torch.tensor([[0, 5, 9, 2]])
    assert torch.equal(logits_of(model, x), logits_of(scorer.model, x))


def test_save_pretrained_round_trip_is_bit_identical(tmp_path, pretrained, tokens):
    folder = save_pretrained(pretrained, tmp_path / "exported")  # what `dsf export` writes
    model = RecurrentLM.from_pretrained(folder)
    saved = model.save_pretrained(tmp_path / "resaved")
    again = RecurrentLM.from_pretrained(saved)
    assert torch.equal(logits_of(again, tokens), logits_of(pretrained.model, tokens))
    assert (folder / "model.safetensors").read_bytes() == (saved / "model.safetensors").read_bytes()


@pytest.mark.parametrize("dtype", [torch.float16, "float16", torch.bfloat16, "bfloat16", torch.float32, "float32"])
def test_dtype_casts_after_strict_loading(folder, dtype, tokens):
    model = RecurrentLM.from_pretrained(folder, dtype=dtype)
    want = dtype if isinstance(dtype, torch.dtype) else getattr(torch, dtype)
    assert {p.dtype for p in model.parameters()} == {want}
    assert logits_of(model, tokens).dtype == want


@pytest.mark.parametrize("dtype", [torch.int8, "float64x", 3])
def test_bad_dtype_names_the_choices(folder, dtype):
    with pytest.raises((ValueError, TypeError), match=r"dtype.*float16.*bfloat16.*float32"):
        RecurrentLM.from_pretrained(folder, dtype=dtype)


def test_strict_loading_is_kept_by_the_model_class(folder):
    config = json.loads((folder / "config.json").read_text())
    config["model"]["hidden_sizes"] = [9]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(PretrainedFormatError):
        RecurrentLM.from_pretrained(folder)


def test_a_model_without_a_vocabulary_cannot_be_saved_and_says_what_to_pass(tmp_path, pretrained):
    bare = RecurrentLM(pretrained.model.config)
    with pytest.raises(ValueError, match=r"vocab=.*tokenizer="):
        bare.save_pretrained(tmp_path / "bare")
    saved = bare.save_pretrained(tmp_path / "bare", vocab=pretrained.vocab, tokenizer=pretrained.tokenizer)
    assert RecurrentLM.from_pretrained(saved).config == pretrained.model.config


def test_the_bundled_model_saves_back_the_same_folder(tmp_path, monkeypatch):
    """RecurrentLM.from_pretrained -> save_pretrained keeps the vocabulary, tokenizer, info and normalizer."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = RecurrentLM.from_pretrained("delta-rnn-ptb")
    saved = model.save_pretrained(tmp_path / "copy", dtype="float16")
    bundled = Path(dsf.__file__).parent / "pretrained" / "delta-rnn-ptb"
    for name in ("vocab.json", "dsf_tokenizer.json", "tokenizer.json"):
        assert (saved / name).read_bytes() == (bundled / name).read_bytes(), name
    mine, theirs = (json.loads((f / "config.json").read_text()) for f in (saved, bundled))
    assert mine["normalize"] == theirs["normalize"] == "ptb" and mine["info"] == theirs["info"]
    assert mine["tokenizer"] == theirs["tokenizer"] and mine["vocabulary"] == theirs["vocabulary"]
    again = RecurrentLM.from_pretrained(saved)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), model.state_dict().values()))
