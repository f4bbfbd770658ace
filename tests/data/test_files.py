"""Checksums, line reading, the data root, and the atomic download helper (file:// URLs, no network)."""

import gzip
import hashlib
import lzma

import pytest

from dsf_lightning.data.corpora import (
    CorpusError,
    CorpusSpec,
    FileSpec,
    download,
    file_digests,
    load_corpus,
    register_corpus,
    resolve_data_root,
    verify_files,
)
from dsf_lightning.data.corpora import base as corpus_base
from dsf_lightning.data.corpora.files import read_lines
from dsf_lightning.data.tokenizers import WordTokenizer

from ._helpers import write

HELLO_SHA256 = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
HELLO_GIT_BLOB = "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object` of "hello\n"


def test_file_digests_sha256_and_git_blob(tmp_path):
    assert file_digests(write(tmp_path / "h.txt", "hello\n")) == (HELLO_SHA256, HELLO_GIT_BLOB)


def test_verify_files_accepts_matches_and_names_mismatches(tmp_path):
    write(tmp_path / "a/h.txt", "hello\n")
    assert verify_files(tmp_path, [FileSpec("a/h.txt", sha256=HELLO_SHA256)]) == {"a/h.txt": HELLO_SHA256}
    assert verify_files(tmp_path, [FileSpec("a/h.txt", git_blob=HELLO_GIT_BLOB)]) == {"a/h.txt": HELLO_SHA256}
    with pytest.raises(CorpusError, match=r"checksum mismatch for .*a/h\.txt: sha256 5891b5.*expected 0000"):
        verify_files(tmp_path, [FileSpec("a/h.txt", sha256="0" * 64)])
    with pytest.raises(CorpusError, match="git blob id ce0136"):
        verify_files(tmp_path, [FileSpec("a/h.txt", git_blob="1" * 40)])
    with pytest.raises(CorpusError, match=r"missing file a/x\.txt"):
        verify_files(tmp_path, [FileSpec("a/x.txt", sha256=HELLO_SHA256)])
    # an alternative form of the file is accepted when the first is absent
    alt = FileSpec("a/h.txt.xz", alternatives=(FileSpec("a/h.txt", sha256=HELLO_SHA256),))
    assert verify_files(tmp_path, [alt]) == {"a/h.txt": HELLO_SHA256}


def test_read_lines_handles_compression_crlf_and_the_ptb_char_tail(tmp_path):
    text = "a b \n c d \n "  # PTB char files end with "\n " (not a line)
    (tmp_path / "p.txt").write_text(text)
    with lzma.open(tmp_path / "p.txt.xz", "wt") as f:
        f.write(text)
    with gzip.open(tmp_path / "p.txt.gz", "wt") as f:
        f.write(text)
    for name in ("p.txt", "p.txt.xz", "p.txt.gz"):
        assert list(read_lines(tmp_path / name)) == ["a b ", " c d "]
    (tmp_path / "w.txt").write_bytes(b"x\r\n\r\ny")
    assert list(read_lines(tmp_path / "w.txt")) == ["x", "", "y"]


def test_data_root_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("DSF_DATA_ROOT", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert resolve_data_root(tmp_path / "arg") == (tmp_path / "arg", "argument data_root")
    assert resolve_data_root()[0] == tmp_path / "env"
    monkeypatch.delenv("DSF_DATA_ROOT")
    assert resolve_data_root()[0] == tmp_path / "xdg/dsf_lightning/data"


def test_download_file_url_verifies_then_renames(tmp_path):
    src = write(tmp_path / "src/h.txt", "hello\n")
    dest = tmp_path / "out/sub/h.txt"
    assert download(src.as_uri(), dest, HELLO_SHA256) == dest
    assert dest.read_text() == "hello\n"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["h.txt"]  # no temp file left
    assert dest.stat().st_mode & 0o777 == 0o644


def test_download_with_a_wrong_checksum_leaves_nothing(tmp_path):
    src = write(tmp_path / "src/h.txt", "hello\n")
    out = tmp_path / "out"
    with pytest.raises(CorpusError, match="sha256 5891b5.*expected 0000.*not saved"):
        download(src.as_uri(), out / "h.txt", "0" * 64)
    assert list(out.iterdir()) == []


def test_download_of_a_missing_source_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(CorpusError, match="could not download file://"):
        download((tmp_path / "nope.txt").as_uri(), out / "h.txt")
    assert list(out.iterdir()) == []


class _Mirror(CorpusSpec):
    """A corpus whose files have direct (file://) URLs, for load_corpus(download=True)."""

    name = "test-mirror"
    description = "test corpus with file:// URLs"
    folder = "mirror"
    unk = "<unk>"
    source = None

    def files(self, opts):
        return {
            split: [FileSpec(f"mirror/{split}.txt", sha256=hashlib.sha256(f"{split} words\n".encode()).hexdigest(),
                             url=(self.source / f"{split}.txt").as_uri())]
            for split in self.splits
        }

    def tokenizer(self, opts):
        return WordTokenizer()


@pytest.fixture
def mirror_spec():
    spec = register_corpus(_Mirror())
    yield spec
    corpus_base._REGISTRY.pop(spec.name)


def test_load_corpus_downloads_missing_files_when_asked(tmp_path, mirror_spec):
    spec = mirror_spec
    spec.source = tmp_path / "remote"
    for split in ("train", "valid", "test"):
        write(spec.source / f"{split}.txt", f"{split} words\n")
    root = tmp_path / "root"
    with pytest.raises(CorpusError, match=r"mirror/train\.txt"):
        load_corpus("test-mirror", root)
    corpus = load_corpus("test-mirror", root, download=True)
    assert corpus.vocab.decode(corpus.splits["valid"]) == ["<unk>", "words", "<eos>"]
    assert (root / "mirror/test.txt").read_text() == "test words\n"
