"""``--trainer.precision auto`` (issue 39): fp32 or bf16-mixed, whichever the timing says trains faster here,
resolved before the Trainer is built and said in one log line; a stand-in timing decides both ways."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from dsf_lightning.cli import main
from dsf_lightning.training import LanguageModelModule
from dsf_lightning.training import precision as auto

from ..test_cli_edges import _lm_args


class _Shape:
    batch_size, bptt = 2, 5


def _module() -> LanguageModelModule:
    return LanguageModelModule(vocab_size=11, cell="delta-rnn", hidden_sizes=[8])


def _stand_in(fp32: float, bf16: float):
    asked = []

    def timing(precision: str) -> float:
        asked.append(precision)
        return {auto.FP32: fp32, auto.BF16: bf16}[precision]
    return timing, asked


@pytest.fixture
def lines(monkeypatch):
    """The lines rank_zero_info logs (Lightning's logger does not propagate to pytest's capture)."""
    seen: list[str] = []
    monkeypatch.setattr("lightning.pytorch.utilities.rank_zero_info", lambda message, *a, **k: seen.append(message))
    return seen


@pytest.mark.parametrize(("fp32", "bf16", "expected", "why"), [
    (1000.0, 2500.0, "bf16-mixed", "bf16-mixed measured 2.50x fp32's rate"),
    (2273.0, 1690.0, "32-true", "fp32 measured 1.34x bf16-mixed's rate"),  # the Xeon without AMX
    (1000.0, 1020.0, "32-true", "only 1.02x fp32's rate (under the 5% margin)"),  # noise keeps full precision
])
def test_auto_takes_the_precision_the_timing_says_is_faster(fp32, bf16, expected, why, lines):
    timing, asked = _stand_in(fp32, bf16)
    chosen = auto.resolve_auto_precision({"precision": "auto", "accelerator": "cpu"}, _module(), _Shape(), timing)
    assert chosen == {"precision": expected} and asked == ["32-true", "bf16-mixed"]
    assert len(lines) == 1 and lines[0].startswith(f"precision auto -> {expected}: ")
    assert f"32-true {fp32:,.0f} tokens/CPU s, bf16-mixed {bf16:,.0f}" in lines[0] and why in lines[0]


def test_a_precision_given_is_left_alone_and_a_failed_timing_falls_back_to_the_hardware(lines):
    timing, asked = _stand_in(1.0, 2.0)
    assert auto.resolve_auto_precision({"precision": "bf16-mixed"}, _module(), _Shape(), timing) == {}
    assert asked == [] and lines == []

    def broken(precision: str) -> float:
        raise RuntimeError("no memory for the second window")

    chosen = auto.resolve_auto_precision({"precision": "auto", "accelerator": "cpu"}, _module(), _Shape(), broken)
    from dsf_lightning._machine import isa_flags

    assert chosen == {"precision": "bf16-mixed" if isa_flags()["amx_bf16"] else "32-true"}
    assert "timing failed (no memory for the second window)" in lines[0]


@pytest.mark.parametrize("config", [{"devices": 2}, {"devices": "0,1"}, {"devices": -1}, {"num_nodes": 2}])
def test_several_processes_decide_from_the_hardware_not_each_from_its_own_timing(config, lines):
    timing, asked = _stand_in(1000.0, 2500.0)
    chosen = auto.resolve_auto_precision({"precision": "auto", "accelerator": "cpu", **config}, _module(), _Shape(), timing)
    from dsf_lightning._machine import isa_flags

    assert asked == [] and chosen == {"precision": "bf16-mixed" if isa_flags()["amx_bf16"] else "32-true"}
    assert "not timed (several processes, each would time on its own)" in lines[0]
    assert not auto.several_processes({"devices": 1}) and not auto.several_processes({"devices": "auto"})


def test_the_real_timing_measures_both_and_leaves_the_module_and_random_state_as_they_were():
    module = _module()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    rng = torch.get_rng_state()
    timing = auto.language_model_timing(module, batch_size=2, bptt=5, windows=2, warmup=1)
    rates = {p: timing(p) for p in (auto.FP32, auto.BF16)}
    assert all(rate > 0 for rate in rates.values())
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng)
    assert auto.choose_precision(lambda p: rates[p]).precision in (auto.FP32, auto.BF16)


def test_dsf_fit_with_precision_auto_logs_the_choice_and_trains_with_it(tiny_folder, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    code = ("import functools, sys, lightning.pytorch.trainer.trainer as t\n"
            "from dsf_lightning.cli import main\n"
            "init = t.Trainer.__init__\n"
            "@functools.wraps(init)\n"  # its signature kept: LightningCLI reads the options from it
            "def spy(self, *a, **k):\n"
            "    print('TRAINER PRECISION', k.get('precision'), flush=True)\n"
            "    init(self, *a, **k)\n"
            "t.Trainer.__init__ = spy\n"
            "sys.exit(main(sys.argv[1:]))\n")
    done = subprocess.run([sys.executable, "-c", code, "fit", *_lm_args(tiny_folder), "--trainer.precision", "auto",
                           "--trainer.max_steps", "2"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in (done.stdout + done.stderr).splitlines() if ln.startswith("precision auto -> "))
    chosen = line.split("->", 1)[1].split(":", 1)[0].strip()
    assert chosen in ("32-true", "bf16-mixed") and "tokens/CPU s" in line  # measured on this CPU
    # the two throwaway timing Trainers, then the run's own with the precision the line names
    built = [ln.split()[-1] for ln in done.stdout.splitlines() if ln.startswith("TRAINER PRECISION")]
    assert built == ["32-true", "bf16-mixed", chosen]


def test_a_precision_lightning_does_not_know_is_still_refused(tiny_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        main(["fit", *_lm_args(tiny_folder), "--trainer.precision", "fastest", "--trainer.max_steps", "1"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and len(err.strip().splitlines()) == 1
    assert 'Parser key "trainer.precision"' in err and "Given value: fastest" in err and "'auto'" in err


def test_the_log_line_names_both_rates_and_the_reason():
    choice = auto.choose_precision(lambda p: {auto.FP32: 2273.0, auto.BF16: 1690.0}[p])
    assert choice.line() == ("precision auto -> 32-true: 32-true 2,273 tokens/CPU s, bf16-mixed 1,690; "
                             "fp32 measured 1.34x bf16-mixed's rate on this machine")


def test_the_timing_runs_a_recipe_whose_sampled_loss_counts_the_corpus():
    """A sampled softmax with unigram noise reads the training split in ``setup``; the timing's random tokens are
    that split (it failed with "'NoneType' object has no attribute 'corpus'" and fell back to the hardware)."""
    module = LanguageModelModule(vocab_size=11, cell="delta-rnn", hidden_sizes=[8], sampled_loss="sampled_softmax",
                                 sampled_loss_samples=4, sampled_loss_noise="unigram")
    timing = auto.language_model_timing(module, batch_size=2, bptt=5, windows=2, warmup=1)
    assert all(timing(p) > 0 for p in (auto.FP32, auto.BF16))
    choice = auto.choose_precision(timing)
    assert "timing failed" not in choice.line()


def test_unigram_noise_without_a_corpus_is_a_clear_error(tmp_path):
    import lightning as L
    from torch.utils.data import DataLoader

    module = LanguageModelModule(vocab_size=11, cell="delta-rnn", hidden_sizes=[8], sampled_loss="sampled_softmax",
                                 sampled_loss_samples=4, sampled_loss_noise="unigram")
    ids = torch.randint(11, (2, 11))
    trainer = L.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    with pytest.raises(ValueError, match="sampled_loss_noise 'unigram' counts the words of the training split"):
        trainer.fit(module, train_dataloaders=DataLoader([(ids[:, :5], ids[:, 1:6], 0)], batch_size=None))


def _sampled_start(epochs: float | None) -> LanguageModelModule:
    return LanguageModelModule(vocab_size=11, cell="delta-rnn", hidden_sizes=[8], sampled_loss="sampled_softmax",
                               sampled_loss_samples=4, sampled_loss_epochs=epochs)


@pytest.mark.parametrize(("module", "max_epochs", "expected"), [
    (_module(), 40, {"full": 40.0}),
    (_sampled_start(None), 40, {"sampled": 40.0}),  # the sampled loss all the way
    (_sampled_start(2), 40, {"sampled": 2.0, "full": 38.0}),
    (_sampled_start(2), None, {"sampled": 2.0, "full": 998.0}),  # Lightning's 1,000 epochs when none is given
    (_sampled_start(2.5), 2, {"sampled": 2.0}),  # the run ends inside the sampled start
])
def test_a_sampled_start_splits_the_runs_epochs_between_the_two_objectives(module, max_epochs, expected):
    assert module.objective_epochs(max_epochs) == expected


def test_the_run_rate_weighs_each_objectives_time_by_its_epochs():
    """delta_rnn_budget_tied.yaml on the Xeon with AMX: fp32 and bf16-mixed tie on the sampled softmax (the rates
    ``auto`` measured before, when it timed that alone and kept fp32); the full-softmax rates are those divided by
    ``benchmarks.recipe_speed``'s sampled / full ratios there (2.8x in fp32, 1.5x in bf16-mixed)."""
    epochs = {"sampled": 2.0, "full": 38.0}
    rates = {auto.FP32: {"sampled": 5927.0, "full": 2117.0}, auto.BF16: {"sampled": 5858.0, "full": 3905.0}}
    run = {p: auto.run_rate(epochs, rates[p]) for p in rates}
    assert run[auto.FP32] == pytest.approx(40 / (2 / 5927 + 38 / 2117))  # time adds up, not rates
    assert auto.choose_precision(lambda p: run[p]).precision == auto.BF16
    assert auto.choose_precision(lambda p: rates[p]["sampled"]).precision == auto.FP32  # the startup alone


