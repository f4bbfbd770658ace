"""push -> Hub -> resolve -> load_pretrained with the real huggingface_hub client against a Hub-protocol
server on loopback (tests/hub/hub_server.py), the client in subprocesses with HF_ENDPOINT pointing at it."""

import json

import pytest
from safetensors.torch import save_file

from dsf_lightning.model.pretrained import save_pretrained

from .conftest import client_env, client_results, logits_of, tiny_pretrained
from .hub_server import FakeHub

EVAL_RESULTS = [
    {"metric": "perplexity", "value": 93.1, "dataset": "ptb", "split": "test"},
    {"metric": "perplexity", "value": 97.5, "dataset": "ptb", "split": "validation"},
]


@pytest.fixture
def hub():
    server = FakeHub().start()
    yield server
    server.stop()


def test_push_then_download_with_the_real_client(tmp_path, hub, tokens):
    versions = {name: tiny_pretrained(seed=seed) for seed, name in enumerate(("v1", "v2", "v3"))}
    folders = {name: str(save_pretrained(p, tmp_path / name, eval_results=EVAL_RESULTS)) for name, p in versions.items()}
    expected = {"tokens": tokens, **{name: logits_of(p.model, tokens) for name, p in versions.items()}}
    save_file(expected, tmp_path / "expected.safetensors")
    plan = {"repo": "owner/tiny-delta", "folders": folders, "expected": str(tmp_path / "expected.safetensors")}
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))

    out = client_results("hub_client", "online", plan_path, env=client_env(tmp_path, hub.url, offline=False))
    assert out["endpoint"] == hub.url and out["offline"] is False
    # first push, then resolve("owner/name") downloads a snapshot that loads to the very same logits
    assert out["first"]["url"] == f"{hub.url}/owner/tiny-delta/commit/{out['first']['oid']}"
    assert out["first_path"].startswith(str(tmp_path / "hf_cache")) and out["first_path"].endswith(out["first"]["oid"])
    # only the model's files are fetched (allow_patterns): not the repo's .gitattributes
    assert out["first_files"] == ["README.md", "config.json", "dsf_tokenizer.json", "model.safetensors", "tokenizer.json", "vocab.json"]
    assert out["first_matches"] == ["v1"]
    # the model-index parses back from the downloaded card (datasets by their Hub id)
    assert out["card_results"] == [{**r, "dataset": "ptb_text_only"} for r in EVAL_RESULTS]
    # pushing identical bytes again commits nothing (the files are reproducible byte for byte)
    assert out["again_oid"] == out["first"]["oid"]
    # a second version moves main; a published name pinned to the first commit still gets the first
    assert out["second_oid"] != out["first"]["oid"] and out["main_matches"] == ["v2"]
    assert out["pinned_path"].endswith(out["first"]["oid"]) and out["pinned_matches"] == ["v1"]
    # `dsf push --revision experiment` creates the branch; main is untouched
    assert out["cli_push_code"] == 0 and out["branch_matches"] == ["v3"] and out["main_after_branch_matches"] == ["v2"]
    assert "no such repo" in out["missing_repo_error"]
    assert "no revision 'no-such-branch'" in out["missing_revision_error"]

    routes = {route for _, route in hub.calls}
    assert not any(route.startswith("UNHANDLED") for route in routes), hub.calls
    assert {("POST", "create_repo"), ("POST", "preupload"), ("POST", "commit"), ("POST", "create_branch"),
            ("GET", "repo_info"), ("GET", "tree"), ("HEAD", "resolve"), ("GET", "resolve")} <= set(hub.calls)

    # offline (HF_HUB_OFFLINE=1, server gone): the cache serves main and the pinned commit; the rest is a clear error
    hub.stop()
    plan["pinned"] = out["first"]["oid"]
    plan_path.write_text(json.dumps(plan))
    off = client_results("hub_client", "offline", plan_path,
                         env=client_env(tmp_path, hub_url_unreachable := "http://127.0.0.1:9", offline=True))
    assert hub_url_unreachable and off["offline"] is True
    assert off["main_matches"] == ["v2"] and off["pinned_matches"] == ["v1"]
    assert "HF_HUB_OFFLINE is set" in off["uncached_error"] and "owner/never-downloaded" in off["uncached_error"]
