"""No bits per character on a word corpus: ``val_bpc`` / ``test_bpc`` are logged for character and subword corpora
(the reproduce runner's bpc rows read ``test_bpc``) and for data that names no tokenizer, never for words."""

import types

import pytest

from dsf_lightning.data.tokenizers import get_tokenizer

from .conftest import make_toy_corpus, quiet_trainer, toy_modules


@pytest.mark.parametrize("tokenizer, has_bpc", [("word", False), ("char", True), (None, True)])
def test_bpc_is_logged_except_for_words(tokenizer, has_bpc):
    corpus = make_toy_corpus()
    if tokenizer is not None:
        corpus = types.SimpleNamespace(**vars(corpus), tokenizer=get_tokenizer(tokenizer))
    model, data = toy_modules(corpus)
    trainer = quiet_trainer(limit_val_batches=2, limit_test_batches=2)
    validated = trainer.validate(model, datamodule=data, verbose=False)[0]
    assert "val_ppl" in validated and "val_loss" in validated
    assert ("val_bpc" in validated) == has_bpc, sorted(validated)
    tested = trainer.test(model, datamodule=data, verbose=False)[0]
    assert "test_ppl" in tested
    assert ("test_bpc" in tested) == has_bpc, sorted(tested)
