"""The tokenized cache: safetensors + JSON (no pickle), keyed by file sha256 + options, atomic writes,
corrupted entries rebuilt, concurrent builders (separate processes) never corrupt an entry."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from dsf_lightning.data import load_corpus
from dsf_lightning.data.corpora import files as corpus_files

from ._helpers import write


@pytest.fixture
def root(tmp_path):
    words = [f"w{i % 97}" for i in range(3000)]
    write(tmp_path / "data/train.txt", "\n".join(" ".join(words[i : i + 15]) for i in range(0, 3000, 15)) + "\n")
    write(tmp_path / "data/valid.txt", "w1 w2 w3\n")
    return tmp_path / "data"


def _entries(cache):
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


def test_entry_is_safetensors_with_json_metadata(root, tmp_path):
    cache = tmp_path / "cache"
    corpus = load_corpus("text-folder", root, cache_dir=cache)
    (name,) = _entries(cache)
    assert name.startswith("text-folder-") and name.endswith(".safetensors")
    with safe_open(str(cache / name), framework="pt") as f:
        assert sorted(f.keys()) == ["train", "valid"]
        assert torch.equal(f.get_tensor("train"), corpus.splits["train"])
        meta = f.metadata()
    assert json.loads(meta["vocab"])["symbols"] == corpus.vocab.symbols
    assert json.loads(meta["tokenizer"])["name"] == "word"
    assert corpus.info["cache"] == str(cache / name) and not corpus.info["cached"]


def test_default_cache_dir_comes_from_the_environment(root, tmp_path, monkeypatch):
    monkeypatch.setenv("DSF_CACHE_DIR", str(tmp_path / "envcache"))
    load_corpus("text-folder", root)
    assert len(_entries(tmp_path / "envcache")) == 1
    assert load_corpus("text-folder", root).info["cached"]


def test_key_follows_file_content_and_options(root, tmp_path):
    cache = tmp_path / "cache"
    first = load_corpus("text-folder", root, cache_dir=cache)
    assert load_corpus("text-folder", root, cache_dir=cache).info["cached"]
    char = load_corpus("text-folder", root, cache_dir=cache, tokenizer="char")
    assert not char.info["cached"] and char.tokenizer_name == "char"
    write(root / "valid.txt", "w1 w2 w4 w5\n")  # new content, new key: never a stale hit
    changed = load_corpus("text-folder", root, cache_dir=cache)
    assert not changed.info["cached"] and changed.splits["valid"].numel() == 5
    assert torch.equal(changed.splits["train"], first.splits["train"])
    assert len(_entries(cache)) == 3
    assert not load_corpus("text-folder", root, cache_dir=cache, cache=False).info["cached"]


@pytest.mark.parametrize("damage", ["truncate", "flip-last-byte", "garbage", "empty"])
def test_corrupted_entry_is_detected_and_rebuilt(root, tmp_path, damage):
    cache = tmp_path / "cache"
    good = load_corpus("text-folder", root, cache_dir=cache)
    path = cache / _entries(cache)[0]
    data = path.read_bytes()
    damaged = {
        "truncate": data[: len(data) // 2],
        "flip-last-byte": data[:-1] + bytes([data[-1] ^ 0x01]),  # inside the tensor bytes: checksum
        "garbage": os.urandom(len(data)),
        "empty": b"",
    }[damage]
    path.write_bytes(damaged)
    rebuilt = load_corpus("text-folder", root, cache_dir=cache)
    assert not rebuilt.info["cached"]
    assert all(torch.equal(rebuilt.splits[s], good.splits[s]) for s in good.splits)
    assert len(path.read_bytes()) == len(data)  # rewritten whole (metadata key order may differ)
    assert load_corpus("text-folder", root, cache_dir=cache).info["cached"]


def test_a_crash_while_writing_leaves_no_entry_and_no_temp_file(root, tmp_path, monkeypatch):
    cache = tmp_path / "cache"

    def crash(fd):
        raise RuntimeError("simulated crash before the rename")

    monkeypatch.setattr(corpus_files.os, "fsync", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        load_corpus("text-folder", root, cache_dir=cache)
    assert _entries(cache) == []
    monkeypatch.undo()
    assert not load_corpus("text-folder", root, cache_dir=cache).info["cached"]
    assert load_corpus("text-folder", root, cache_dir=cache).info["cached"]


def test_an_unwritable_cache_only_warns(root, tmp_path, caplog):
    blocker = write(tmp_path / "file", "not a directory")
    corpus = load_corpus("text-folder", root, cache_dir=blocker / "cache")
    assert corpus.splits["valid"].numel() == 4
    assert "could not write the corpus cache" in caplog.text


WORKER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from dsf_lightning.data import load_corpus
    from dsf_lightning.data.corpora import cache

    role, root, cache_dir, go = sys.argv[1:5]
    while not Path(go).exists():
        time.sleep(0.005)
    if role == "writer":  # never read the entry: build and write it every time
        cache.load_entry = lambda path, key: None
        for _ in range(5):
            load_corpus("text-folder", root, cache_dir=cache_dir)
        (Path(go).parent / f"done-{os.getpid()}").touch()
        print("ok")
    else:  # reader: once the entry exists, it must never be seen half-written
        while not any(Path(cache_dir).glob("*.safetensors")):
            time.sleep(0.001)
        corpus = load_corpus("text-folder", root, cache_dir=cache_dir)
        path, key = Path(corpus.info["cache"]), corpus.info["key"]
        reads = bad = 0
        deadline = time.time() + 30
        # at least 20 reads: on a fast machine both writers may be done before the first one
        while reads < 20 or (len(list(Path(go).parent.glob("done-*"))) < 2 and time.time() < deadline):
            bad += cache.load_entry(path, key) is None
            reads += 1
        print("ok" if bad == 0 and reads > 0 else f"{bad} of {reads} reads saw a broken entry")
    """
)