def test_a_sampled_start_is_timed_in_both_objectives_the_full_softmax_without_the_sampled_loss(monkeypatch):
    from dsf_lightning.training.sampled_softmax import SampledLoss

    calls = {"sampled": 0, "steps": 0}
    forward, step = SampledLoss.forward, LanguageModelModule.training_step

    def count_sampled(self, *a, **k):
        calls["sampled"] += 1
        return forward(self, *a, **k)

    def count_steps(self, *a, **k):
        calls["steps"] += 1
        return step(self, *a, **k)

    monkeypatch.setattr(SampledLoss, "forward", count_sampled)
    monkeypatch.setattr(LanguageModelModule, "training_step", count_steps)
    module = _sampled_start(2)
    timing = auto.language_model_timing(module, batch_size=2, bptt=5, windows=2, warmup=1, max_epochs=40)
    assert timing(auto.FP32) > 0
    assert calls == {"sampled": 3, "steps": 6}  # 3 windows on the sampled loss, 3 on the full softmax
    assert module.sampled_loss is not None  # the module itself keeps its sampled start
    assert timing.basis == ("timed apart and weighed by epochs: 2 of 40 with the sampled loss, the rest the full "
                            "softmax")


def test_the_log_line_says_when_the_rates_were_weighed_across_a_sampled_start(lines):
    def timing(precision: str) -> float:
        return {auto.FP32: 2188.0, auto.BF16: 3969.0}[precision]
    timing.basis = "timed apart and weighed by epochs: 2 of 40 with the sampled loss, the rest the full softmax"
    assert auto.resolve_auto_precision({"precision": "auto"}, _module(), _Shape(), timing=timing) == {
        "precision": auto.BF16}
    assert lines == ["precision auto -> bf16-mixed: 32-true 2,188 tokens/CPU s, bf16-mixed 3,969; bf16-mixed measured "
                     "1.81x fp32's rate on this machine (timed apart and weighed by epochs: 2 of 40 with the sampled "
                     "loss, the rest the full softmax)"]
