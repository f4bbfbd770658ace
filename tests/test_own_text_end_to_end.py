"""Issue 35: your own text, end to end, through the real ``dsf`` commands.

A folder of varied English the test writes (capitals, digits, punctuation; valid and test hold words train
lacks): train a tiny model from scratch, fine-tune the bundled ``delta-rnn-ptb``, export both with
``--evaluate test`` (which must read the folder the run trained on, recorded in the checkpoint), score a
sentence with each exported folder, and read each ``tokenizer.json`` with the ``tokenizers`` library, which
must give the scorer's ids on raw text.
"""

import json
import math
import random
from pathlib import Path

import pytest

import dsf_lightning
from dsf_lightning.cli import main

pytestmark = pytest.mark.slow

SUBJECTS = ["The Market", "Dr. Smith", "Our team", "The Bank of England", "Anna", "Shares of Acme Corp."]
VERBS = ["rose", "fell", "said", "reported", "expected", "bought", "sold", "warned"]
OBJECTS = ["3.5% on Monday", "$12 million in 2024", "profits, again", "the 10 new stores", "rates (briefly)",
           "a loss of 7 cents a share", "that prices would climb!", "its 2nd-quarter results?"]
ENDINGS = [".", "!", "?", ";", ", analysts said.", " - or so it seemed."]
SENTENCE = "The Market rose 3.5% on Monday, analysts said."
RAW = "Shares of Acme Corp. fell 12% in 2024; Dr. Smith warned!"


def write_text_folder(folder: Path) -> Path:
    rng = random.Random(35)

    def line(extra: list[str]) -> str:
        words = [rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS)]
        if extra:
            words.insert(rng.randrange(1, 3), rng.choice(extra))
        return " ".join(words) + rng.choice(ENDINGS)

    folder.mkdir(parents=True)
    (folder / "train.txt").write_text("\n".join(line([]) for _ in range(300)) + "\n", encoding="utf-8")
    unseen = ["naught", "Zebra", "1999", "quietly"]  # not in train: an open vocabulary reads them as <unk>
    for split in ("valid", "test"):
        (folder / f"{split}.txt").write_text("\n".join(line(unseen) for _ in range(40)) + "\n", encoding="utf-8")
    return folder


def run(argv: list[str]) -> None:
    assert main(argv) == 0, argv


def only_checkpoint(root: Path) -> Path:
    found = sorted(root.rglob("*.ckpt"))
    assert found, f"no checkpoint under {root}"
    return found[-1]


FIT = ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
       "--trainer.enable_model_summary", "false", "--data.batch_size", "4", "--data.bptt", "12",
       "--data.eval_batch_size", "2"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("own_text")
    text = write_text_folder(tmp / "my_text")
    options = json.dumps({"path": str(text)})
    run(["fit", "--data.corpus", "text-folder", "--data.corpus_options", options, "--model.hidden_sizes", "[24]",
         "--model.embedding_size", "16", "--trainer.default_root_dir", str(tmp / "scratch"), "--trainer.max_steps", "3", *FIT])
    run(["fit", "--model.init_from", "delta-rnn-ptb", "--model.lr", "0.0005", "--data.corpus", "text-folder",
         "--data.corpus_options", options, "--trainer.default_root_dir", str(tmp / "finetuned"), "--trainer.max_steps", "2", *FIT])
    folders = {}
    for name in ("scratch", "finetuned"):
        ckpt = only_checkpoint(tmp / name)
        assert not (tmp / name / "valid.txt").exists()  # --evaluate must find the folder from the checkpoint
        run(["export", str(ckpt), str(tmp / f"{name}-model"), "--evaluate", "test"])
        folders[name] = tmp / f"{name}-model"
    return {"text": text, **folders}


@pytest.mark.parametrize("name", ["scratch", "finetuned"])
def test_export_evaluates_the_folder_it_trained_on(exported, name):
    config = json.loads((exported[name] / "config.json").read_text())
    metrics = config["info"]["metrics"]
    assert math.isfinite(metrics["test_ppl"]) and metrics["test_ppl"] > 1
    assert metrics["test_tokens"] > 300  # the folder's test.txt (40 lines), not another corpus
    vocab = json.loads((exported[name] / "vocab.json").read_text())
    if name == "finetuned":  # the pretrained vocabulary and normalizer, not one rebuilt from the folder
        bundled = json.loads((Path(dsf_lightning.__file__).parent / "pretrained" / "delta-rnn-ptb" / "vocab.json").read_text())
        assert vocab == bundled and config["normalize"] == "ptb"
    else:  # an open vocabulary built from train.txt: test's unseen words became <unk>
        assert vocab["unk"] == "<unk>" and "naught" not in vocab["symbols"] and "Market" in vocab["symbols"]


@pytest.mark.parametrize("name", ["scratch", "finetuned"])
def test_exported_folder_scores_a_sentence(exported, name):
    scorer = dsf_lightning.from_pretrained(str(exported[name]))
    result = scorer.score(SENTENCE)
    assert math.isfinite(result.ppl) and result.ppl > 1 and result.num_tokens >= 8


@pytest.mark.parametrize("name", ["scratch", "finetuned"])
def test_tokenizers_file_gives_the_scorer_ids_on_raw_text(exported, name):
    tokenizers = pytest.importorskip("tokenizers")
    scorer = dsf_lightning.from_pretrained(str(exported[name]))
    for text in (SENTENCE, RAW):
        lines = scorer.text_lines(text)  # normalized as the scorer reads it (the PTB form for the fine-tuned model)
        want = [i for line in lines for i in scorer.vocab.encode(scorer.tokenizer.tokenize_line(line))]
        assert len(lines) == 1 and want
        path = exported[name] / "tokenizer.json"
        assert path.is_file(), f"{name}: no tokenizer.json"
        got = tokenizers.Tokenizer.from_file(str(path)).encode(text).ids
        assert got == want, (name, text, scorer.vocab.decode(got), scorer.vocab.decode(want))
