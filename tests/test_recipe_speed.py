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


def test_a_checkout_that_is_not_one_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        recipe_speed.main(["r.yaml", "--checkout", f"x={tmp_path}"])
    assert "a checkout of dsf-lightning" in capsys.readouterr().err
