"""The synthetic languages and sequence tasks of the sr-RNN paper (Wang & Niepert 2019, sec. 4.1-4.2,
appendices C and E), as seeded generators of labelled strings (pure Python / NumPy, no torch).

* **Tomita grammars** 1-7 over {0, 1} (appendix E, Table 5): membership predicates written from the
  grammar definitions (:func:`tomita_accepts`), their minimal complete DFAs written down by hand
  (:func:`tomita_dfa`), and :func:`sample_language`, which draws a given number of distinct positive
  and negative strings over given lengths uniformly from a DFA (count and unrank, so rare classes such
  as the single string of ``1*`` of each length are drawn exactly). The paper's split sizes (Table 2)
  and lengths (Table 3) are :data:`TOMITA_SPLITS`.
* **Balanced parentheses** (sec. 4.2) over ``a..z ( )`` with a controlled nesting depth
  (:func:`balanced_parentheses`); negatives are corrupted positives.
* **Palindromes** ``w w^-1`` over ``a..z`` (sec. 4.2, :func:`palindromes`).
* **Copying memory** (appendix C, :func:`copying_memory`).

Tomita 3 is read as Tomita's original: a string is rejected iff a maximal run of 1s of odd length is
*immediately* followed by a maximal run of 0s of odd length (the paper's "an odd number of
consecutive 1s is followed by an even number of consecutive 0s"); its minimal DFA has 5 states.
"""

from __future__ import annotations

import random
import re
import string as _string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dfa import DFA

BINARY = ("0", "1")

# -- Tomita grammars -------------------------------------------------------------------------------
TOMITA_DESCRIPTIONS = {
    1: "1*",
    2: "(10)*",
    3: "no odd-length run of 1s immediately followed by an odd-length run of 0s",
    4: "no substring 000",
    5: "even number of 0s and even number of 1s",
    6: "(#0 - #1) is a multiple of 3",
    7: "0*1*0*1*",
}

_RUNS = re.compile(r"0+|1+")


def tomita_accepts(grammar: int, s: str) -> bool:
    """Membership of ``s`` (a string over '0', '1') in Tomita grammar ``grammar``, from its definition."""
    if set(s) - set("01"):
        raise ValueError(f"Tomita strings are over '0' and '1', got {s!r}")
    if grammar == 1:
        return re.fullmatch(r"1*", s) is not None
    if grammar == 2:
        return re.fullmatch(r"(10)*", s) is not None
    if grammar == 3:
        runs = _RUNS.findall(s)
        return not any(
            a[0] == "1" and len(a) % 2 == 1 and b[0] == "0" and len(b) % 2 == 1 for a, b in zip(runs, runs[1:])
        )
    if grammar == 4:
        return "000" not in s
    if grammar == 5:
        return s.count("0") % 2 == 0 and s.count("1") % 2 == 0
    if grammar == 6:
        return (s.count("0") - s.count("1")) % 3 == 0
    if grammar == 7:
        return re.fullmatch(r"0*1*0*1*", s) is not None
    raise ValueError(f"Tomita grammars are numbered 1-7, got {grammar!r}")