@pytest.mark.slow
def test_concurrent_builders_in_two_processes_never_corrupt_the_entry(tmp_path):
    words = [f"w{i % 5003}" for i in range(100_000)]
    root = write(tmp_path / "big/train.txt", "\n".join(" ".join(words[i : i + 20]) for i in range(0, len(words), 20))).parent
    script = write(tmp_path / "worker.py", WORKER)
    cache, go = tmp_path / "cache", tmp_path / "sync/go"
    go.parent.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), role, str(root), str(cache), str(go)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        for role in ("writer", "writer", "reader")
    ]
    time.sleep(0.5)  # let them import, then start all at once
    go.touch()
    outputs = [p.communicate(timeout=180) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err
        assert out.strip() == "ok", (out, err)
    assert len(_entries(cache)) == 1  # one entry, no temp files left behind
    cached = load_corpus("text-folder", root, cache_dir=cache)
    fresh = load_corpus("text-folder", root, cache=False)
    assert cached.info["cached"] and cached.vocab == fresh.vocab
    assert torch.equal(cached.splits["train"], fresh.splits["train"])


# ---------------------------------------------------------------------------------------------- races
GOOD = "w1 w2 w3\nw2 w3\n"
SWAPPED = "w3 w3 w1 w2 w1\n"


def _fresh(root):
    return load_corpus("text-folder", root, cache=False)


def _assert_every_entry_matches_its_content(root, tmp_path, cache):
    """Whatever the cache holds, a load of either content gives the tokens a fresh build gives."""
    for text in (GOOD, SWAPPED):
        write(root / "valid.txt", text)
        loaded = load_corpus("text-folder", root, cache_dir=cache)
        fresh = _fresh(root)
        for split in fresh.splits:
            assert torch.equal(loaded.splits[split], fresh.splits[split]), (
                f"cache entry {loaded.info['cache']} (cached={loaded.info['cached']}) holds the tokens of "
                f"other bytes than its key's for {split}"
            )
        assert loaded.vocab == fresh.vocab


@pytest.mark.parametrize("when", ["after-hashing", "while-tokenizing"])
def test_a_file_replaced_during_a_load_cannot_poison_the_cache(root, tmp_path, monkeypatch, when):
    """Issue 13 item 5: the bytes whose sha256 keys the entry must be the bytes tokenized. The file
    is replaced at the two points between hashing and tokenizing (deterministic race)."""
    from dsf_lightning.data.corpora import base as corpus_base
    from dsf_lightning.data.corpora import get_corpus_spec

    cache = tmp_path / "cache"
    write(root / "valid.txt", GOOD)
    swapped = []

    def swap_once():
        if not swapped:
            swapped.append(True)
            write(root / "valid.txt", SWAPPED)

    if when == "after-hashing":  # the file changes right after load_corpus hashed it
        real_digests, real_verify = corpus_base.file_digests, corpus_base.verify_file

        def digests(path, *a, **k):
            out = real_digests(path, *a, **k)
            if Path(path).name == "valid.txt":
                swap_once()
            return out

        def verify(path, *a, **k):
            out = real_verify(path, *a, **k)
            if Path(path).name == "valid.txt":
                swap_once()
            return out

        monkeypatch.setattr(corpus_base, "file_digests", digests)
        monkeypatch.setattr(corpus_base, "verify_file", verify)
    else:  # the file changes when the spec starts reading lines to tokenize
        spec = get_corpus_spec("text-folder")
        real_lines = type(spec).lines

        def lines(self, split, paths, opts):
            swap_once()
            return real_lines(self, split, paths, opts)

        monkeypatch.setattr(type(spec), "lines", lines)
    raced = load_corpus("text-folder", root, cache_dir=cache)
    assert swapped
    monkeypatch.undo()
    # what the raced load returned is one consistent content (never old key + new tokens)
    assert raced.splits["valid"].numel() in (7, 6)  # GOOD: 3+1 + 2+1 tokens; SWAPPED: 5+1
    _assert_every_entry_matches_its_content(root, tmp_path, cache)


@pytest.mark.slow
def test_a_writer_thread_swapping_the_file_never_poisons_the_cache(root, tmp_path):
    """A real race: a thread rewrites valid.txt between two contents while loads (each a cache miss,
    in its own cache dir) run; then every entry written must hold the tokens of its key's content."""
    import threading

    from safetensors.torch import load_file

    expected = {}
    for text in (GOOD, SWAPPED):
        write(root / "valid.txt", text)
        fresh = _fresh(root)
        expected[fresh.info["key"]] = fresh.splits["valid"]
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            path = root / f".valid.{i}.tmp"
            path.write_text(GOOD if i % 2 else SWAPPED, encoding="utf-8")
            os.replace(path, root / "valid.txt")
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for i in range(60):
            load_corpus("text-folder", root, cache_dir=tmp_path / f"cache{i}")
    finally:
        stop.set()
        thread.join()
    checked = poisoned = 0
    for i in range(60):
        for entry in (tmp_path / f"cache{i}").glob("*.safetensors"):
            with safe_open(str(entry), framework="pt") as f:
                key = f.metadata()["key"]
            checked += 1
            poisoned += not torch.equal(load_file(str(entry))["valid"], expected[key])
    assert checked == 60 and poisoned == 0, f"{poisoned} of {checked} cache entries poisoned"


def test_a_custom_spec_reading_the_disk_itself_is_checked_after_tokenizing(root, tmp_path, monkeypatch):
    """A spec that opens its files by another route than the frozen bytes (here builtins.open on the
    path string) read the disk: if the file changed meanwhile, nothing is cached and the error says so."""
    from dsf_lightning.data.corpora import base as corpus_base
    from dsf_lightning.data.corpora.files import CorpusError
    from dsf_lightning.data.corpora.text import TextFolder

    class DiskReader(TextFolder):
        name = "race-custom"

        def lines(self, split, paths, opts):
            write(root / "valid.txt", SWAPPED)  # replaced just before this spec reads it from disk
            for path in paths:
                with open(os.fspath(path), encoding="utf-8") as f:
                    for i, line in enumerate(f, 1):
                        yield path, i, line.rstrip("\n")

    monkeypatch.setitem(corpus_base._REGISTRY, "race-custom", DiskReader())
    write(root / "valid.txt", GOOD)
    cache = tmp_path / "cache"
    with pytest.raises(CorpusError, match=r"valid.txt changed while it was being tokenized"):
        load_corpus("race-custom", root, cache_dir=cache, splits=["valid"])
    assert _entries(cache) == []
