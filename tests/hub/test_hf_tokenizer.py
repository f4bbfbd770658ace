"""Hub conventions for the tokenizer (issue 15 item 4): ``tokenizer.json`` belongs to the ``tokenizers``
library, so a folder keeps this library's tokenizer in ``dsf_tokenizer.json`` and writes ``tokenizer.json``
as a real ``tokenizers`` file only where it reproduces this library's ids exactly (word and character
models, not the DSF subword splitter); folders of format version 1 (our tokenizer in ``tokenizer.json``)
still load."""

import json
import os
from pathlib import Path

import pytest
import torch

tokenizers = pytest.importorskip("tokenizers")

import dsf_lightning  # noqa: E402
from dsf_lightning.data.tokenizers import get_tokenizer  # noqa: E402
from dsf_lightning.data.vocab import Vocabulary  # noqa: E402
from dsf_lightning.hub import PretrainedFormatError  # noqa: E402
from dsf_lightning.model.pretrained import load_pretrained, save_pretrained  # noqa: E402

from .conftest import logits_of, rehash, tiny_pretrained  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA_ROOT = Path(os.environ.get("DSF_DATA_ROOT", ROOT.parent / "shared" / "data"))
BUNDLED = Path(dsf_lightning.__file__).parent / "pretrained" / "delta-rnn-ptb"
# every code point Python or Rust calls whitespace is below U+3001; around them, letters and marks
PROBE = "".join(chr(c) for c in range(0x3001)) + "e\u0301 \U0001F600x\u200b<unk><eos>a<eos> _\t\t"


def ours(tokenizer, vocab, line):
    return vocab.encode(tokenizer.tokenize_line(line))


def theirs(folder, lines):
    hf = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    return [e.ids for e in hf.encode_batch(lines)]


def word_vocab():
    return Vocabulary(["<eos>", "<unk>", "the", "cat", "a<eos>b", "_", "\u00e9"], eos="<eos>", unk="<unk>")


def test_a_word_folder_has_a_tokenizers_file_giving_our_ids(tmp_path):
    p = tiny_pretrained()
    p.vocab = word_vocab()
    p.model = tiny_pretrained(vocab_size=len(p.vocab)).model
    folder = save_pretrained(p, tmp_path / "word")
    assert json.loads((folder / "dsf_tokenizer.json").read_text())["name"] == "word"
    lines = ["the cat", "", "  the\u00a0cat\x1cthe\u2003a<eos>b  ", "unknown words <unk> the", PROBE, "\u00e9 _"]
    assert theirs(folder, lines) == [ours(p.tokenizer, p.vocab, line) for line in lines]
    assert theirs(folder, ["the cat"]) == [[2, 3, 0]]  # <eos> appended, as the library's tokenizer does


@pytest.mark.parametrize("mode", ["plain", "ptb"])
def test_a_char_folder_has_a_tokenizers_file_giving_our_ids(tmp_path, mode):
    p = tiny_pretrained(tokenizer="char")
    p.tokenizer = get_tokenizer("char", mode=mode)
    folder = save_pretrained(p, tmp_path / mode)
    lines = ["abc", "", "a b  c", "a _ b", "cab ba"] if mode == "plain" else ["a b c", "", " a  _\tb ", "c a b _ b a"]
    assert theirs(folder, lines) == [ours(p.tokenizer, p.vocab, line) for line in lines]
    with pytest.raises(Exception):  # a closed vocabulary: an unknown character is an error there too
        theirs(folder, ["z\u00e9"])


def test_plain_char_splitting_is_per_code_point(tmp_path):
    symbols = sorted(set(PROBE.replace(" ", "_")) | {"_"})
    vocab = Vocabulary(["<eos>", *symbols], eos="<eos>")
    p = tiny_pretrained(tokenizer="char", vocab_size=len(vocab))
    p.vocab = vocab
    folder = save_pretrained(p, tmp_path / "chars")
    assert theirs(folder, [PROBE]) == [ours(p.tokenizer, vocab, PROBE)]


