"""Issue 38 items 5 and 6: what a push sends, and tokenizer.json against dsf_tokenizer.json.

* A ``tokenizer.json`` whose vocabulary was permuted, with config.json's checksums recomputed ("permuted and
  re-hashed"), loaded and passed push validation: tokenizers users would get other ids than the model was
  trained on. Loading (and so pushing) now checks that it gives the ids of dsf_tokenizer.json + vocab.json.
* ``dsf push`` followed a README.md or tokenizer.json symlinked to a file outside the folder and uploaded that
  file. Pushes run against the loopback Hub server (tests/hub/hub_server.py) with the real huggingface_hub
  client; every request body the server receives is kept, and the symlink targets' bytes must not be in any.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest

from dsf_lightning.hub import PretrainedFormatError
from dsf_lightning.model.pretrained import load_pretrained, save_pretrained

from .conftest import ROOT, client_env, edit_config, rehash, tiny_pretrained
from .hub_server import FakeHub

PUSH = """
import json, sys
from dsf_lightning.auto import push_to_hub
out = {}
for folder, repo in json.loads(sys.argv[1]):
    try:
        out[folder] = {"oid": push_to_hub(folder, repo).oid}
    except Exception as err:  # the test reads the kind and the message
        out[folder] = {"error": f"{type(err).__name__}: {err}"}
print(json.dumps(out))
"""


@pytest.fixture
def hub():
    server = FakeHub().start()
    yield server
    server.stop()


def _push(tmp_path, hub, pairs) -> dict:
    done = subprocess.run([sys.executable, "-c", PUSH, json.dumps([[str(f), r] for f, r in pairs])], cwd=ROOT,
                          env=client_env(tmp_path, hub.url, offline=False), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _sent(hub, data: bytes) -> bool:
    """Whether ``data`` reached the server: in a request body as it is or base64-encoded (commits carry files
    as base64), or in any file of any commit."""
    encoded = base64.b64encode(data)
    if any(data in body or encoded in body for body in hub.received):
        return True
    return any(data in content for repo in hub.repos.values() for files in repo["commits"].values()
               for content in files.values())


def _permute(folder, first: str = "w1", second: str = "w2") -> None:
    """Swap two tokens' ids in tokenizer.json and recompute config.json's checksums, as a forger would."""
    path = folder / "tokenizer.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    ids = document["model"]["vocab"]
    ids[first], ids[second] = ids[second], ids[first]
    path.write_text(json.dumps(document), encoding="utf-8")
    rehash(folder)


# ------------------------------------------------------------------------------ tokenizer.json
@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda d: d["model"]["vocab"].update({"w1": d["model"]["vocab"]["w2"], "w2": d["model"]["vocab"]["w1"]}),
         "token 'w1' has id 3 there but 2"),
        (lambda d: d["model"]["vocab"].update({"extra": 13}), "1 token(s) the vocabulary does not"),
        (lambda d: d["model"].update(unk_token="w3"), "unk_token 'w3'"),
        (lambda d: d["post_processor"]["special_tokens"]["<eos>"].update(ids=[5]), "its post_processor"),
        (lambda d: d.update(normalizer={"type": "Lowercase"}), "its normalizer"),
        (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}), "its pre_tokenizer"),
        (lambda d: d.update(added_tokens=[{"id": 4, "content": "w9", "special": True}]), "its added_tokens"),
        (lambda d: d["model"].update(type="BPE"), "no WordLevel vocabulary"),
    ],
    ids=["permuted", "extra-token", "unk", "eos-id", "normalizer", "pre-tokenizer", "added-tokens", "model-type"],
)
def test_a_rehashed_tokenizer_json_that_gives_other_ids_is_refused_on_load(folder, edit, problem):
    path = folder / "tokenizer.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    edit(document)
    path.write_text(json.dumps(document), encoding="utf-8")
    rehash(folder)
    with pytest.raises(PretrainedFormatError) as info:
        load_pretrained(folder)
    message = str(info.value)
    assert "\n" not in message and "tokenizer.json" in message and "dsf_tokenizer.json" in message, message
    assert problem in message, message


def test_the_probe_text_gives_the_same_ids_through_the_tokenizers_library(folder):
    """An honest folder's tokenizer.json passes, the probe included (tokenizers is installed with the test extra)."""
    pytest.importorskip("tokenizers")
    from dsf_lightning.hub.hf_tokenizer import _probe_mismatch

    loaded = load_pretrained(folder)
    document = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    assert _probe_mismatch(document, loaded.tokenizer, loaded.vocab) is None
    document["model"]["vocab"]["w1"], document["model"]["vocab"]["w2"] = 3, 2  # the probe alone sees a permutation
    assert "probe text encodes to other ids" in _probe_mismatch(document, loaded.tokenizer, loaded.vocab)


