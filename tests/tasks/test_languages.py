"""The generators: the right languages (against the grammar definitions on every short string), the
paper's split sizes and lengths, disjoint and reproducible splits."""

import itertools
import random

import numpy as np
import pytest

from dsf_lightning.tasks import languages as lang

SHORT = [""] + ["".join(p) for n in range(1, 11) for p in itertools.product("01", repeat=n)]


@pytest.mark.parametrize("grammar", range(1, 8))
def test_tomita_dfa_accepts_exactly_the_grammar_on_every_string_up_to_length_10(grammar):
    dfa = lang.tomita_dfa(grammar)
    assert [dfa.accepts(s) for s in SHORT] == [lang.tomita_accepts(grammar, s) for s in SHORT]


def test_tomita_dfas_are_minimal_with_the_known_sizes():
    sizes = {g: lang.tomita_dfa(g).num_states for g in range(1, 8)}
    assert sizes == {1: 2, 2: 3, 3: 5, 4: 4, 5: 4, 6: 3, 7: 5}
    for g in range(1, 8):
        assert lang.tomita_dfa(g).minimize().num_states == sizes[g]


@pytest.mark.parametrize(
    "grammar, accepted, rejected",
    [
        (1, ["", "1", "1111"], ["0", "10", "1110"]),
        (2, ["", "10", "101010"], ["1", "01", "1001", "100"]),
        (3, ["", "1", "100", "110", "11100", "0110100", "1001"], ["10", "1000", "1010", "0111011000"]),
        (4, ["", "00", "1001001", "0010"], ["000", "10001", "0000"]),
        (5, ["", "00", "11", "0101", "1001"], ["0", "01", "0111"]),
        (6, ["", "01", "000", "10", "111"], ["0", "00", "0001"]),
        (7, ["", "0", "01", "0101", "101", "0011001"], ["01010", "10101", "1101010"]),
    ],
)
def test_tomita_definitions_on_hand_checked_strings(grammar, accepted, rejected):
    assert all(lang.tomita_accepts(grammar, s) for s in accepted)
    assert not any(lang.tomita_accepts(grammar, s) for s in rejected)


@pytest.mark.parametrize("grammar", range(1, 8))
def test_tomita_splits_have_the_papers_sizes_lengths_and_true_labels(grammar):
    splits = lang.tomita_splits(grammar, seed=0)
    for name, rows in splits.items():
        spec = lang.TOMITA_SPLITS[grammar][name]
        strings = [s for s, _ in rows]
        assert len(rows) == spec.size
        if spec.positives is not None:
            assert sum(y for _, y in rows) == spec.positives
        assert len(set(strings)) == len(strings)  # distinct
        assert {len(s) for s in strings} <= set(spec.lengths)
        assert all(y == lang.tomita_accepts(grammar, s) for s, y in rows)
    # Table 3: every training length occurs; held-out splits are disjoint from train
    assert {len(s) for s, _ in splits["train"]} == set(lang.TOMITA_TRAIN_LENGTHS)
    train = {s for s, _ in splits["train"]}
    assert not train & {s for s, _ in splits["test"]}
    if grammar > 2:  # grammars 1, 2 may reuse their few positives; the others never overlap
        assert not train & {s for s, _ in splits["valid"]}


def test_tomita_splits_are_reproducible_and_seeded():
    assert lang.tomita_splits(3, seed=0) == lang.tomita_splits(3, seed=0)
    assert lang.tomita_splits(3, seed=0)["train"] != lang.tomita_splits(3, seed=1)["train"]


def test_sample_language_spreads_over_lengths_and_refuses_impossible_requests():
    dfa = lang.tomita_dfa(1)
    rows = lang.sample_language(dfa, range(6), 12, 6, seed=0)
    assert sorted(s for s, y in rows if y) == ["", "1", "11", "111", "1111", "11111"]
    with pytest.raises(ValueError, match="distinct"):
        lang.sample_language(dfa, range(6), 20, 7, seed=0)  # only 6 positives exist
    dfa4 = lang.tomita_dfa(4)
    rows = lang.sample_language(dfa4, [3, 12], 100, 50, seed=0)
    counts = {n: sum(1 for s, y in rows if y and len(s) == n) for n in (3, 12)}
    assert counts == {3: 7, 12: 43}  # length 3 has only 7 positives, length 12 takes the rest


