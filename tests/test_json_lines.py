"""One JSON convention for every command that prints results (dsf_lightning/cli/jsonlines.py): JSON lines, one
complete object per line, a line per result (score: a sentence, classify: a text, generate: a sample, score --file
--per-token: a token, then the document's summary). dsf predict writes the same (tests/training/test_prediction*)."""

import json

import pytest

from dsf_lightning.cli import main


def json_lines(text: str) -> list[dict]:
    lines = text.splitlines()
    rows = [json.loads(line) for line in lines]  # each line parses alone
    assert all(isinstance(row, dict) for row in rows)
    return rows


@pytest.mark.parametrize("argv, count, key", [
    (["score", "--json", "the company said", "shares fell"], 2, "ppl"),
    (["score", "--json", "--per-token", "the company said"], 1, "tokens"),
    (["classify", "--json", "A great movie!", "Dull.", "Fine."], 3, "label"),
    (["generate", "--json", "-n", "3", "--num-samples", "2", "--seed", "0"], 2, "tokens"),
])
def test_json_output_is_one_object_a_line(argv, count, key, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(argv) == 0
    rows = json_lines(capsys.readouterr().out)
    assert len(rows) == count and all(key in row for row in rows), rows
    if argv[0] in ("score", "classify"):
        assert all(row["model"] for row in rows)  # each line says what produced it


def test_score_file_per_token_json_lines_end_with_the_summary(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "doc.txt").write_text("the company said\nshares fell\n")
    assert main(["score", "--json", "--per-token", "--file", str(tmp_path / "doc.txt")]) == 0
    *tokens, summary = json_lines(capsys.readouterr().out)
    assert [t["token"] for t in tokens] == ["the", "company", "said", "<eos>", "shares", "fell", "<eos>"]
    assert summary["num_tokens"] == len(tokens) and summary["source"] == str(tmp_path / "doc.txt")
    assert sum(t["logprob"] for t in tokens) == pytest.approx(summary["logprob"], abs=1e-4)
