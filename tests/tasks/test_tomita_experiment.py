"""End to end: a short sr-GRU training on Tomita 1 recovers the grammar's minimal DFA (about 2 s)."""

import json

from dsf_lightning.tasks import tomita_experiment
from dsf_lightning.tasks.dfa import DFA
from dsf_lightning.tasks.languages import tomita_dfa


def test_sr_gru_on_tomita_1_recovers_its_dfa(tmp_path):
    records = tomita_experiment.main(["--grammars", "1", "--out", str(tmp_path), "--max-minutes", "2", "--hidden-size", "32"])
    (record,) = records
    assert record["recovered"] and record["selected"]
    assert record["network_accuracy"]["test"] == 1.0 and record["dfa_accuracy"]["test"] == 1.0
    saved = json.loads((tmp_path / "tomita1_dfa.json").read_text())
    assert DFA.from_dict(saved["minimal_dfa"]).equivalent(tomita_dfa(1))
    assert (tmp_path / "tomita1_dfa.dot").exists() and "| 1 | `1*` | yes |" in (tmp_path / "tomita.md").read_text()
