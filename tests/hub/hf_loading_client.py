"""huggingface_hub-style loading keywords against the loopback Hub, run in a subprocess: the Hub server
(tests/hub/hub_server.py) is started here first (``run_client``) and HF_ENDPOINT pointed at it before
huggingface_hub is imported (it reads its settings at import), so every step's requests can be counted.

``python -m tests.hub.hf_loading_client PLAN.json`` prints one JSON line of results.
"""

from __future__ import annotations

import os
from pathlib import Path

from .hub_server import FakeHub, run_client


def _resolve_gets(hub: FakeHub, since: int) -> int:
    return sum(1 for call in hub.calls[since:] if call == ("GET", "resolve"))


def _error(call) -> dict:
    try:
        call()
    except Exception as err:  # noqa: BLE001 - the test inspects the type and message
        return {"type": type(err).__name__, "message": str(err)}
    return {"type": None, "message": "no error"}


def main(hub: FakeHub, plan: dict) -> dict:
    import torch
    from safetensors.torch import load_file

    import dsf_lightning as dsf
    from dsf_lightning import RecurrentLM

    expected = load_file(plan["expected"])
    tokens = expected.pop("tokens")
    tmp = Path(plan["tmp"])
    repo = "owner/tiny-hf"
    out: dict = {}

    def logits(model):
        with torch.no_grad():
            return model(tokens)[0]

    def matches(model):
        got = logits(model)
        return [name for name, want in expected.items() if torch.equal(got, want)]

    # the model class itself: from a folder, push, then from the Hub by repo id
    v1 = RecurrentLM.from_pretrained(plan["folders"]["v1"])
    out["v1_type"] = type(v1).__name__
    out["v1_matches"] = matches(v1)
    first = v1.push_to_hub(repo)
    out["first_oid"] = first.oid
    v2 = RecurrentLM.from_pretrained(plan["folders"]["v2"])
    out["second_oid"] = v2.push_to_hub(repo, commit_message="second").oid

    # local_files_only with an empty cache: a clear error, and nothing asked of the server
    n = len(hub.calls)
    out["local_only_error"] = _error(lambda: dsf.from_pretrained(repo, local_files_only=True, cache_dir=tmp / "empty"))
    out["local_only_requests"] = len(hub.calls) - n

    # cache_dir: where the files land (only the model's files), and nothing in the default cache
    n = len(hub.calls)
    model = RecurrentLM.from_pretrained(repo, cache_dir=tmp / "mine")
    out["cache_matches"] = matches(model)
    out["cache_gets"] = _resolve_gets(hub, n)
    snapshots = sorted((tmp / "mine").glob("models--owner--tiny-hf/snapshots/*"))
    out["cache_snapshots"] = [p.name for p in snapshots]
    out["cache_files"] = sorted(p.name for p in snapshots[0].iterdir()) if snapshots else []
    out["default_cache_has_repo"] = any(Path(os.environ["HF_HUB_CACHE"]).glob("models--owner--tiny-hf"))
    blobs = sorted((tmp / "mine").glob("models--owner--tiny-hf/blobs/*"))
    mtimes = {p.name: p.stat().st_mtime_ns for p in blobs}

    # cached: a second load downloads nothing; force_download fetches every file again
    n = len(hub.calls)
    RecurrentLM.from_pretrained(repo, cache_dir=tmp / "mine")
    out["cached_gets"] = _resolve_gets(hub, n)
    n = len(hub.calls)
    model = RecurrentLM.from_pretrained(repo, cache_dir=tmp / "mine", force_download=True)
    out["forced_gets"] = _resolve_gets(hub, n)
    out["forced_matches"] = matches(model)
    out["forced_rewritten"] = sorted(p.name for p in blobs if p.stat().st_mtime_ns != mtimes[p.name])
    out["blobs"] = sorted(mtimes)

    # local_files_only once cached: served from the cache without a request
    n = len(hub.calls)
    model = RecurrentLM.from_pretrained(repo, cache_dir=tmp / "mine", local_files_only=True)
    out["local_only_cached_matches"] = matches(model)
    out["local_only_cached_requests"] = len(hub.calls) - n

    # revision: the first commit gives v1, main gives v2
    out["revision_matches"] = matches(RecurrentLM.from_pretrained(repo, revision=first.oid, cache_dir=tmp / "mine"))
    out["main_matches"] = matches(RecurrentLM.from_pretrained(repo, cache_dir=tmp / "mine"))

    # token: reaches the server as a Bearer Authorization header
    n = len(hub.authorization)
    dsf.from_pretrained(repo, token="hf_loopback_test_token", cache_dir=tmp / "tok")
    out["token_headers"] = sorted(set(h for h in hub.authorization[n:] if h))
    n = len(hub.authorization)
    dsf.from_pretrained(repo, cache_dir=tmp / "notok")
    out["no_token_headers"] = sorted(set(h for h in hub.authorization[n:] if h))

    # dtype (a torch dtype or its name) and device
    for name, dtype in (("bf16", torch.bfloat16), ("f16_name", "float16"), ("bf16_name", "bfloat16")):
        m = RecurrentLM.from_pretrained(repo, cache_dir=tmp / "mine", dtype=dtype)
        out[f"dtype_{name}"] = sorted({str(p.dtype) for p in m.parameters()})
    scorer = dsf.from_pretrained(repo, cache_dir=tmp / "mine", dtype=torch.bfloat16, device="cpu")
    out["scorer_dtype"] = sorted({str(p.dtype) for p in scorer.model.parameters()})
    out["scorer_device"] = sorted({str(p.device) for p in scorer.model.parameters()})
    out["scorer_bf16_logprob"] = scorer.score("w1 w2 w3").logprob
    out["scorer_f32_logprob"] = dsf.from_pretrained(repo, cache_dir=tmp / "mine", device="cpu").score("w1 w2 w3").logprob

    # save_pretrained -> from_pretrained round trip (the same folder format as `dsf export`)
    saved = model.save_pretrained(tmp / "saved")
    again = RecurrentLM.from_pretrained(saved)
    out["saved_equal"] = torch.equal(logits(again), logits(model))
    out["saved_files"] = sorted(p.name for p in Path(saved).iterdir())
    out["saved_loads_as_scorer"] = dsf.from_pretrained(saved).score("w1 w2").logprob
    return out


if __name__ == "__main__":
    run_client(main)