@pytest.mark.parametrize("tokenizer", [get_tokenizer("word", lowercase=True), get_tokenizer("subword")])
def test_no_tokenizers_file_where_none_is_exact(tmp_path, tokenizer):
    p = tiny_pretrained()
    if tokenizer.name == "subword":
        tokenizer.fit(["w1 w2 w3"])
    p.tokenizer = tokenizer
    folder = save_pretrained(p, tmp_path / tokenizer.name)
    assert not (folder / "tokenizer.json").exists()
    assert set(json.loads((folder / "config.json").read_text())["files"]) == {"model.safetensors", "vocab.json", "dsf_tokenizer.json"}
    assert load_pretrained(folder).tokenizer.to_dict() == tokenizer.to_dict()


def test_the_tokenizers_file_is_checksummed(folder):
    path = folder / "tokenizer.json"
    document = json.loads(path.read_text())
    document["model"]["vocab"]["w1"], document["model"]["vocab"]["w2"] = document["model"]["vocab"]["w2"], document["model"]["vocab"]["w1"]
    path.write_text(json.dumps(document, separators=(",", ":"), ensure_ascii=False))  # the same size: the tokenizers library writes compact JSON
    with pytest.raises(PretrainedFormatError, match=r"tokenizer.json: sha256"):
        load_pretrained(folder)


def test_a_format_version_1_folder_still_loads(tmp_path, pretrained, tokens):
    """Version 1 kept our tokenizer in tokenizer.json and had no dsf_tokenizer.json."""
    folder = save_pretrained(pretrained, tmp_path / "v1")
    (folder / "tokenizer.json").unlink()
    (folder / "dsf_tokenizer.json").rename(folder / "tokenizer.json")
    config = json.loads((folder / "config.json").read_text())
    config["format_version"] = 1
    config["files"] = {k: v for k, v in config["files"].items() if k != "tokenizer.json"}
    config["files"]["tokenizer.json"] = config["files"].pop("dsf_tokenizer.json")
    (folder / "config.json").write_text(json.dumps(config))
    loaded = load_pretrained(folder)
    assert torch.equal(logits_of(loaded.model, tokens), logits_of(pretrained.model, tokens))
    assert loaded.tokenizer.to_dict() == pretrained.tokenizer.to_dict()
    # the legacy file is still checked against config.json's tokenizer record
    (folder / "tokenizer.json").write_text(get_tokenizer("char").to_json())
    rehash(folder)
    with pytest.raises(PretrainedFormatError, match=r"tokenizer.json: .*'char'.*trained with"):
        load_pretrained(folder)


def test_the_bundled_folder_has_a_tokenizers_file():
    hf = tokenizers.Tokenizer.from_file(str(BUNDLED / "tokenizer.json"))
    scorer = dsf_lightning.from_pretrained("delta-rnn-ptb")
    line = "the company said its profit rose in the third quarter zyxq"
    assert hf.encode(line).ids == ours(scorer.tokenizer, scorer.vocab, line)


@pytest.mark.corpus
def test_bundled_tokenizers_file_gives_our_ids_on_ptb_test():
    path = DATA_ROOT / "ptb" / "ptb.test.txt"
    if not path.is_file():
        pytest.skip(f"no PTB corpus at {path}")
    lines = path.read_text(encoding="utf-8").splitlines()
    hf = tokenizers.Tokenizer.from_file(str(BUNDLED / "tokenizer.json"))
    scorer = dsf_lightning.from_pretrained("delta-rnn-ptb")
    got = [e.ids for e in hf.encode_batch(lines)]
    want = [ours(scorer.tokenizer, scorer.vocab, line) for line in lines]
    assert sum(map(len, want)) == 82430  # PTB test: 78,669 words + 3,761 <eos>
    assert got == want
