"""Issue 35, Hugging Face conventions: a folder's ``tokenizer.json`` is written by the ``tokenizers`` library
and carries the model's text normalizer, so ``tokenizers.Tokenizer.from_file(path).encode(raw).ids`` gives
the Scorer's ids on raw text (capitals, digits, punctuation); the character model's file reads plain text."""

import os
from pathlib import Path

import pytest
import tokenizers

import dsf_lightning
from dsf_lightning.data.normalize import get_normalizer
from dsf_lightning.hub import PretrainedFormatError
from dsf_lightning.hub.hf_tokenizer import hf_tokenizer_json
from dsf_lightning.model.pretrained import load_pretrained, save_pretrained
from dsf_lightning.scoring import Scorer

from .conftest import rehash

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = Path(dsf_lightning.__file__).parent / "pretrained"
DATA_ROOT = Path(os.environ.get("DSF_DATA_ROOT", ROOT.parent / "shared" / "data"))
ISSUE = "The Market rose 3.5% to $1,200 on Monday."
RAW = [
    ISSUE,
    "Mr. Smith didn't go. He said no! Investors' shares rose; Consolidated Freight Corp. fell 4% (to $12.5 million).",
    "U.S. officials, Dr. Jones and Gov. Brown said the 1980s were \"good\" -- really... for 30-year bonds?",
    "I can't; it's 3:30 p.m. and I won't wait. The rate was 1/2 point, US$3 or #5 and/or more.",
    "\u201cCaf\u00e9 na\u00efve\u201d \u2014 she said \u2018no\u2019. Then Wash. Ore. and No. 5 fell. 'Tis the '80s' end.",
    "Question?! Yes. . . No.. <unk> and N and \u00a3200, cannot & will 13th.",
]


