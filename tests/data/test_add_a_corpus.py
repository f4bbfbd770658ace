"""Adding a corpus is one spec (issue 36; docs/add-a-corpus.md): a :class:`CorpusSpec` registered in one place gives
a working DataModule, the model card's dataset id and language, the text normalizer, and a one-line message naming
the files that are missing. Nothing else in the library is keyed by a corpus's name."""

from __future__ import annotations

import lightning as L
import pytest
from huggingface_hub import ModelCard

from dsf_lightning.data.corpora import (
    CorpusError,
    CorpusSpec,
    FileSpec,
    find_corpus_spec,
    get_corpus_spec,
    list_corpora,
    load_corpus,
    normalizer_for_corpus,
    register_corpus,
)
from dsf_lightning.data.corpora import base as corpora_base
from dsf_lightning.data.normalize import PTBNormalizer
from dsf_lightning.data.tokenizers import WordTokenizer
from dsf_lightning.hub.card import build_model_card
from dsf_lightning.reproduce import runner
from dsf_lightning.tasks import IMDBSentimentDataModule, PixelMNISTDataModule, TomitaDataModule
from dsf_lightning.training.datamodule import LanguageModelDataModule
from tests.hub.conftest import tiny_pretrained

NAME = "tiny-news-e"
LINES = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"]


class TinyNews(CorpusSpec):
    """The corpus of this test: three text files under ``tiny_news/``, French by its card."""

    name = NAME
    description = "a tiny word corpus written by the test"
    folder = "tiny_news"
    howto = "write train.txt / valid.txt / test.txt into <data root>/tiny_news/"
    unk = "<unk>"
    dataset_id, language, normalizer = "example/tiny-news", "fr", "ptb"

    def files(self, opts: dict) -> dict[str, list[FileSpec]]:
        return {split: [FileSpec(f"tiny_news/{split}.txt")] for split in self.splits}

    def tokenizer(self, opts: dict) -> WordTokenizer:
        return WordTokenizer()


@pytest.fixture
def tiny_news():
    spec = register_corpus(TinyNews())  # the one place
    yield spec
    corpora_base._REGISTRY.pop(NAME, None)


def write(root, splits=("train", "valid", "test")):
    (root / "tiny_news").mkdir(parents=True, exist_ok=True)
    for split in splits:
        (root / "tiny_news" / f"{split}.txt").write_text("\n".join(LINES * (4 if split == "train" else 1)) + "\n")


def test_the_missing_files_are_named_in_one_line(tiny_news, tmp_path):
    write(tmp_path, splits=("train",))
    expected = [tmp_path / "tiny_news" / "valid.txt", tmp_path / "tiny_news" / "test.txt"]
    assert tiny_news.missing_files(tmp_path) == expected
    data = LanguageModelDataModule(NAME, data_root=str(tmp_path))
    assert data.missing_data() == expected
    # the reproduce runner asks the DataModule: one line naming the files, no table of its own to extend
    recipe = {"data": {"corpus": NAME}}
    why = runner._missing_data(recipe, runner.Row("r", "r", 1.0, "ppl", "x.yaml"), str(tmp_path))
    assert why == f"corpus missing: {NAME} needs tiny_news/valid.txt, tiny_news/test.txt under {tmp_path} " \
                  "(data root from argument data_root)"
    with pytest.raises(CorpusError) as err:  # loading it still says which files, where, and what to do
        data.prepare_data()
    assert "tiny_news/valid.txt" in str(err.value) and "write train.txt / valid.txt / test.txt" in str(err.value)
    write(tmp_path)
    assert tiny_news.missing_files(tmp_path) == data.missing_data() == []
    assert runner._missing_data(recipe, runner.Row("r", "r", 1.0, "ppl", "x.yaml"), str(tmp_path)) is None


def test_a_registered_spec_trains_with_the_datamodule(tiny_news, tmp_path):
    from dsf_lightning.training import LanguageModelModule

    write(tmp_path)
    assert NAME in list_corpora() and get_corpus_spec(NAME) is tiny_news
    data = LanguageModelDataModule(NAME, data_root=str(tmp_path), batch_size=2, bptt=4, eval_batch_size=1)
    L.seed_everything(0, verbose=False)
    module = LanguageModelModule(vocab_size=data.vocab_size, hidden_sizes=8, embedding_size=8)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, max_steps=2, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
                        limit_val_batches=1)
    trainer.fit(module, data)
    assert trainer.global_step == 2
    assert data.corpus.name == NAME and "mat" in data.corpus.vocab.symbols


