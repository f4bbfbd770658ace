"""benchmarks.recipe_speed: times ``dsf fit`` of a recipe with each checkout, alternately, and reports tokens
per CPU second and per-round ratios; bad checkouts are refused."""

import pytest

from benchmarks import recipe_speed

from .test_cli_edges import ROOT, _lm_args


def test_two_checkouts_are_timed_alternately_and_compared(tiny_folder, capsys):
    overrides = " ".join(_lm_args(tiny_folder)[2:])  # the tiny corpus and model, without --config
    code = recipe_speed.main([str(ROOT / "recipes" / "ptb_char" / "delta_rnn.yaml"), "--checkout", f"a={ROOT}",
                              "--checkout", f"b={ROOT}", "--rounds", "2", "--steps", "6", "--skip", "2",
                              "--overrides", overrides])
    out = capsys.readouterr().out
    assert code == 0
    assert [line.split(":")[0] + line.split()[2] for line in out.splitlines() if line.startswith("round")] == [
        "round 1a", "round 1b", "round 2b", "round 2a"]
    rows = [line for line in out.splitlines() if line.startswith("| a (") or line.startswith("| b (")]
    assert len(rows) == 2 and rows[0].endswith("| 1.00x (1.00-1.00) |")
    assert all(float(row.split("|")[2].replace(",", "")) > 0 for row in rows)
    from .test_machine import assert_records_the_machine

    assert_records_the_machine(out.split("The machine:", 1)[1])  # issue 39: the report names its machine


def test_a_checkout_that_is_not_one_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        recipe_speed.main(["r.yaml", "--checkout", f"x={tmp_path}"])
    assert "a checkout of dsf-lightning" in capsys.readouterr().err


def test_a_variant_times_the_first_checkout_with_its_arguments_added(tiny_folder, capsys):
    overrides = " ".join(_lm_args(tiny_folder)[2:])
    base = [str(ROOT / "recipes" / "ptb_char" / "delta_rnn.yaml"), "--checkout", f"a={ROOT}", "--rounds", "1",
            "--steps", "4", "--skip", "1", "--overrides", overrides]
    assert recipe_speed.main([*base, "--variant", "bf16=--trainer.precision bf16-mixed"]) == 0
    out = capsys.readouterr().out
    assert f"| bf16 ({ROOT}, --trainer.precision bf16-mixed) |" in out
    with pytest.raises(RuntimeError, match="failed"):  # the variant's arguments reach dsf fit
        recipe_speed.main([*base, "--variant", "bad=--trainer.precision no-such-precision"])
    with pytest.raises(SystemExit):
        recipe_speed.main([*base, "--variant", "a=--trainer.precision bf16-mixed"])  # a name taken
