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


# -- per-sentence updates (the DSF paper's "updating the model sample-by-sample after each evaluation",
#    sec 4.2; its samples are sentences) ---------------------------------------------------------------
EOS = 16


def sentences_stream(seed=6):
    """Sentences of 3 to 11 tokens (ids 0..15), each closed by EOS, a phrase repeated so that learning helps."""
    g = torch.Generator().manual_seed(seed)
    phrase = torch.randint(0, 16, (11,), generator=g)
    lengths = torch.randint(3, 12, (30,), generator=g).tolist()
    return torch.cat([torch.cat([phrase[:n], torch.tensor([EOS])]) for n in lengths]), lengths


def per_sentence_by_hand(model, ids, lr, context):
    """Test-then-train written out: predict one sentence (through its EOS) with the current weights, then
    w <- w - lr * d(summed NLL of the sentence)/dw, carry the state; returns (nll, number of updates)."""
    import copy

    learner = copy.deepcopy(model).eval()
    nll, updates, state, prev, start = 0.0, 0, None, context, 0
    ends = (ids == EOS).nonzero().flatten().tolist()
    for end in ends:
        targets = ids[start : end + 1]
        inputs = torch.cat([torch.tensor([prev]), targets[:-1]])
        logits, state = learner(inputs[None], state)
        loss = F.cross_entropy(logits[0], targets, reduction="sum")
        nll += float(loss)
        grads = torch.autograd.grad(loss, list(learner.parameters()))
        with torch.no_grad():
            for p, g in zip(learner.parameters(), grads):
                p -= lr * g
        updates += 1
        state = tuple(tuple(s.detach() for s in layer) for layer in state)
        prev, start = int(targets[-1]), end + 1
    return nll, updates


def test_per_sentence_updates_happen_at_sentence_ends_and_nowhere_else(model, monkeypatch):
    ids, lengths = sentences_stream()
    steps = []
    real_step = torch.optim.SGD.step
    monkeypatch.setattr(torch.optim.SGD, "step", lambda self, *a, **k: (steps.append(1), real_step(self, *a, **k))[1])
    got = dynamic_evaluation(model, {"test": ids}, lr=0.05, updates="sentence", sentence_end=EOS, context_token=EOS)["test"]
    want_nll, want_updates = per_sentence_by_hand(model, ids, 0.05, EOS)
    assert len(steps) == want_updates == len(lengths)  # one update per sentence
    assert got.tokens == ids.numel()
    assert got.nll == pytest.approx(want_nll, rel=1e-6)
    # not the 20-token segmentation: the default mode updates elsewhere and scores differently
    segments = dynamic_evaluation(model, {"test": ids}, lr=0.05, context_token=EOS)["test"]
    assert abs(segments.nll - got.nll) > 1e-3 * got.nll


def test_per_sentence_updates_need_a_sentence_end(model):
    with pytest.raises(ValueError, match="sentence_end"):
        dynamic_evaluation(model, {"test": stream(5)}, updates="sentence")
    with pytest.raises(ValueError, match="updates.*'segment'.*'sentence'"):
        dynamic_evaluation(model, {"test": stream(5)}, updates="word", context_token=0)


def test_a_trailing_unfinished_sentence_is_scored_and_learned_from(model):
    ids, _ = sentences_stream()
    ids = torch.cat([ids, torch.tensor([1, 2, 3])])  # no EOS at the end
    got = dynamic_evaluation(model, {"test": ids}, lr=0.0, updates="sentence", sentence_end=EOS, context_token=EOS)
    assert got["test"].tokens == ids.numel()
    assert got["test"].nll == pytest.approx(static_nll(model, ids, EOS), rel=1e-5)


@pytest.mark.parametrize("extra, recipe_accelerator, expected", [
    ((), None, "cpu"),  # Lightning's auto, no CUDA here
    (("--trainer.accelerator", "cpu"), "gpu", "cpu"),  # the command line wins over the recipe
    (("--trainer.accelerator=cpu",), None, "cpu"),
    (("--trainer.accelerator", "gpu"), None, ValueError),
    (("--trainer.accelerator=cuda",), "cpu", ValueError),
    ((), "gpu", ValueError),  # the recipe's when the command line says nothing
])
def test_dynamic_rows_are_evaluated_on_the_device_of_the_fits(extra, recipe_accelerator, expected, monkeypatch):
    """`dsf reproduce ... --trainer.accelerator gpu`: the dynamic rows run on the GPU too (on the CPU they took
    6-11 minutes each on PTB); asked for a GPU where torch sees none, a clear error instead of the CPU."""
    from dsf_lightning.reproduce.runner import evaluation_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    recipe = {"trainer": {"accelerator": recipe_accelerator}} if recipe_accelerator else {}
    if expected is ValueError:
        with pytest.raises(ValueError, match="no CUDA device"):
            evaluation_device(recipe, extra)
    else:
        assert evaluation_device(recipe, extra) == expected
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert evaluation_device(recipe, extra) == ("cpu" if expected == "cpu" and "cpu" in " ".join(extra) else "cuda")