def tomita_dfa(grammar: int) -> DFA:
    """The minimal complete DFA of a Tomita grammar, written down from its definition.

    States are small integers (0 is the start); the dead state, where a language needs one, is
    included. Sizes: 2, 3, 5, 4, 4, 3, 5 states for grammars 1-7.
    """
    T: dict[tuple[int, str], int]
    if grammar == 1:  # 0: only 1s so far; 1: dead
        T = {(0, "1"): 0, (0, "0"): 1, (1, "0"): 1, (1, "1"): 1}
        return DFA(BINARY, T, 0, {0})
    if grammar == 2:  # 0: (10)^n; 1: (10)^n 1; 2: dead
        T = {(0, "1"): 1, (0, "0"): 2, (1, "0"): 0, (1, "1"): 2, (2, "0"): 2, (2, "1"): 2}
        return DFA(BINARY, T, 0, {0})
    if grammar == 3:
        # 0: no pending constraint (start, inside an even run of 1s, or 0s after an even run of 1s)
        # 1: inside an odd run of 1s; 2: odd run of 0s after an odd run of 1s (reject);
        # 3: even run of 0s after an odd run of 1s; 4: dead
        T = {
            (0, "0"): 0, (0, "1"): 1,
            (1, "0"): 2, (1, "1"): 0,
            (2, "0"): 3, (2, "1"): 4,
            (3, "0"): 2, (3, "1"): 1,
            (4, "0"): 4, (4, "1"): 4,
        }  # fmt: skip
        return DFA(BINARY, T, 0, {0, 1, 3})
    if grammar == 4:  # i = number of trailing 0s (0-2); 3: dead
        T = {(i, "0"): i + 1 for i in range(3)} | {(i, "1"): 0 for i in range(3)} | {(3, "0"): 3, (3, "1"): 3}
        return DFA(BINARY, T, 0, {0, 1, 2})
    if grammar == 5:  # state = 2 * (#0 mod 2) + (#1 mod 2)
        T = {(q, "0"): q ^ 2 for q in range(4)} | {(q, "1"): q ^ 1 for q in range(4)}
        return DFA(BINARY, T, 0, {0})
    if grammar == 6:  # state = (#0 - #1) mod 3
        T = {(q, "0"): (q + 1) % 3 for q in range(3)} | {(q, "1"): (q - 1) % 3 for q in range(3)}
        return DFA(BINARY, T, 0, {0})
    if grammar == 7:  # 0: 0*; 1: 0*1*; 2: 0*1*0*; 3: 0*1*0*1*; 4: dead
        T = {
            (0, "0"): 0, (0, "1"): 1,
            (1, "0"): 2, (1, "1"): 1,
            (2, "0"): 2, (2, "1"): 3,
            (3, "0"): 4, (3, "1"): 3,
            (4, "0"): 4, (4, "1"): 4,
        }  # fmt: skip
        return DFA(BINARY, T, 0, {0, 1, 2, 3})
    raise ValueError(f"Tomita grammars are numbered 1-7, got {grammar!r}")


#: Table 3: training lengths 0-13, 16, 19, 22; validation lengths 1, 4, ..., 28
TOMITA_TRAIN_LENGTHS = tuple(range(14)) + (16, 19, 22)
TOMITA_VALID_LENGTHS = tuple(range(1, 29, 3))
#: this library's extra held-out test split (the paper has none): lengths 1-50, as balanced as the
#: language allows, disjoint from train and valid
TOMITA_TEST_LENGTHS = tuple(range(1, 51))
TOMITA_TEST_SIZE = 2000


@dataclass(frozen=True)
class SplitSpec:
    """How many strings (and how many of them positive; None: as balanced as possible) over which lengths."""

    size: int
    positives: int | None
    lengths: tuple[int, ...]


#: Table 2 (sizes, positives in parentheses) and Table 3 (lengths) of the paper, plus the test split
TOMITA_SPLITS: dict[int, dict[str, SplitSpec]] = {
    g: {
        "train": SplitSpec(train, train_pos, TOMITA_TRAIN_LENGTHS),
        "valid": SplitSpec(valid, valid_pos, TOMITA_VALID_LENGTHS),
        "test": SplitSpec(TOMITA_TEST_SIZE, None, TOMITA_TEST_LENGTHS),
    }
    for g, (train, train_pos, valid, valid_pos) in {
        1: (265, 12, 182, 4),
        2: (257, 6, 180, 2),
        3: (2141, 1028, 1344, 615),
        4: (2571, 1335, 2182, 1087),
        5: (1651, 771, 1298, 608),
        6: (2523, 1221, 2222, 1098),
        7: (1561, 745, 680, 288),
    }.items()
}


def _water_fill(capacity: dict[int, int], total: int, rng: random.Random) -> dict[int, int]:
    """Spread ``total`` over the keys as evenly as ``capacity`` allows (remainders to random keys)."""
    if total > sum(capacity.values()):
        raise ValueError(f"cannot draw {total} distinct strings: only {sum(capacity.values())} available")
    alloc = {key: 0 for key in capacity}
    left = total
    open_keys = [key for key in capacity if capacity[key] > 0]
    while left > 0:
        share = left // len(open_keys)
        if share == 0:  # fewer strings left than open lengths: one each to a random subset
            for key in rng.sample(open_keys, left):
                alloc[key] += 1
            break
        for key in list(open_keys):
            take = min(share, capacity[key] - alloc[key])
            alloc[key] += take
            left -= take
        open_keys = [key for key in open_keys if alloc[key] < capacity[key]]
    return alloc


def _sample_ranks(available: int, excluded: set[int], k: int, rng: random.Random) -> list[int]:
    """``k`` distinct ranks from ``range(available)`` avoiding ``excluded``, uniformly."""
    if k == 0:
        return []
    if available <= 4 * (k + len(excluded)) + 64:
        pool = [r for r in range(available) if r not in excluded]
        return rng.sample(pool, k)
    chosen: dict[int, None] = {}
    while len(chosen) < k:
        r = rng.randrange(available)
        if r not in excluded:
            chosen[r] = None
    return list(chosen)