def test_random_dyck_strings_are_balanced_with_exact_depth():
    rng = random.Random(0)
    for _ in range(200):
        pairs = rng.randint(1, 12)
        depth = rng.randint(1, pairs)
        s = lang.random_dyck(pairs, depth, rng)
        assert len(s) == 2 * pairs and lang.bp_balanced(s) and lang.bp_depth(s) == depth


def test_random_dyck_is_uniform_over_its_support():
    # pairs=3, depth=2: "(())()", "()(())", "(()())" -> 3 strings, each about 1/3
    rng = random.Random(1)
    counts = {}
    for _ in range(3000):
        s = lang.random_dyck(3, 2, rng)
        counts[s] = counts.get(s, 0) + 1
    assert set(counts) == {"(())()", "()(())", "(()())"}
    assert all(abs(c / 3000 - 1 / 3) < 0.04 for c in counts.values())


def test_balanced_parentheses_small_set_matches_the_paper():
    n, pos = lang.BP_SIZES["small"]["train"]
    assert (n, pos) == (1008, 601) and lang.BP_SIZES["large"]["train"] == (22286, 13025)
    rows = lang.balanced_parentheses(n, pos, lang.BP_TRAIN_DEPTHS, 50, seed=0)
    assert len(rows) == 1008 and sum(y for _, y, _ in rows) == 601
    assert all(lang.bp_balanced(s) == bool(y) for s, y, _ in rows)
    assert all(1 <= d <= 5 for _, _, d in rows)
    assert all(lang.bp_depth(s) == d for s, y, d in rows if y)
    assert max(len(s) for s, _, _ in rows) <= 50
    assert set("".join(s for s, _, _ in rows)) <= set(lang.BP_ALPHABET)
    valid = lang.balanced_parentheses(268, 142, lang.BP_VALID_DEPTHS, 100, seed=1)
    assert all(6 <= lang.bp_depth(s) <= 10 for s, y, _ in valid if y)


def test_balanced_parentheses_test_sets_follow_table_1():
    names = [name for name, _, _ in lang.BP_TEST_SETS]
    assert names == ["d1-10_l100", "d10-20_l100", "d10-20_l200", "d5_l200", "d10_l200", "d20_l1000"]
    rows = lang.balanced_parentheses(40, 20, (20, 20), 1000, seed=3)
    assert all(lang.bp_depth(s) == 20 for s, y, _ in rows if y) and max(len(s) for s, _, _ in rows) <= 1000


def test_palindromes_have_the_right_labels_lengths_and_sizes():
    assert lang.PALINDROME_SPLITS["train"][:2] == (229984, 115040)
    rows = lang.palindromes(2000, 1000, (1, 25), seed=0)
    assert len(rows) == 2000 and sum(y for _, y in rows) == 1000
    assert all(lang.is_palindrome_ww(s) == bool(y) for s, y in rows)
    lengths = {len(s) for s, _ in rows}
    assert lengths <= set(range(2, 26, 2)) and len(lengths) == 12
    test = lang.palindromes(50, 25, (50, 500), seed=1)
    assert all(50 <= len(s) <= 500 for s, _ in test)


def test_copying_memory_layout():
    inputs, targets = lang.copying_memory(64, lag=20, n=10, seed=0)
    assert inputs.shape == targets.shape == (64, 40) and inputs.dtype == np.uint8
    assert ((inputs[:, :10] >= 1) & (inputs[:, :10] <= 8)).all()
    assert (inputs[:, 10:29] == 0).all() and (inputs[:, 29] == 9).all() and (inputs[:, 30:] == 0).all()
    assert (targets[:, :30] == 0).all() and (targets[:, 30:] == inputs[:, :10]).all()
    assert lang.copying_baseline_loss(100) == pytest.approx(10 * np.log(8) / 120)
