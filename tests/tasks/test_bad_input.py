"""Bad input to the sequence tasks fails with a message that says what was wrong and what to do (issue 6).

Already covered elsewhere: ``centroid_decisions`` of a non-sr classifier (tests/tasks/test_modules.py), a
malformed DFA (test_dfa.py), ``accepting="labels"`` without labels (test_extraction.py).
"""

import pytest
import torch

from dsf_lightning.tasks import CopyingMemoryDataModule, SequenceClassifier, TomitaDataModule, Vocabulary
from dsf_lightning.tasks import languages as lang
from dsf_lightning.tasks.data import UnknownSymbolError
from dsf_lightning.tasks.dfa import DFAError, extract_dfa


# -- DFA extraction from a model without centroids ---------------------------------------------------
def test_dfa_extraction_of_a_cell_without_centroids_names_the_sr_cells():
    vocab = Vocabulary(lang.BINARY)
    model = SequenceClassifier(vocab_size=len(vocab), cell="gru", hidden_size=4)
    with pytest.raises(DFAError, match=r"state-regularized.*GRUCell.*sr-gru"):
        extract_dfa(model, ["01", "10"], vocab)
    with pytest.raises(DFAError, match="SequenceClassifier with an sr-\\* cell"):
        extract_dfa(torch.nn.Linear(2, 2), ["01"], vocab)  # not a sequence classifier at all
    with pytest.raises(TypeError, match="not state-regularized.*use an sr-\\* cell"):
        model.transition_trace(torch.tensor([[1, 3, 2]]), torch.tensor([3]))


def test_dfa_extraction_reading_centroids_of_a_cell_with_memory_says_which_options_work():
    vocab = Vocabulary(lang.BINARY)
    model = SequenceClassifier(vocab_size=len(vocab), cell="sr-lstm", hidden_size=4, cell_options={"k": 3})
    with pytest.raises(DFAError, match=r"memory-less.*accepting='labels'"):
        extract_dfa(model, ["01", "10"], vocab)  # accepting="classifier" (the default)
    with pytest.raises(DFAError, match="fill_missing"):
        extract_dfa(model, ["01", "10"], vocab, labels=[0, 1], accepting="labels", fill_missing="network")
    # what the message suggests works
    result = extract_dfa(model, ["01", "10", "0"], vocab, labels=[0, 1, 1], accepting="labels")
    assert result.dfa.alphabet == lang.BINARY and result.centroid_accept_probability is None


# -- symbols outside the alphabet --------------------------------------------------------------------
def test_encoding_a_symbol_outside_the_alphabet_names_it_and_the_fix():
    vocab = Vocabulary(lang.BINARY)
    with pytest.raises(UnknownSymbolError, match=r"'012'.*'2'.*alphabet is '0', '1'.*unk=True") as err:
        vocab.encode("012")
    assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)  # what callers caught before
    with pytest.raises(UnknownSymbolError, match=r"'good', 'film'"):
        Vocabulary(["a", "bad"]).encode(["a", "good", "film", "good"])
    assert Vocabulary(lang.BINARY, unk=True).encode("012")[-2] == 3  # the suggested fix: <unk>


def test_task_data_and_classifier_reject_strings_outside_the_task_alphabet():
    data = TomitaDataModule(grammar=4)
    with pytest.raises(UnknownSymbolError, match=r"'a'.*'0', '1'"):
        data.vocab.encode("01a")
    model = SequenceClassifier(vocab_size=len(data.vocab), cell="sr-gru", hidden_size=4, cell_options={"k": 3})
    with pytest.raises(UnknownSymbolError, match="'x'"):
        model.predict_strings(["01", "0x1"], data.vocab)
    with pytest.raises(ValueError, match="over '0' and '1'"):
        lang.tomita_accepts(4, "0120")


def test_dfa_run_and_extraction_reject_symbols_outside_the_alphabet():
    dfa = lang.tomita_dfa(1)
    with pytest.raises(DFAError, match=r"'1a1'.*\['a'\].*alphabet \('0', '1'\)"):
        dfa.accepts("1a1")
    with pytest.raises(DFAError, match="outside"):
        dfa.run(["1", "2"])
    vocab = Vocabulary(lang.BINARY)
    model = SequenceClassifier(vocab_size=len(vocab), cell="sr-gru", hidden_size=4, cell_options={"k": 3})
    with pytest.raises(DFAError, match=r"string 1 \('0b'\).*\['b'\]"):
        extract_dfa(model, ["01", "0b"], vocab)


# -- copying memory with a time lag below 1 ----------------------------------------------------------
@pytest.mark.parametrize("lag", [0, -5, 2.5, True])
def test_copying_memory_needs_a_time_lag_of_at_least_one(lag):
    with pytest.raises(ValueError, match=r"lag is the time lag T .* integer >= 1"):
        CopyingMemoryDataModule(lag=lag, train_size=4, test_size=4)  # at construction, not at setup
    with pytest.raises(ValueError, match="time lag T"):
        lang.copying_memory(4, lag)
    with pytest.raises(ValueError, match="time lag T"):
        lang.copying_baseline_loss(lag)


def test_copying_memory_needs_something_to_copy():
    with pytest.raises(ValueError, match=r"n is the number of symbols to copy .* got n=0"):
        CopyingMemoryDataModule(lag=5, n=0)
    assert lang.copying_memory(2, lag=1, n=1)[0].shape == (2, 3)  # the smallest valid task