def test_the_card_names_the_specs_dataset_and_language(tiny_news):
    pretrained = tiny_pretrained()
    pretrained.info["corpus"] = NAME
    data = build_model_card(pretrained).data
    assert data.datasets == ["example/tiny-news"] and data.language == "fr"
    assert {r.dataset_type for r in data.eval_results} == {"example/tiny-news"}  # the model-index too
    assert ModelCard(str(build_model_card(pretrained))).data.datasets == ["example/tiny-news"]


def test_the_text_normalizer_is_the_specs(tiny_news, tmp_path):
    write(tmp_path)
    assert normalizer_for_corpus(NAME) == "ptb"
    assert isinstance(LanguageModelDataModule(NAME, data_root=str(tmp_path)).text_normalizer(), PTBNormalizer)
    assert load_corpus(NAME, data_root=tmp_path, cache=False).info["normalize"] is None  # the corpus is read as written


def test_a_spec_with_an_unknown_normalizer_or_a_taken_alias_is_refused():
    class Misspelt(TinyNews):
        name, normalizer = "tiny-misspelt-e", "ptbb"

    with pytest.raises(CorpusError, match=r"tiny-misspelt-e.*'ptbb'.*known: none, .*ptb"):
        register_corpus(Misspelt())

    class Squatter(TinyNews):
        name, aliases = "tiny-squatter-e", ("imdb",)

    with pytest.raises(CorpusError, match="alias.*imdb"):
        register_corpus(Squatter())

    class NamedLikeAnAlias(TinyNews):
        name = "imdb"  # the sentiment task's data: its cards name imdb-subword's dataset

    with pytest.raises(CorpusError, match="alias.*imdb"):
        register_corpus(NamedLikeAnAlias())
    assert not {"tiny-misspelt-e", "tiny-squatter-e", "imdb"} & set(list_corpora())
    assert find_corpus_spec("imdb").name == "imdb-subword"


#: what hub/card.py's HUB_DATASETS / ENGLISH_CORPORA and data/normalize.py's CORPUS_NORMALIZERS said before the
#: facts moved onto the specs: the bundled corpora's cards and normalizers stay as they were
BEFORE = {
    "ptb": ("ptb_text_only", "en", "ptb"), "ptb-subword": ("ptb_text_only", "en", "ptb"),
    "ptb-char": ("ptb_text_only", "en", "ptb-char"), "wikitext2": ("wikitext", "en", None),
    "imdb": ("imdb", "en", None), "imdb-subword": ("imdb", "en", None),
    "tinyshakespeare": ("tiny_shakespeare", "en", None), "text8": (None, "en", None),
    "one-billion-word": (None, "en", None), "wmt-small": (None, None, None), "text-folder": (None, None, None),
    "srnn-wikipedia": (None, None, None), "gutenberg": (None, None, None),
}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_the_bundled_corpora_keep_their_facts(name):
    spec = find_corpus_spec(name)
    assert (spec.dataset_id, spec.language, normalizer_for_corpus(name)) == BEFORE[name]
    assert set(BEFORE) - {"imdb"} == set(list_corpora())  # every registered corpus is pinned here
    assert find_corpus_spec("tomita") is None and normalizer_for_corpus("tomita") is None


def test_the_task_datamodules_say_what_data_they_miss(tmp_path):
    imdb = IMDBSentimentDataModule(data_root=tmp_path)
    assert imdb.missing_data() == [tmp_path / "imdb" / "train.jsonl.xz", tmp_path / "imdb" / "test.jsonl.xz"]
    mnist = PixelMNISTDataModule(data_root=tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in mnist.missing_data()] == [
        "mnist/train-images-idx3-ubyte.gz", "mnist/train-labels-idx1-ubyte.gz",
        "mnist/t10k-images-idx3-ubyte.gz", "mnist/t10k-labels-idx1-ubyte.gz",
    ]
    assert len(PixelMNISTDataModule(data_root=tmp_path, split_test_file=True).missing_data()) == 2  # the test file only
    assert TomitaDataModule(grammar=3).missing_data() == []  # generated
