"""push -> Hub -> ``from_pretrained("owner/name")`` for a classifier folder, with the real huggingface_hub
client against the loopback Hub server (tests/hub/hub_server.py), in a subprocess."""

import json

import torch
from safetensors.torch import save_file

from dsf_lightning.tasks.pretrained import save_classifier

from .conftest import client_env, client_results, tiny_classifier


def test_push_then_from_pretrained_owner_name(tmp_path):
    versions = {name: tiny_classifier(seed=seed) for seed, name in enumerate(("v1", "v2"))}
    folders = {name: str(save_classifier(p, tmp_path / name, dtype="float16" if name == "v2" else "float32"))
               for name, p in versions.items()}
    ids = torch.tensor([[1, 5, 6, 7, 8, 2], [1, 9, 4, 2, 0, 0]])
    lengths = torch.tensor([6, 4])
    expected = {"ids": ids, "lengths": lengths}
    with torch.no_grad():
        expected["v1"] = versions["v1"].model(ids, lengths)
        half = versions["v2"].model
        for p in half.parameters():
            p.copy_(p.half().float())  # what the float16 folder stores
        expected["v2"] = half(ids, lengths)
    save_file(expected, tmp_path / "expected.safetensors")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"folders": folders, "expected": str(tmp_path / "expected.safetensors")}))
    out = client_results("classifier_hub_client", plan, env=client_env(tmp_path, None, offline=False))
    assert out["type"] == "TextClassifier" and out["matches"] == ["v1"] and out["class_matches"] == ["v1"]
    assert out["labels"] == ["negative", "positive"] and out["classified"]["num_tokens"] == 4
    assert out["files"] == ["README.md", "config.json", "dsf_tokenizer.json", "model.safetensors", "vocab.json"]
    assert out["second_oid"] != out["first_oid"] and out["main_matches"] == ["v2"] and out["revision_matches"] == ["v1"]
    assert out["unhandled"] == []
