"""The client side of the Hub round trip, run in a subprocess so that huggingface_hub reads
HF_ENDPOINT / HF_HUB_CACHE / HF_HUB_OFFLINE from a fresh environment at import time.

``python -m tests.hub.hub_client online|offline PLAN.json`` prints one JSON line of results.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from safetensors.torch import load_file

from dsf_lightning.auto import PUBLISHED, push_to_hub
from dsf_lightning.cli.hub import add_push_parser
from dsf_lightning.hub.registry import ModelDownloadError, PublishedModel, resolve
from dsf_lightning.model.pretrained import load_pretrained


def _logits(folder, tokens):
    model = load_pretrained(folder).model
    with torch.no_grad():
        return model(tokens)[0]


def _matches(folder, expected, tokens):
    """Which expected logits (by name) the model in ``folder`` reproduces bit for bit."""
    got = _logits(folder, tokens)
    return [name for name, logits in expected.items() if torch.equal(got, logits)]


def _error(call) -> str:
    try:
        call()
    except ModelDownloadError as err:
        return str(err)
    return "no error"


def online(plan: dict) -> dict:
    from huggingface_hub import ModelCard, constants

    expected = load_file(plan["expected"])
    tokens = expected.pop("tokens")
    repo = plan["repo"]
    out: dict = {"endpoint": constants.ENDPOINT, "offline": constants.HF_HUB_OFFLINE}

    first = push_to_hub(plan["folders"]["v1"], repo)
    out["first"] = {"url": str(first), "oid": first.oid}
    path = resolve(repo)
    out["first_path"] = str(path)
    out["first_files"] = sorted(p.name for p in path.iterdir())
    out["first_matches"] = _matches(path, expected, tokens)
    out["card_results"] = [
        {"metric": r.metric_type, "value": r.metric_value, "dataset": r.dataset_type, "split": r.dataset_split}
        for r in ModelCard.load(path / "README.md").data.eval_results
    ]

    again = push_to_hub(plan["folders"]["v1"], repo)  # same bytes: nothing to commit
    out["again_oid"] = again.oid

    second = push_to_hub(plan["folders"]["v2"], repo, commit_message="second version")
    out["second_oid"] = second.oid
    out["main_matches"] = _matches(resolve(repo), expected, tokens)

    PUBLISHED["pinned-test"] = PublishedModel(repo_id=repo, revision=first.oid, bundled=None)
    pinned = resolve("pinned-test")
    out["pinned_path"] = str(pinned)
    out["pinned_matches"] = _matches(pinned, expected, tokens)

    parser = argparse.ArgumentParser(prog="dsf")
    add_push_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["push", plan["folders"]["v3"], repo, "--revision", "experiment"])
    out["cli_push_code"] = args.handler(args)
    out["branch_matches"] = _matches(resolve(repo, revision="experiment"), expected, tokens)
    out["main_after_branch_matches"] = _matches(resolve(repo), expected, tokens)

    out["missing_repo_error"] = _error(lambda: resolve("owner/missing"))
    out["missing_revision_error"] = _error(lambda: resolve(repo, revision="no-such-branch"))
    return out


def offline(plan: dict) -> dict:
    from huggingface_hub import constants

    expected = load_file(plan["expected"])
    tokens = expected.pop("tokens")
    repo = plan["repo"]
    out: dict = {"offline": constants.HF_HUB_OFFLINE}
    out["main_matches"] = _matches(resolve(repo), expected, tokens)
    PUBLISHED["pinned-test"] = PublishedModel(repo_id=repo, revision=plan["pinned"], bundled=None)
    out["pinned_matches"] = _matches(resolve("pinned-test"), expected, tokens)
    out["uncached_error"] = _error(lambda: resolve("owner/never-downloaded"))
    return out


if __name__ == "__main__":
    phase, plan_path = sys.argv[1], sys.argv[2]
    with open(plan_path) as f:
        plan = json.load(f)
    result = {"online": online, "offline": offline}[phase](plan)
    print(json.dumps(result))
