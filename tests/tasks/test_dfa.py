"""DFA operations: minimization (Hopcroft against Moore and known automata), exact equivalence with
shortest counterexamples, counting / unranking, serialization and drawing."""

import itertools
import random
import shutil

import pytest

from dsf_lightning.tasks.dfa import DFA, DFAError
from dsf_lightning.tasks.languages import tomita_dfa

STRINGS = [""] + ["".join(p) for n in range(1, 9) for p in itertools.product("ab", repeat=n)]


def redundant_even_a() -> DFA:
    """'even number of a' with 6 states: two copies of each parity class and an unreachable state."""
    T = {}
    for q in range(4):  # q % 2 = parity; copies 0/2 and 1/3 are equivalent
        T[(q, "a")] = (q + 1) % 4
        T[(q, "b")] = q
    T[(9, "a")] = 0
    T[(9, "b")] = 9
    return DFA("ab", T, 0, {0, 2}, states=range(4))


def random_dfa(rng: random.Random, n: int) -> DFA:
    T = {(q, a): rng.randrange(n) for q in range(n) for a in "ab" if rng.random() < 0.9}
    return DFA("ab", T, 0, {q for q in range(n) if rng.random() < 0.4}, states=range(n))


def test_minimize_merges_equivalent_states_and_drops_unreachable_ones():
    dfa = redundant_even_a()
    minimal = dfa.minimize()
    assert minimal.num_states == 2
    assert minimal == DFA("ab", {(0, "a"): 1, (0, "b"): 0, (1, "a"): 0, (1, "b"): 1}, 0, {0})
    assert all(minimal.accepts(s) == (s.count("a") % 2 == 0) for s in STRINGS)
    assert not dfa.is_minimal() and minimal.is_minimal()


def test_minimize_keeps_one_dead_state_for_partial_automata():
    partial = DFA("ab", {(0, "a"): 0}, 0, {0})  # a*, "b" missing
    minimal = partial.minimize()
    assert minimal.num_states == 2 and minimal.is_complete()
    assert all(minimal.accepts(s) == (set(s) <= {"a"}) for s in STRINGS)
    assert partial.complete().num_states == 2 and partial.complete().accepts("aa") and not partial.accepts("ab")


def test_empty_and_universal_languages_minimize_to_one_state():
    nothing = DFA("ab", {(0, "a"): 1, (1, "b"): 0}, 0, set())
    everything = DFA("ab", {(q, a): 1 - q for q in (0, 1) for a in "ab"}, 0, {0, 1})
    assert nothing.minimize().num_states == 1 and not any(nothing.accepts(s) for s in STRINGS)
    assert everything.minimize().num_states == 1


@pytest.mark.parametrize("seed", range(40))
def test_hopcroft_equals_moore_and_preserves_the_language(seed):
    rng = random.Random(seed)
    dfa = random_dfa(rng, rng.randint(1, 9))
    hopcroft, moore = dfa.minimize("hopcroft"), dfa.minimize("moore")
    assert hopcroft == moore  # canonical forms of the same minimal automaton
    assert all(hopcroft.accepts(s) == dfa.accepts(s) for s in STRINGS)
    assert dfa.equivalent(hopcroft)


def test_equivalence_detects_a_difference_with_a_shortest_counterexample():
    t3 = tomita_dfa(3)
    changed = DFA(t3.alphabet, t3.transitions, t3.start, t3.accepting - {3})  # even 0-run after odd 1s
    assert t3.equivalent(t3.relabel({q: f"s{q}" for q in t3.states}))
    witness = t3.find_difference(changed)
    assert witness == "100"  # the shortest string reaching state 3
    assert t3.accepts(witness) != changed.accepts(witness)
    assert tomita_dfa(1).find_difference(tomita_dfa(2)) == "1"
    assert tomita_dfa(5).find_difference(tomita_dfa(6)) == "0" * 2  # "00": even counts, difference 2


def test_equivalence_with_different_alphabets_treats_missing_symbols_as_rejection():
    over_a = DFA("a", {(0, "a"): 0}, 0, {0})
    over_ab = DFA("ab", {(0, "a"): 0}, 0, {0})
    assert over_a.equivalent(over_ab)
    assert over_ab.find_difference(DFA("ab", {(0, "a"): 0, (0, "b"): 0}, 0, {0})) == "b"


def test_count_unrank_and_rank_enumerate_the_language():
    dfa = tomita_dfa(5)
    for n in range(7):
        for accepted in (True, False):
            words = sorted("".join(p) for p in itertools.product("01", repeat=n) if dfa.accepts("".join(p)) == accepted)
            assert dfa.count(n, accepted) == len(words)
            assert [dfa.unrank(n, r, accepted) for r in range(len(words))] == words
            assert [dfa.rank(w, accepted) for w in words] == list(range(len(words)))
    with pytest.raises(DFAError):
        dfa.unrank(3, 99)
    assert tomita_dfa(1).count(40) == 1 and tomita_dfa(1).count(40, accepted=False) == 2**40 - 1


def test_json_round_trip_and_accuracy(tmp_path):
    dfa = tomita_dfa(7).relabel({4: "sink"})
    again = DFA.from_json(dfa.to_json())
    assert again == dfa
    assert DFA.load(dfa.save(tmp_path / "d.json")) == dfa
    assert dfa.accuracy(["01", "010", "01010"], [1, 1, 0]) == 1.0
    assert dfa.accuracy(["01", "010", "01010"], [0, 1, 0]) == pytest.approx(2 / 3)
    with pytest.raises(DFAError):
        DFA.from_json('{"alphabet": ["0"]}')


def test_dot_output_and_drawing(tmp_path, monkeypatch):
    dfa = tomita_dfa(2)
    dot = dfa.to_dot(title="T2")
    assert "doublecircle" in dot and "__start ->" in dot and '"1" -> "0" [label="0"]' in dot
    assert '"2"' not in dfa.to_dot(hide_dead=True)  # the sink is hidden
    if shutil.which("dot"):
        out = dfa.draw(tmp_path / "t2")
        assert out.suffix == ".png" and out.stat().st_size > 0
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.warns(UserWarning, match="dot"):
        assert dfa.draw(tmp_path / "nodot") is None
    assert (tmp_path / "nodot.dot").read_text().startswith("digraph")


def test_malformed_automata_are_rejected():
    with pytest.raises(DFAError, match="alphabet"):
        DFA("ab", {(0, "c"): 0}, 0, {0})
    with pytest.raises(DFAError, match="repeated"):
        DFA("aa", {}, 0, {0})