def sample_language(
    dfa: DFA,
    lengths: Sequence[int],
    size: int,
    positives: int | None,
    seed: int,
    exclude: set[str] | frozenset[str] = frozenset(),
    overlap_if_needed: bool = False,
) -> list[tuple[str, int]]:
    """Draw ``size`` distinct labelled strings, ``positives`` of them accepted by ``dfa``.

    Positives and negatives are each spread as evenly over ``lengths`` as the language allows (a
    length with fewer strings of a class than its share gives all it has, the others take the rest);
    within a (length, class) the strings are uniform, distinct and never in ``exclude``.
    ``positives=None`` asks for ``size // 2`` positives, or all there are when fewer. With
    ``overlap_if_needed``, a class with fewer than the requested strings outside ``exclude`` is drawn
    ignoring ``exclude``. Returns ``(string, label)`` pairs shuffled with ``seed``.
    """
    rng = random.Random(seed)
    lengths = sorted(set(lengths))
    excluded: dict[tuple[int, bool], set[int]] = {(n, c): set() for n in lengths for c in (True, False)}
    for s in exclude:
        if len(s) in lengths:
            c = dfa.accepts(s)
            excluded[(len(s), c)].add(dfa.rank(s, c))
    capacity = {
        c: {n: dfa.count(n, c) - len(excluded[(n, c)]) for n in lengths} for c in (True, False)
    }
    if positives is None:
        positives = min(size // 2, sum(capacity[True].values()))
        positives = max(positives, size - sum(capacity[False].values()))
    if not 0 <= positives <= size:
        raise ValueError(f"positives must lie in [0, size={size}], got {positives}")
    if overlap_if_needed:
        for c, n_class in ((True, positives), (False, size - positives)):
            if sum(capacity[c].values()) < n_class:
                capacity[c] = {n: dfa.count(n, c) for n in lengths}
                for n in lengths:
                    excluded[(n, c)] = set()
    out: list[tuple[str, int]] = []
    for c, n_class in ((True, positives), (False, size - positives)):
        alloc = _water_fill(capacity[c], n_class, rng)
        for n in lengths:
            ranks = _sample_ranks(dfa.count(n, c), excluded[(n, c)], alloc[n], rng)
            out += [(dfa.unrank(n, r, c), int(c)) for r in ranks]
    rng.shuffle(out)
    return out


def tomita_splits(grammar: int, seed: int = 0, splits: dict[str, SplitSpec] | None = None) -> dict[str, list[tuple[str, int]]]:
    """The train / valid / test strings of a Tomita grammar, pairwise disjoint, labelled by its DFA.

    Default sizes and lengths: :data:`TOMITA_SPLITS` (the paper's Tables 2 and 3). Each split has its
    own seed derived from ``seed`` and its name, and excludes the strings of the splits before it, so
    valid and test are held out from train. Exception: when a class has too few unseen strings at a
    split's lengths (the positives of grammars 1 and 2: one string per length), that class may reuse
    strings of earlier splits (``sample_language(..., overlap_if_needed=True)``). Lengths whose strings
    all went to train (e.g. length 1 for grammar 1) are then absent from valid.
    """
    dfa = tomita_dfa(grammar)
    splits = splits or TOMITA_SPLITS[grammar]
    drawn, seen = {}, set()
    for name, spec in splits.items():
        split_seed = seed * 1000 + 10 * grammar + sum(map(ord, name))
        drawn[name] = sample_language(
            dfa, spec.lengths, spec.size, spec.positives, split_seed, seen, overlap_if_needed=True
        )
        seen |= {s for s, _ in drawn[name]}
    return {name: drawn[name] for name in splits}


# -- balanced parentheses --------------------------------------------------------------------------
BP_LETTERS = _string.ascii_lowercase
BP_ALPHABET = tuple(BP_LETTERS) + ("(", ")")

#: sec. 4.2: (size, positives) of the large and small data sets, train (depth 1-5) and valid (6-10)
BP_SIZES = {
    "large": {"train": (22286, 13025), "valid": (6704, 3582)},
    "small": {"train": (1008, 601), "valid": (268, 142)},
}
BP_TRAIN_DEPTHS = (1, 5)
BP_VALID_DEPTHS = (6, 10)
#: Table 1: 1,000 test strings each, (name, (min depth, max depth), max length)
BP_TEST_SETS = (
    ("d1-10_l100", (1, 10), 100),
    ("d10-20_l100", (10, 20), 100),
    ("d10-20_l200", (10, 20), 200),
    ("d5_l200", (5, 5), 200),
    ("d10_l200", (10, 10), 200),
    ("d20_l1000", (20, 20), 1000),
)
BP_TEST_SIZE = 1000


def bp_balanced(s: str) -> bool:
    """Whether the parentheses of ``s`` are balanced (letters are ignored)."""
    level = 0
    for ch in s:
        if ch == "(":
            level += 1
        elif ch == ")":
            level -= 1
            if level < 0:
                return False
    return level == 0


def bp_depth(s: str) -> int:
    """The maximal nesting depth: the largest number of open parentheses over the prefixes of ``s``."""
    level = best = 0
    for ch in s:
        level += (ch == "(") - (ch == ")")
        best = max(best, level)
    return best


class _BoundedPaths:
    """``N[r][h]``: the paths of r steps +-1 from height h to 0 that stay within [0, bound]."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.rows = [[int(h == 0) for h in range(bound + 1)]]

    def __call__(self, r: int, h: int) -> int:
        if not 0 <= h <= self.bound:
            return 0
        while len(self.rows) <= r:
            prev, b = self.rows[-1], self.bound
            self.rows.append([(prev[h - 1] if h >= 1 else 0) + (prev[h + 1] if h < b else 0) for h in range(b + 1)])
        return self.rows[r][h]


_PATHS: dict[int, _BoundedPaths] = {}


def _paths(bound: int) -> _BoundedPaths:
    if bound not in _PATHS:
        _PATHS[bound] = _BoundedPaths(bound)
    return _PATHS[bound]


def random_dyck(pairs: int, depth: int, rng: random.Random) -> str:
    """A uniformly random balanced string of ``pairs`` parenthesis pairs with maximal depth exactly ``depth``."""
    if not 1 <= depth <= pairs:
        raise ValueError(f"need 1 <= depth <= pairs, got depth={depth}, pairs={pairs}")
    within, below = _paths(depth), _paths(depth - 1)

    def completions(r: int, h: int, touched: bool) -> int:  # paths that still reach `depth` if not touched
        if touched:
            return within(r, h)
        return within(r, h) - below(r, h)

    h, touched, out = 0, False, []
    for r in range(2 * pairs, 0, -1):
        up = completions(r - 1, h + 1, touched or h + 1 == depth) if h < depth else 0
        down = completions(r - 1, h - 1, touched) if h > 0 else 0
        if rng.randrange(up + down) < up:
            h += 1
            touched |= h == depth
            out.append("(")
        else:
            h -= 1
            out.append(")")
    return "".join(out)


def _bp_positive(depth: int, max_length: int, rng: random.Random) -> str:
    length = rng.randint(2 * depth, max_length)
    pairs = rng.randint(depth, length // 2)
    parens = random_dyck(pairs, depth, rng)
    slots = set(rng.sample(range(length), 2 * pairs))
    it = iter(parens)
    return "".join(next(it) if i in slots else rng.choice(BP_LETTERS) for i in range(length))


def _bp_corrupt(s: str, max_length: int, rng: random.Random) -> str:
    """A near miss: delete, insert, flip or swap parentheses until the string is unbalanced."""
    while True:
        parens = [i for i, ch in enumerate(s) if ch in "()"]
        kind = rng.choice(("delete", "insert", "flip", "swap"))
        if kind == "delete":
            i = rng.choice(parens)
            t = s[:i] + s[i + 1 :]
        elif kind == "insert":
            if len(s) >= max_length:
                continue
            i = rng.randint(0, len(s))
            t = s[:i] + rng.choice("()") + s[i:]
        elif kind == "flip":
            i = rng.choice(parens)
            t = s[:i] + ("(" if s[i] == ")" else ")") + s[i + 1 :]
        else:
            i, j = sorted(rng.sample(parens, 2))
            t = s[:i] + s[j] + s[i + 1 : j] + s[i] + s[j + 1 :]
        if not bp_balanced(t):
            return t


def balanced_parentheses(
    size: int, positives: int, depths: tuple[int, int], max_length: int, seed: int
) -> list[tuple[str, int, int]]:
    """``size`` labelled strings over ``a..z ( )``: ``(string, label, depth)``, shuffled.

    Positives: a uniformly random balanced skeleton with a nesting depth drawn uniformly from
    ``depths`` (inclusive), length uniform in [2 * depth, max_length], the non-parenthesis positions
    filled with random letters. Negatives: positives of the same depth and length distribution with
    one corruption (a parenthesis deleted, inserted, flipped, or a '(' swapped with a later ')'),
    retried until unbalanced; their ``depth`` is that of the positive they came from.
    """
    lo, hi = depths
    if not 1 <= lo <= hi or 2 * hi > max_length:
        raise ValueError(f"depths {depths} do not fit max_length {max_length}")
    rng = random.Random(seed)
    out = []
    for i in range(size):
        depth = rng.randint(lo, hi)
        s = _bp_positive(depth, max_length, rng)
        if i < positives:
            out.append((s, 1, depth))
        else:
            out.append((_bp_corrupt(s, max_length, rng), 0, depth))
    rng.shuffle(out)
    return out


# -- palindromes -----------------------------------------------------------------------------------
PALINDROME_ALPHABET = tuple(_string.ascii_lowercase)
#: Table 2 / 3: train 229,984 (115,040 positive) of length 1-25, valid 50k (25k) of length 26-50
PALINDROME_SPLITS = {"train": (229984, 115040, (1, 25)), "valid": (50000, 25000, (26, 50))}
#: Figure 8: test sets of maximal length 100, 200, 500 (lengths from 50), 1,000 strings each
PALINDROME_TEST_SETS = (("l50-100", (50, 100)), ("l50-200", (50, 200)), ("l50-500", (50, 500)))
PALINDROME_TEST_SIZE = 1000


def is_palindrome_ww(s: str) -> bool:
    """Membership in ``{w w^-1}``: even length and equal to its reverse."""
    return len(s) % 2 == 0 and s == s[::-1]


def palindromes(size: int, positives: int, lengths: tuple[int, int], seed: int) -> list[tuple[str, int]]:
    """``size`` labelled strings over ``a..z``, ``positives`` of them of the form ``w w^-1``.

    Every string has an even length drawn uniformly from the even numbers in ``lengths`` (a ``w w^-1``
    has even length; negatives get the same lengths, so parity says nothing). Negatives are half near
    misses (a palindrome with one letter changed) and half uniform random non-palindromes.
    """
    lo, hi = lengths
    even = [n for n in range(max(lo, 2), hi + 1) if n % 2 == 0]
    if not even:
        raise ValueError(f"no even length in {lengths}")
    rng = random.Random(seed)
    letters = PALINDROME_ALPHABET
    out = []
    for i in range(size):
        n = rng.choice(even)
        half = rng.choices(letters, k=n // 2)
        s = half + half[::-1]
        if i < positives:
            out.append(("".join(s), 1))
            continue
        if rng.random() < 0.5:
            j = rng.randrange(n)
            s[j] = rng.choice([a for a in letters if a != s[j]])
        else:
            while True:
                s = rng.choices(letters, k=n)
                if s != s[::-1]:
                    break
        out.append(("".join(s), 0))
    rng.shuffle(out)
    return out


# -- copying memory --------------------------------------------------------------------------------
COPY_BLANK, COPY_MARKER, COPY_SYMBOLS = 0, 9, 10


def check_copying_sizes(lag: Any, n: Any) -> None:
    """Raise ``ValueError`` unless the time lag T and the count n of the copying task are integers >= 1."""
    for name, value, what in (("lag", lag, "the time lag T (the paper: 100 and 500)"),
                              ("n", n, "the number of symbols to copy (the paper: 10)")):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"copying memory: {name} is {what} and must be an integer >= 1, got {name}={value!r}")


def copying_memory(size: int, lag: int, n: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The copying-memory problem (appendix C): ``(inputs, targets)``, each ``[size, lag + 2n]`` uint8.

    Symbols ``c_0 .. c_9``: the first ``n`` inputs are uniform over ``c_1 .. c_8``, then ``lag - 1``
    blanks ``c_0``, the marker ``c_9``, and ``n`` more blanks; the target is ``lag + n`` blanks and then
    the first ``n`` inputs, in order.
    """
    check_copying_sizes(lag, n)
    rng = np.random.default_rng(seed)
    data = rng.integers(1, 9, size=(size, n), dtype=np.uint8)
    total = lag + 2 * n
    inputs = np.zeros((size, total), dtype=np.uint8)
    targets = np.zeros((size, total), dtype=np.uint8)
    inputs[:, :n] = data
    inputs[:, n + lag - 1] = COPY_MARKER
    targets[:, lag + n :] = data
    return inputs, targets


def copying_baseline_loss(lag: int, n: int = 10) -> float:
    """The memory-less baseline's cross-entropy per step, ``n log 8 / (lag + 2n)`` (appendix C)."""
    check_copying_sizes(lag, n)
    return n * float(np.log(8)) / (lag + 2 * n)
