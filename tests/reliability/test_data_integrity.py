"""A corrupted corpus *source* file (one byte flipped) is caught by its sha256 with a clear CorpusError,
also when a tokenized cache built from the good file exists (the cache is never served for it)."""

from __future__ import annotations

import hashlib

import pytest

from dsf_lightning.data.corpora import CorpusError, load_corpus, verify_corpus
from dsf_lightning.data.corpora import base as corpora_base
from dsf_lightning.data.corpora.base import CorpusSpec
from dsf_lightning.data.corpora.files import FileSpec
from dsf_lightning.data.tokenizers import get_tokenizer
from dsf_lightning.data.vocab import VocabularyError

TEXT = "the cat sat on the mat\nthe dog sat on the log\n" * 50


class Checked(CorpusSpec):
    """A corpus whose files carry known sha256 digests, as ptb / wikitext / text8 do."""

    name = "reliability-checked"
    description = "test corpus with checksums"
    folder = "checked"
    digests: dict = {}

    def files(self, opts):
        return {split: [FileSpec(f"checked/{split}.txt", sha256=self.digests[split])] for split in self.splits}

    def tokenizer(self, opts):
        return get_tokenizer("word")


@pytest.fixture
def checked(tmp_path, monkeypatch):
    root = tmp_path / "data"
    (root / "checked").mkdir(parents=True)
    digests = {}
    for split in ("train", "valid", "test"):
        data = TEXT.encode()
        (root / "checked" / f"{split}.txt").write_bytes(data)
        digests[split] = hashlib.sha256(data).hexdigest()
    spec = Checked()
    spec.digests = digests
    monkeypatch.setitem(corpora_base._REGISTRY, spec.name, spec)
    monkeypatch.setenv("DSF_CACHE_DIR", str(tmp_path / "cache"))
    return root


@pytest.mark.parametrize("position", [0, len(TEXT) // 2, len(TEXT) - 1], ids=["first-byte", "middle-byte", "last-byte"])
def test_one_flipped_byte_in_a_source_file_is_caught_by_its_sha256(checked, position):
    good = load_corpus("reliability-checked", checked)  # builds and caches the tokenized corpus
    assert good.splits["train"].numel() > 0
    path = checked / "checked" / "valid.txt"
    data = bytearray(path.read_bytes())
    data[position] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorpusError) as info:
        load_corpus("reliability-checked", checked)
    message = str(info.value)
    assert f"checksum mismatch for {path}" in message
    assert hashlib.sha256(bytes(data)).hexdigest() in message and hashlib.sha256(TEXT.encode()).hexdigest() in message
    assert "corrupted" in message and "verify=False" in message
    with pytest.raises(CorpusError, match="checksum mismatch"):
        verify_corpus("reliability-checked", checked)
    # knowingly skipping the check reads the changed file, never the cache built from the good one
    try:
        changed = load_corpus("reliability-checked", checked, verify=False)
    except VocabularyError as err:  # the flipped byte made a word the (train) vocabulary lacks
        assert f"{path} line" in str(err)
    else:
        assert changed.info["cached"] is False


def test_a_truncated_source_file_is_caught_too(checked):
    path = checked / "checked" / "test.txt"
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(CorpusError, match=r"checksum mismatch for .*test\.txt"):
        load_corpus("reliability-checked", checked)