def scorer_ids(pretrained, line):
    """What the Scorer reads for a raw line: each normalized sentence, tokenized with its <eos>."""
    normalizer = get_normalizer(pretrained.normalize)
    return [i for s in normalizer.normalize_line(line) for i in pretrained.vocab.encode(pretrained.tokenizer.tokenize_line(s))]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The bundled word and character models, saved again (as `dsf export` and save_pretrained write them)."""
    out = tmp_path_factory.mktemp("reexported")
    return {name: save_pretrained(load_pretrained(BUNDLED / name), out / name, dtype="float16") for name in ("delta-rnn-ptb", "delta-rnn-ptb-char")}


def test_the_word_models_tokenizer_json_gives_the_scorers_ids_on_raw_text(exported):
    folder = exported["delta-rnn-ptb"]
    hf = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    pretrained = load_pretrained(folder)
    ids = hf.encode(ISSUE).ids
    assert pretrained.vocab.unk_id not in ids  # it was 6 of 9 tokens before the normalizer was carried
    assert ids == scorer_ids(pretrained, ISSUE)
    assert hf.encode(ISSUE).tokens == ["the", "market", "rose", "N", "N", "to", "$", "N", "on", "monday", "<eos>"]
    for line in RAW:
        assert hf.encode(line).ids == scorer_ids(pretrained, line), line
    # the Scorer itself reads the same ids
    scorer = Scorer(pretrained)
    assert [t for s in scorer.text_lines(ISSUE) for t in pretrained.tokenizer.tokenize_line(s)] == hf.encode(ISSUE).tokens


@pytest.mark.corpus
def test_the_word_normalizer_agrees_on_raw_corpora(exported):
    """Newswire, Tiny Shakespeare and WikiText-2 lines (4,000+ lines with capitals, digits, punctuation):
    every one gives the Scorer's ids (the differences left, in hub/hf_tokenizer.py's docstring, are edge cases)."""
    folder = exported["delta-rnn-ptb"]
    hf = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    pretrained = load_pretrained(folder)
    sources = [ROOT / "tests" / "assets" / "newswire.txt", DATA_ROOT / "tinyshakespeare" / "input.txt", DATA_ROOT / "wikitext2" / "wiki.valid.tokens"]
    if not all(p.is_file() for p in sources):
        pytest.skip("raw corpora not under DSF_DATA_ROOT")
    lines = [line for p in sources for line in p.read_text(encoding="utf-8").splitlines()[:3000] if line.strip()]
    theirs = [e.ids for e in hf.encode_batch(lines)]
    differ = [line for line, ids in zip(lines, theirs) if ids != scorer_ids(pretrained, line)]
    assert len(lines) > 4000 and differ == []


def test_the_character_models_tokenizer_json_reads_plain_text(exported):
    folder = exported["delta-rnn-ptb-char"]
    hf = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    pretrained = load_pretrained(folder)
    assert hf.encode("the market").tokens == ["t", "h", "e", "_", "m", "a", "r", "k", "e", "t", "<eos>"]
    for line in ["the market", *RAW]:
        assert hf.encode(line).ids == scorer_ids(pretrained, line), line


def test_a_folder_without_the_normalizer_still_loads_and_a_wrong_one_is_refused(exported, tmp_path):
    """Folders exported before the normalizer was carried (their tokenizer.json reads normalized text) load;
    a tokenizer.json whose normalizer is neither is refused even with config.json rehashed."""
    import json
    import shutil

    folder = shutil.copytree(exported["delta-rnn-ptb"], tmp_path / "old")
    pretrained = load_pretrained(folder)
    (folder / "tokenizer.json").write_text(hf_tokenizer_json(pretrained.tokenizer, pretrained.vocab), encoding="utf-8")
    rehash(folder)
    assert load_pretrained(folder).vocab.stoi == pretrained.vocab.stoi
    document = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    document["normalizer"] = {"type": "Lowercase"}
    (folder / "tokenizer.json").write_text(json.dumps(document), encoding="utf-8")
    rehash(folder)
    with pytest.raises(PretrainedFormatError, match="its normalizer is not the one"):
        load_pretrained(folder)


def test_the_differences_left_are_the_documented_ones(exported):
    """What a regex pipeline cannot express (hub/hf_tokenizer.py's docstring): an empty line is [<eos>] there and
    nothing for the Scorer; a ptb-char line already spelled out is kept as it is by the Scorer, normalized again
    there. If one of these starts to agree, update the docstring and this test."""
    word = tokenizers.Tokenizer.from_file(str(exported["delta-rnn-ptb"] / "tokenizer.json"))
    char = tokenizers.Tokenizer.from_file(str(exported["delta-rnn-ptb-char"] / "tokenizer.json"))
    pretrained = load_pretrained(exported["delta-rnn-ptb-char"])
    assert word.encode("").tokens == ["<eos>"] and scorer_ids(pretrained, "") == []
    spelled = "t h e _ c a t"
    assert scorer_ids(pretrained, spelled) == pretrained.vocab.encode(spelled.split() + ["<eos>"])
    assert char.encode(spelled).tokens == ["t", "_", "h", "_", "e", "_", "c", "_", "a", "_", "t", "<eos>"]  # each symbol a word


# ------------------------------------------------------------------ config.json, card, dtype, device
def test_config_json_names_model_type_and_architectures_and_the_card_a_license(tmp_path):
    import json

    from huggingface_hub import ModelCard

    from dsf_lightning.model import RecurrentLM

    folder = save_pretrained(load_pretrained(BUNDLED / "delta-rnn-ptb"), tmp_path / "lm")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "dsf-recurrent-lm" and config["architectures"] == [RecurrentLM.__name__]
    assert ModelCard.load(folder / "README.md").data.license == "apache-2.0"
    other = save_pretrained(load_pretrained(folder), tmp_path / "mit", card_extra={"license": "mit"})
    assert ModelCard.load(other / "README.md").data.license == "mit"


def test_save_pretrained_keeps_the_folders_dtype_and_the_cards_results(tmp_path):
    import json

    import torch
    from huggingface_hub import ModelCard

    from dsf_lightning.model import RecurrentLM

    results = [{"metric": "perplexity", "value": 77.7, "dataset": "ptb", "split": "test"}]
    first = save_pretrained(load_pretrained(BUNDLED / "delta-rnn-ptb"), tmp_path / "a", dtype="float16", eval_results=results,
                            card_extra={"license": "mit"})
    again = save_pretrained(load_pretrained(first), tmp_path / "b")  # the functional API
    model = RecurrentLM.from_pretrained(first, torch_dtype=torch.bfloat16)  # and the mixin, whatever dtype it runs in
    mixin = model.save_pretrained(tmp_path / "c")
    for folder in (again, mixin):
        assert json.loads((folder / "config.json").read_text())["weights"]["dtype"] == "float16"
        card = ModelCard.load(folder / "README.md").data
        assert [(r.metric_type, r.metric_value, r.dataset_split) for r in card.eval_results] == [("perplexity", 77.7, "test")]
        assert card.license == "mit"
    assert (again / "model.safetensors").read_bytes() == (first / "model.safetensors").read_bytes()
    asked = save_pretrained(load_pretrained(first), tmp_path / "d", dtype="float32")  # an explicit dtype wins
    assert json.loads((asked / "config.json").read_text())["weights"]["dtype"] == "float32"


def test_torch_dtype_is_an_alias_of_dtype():
    import torch

    from dsf_lightning.model import RecurrentLM

    assert next(RecurrentLM.from_pretrained(BUNDLED / "delta-rnn-ptb", torch_dtype="bfloat16").parameters()).dtype == torch.bfloat16
    assert Scorer.from_pretrained(BUNDLED / "delta-rnn-ptb", torch_dtype=torch.float16).pretrained.model.embedding.weight.dtype == torch.float16
    with pytest.raises(TypeError, match="torch_dtype is another name for dtype"):
        RecurrentLM.from_pretrained(BUNDLED / "delta-rnn-ptb", dtype="float32", torch_dtype="float16")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_a_device_this_machine_lacks_is_one_clear_error_before_anything_is_read(tmp_path, device):
    from dsf_lightning.model import RecurrentLM
    from dsf_lightning.scoring import ScoringError

    for load, error in ((RecurrentLM.from_pretrained, ValueError), (Scorer.from_pretrained, ScoringError)):
        with pytest.raises(error) as caught:
            load(tmp_path / "no-such-folder", device=device)  # the device is refused first: the folder is never looked at
        message = str(caught.value)
        assert "\n" not in message and device in message and "cpu" in message


def test_the_hand_written_safetensors_file_is_what_the_library_reads_and_the_same_at_every_save(exported, tmp_path):
    """hub/_safetensors.py keeps its writer (the library's writes metadata in hash order: measured there); the
    safetensors library must read every tensor and the metadata back, and a second save is byte-identical."""
    import torch
    from safetensors import safe_open

    from dsf_lightning.hub._safetensors import parse

    folder = exported["delta-rnn-ptb"]
    ours, metadata = parse((folder / "model.safetensors").read_bytes())
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        assert f.metadata() == metadata and sorted(f.keys()) == sorted(ours)
        assert all(torch.equal(f.get_tensor(name), tensor) for name, tensor in ours.items())
    again = save_pretrained(load_pretrained(folder), tmp_path / "again")
    assert (again / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()


def test_a_classifier_saved_again_keeps_its_folders_dtype_and_card(tmp_path):
    import json

    from huggingface_hub import ModelCard

    from dsf_lightning.tasks import SequenceClassifier

    bundled = BUNDLED / "sr-lstm-p-imdb"
    assert json.loads((bundled / "config.json").read_text())["weights"]["dtype"] == "float16"
    folder = SequenceClassifier.from_pretrained(bundled).save_pretrained(tmp_path / "copy")
    config = json.loads((folder / "config.json").read_text())
    assert config["weights"]["dtype"] == "float16" and config["model_type"] == "dsf-sequence-classifier"
    assert (folder / "model.safetensors").read_bytes() == (bundled / "model.safetensors").read_bytes()
    mine, theirs = (ModelCard.load(f / "README.md").data for f in (folder, bundled))
    assert mine.license == theirs.license == "apache-2.0" and mine.eval_results == theirs.eval_results


def test_the_ptb_char_normalizer_writes_its_own_word_separator_whatever_the_tokenizers_space():
    """ptb-char writes '_' between words (PTBCharNormalizer.space); a char tokenizer whose own space symbol is
    another reads that '_' as a symbol, and the tokenizers file must too."""
    from dsf_lightning.data.tokenizers import get_tokenizer
    from dsf_lightning.data.vocab import Vocabulary

    tokenizer = get_tokenizer("char", mode="ptb", space="|")
    vocab = Vocabulary(["<eos>", *"abcdefghijklmnopqrstuvwxyz_N.'"], eos="<eos>")
    hf = tokenizers.Tokenizer.from_str(hf_tokenizer_json(tokenizer, vocab, "ptb-char"))
    normalizer = get_normalizer("ptb-char")
    for line in ["The cat sat. 3 dogs", "ab cd", "Mr. Dog's bone!"]:
        want = [i for s in normalizer.normalize_line(line) for i in vocab.encode(tokenizer.tokenize_line(s))]
        assert hf.encode(line).ids == want, line
