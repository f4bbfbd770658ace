"""Vocabulary: building order and cut-offs, encoding (unk vs closed), decoding, plain-JSON round trip."""

import json

import pytest
import torch

from dsf_lightning.data.vocab import Vocabulary, VocabularyError


def test_build_orders_specials_then_frequency_then_first_occurrence():
    lines = [["b", "a", "c"], ["a", "c", "d"], ["a"]]
    vocab = Vocabulary.build(lines, specials=("<eos>",), eos="<eos>", unk="<unk>")
    # a:3, c:2, then the count-1 tie b, d in order of first occurrence
    assert vocab.symbols == ["<eos>", "<unk>", "a", "c", "b", "d"]
    assert vocab.stoi == {s: i for i, s in enumerate(vocab.symbols)}
    assert (vocab.eos_id, vocab.unk_id) == (0, 1)
    assert len(vocab) == 6 and "d" in vocab and "z" not in vocab


def test_build_accepts_a_flat_token_stream():
    vocab = Vocabulary.build(iter("abracadabra"), specials=(), eos=None)
    assert vocab.symbols == ["a", "b", "r", "c", "d"]
    assert vocab.eos is None and vocab.eos_id is None


def test_min_count_and_max_size_count_specials():
    tokens = ["x"] * 5 + ["y"] * 3 + ["z"]
    assert Vocabulary.build(tokens, min_count=2, unk="<unk>").symbols == ["<eos>", "<unk>", "x", "y"]
    assert Vocabulary.build(tokens, max_size=3, unk="<unk>").symbols == ["<eos>", "<unk>", "x"]
    with pytest.raises(VocabularyError, match="max_size=1"):
        Vocabulary.build(tokens, max_size=1, unk="<unk>")
    with pytest.raises(VocabularyError, match="min_count"):
        Vocabulary.build(tokens, min_count=0)


def test_encode_maps_unknown_to_unk_when_open():
    vocab = Vocabulary(["<eos>", "<unk>", "a"], unk="<unk>")
    assert vocab.encode(["a", "zzz", "<eos>"]) == [2, 1, 0]
    assert not vocab.closed


def test_encode_closed_vocabulary_names_token_and_source():
    vocab = Vocabulary(["<eos>", "a", "b"])
    assert vocab.closed
    with pytest.raises(VocabularyError) as info:
        vocab.encode(["a", "Q", "b"], source="data/test.txt line 7")
    message = str(info.value)
    assert "'Q'" in message and "data/test.txt line 7" in message and "closed" in message
    assert isinstance(info.value, ValueError)


def test_decode_accepts_lists_and_tensors_and_checks_range():
    vocab = Vocabulary(["<eos>", "a", "b"])
    assert vocab.decode([1, 2, 0]) == ["a", "b", "<eos>"]
    assert vocab.decode(torch.tensor([2, 1])) == ["b", "a"]
    with pytest.raises(VocabularyError, match="id 3"):
        vocab.decode([0, 3])
    with pytest.raises(VocabularyError, match="id -1"):
        vocab.decode([-1])


def test_json_round_trip_is_plain_json(tmp_path):
    vocab = Vocabulary(["<eos>", "<unk>", "é", "_", "<"], unk="<unk>")
    data = json.loads(vocab.to_json())
    assert data["symbols"] == ["<eos>", "<unk>", "é", "_", "<"]
    assert (data["eos"], data["unk"]) == ("<eos>", "<unk>")
    assert Vocabulary.from_json(vocab.to_json()) == vocab
    vocab.save(tmp_path / "vocab.json")
    again = Vocabulary.load(tmp_path / "vocab.json")
    assert again == vocab and again.stoi == vocab.stoi
    assert not (tmp_path / "vocab.json").read_bytes().startswith(b"\x80")  # not a pickle


@pytest.mark.parametrize("text", ["not json", '{"symbols": ["a"]}', "[1, 2]"])
def test_from_json_rejects_foreign_documents(text):
    with pytest.raises(VocabularyError):
        Vocabulary.from_json(text)


def test_invalid_definitions_are_rejected():
    with pytest.raises(VocabularyError, match="duplicate"):
        Vocabulary(["<eos>", "a", "a"])
    with pytest.raises(VocabularyError, match="eos symbol"):
        Vocabulary(["a"], eos="<eos>")
    with pytest.raises(VocabularyError, match="unk symbol"):
        Vocabulary(["<eos>"], unk="<unk>")