# ------------------------------------------------------------------------------ push
def _folders(tmp_path):
    """Folders whose push must be refused (a symlink leading outside, a permuted tokenizer.json) and the
    bytes of each symlink's target that must never reach the server."""
    outside = tmp_path / "outside"
    outside.mkdir()
    cases, secrets = {}, {}

    def make(name):
        return save_pretrained(tiny_pretrained(seed=len(cases)), tmp_path / name)

    # README.md -> a private file (the card is not checksummed: the old push uploaded the file as it was)
    folder = make("readme")
    secret = outside / "notes.txt"
    secret.write_bytes(b"SECRET-README-TARGET 7f3a9c\n")
    (folder / "README.md").unlink()
    (folder / "README.md").symlink_to(secret)
    cases["README.md"], secrets["README.md"] = folder, secret.read_bytes()

    # tokenizer.json -> a file outside holding a valid tokenizer.json with a secret in an extra field, rehashed
    folder = make("tokenizer")
    document = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    document["private"] = "SECRET-TOKENIZER-TARGET 51be02"
    target = outside / "tok.json"
    target.write_text(json.dumps(document), encoding="utf-8")
    (folder / "tokenizer.json").unlink()
    os.symlink(os.path.relpath(target, folder), folder / "tokenizer.json")  # relative: ../outside/tok.json
    rehash(folder)
    cases["tokenizer.json"], secrets["tokenizer.json"] = folder, target.read_bytes()

    # config.json -> a copy outside with a secret in info (a chain: config.json -> inside link -> outside)
    folder = make("config")
    edit_config(folder, lambda c: c["info"].update(private="SECRET-CONFIG-TARGET 9d41aa"))
    target = outside / "config.json"
    target.write_bytes((folder / "config.json").read_bytes())
    (folder / "config.json").unlink()
    (folder / "hop").symlink_to(target)
    (folder / "config.json").symlink_to("hop")
    cases["config.json"], secrets["config.json"] = folder, target.read_bytes()

    # vocab.json -> an identical copy outside (any file: the link is refused whatever it holds)
    folder = make("vocab")
    target = outside / "vocab.json"
    target.write_bytes((folder / "vocab.json").read_bytes())
    (folder / "vocab.json").unlink()
    (folder / "vocab.json").symlink_to(target)
    cases["vocab.json"] = folder

    folder = make("permuted")
    _permute(folder)
    cases["permuted tokenizer.json"] = folder
    return cases, secrets


def test_push_refuses_symlinks_leaving_the_folder_and_permuted_tokenizers_and_sends_nothing(tmp_path, hub):
    cases, secrets = _folders(tmp_path)
    out = _push(tmp_path, hub, [(folder, f"owner/{folder.name}") for folder in cases.values()])
    for what, folder in cases.items():
        result = out[str(folder)]
        assert "error" in result, f"{what}: pushed ({result})"
        message = result["error"]
        assert message.startswith("PretrainedFormatError: ") and "\n" not in message, message
        if what == "permuted tokenizer.json":
            assert "tokenizer.json" in message and "dsf_tokenizer.json" in message and "token 'w1'" in message, message
        else:
            assert f"{folder / what}: is a symbolic link to" in message and "outside the folder" in message, message
    for what, data in secrets.items():
        assert not _sent(hub, data), f"the target of {what}'s symlink reached the server"
    assert not {("POST", "preupload"), ("POST", "commit")} & set(hub.calls), hub.calls  # refused before any upload


def test_push_uploads_links_inside_the_folder_and_only_recorded_files(tmp_path, hub):
    """A symlink to a file inside the folder is fine (its content is the folder's); a tokenizer.json that
    config.json does not record (dropped in, no checksum) is not uploaded."""
    folder = save_pretrained(tiny_pretrained(), tmp_path / "inside")
    (folder / "README.md").rename(folder / "card.md")
    (folder / "README.md").symlink_to("card.md")
    plain = save_pretrained(tiny_pretrained(seed=1), tmp_path / "unrecorded")
    edit_config(plain, lambda c: c["files"].pop("tokenizer.json"))
    out = _push(tmp_path, hub, [(folder, "owner/inside"), (plain, "owner/unrecorded")])
    assert "oid" in out[str(folder)] and "oid" in out[str(plain)], out
    _, files = hub.files_at("owner/inside", "main")
    assert files["README.md"] == (folder / "card.md").read_bytes() and "card.md" not in files
    _, files = hub.files_at("owner/unrecorded", "main")
    assert "tokenizer.json" not in files and {"config.json", "model.safetensors", "README.md"} <= set(files)


def test_dsf_push_exits_2_with_one_line_for_a_symlink_leaving_the_folder(tmp_path, hub):
    folder = save_pretrained(tiny_pretrained(), tmp_path / "cli")
    secret = tmp_path / "id_rsa"
    secret.write_bytes(b"SECRET-CLI-TARGET c0ffee\n")
    (folder / "README.md").unlink()
    (folder / "README.md").symlink_to(secret)
    done = subprocess.run([sys.executable, "-m", "dsf_lightning.cli", "push", str(folder), "owner/cli"], cwd=ROOT,
                          env=client_env(tmp_path, hub.url, offline=False), capture_output=True, text=True, timeout=240)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "symbolic link" in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert not _sent(hub, secret.read_bytes())


def test_a_symlink_loop_among_the_model_files_is_a_one_line_refusal(folder):
    from dsf_lightning.hub.publish import push_to_hub

    (folder / "README.md").unlink()
    (folder / "README.md").symlink_to("README.md")
    with pytest.raises(PretrainedFormatError, match=r"README.md: is a symbolic link that cannot be followed") as info:
        push_to_hub(folder, "owner/loop", load=load_pretrained, endpoint="http://127.0.0.1:9")  # nothing listens
    assert "\n" not in str(info.value)
