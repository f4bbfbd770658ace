"""Dynamic evaluation: strictly test-then-train, on a copy, and it helps on a repetitive stream."""

import math

import pytest
import torch
import torch.nn.functional as F

from dsf_lightning.evaluation import dynamic_evaluation
from dsf_lightning.model import LMConfig, RecurrentLM


@pytest.fixture
def model():
    torch.manual_seed(0)
    return RecurrentLM(LMConfig(vocab_size=17, hidden_sizes=[24], embedding_size=24, tie_weights=True)).eval()


def stream(seed, n=600):
    """A stream with a repeated phrase: something a model can pick up while it is evaluated."""
    g = torch.Generator().manual_seed(seed)
    phrase = torch.randint(0, 17, (12,), generator=g)
    return phrase.repeat(n // 12)


def static_nll(model, ids, context):
    with torch.no_grad():
        logits, _ = model(torch.cat([torch.tensor([context]), ids[:-1]])[None])
        return float(F.cross_entropy(logits[0], ids, reduction="sum"))


def test_with_lr_zero_it_is_static_evaluation_of_one_stream(model):
    ids = stream(1)
    result = dynamic_evaluation(model, {"test": ids}, lr=0.0, segment_length=7, context_token=0)["test"]
    assert result.tokens == ids.numel()
    assert result.nll == pytest.approx(static_nll(model, ids, 0), rel=1e-5)


def test_the_first_segment_is_predicted_before_any_update(model):
    ids = stream(2)
    first = dynamic_evaluation(model, {"test": ids[:9]}, lr=0.5, segment_length=9, context_token=0)["test"]
    assert first.nll == pytest.approx(static_nll(model, ids[:9], 0), rel=1e-5)


def test_the_callers_weights_are_untouched(model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    dynamic_evaluation(model, {"test": stream(3)}, lr=0.1, segment_length=10, context_token=0)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_learning_while_evaluating_lowers_perplexity_and_2_differs_from_1(model):
    valid, test = stream(4), stream(4)  # the same phrase recurs in both splits
    static = math.exp(static_nll(model, test, 0) / test.numel())
    one = dynamic_evaluation(model, {"test": test}, lr=0.05, segment_length=12, context_token=0)["test"]
    two = dynamic_evaluation(model, {"valid": valid, "test": test}, lr=0.05, segment_length=12, context_token=0)
    assert one.ppl < static / 2
    assert two["test"].ppl < one.ppl  # having "compressed" the validation split first helps on test


@pytest.mark.parametrize("kwargs,message", [({"segment_length": 0}, "segment_length"), ({"lr": -1.0}, "lr")])
def test_bad_arguments(model, kwargs, message):
    with pytest.raises(ValueError, match=message):
        dynamic_evaluation(model, {"test": stream(5)}, **kwargs)
