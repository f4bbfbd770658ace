"""Deterministic finite automata, and their extraction from state-regularized RNNs.

Two halves:

* :class:`DFA`: a (possibly partial) deterministic automaton over a finite alphabet with states of any
  JSON-able hashable kind (the extracted ones are centroid indices). It runs and accepts strings,
  completes itself with a sink, trims unreachable states, minimizes (Hopcroft's partition refinement,
  or Moore's for cross-checking) into a canonical form, finds the shortest string two automata
  disagree on (so equivalence is exact, not sampled), counts and unranks the strings of a given
  length it accepts or rejects (uniform sampling of a language), scores labelled strings, and
  serializes to JSON / Graphviz.
* :func:`extract_dfa`: the transition-function extraction of the sr-RNN paper (Wang & Niepert 2019, "State-Regularized
  Recurrent Neural Networks", sec. 3.1 and appendix E): feed the start token and then every
  string of a data set, move to the centroid of highest transition probability at each step, count
  the transitions ``(c_{t-1}, x_t, c_t)``, and keep for every (state, symbol) the most frequent one.
  The start state is the argmax after the start token; the accepting states are read from the
  classifier at each centroid (or from the labels / predictions of the strings that end there).

Strings are Python strings (one character per symbol) or sequences of symbols.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import warnings
from collections import defaultdict, deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

StateId = Hashable
Symbol = str


def _sort_key(value: Any) -> tuple:
    """Sort ints before strings and each kind naturally (states may mix them, e.g. 0, 1, 'sink')."""
    return (0, value, "") if isinstance(value, (int, np.integer)) else (1, 0, str(value))


def _as_symbols(string: str | Sequence[Symbol]) -> tuple[Symbol, ...]:
    return tuple(string)


class DFAError(ValueError):
    """An automaton is malformed or an operation does not apply to it (the message says why)."""


class DFA:
    """A deterministic finite automaton ``(Q, Sigma, delta, q0, F)`` (sr-RNN paper sec. 2).

    ``transitions`` maps ``(state, symbol) -> state``; missing pairs make the automaton *partial*,
    and a partial automaton rejects any string that needs a missing transition (as if the pair led to
    a non-accepting sink). :meth:`complete` adds that sink explicitly.
    """

    def __init__(
        self,
        alphabet: Iterable[Symbol],
        transitions: dict[tuple[StateId, Symbol], StateId],
        start: StateId,
        accepting: Iterable[StateId],
        states: Iterable[StateId] = (),
    ) -> None:
        self.alphabet: tuple[Symbol, ...] = tuple(alphabet)
        if len(set(self.alphabet)) != len(self.alphabet):
            raise DFAError(f"the alphabet has repeated symbols: {self.alphabet}")
        self.transitions: dict[tuple[StateId, Symbol], StateId] = dict(transitions)
        for (_, symbol) in self.transitions:
            if symbol not in self.alphabet:
                raise DFAError(f"transition on symbol {symbol!r}, which is not in the alphabet {self.alphabet}")
        self.start = start
        self.accepting = frozenset(accepting)
        every = set(states) | {start} | set(self.accepting)
        for (src, _), dst in self.transitions.items():
            every.update((src, dst))
        self.states: tuple[StateId, ...] = tuple(sorted(every, key=_sort_key))
        self._count_cache: dict[bool, list[dict[StateId, int]]] = {}

    # -- running -------------------------------------------------------------------------------
    def step(self, state: StateId | None, symbol: Symbol) -> StateId | None:
        """``delta(state, symbol)``, or None when the transition is missing (or ``state`` is None)."""
        if state is None:
            return None
        if symbol not in self.alphabet:
            raise DFAError(f"symbol {symbol!r} is not in the alphabet {self.alphabet}")
        return self.transitions.get((state, symbol))

    def run(self, string: str | Sequence[Symbol], state: StateId | None = None) -> StateId | None:
        """The state reached after reading ``string`` from ``state`` (default: the start state)."""
        state = self.start if state is None else state
        symbols = _as_symbols(string)
        bad = [a for a in dict.fromkeys(symbols) if a not in self.alphabet]
        if bad:
            text = repr(string) if len(repr(string)) <= 60 else repr(string)[:57] + "..."
            raise DFAError(f"{text} has symbol(s) {bad} outside this DFA's alphabet {self.alphabet}: it reads only "
                           "strings over that alphabet")
        for symbol in symbols:
            state = self.step(state, symbol)
            if state is None:
                return None
        return state

    def accepts(self, string: str | Sequence[Symbol]) -> bool:
        return self.run(string) in self.accepting

    def accuracy(self, strings: Sequence[str | Sequence[Symbol]], labels: Sequence[int | bool]) -> float:
        """The fraction of ``strings`` whose acceptance equals their label (1/True = in the language)."""
        if len(strings) != len(labels):
            raise DFAError(f"{len(strings)} strings but {len(labels)} labels")
        if not strings:
            return float("nan")
        return sum(self.accepts(s) == bool(y) for s, y in zip(strings, labels)) / len(strings)

    # -- structure -----------------------------------------------------------------------------
    @property
    def num_states(self) -> int:
        return len(self.states)

    def is_complete(self) -> bool:
        return all((q, a) in self.transitions for q in self.states for a in self.alphabet)

    def missing_transitions(self) -> list[tuple[StateId, Symbol]]:
        return [(q, a) for q in self.states for a in self.alphabet if (q, a) not in self.transitions]

    def complete(self, sink: StateId = "sink") -> DFA:
        """The same language with every missing transition sent to a non-accepting ``sink`` state."""
        missing = self.missing_transitions()
        if not missing:
            return self
        while sink in self.states:  # a fresh name
            sink = f"{sink}'"
        transitions = dict(self.transitions)
        for q, a in missing:
            transitions[(q, a)] = sink
        for a in self.alphabet:
            transitions[(sink, a)] = sink
        return DFA(self.alphabet, transitions, self.start, self.accepting, (*self.states, sink))

    def reachable_states(self) -> list[StateId]:
        """The states reachable from the start, in breadth-first order (alphabet order within a level)."""
        seen, order, queue = {self.start}, [self.start], deque([self.start])
        while queue:
            q = queue.popleft()
            for a in self.alphabet:
                r = self.transitions.get((q, a))
                if r is not None and r not in seen:
                    seen.add(r)
                    order.append(r)
                    queue.append(r)
        return order

    def trim(self) -> DFA:
        """Drop the states that cannot be reached from the start."""
        keep = set(self.reachable_states())
        transitions = {(q, a): r for (q, a), r in self.transitions.items() if q in keep}
        return DFA(self.alphabet, transitions, self.start, self.accepting & keep, keep)

    def dead_states(self) -> set[StateId]:
        """States from which no accepting state can be reached (the sink(s))."""
        reverse: dict[StateId, set[StateId]] = defaultdict(set)
        for (q, _), r in self.transitions.items():
            reverse[r].add(q)
        alive, queue = set(self.accepting), deque(self.accepting)
        while queue:
            r = queue.popleft()
            for q in reverse[r]:
                if q not in alive:
                    alive.add(q)
                    queue.append(q)
        return set(self.states) - alive

    def relabel(self, mapping: dict[StateId, StateId]) -> DFA:
        """Rename states (``mapping`` must be injective on the states it renames)."""
        m = lambda q: mapping.get(q, q)  # noqa: E731
        return DFA(
            self.alphabet,
            {(m(q), a): m(r) for (q, a), r in self.transitions.items()},
            m(self.start),
            {m(q) for q in self.accepting},
            [m(q) for q in self.states],
        )

    def canonical(self) -> DFA:
        """Reachable states renamed 0, 1, ... in breadth-first order from the start (alphabet order).

        Two *minimal* complete automata accept the same language iff their canonical forms are equal.
        """
        trimmed = self.trim()
        order = trimmed.reachable_states()
        return trimmed.relabel({q: i for i, q in enumerate(order)})

    # -- minimization --------------------------------------------------------------------------
    def minimize(self, method: str = "hopcroft") -> DFA:
        """The minimal complete DFA of the same language, in canonical form (states 0..n-1, start 0).

        The automaton is first completed (missing transitions -> sink) and trimmed to its reachable
        states; ``method`` is ``"hopcroft"`` (partition refinement on the inverse transitions,
        O(n |Sigma| log n)) or ``"moore"`` (iterated signature refinement, for cross-checking).
        A language that needs a dead state keeps exactly one.
        """
        dfa = self.complete().trim()
        if method == "hopcroft":
            blocks = _hopcroft(dfa)
        elif method == "moore":
            blocks = _moore(dfa)
        else:
            raise DFAError(f"method must be 'hopcroft' or 'moore', got {method!r}")
        block_of = {q: i for i, block in enumerate(blocks) for q in block}
        transitions = {(block_of[q], a): block_of[r] for (q, a), r in dfa.transitions.items()}
        accepting = {block_of[q] for q in dfa.accepting}
        return DFA(dfa.alphabet, transitions, block_of[dfa.start], accepting, range(len(blocks))).canonical()

    def is_minimal(self) -> bool:
        """Whether the completed, trimmed automaton already has the minimal number of states."""
        return self.complete().trim().num_states == self.minimize().num_states

    # -- comparison ----------------------------------------------------------------------------
    def find_difference(self, other: DFA) -> str | tuple[Symbol, ...] | None:
        """The shortest (then alphabetically first) string accepted by exactly one of the two, or None.

        Breadth-first search over the product automaton; a symbol missing from one alphabet, like a
        missing transition, leads that automaton to rejection.
        """
        alphabet = tuple(self.alphabet) + tuple(a for a in other.alphabet if a not in self.alphabet)
        dead = object()

        def move(dfa: DFA, q: Any, a: Symbol) -> Any:
            if q is dead or a not in dfa.alphabet:
                return dead
            r = dfa.transitions.get((q, a))
            return dead if r is None else r

        def accept(dfa: DFA, q: Any) -> bool:
            return q is not dead and q in dfa.accepting

        start = (self.start, other.start)
        parent: dict[tuple, tuple | None] = {start: None}
        queue = deque([start])
        while queue:
            p, q = pair = queue.popleft()
            if accept(self, p) != accept(other, q):
                symbols = []
                while parent[pair] is not None:
                    pair, a = parent[pair]
                    symbols.append(a)
                return _join(symbols[::-1])
            for a in alphabet:
                nxt = (move(self, p, a), move(other, q, a))
                if nxt not in parent:
                    parent[nxt] = (pair, a)
                    queue.append(nxt)
        return None

    def equivalent(self, other: DFA) -> bool:
        """Whether both accept exactly the same strings (decided exactly on the product automaton)."""
        return self.find_difference(other) is None

    def __eq__(self, other: object) -> bool:  # structural equality (same states, names and edges)
        if not isinstance(other, DFA):
            return NotImplemented
        return (
            self.alphabet == other.alphabet
            and self.transitions == other.transitions
            and self.start == other.start
            and self.accepting == other.accepting
            and set(self.states) == set(other.states)
        )

    __hash__ = None  # mutable-looking; not hashable

    def __repr__(self) -> str:
        return (
            f"DFA(states={list(self.states)}, alphabet={list(self.alphabet)}, start={self.start!r}, "
            f"accepting={sorted(self.accepting, key=_sort_key)}, transitions={len(self.transitions)})"
        )

    # -- counting and sampling strings ---------------------------------------------------------
    def _counts(self, length: int, accepted: bool) -> list[dict[StateId, int]]:
        """``N[r][q]``: the number of strings of length r that lead from q to (non-)acceptance."""
        table = self._count_cache.get(accepted)
        dfa = self.complete()
        if table is None:
            table = [{q: int((q in dfa.accepting) == accepted) for q in dfa.states}]
            self._count_cache[accepted] = table
        while len(table) <= length:
            prev = table[-1]
            table.append({q: sum(prev[dfa.transitions[(q, a)]] for a in dfa.alphabet) for q in dfa.states})
        return table

    def count(self, length: int, accepted: bool = True) -> int:
        """How many strings of exactly ``length`` symbols are accepted (or rejected)."""
        return self._counts(length, accepted)[length][self.start]

    def unrank(self, length: int, rank: int, accepted: bool = True) -> str | tuple[Symbol, ...]:
        """The ``rank``-th (0-based, alphabet order) string of ``length`` that is accepted (rejected)."""
        table, dfa = self._counts(length, accepted), self.complete()
        if not 0 <= rank < table[length][self.start]:
            raise DFAError(f"rank {rank} out of range: {table[length][self.start]} strings of length {length}")
        q, out = self.start, []
        for r in range(length, 0, -1):
            for a in dfa.alphabet:
                nxt = dfa.transitions[(q, a)]
                n = table[r - 1][nxt]
                if rank < n:
                    out.append(a)
                    q = nxt
                    break
                rank -= n
        return _join(out)

    def rank(self, string: str | Sequence[Symbol], accepted: bool = True) -> int:
        """The inverse of :meth:`unrank` (``string`` must be in the requested class)."""
        symbols = _as_symbols(string)
        if self.accepts(symbols) != accepted:
            raise DFAError(f"{string!r} is {'not ' if accepted else ''}accepted")
        table, dfa = self._counts(len(symbols), accepted), self.complete()
        q, rank = self.start, 0
        for i, s in enumerate(symbols):
            remaining = len(symbols) - i - 1
            for a in dfa.alphabet:
                if a == s:
                    break
                rank += table[remaining][dfa.transitions[(q, a)]]
            q = dfa.transitions[(q, s)]
        return rank

    # -- serialization -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        def plain(q):
            return int(q) if isinstance(q, np.integer) else q

        return {
            "alphabet": list(self.alphabet),
            "states": [plain(q) for q in self.states],
            "start": plain(self.start),
            "accepting": [plain(q) for q in sorted(self.accepting, key=_sort_key)],
            "transitions": [
                [plain(q), a, plain(r)]
                for (q, a), r in sorted(
                    self.transitions.items(), key=lambda kv: (_sort_key(kv[0][0]), self.alphabet.index(kv[0][1]))
                )
            ],
        }

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DFA:
        try:
            return cls(
                data["alphabet"],
                {(q, a): r for q, a, r in data["transitions"]},
                data["start"],
                data["accepting"],
                data.get("states", ()),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise DFAError(f"not a DFA description: {err}") from err

    @classmethod
    def from_json(cls, text: str | dict) -> DFA:
        return cls.from_dict(json.loads(text) if isinstance(text, str) else text)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.to_json() + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> DFA:
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    # -- drawing -------------------------------------------------------------------------------
    def to_dot(self, title: str | None = None, hide_dead: bool = False) -> str:
        """Graphviz source: circles, double circles for accepting states, an arrow into the start.

        Parallel edges are merged into one labelled with every symbol; ``hide_dead`` drops the states
        from which nothing is accepted (the sink), as drawings of DFAs usually do.
        """
        hidden = self.dead_states() - {self.start} if hide_dead else set()
        lines = ["digraph DFA {", "  rankdir=LR;", '  node [fontname="Helvetica"];', '  edge [fontname="Helvetica"];']
        if title:
            lines.append(f'  labelloc="t"; label={json.dumps(title)};')
        lines.append('  __start [shape=point, width=0.08, label=""];')
        for q in self.states:
            if q in hidden:
                continue
            shape = "doublecircle" if q in self.accepting else "circle"
            lines.append(f"  {json.dumps(str(q))} [shape={shape}, label={json.dumps(str(q))}];")
        lines.append(f"  __start -> {json.dumps(str(self.start))};")
        edges: dict[tuple, list[Symbol]] = defaultdict(list)
        for (q, a), r in self.transitions.items():
            if q not in hidden and r not in hidden:
                edges[(q, r)].append(a)
        for (q, r), symbols in sorted(edges.items(), key=lambda kv: (_sort_key(kv[0][0]), _sort_key(kv[0][1]))):
            label = ",".join(sorted(symbols, key=self.alphabet.index))
            lines.append(f"  {json.dumps(str(q))} -> {json.dumps(str(r))} [label={json.dumps(label)}];")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def draw(self, path: str | Path, fmt: str = "png", title: str | None = None, hide_dead: bool = False) -> Path | None:
        """Write ``<path>.dot`` and, if Graphviz's ``dot`` is installed, ``<path>.<fmt>``.

        Returns the rendered file, or None (with a warning) when ``dot`` is absent: install it with
        ``apt-get install graphviz``.
        """
        path = Path(path)
        dot_file = path.with_suffix(".dot")
        dot_file.parent.mkdir(parents=True, exist_ok=True)
        dot_file.write_text(self.to_dot(title, hide_dead), encoding="utf-8")
        exe = shutil.which("dot")
        if exe is None:
            warnings.warn(f"graphviz 'dot' not found: wrote {dot_file} but no {fmt} (apt-get install graphviz)", stacklevel=2)
            return None
        out = path.with_suffix(f".{fmt}")
        subprocess.run([exe, f"-T{fmt}", "-o", str(out), str(dot_file)], check=True, capture_output=True)
        return out


def _join(symbols: Sequence[Symbol]) -> str | tuple[Symbol, ...]:
    """A string when every symbol is one character, else a tuple of symbols."""
    symbols = list(symbols)
    if all(isinstance(s, str) and len(s) == 1 for s in symbols):
        return "".join(symbols)
    return tuple(symbols)


def _hopcroft(dfa: DFA) -> list[frozenset]:
    """Hopcroft's partition refinement on a complete, trimmed DFA: the blocks of equivalent states."""
    states = frozenset(dfa.states)
    final = frozenset(dfa.accepting) & states
    partition = [b for b in (final, states - final) if b]
    if len(partition) < 2:
        return partition
    inverse: dict[Symbol, dict[StateId, set[StateId]]] = {a: defaultdict(set) for a in dfa.alphabet}
    for (q, a), r in dfa.transitions.items():
        inverse[a][r].add(q)
    waiting = [min(partition, key=len)]
    while waiting:
        splitter = waiting.pop()
        for a in dfa.alphabet:
            predecessors = set()
            for r in splitter:
                predecessors |= inverse[a][r]
            if not predecessors:
                continue
            refined = []
            for block in partition:
                inside, outside = block & predecessors, block - predecessors
                if inside and outside:
                    refined += [inside, outside]
                    if block in waiting:
                        waiting.remove(block)
                        waiting += [inside, outside]
                    else:
                        waiting.append(inside if len(inside) <= len(outside) else outside)
                else:
                    refined.append(block)
            partition = refined
    return partition


def _moore(dfa: DFA) -> list[frozenset]:
    """Moore's algorithm: refine by (class, classes of the successors) until nothing splits."""
    cls = {q: int(q in dfa.accepting) for q in dfa.states}
    n_classes = len(set(cls.values()))
    while True:
        signatures = {q: (cls[q], *(cls[dfa.transitions[(q, a)]] for a in dfa.alphabet)) for q in dfa.states}
        numbering = {sig: i for i, sig in enumerate(sorted(set(signatures.values())))}
        cls = {q: numbering[signatures[q]] for q in dfa.states}
        if len(numbering) == n_classes:
            break
        n_classes = len(numbering)
    blocks: dict[int, set] = defaultdict(set)
    for q, c in cls.items():
        blocks[c].add(q)
    return [frozenset(b) for b in blocks.values()]


# -- extraction from an sr-RNN ---------------------------------------------------------------------
@dataclass
class Extraction:
    """What :func:`extract_dfa` found.

    Attributes:
        dfa: the extracted automaton; its states are centroid indices (partial when some (state,
            symbol) pair never occurred in the data, unless ``fill_missing="network"``).
        counts: ``[k, |Sigma|, k]`` transition counts ``T[(c_i, x, c_j)]`` of appendix E.
        start_counts: ``[k]`` how often each centroid was the argmax after the start token.
        final_counts: ``[k]`` how often each centroid was the last state of a string.
        consistency: the fraction of counted transitions that agree with the kept (most frequent) one;
            1.0 means the network moved deterministically between centroids on this data.
        mean_max_probability: the mean of ``max_i alpha_i`` over every step (1.0: one-hot transitions).
        accepting_source: how the accepting states were decided.
        centroid_accept_probability: ``[k]`` the classifier's probability of the accepting class at each
            centroid (after the end token), when the model could compute it.
        filled: the transitions that were not observed and were read off the network instead.
    """

    dfa: DFA
    counts: np.ndarray
    start_counts: np.ndarray
    final_counts: np.ndarray
    consistency: float
    mean_max_probability: float
    accepting_source: str
    centroid_accept_probability: np.ndarray | None = None
    filled: list[tuple[int, Symbol, int]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dfa": self.dfa.to_dict(),
            "counts": self.counts.tolist(),
            "start_counts": self.start_counts.tolist(),
            "final_counts": self.final_counts.tolist(),
            "consistency": self.consistency,
            "mean_max_probability": self.mean_max_probability,
            "accepting_source": self.accepting_source,
            "centroid_accept_probability": (
                None if self.centroid_accept_probability is None else self.centroid_accept_probability.tolist()
            ),
            "filled": [list(t) for t in self.filled],
        }


ACCEPTING_SOURCES = ("classifier", "labels", "predictions")
FOLLOW = ("network", "centroid")


def extract_dfa(
    model: Any,
    strings: Sequence[str | Sequence[Symbol]],
    vocab: Any,
    *,
    alphabet: Sequence[Symbol] | None = None,
    labels: Sequence[int] | None = None,
    accepting: str = "classifier",
    accept_class: int = 1,
    follow: str = "network",
    fill_missing: str | None = None,
    batch_size: int = 512,
) -> Extraction:
    """Extract the DFA of a trained sr-RNN classifier (sr-RNN paper appendix E, "Algorithm E").

    Args:
        model: a :class:`~dsf_lightning.tasks.modules.SequenceClassifier` over a state-regularized cell
            (anything with ``transition_trace(inputs, lengths) -> alpha [B, T, k]``, and for the
            options below ``forward``, ``centroid_decisions`` and ``centroid_transitions``).
        strings: the data set D (the paper runs the training strings).
        vocab: the :class:`~dsf_lightning.tasks.data.Vocabulary` the model was trained with; the start
            token (sec. 3.3) must be part of its encoding.
        alphabet: the input symbols (default: ``vocab.alphabet``).
        labels: the strings' labels (needed for ``accepting="labels"``).
        accepting: ``"classifier"`` (default): a centroid is accepting when the classifier, reading the
            end token from exactly that centroid, gives the accepting class probability > 0.5 (for
            memory-less cells, whose whole state is the centroid); ``"labels"``: the majority label of
            the strings whose last state is the centroid; ``"predictions"``: the majority of the
            network's own decisions on those strings. Centroids no string ends in fall back to the
            classifier when it is available, else reject.
        follow: ``"network"`` (default, the paper): run the network as trained (soft mixtures, eq. 6)
            and take the argmax centroid at each step; ``"centroid"``: snap the state to the argmax
            centroid at every step (the cell's ``mode="hard"``, the tau -> 0 limit of Theorem 3.2).
        fill_missing: None (default, the paper: unobserved pairs stay missing, i.e. reject) or
            ``"network"``: read each missing transition off the network by stepping from the centroid
            itself (exact for memory-less cells, Theorem 3.1), closing over newly reached centroids.
        accept_class: the class index meaning "in the language".
    """
    import torch

    from .data import pad_ids

    if accepting not in ACCEPTING_SOURCES:
        raise DFAError(f"accepting must be one of {ACCEPTING_SOURCES}, got {accepting!r}")
    if follow not in FOLLOW:
        raise DFAError(f"follow must be one of {FOLLOW}, got {follow!r}")
    if fill_missing not in (None, "network"):
        raise DFAError(f"fill_missing must be None or 'network', got {fill_missing!r}")
    if accepting == "labels" and (labels is None or len(labels) != len(strings)):
        raise DFAError("accepting='labels' needs one label per string")
    if not getattr(vocab, "start_end_tokens", True):
        raise DFAError("extraction needs the start token (sec. 3.3): build the vocabulary with start_end_tokens=True")
    cell = getattr(model, "cell", None)
    if cell is None or not hasattr(cell, "centroids") or not hasattr(model, "transition_trace"):
        what = f"cell {type(cell).__name__}" if cell is not None else "no .cell"
        raise DFAError(
            f"DFA extraction needs a classifier over a state-regularized cell (one with centroids), but "
            f"{type(model).__name__} has {what}: train a SequenceClassifier with an sr-* cell (sr-gru, sr-lstm, "
            "sr-lstm-p; e.g. --model.init_args.cell sr-gru) and extract from that"
        )
    memoryless = len(getattr(cell, "state_sizes", ())) == 1
    if not memoryless and (accepting == "classifier" or fill_missing == "network"):
        option = "accepting='classifier'" if accepting == "classifier" else "fill_missing='network'"
        raise DFAError(
            f"{option} reads the network at exactly a centroid, which needs a memory-less cell (state = the hidden "
            f"state only, e.g. sr-gru); this cell's state sizes are {tuple(cell.state_sizes)}: use "
            "accepting='labels' (with labels=...) or accepting='predictions', and fill_missing=None"
        )
    alphabet = tuple(alphabet if alphabet is not None else vocab.alphabet)
    symbol_index = {a: i for i, a in enumerate(alphabet)}
    for i, string in enumerate(strings):
        bad = [a for a in dict.fromkeys(_as_symbols(string)) if a not in symbol_index]
        if bad:
            text = repr(string) if len(repr(string)) <= 60 else repr(string)[:57] + "..."
            raise DFAError(f"string {i} ({text}) has symbol(s) {bad} outside the alphabet {alphabet}: extract from "
                           "strings over the model's alphabet (its vocabulary's), or pass alphabet=")
    k = int(cell.k)

    counts = np.zeros((k, len(alphabet), k), dtype=np.int64)
    start_counts = np.zeros(k, dtype=np.int64)
    final_counts = np.zeros(k, dtype=np.int64)
    final_state = np.zeros(len(strings), dtype=np.int64)
    predictions = np.zeros(len(strings), dtype=np.int64)
    max_prob_sum, steps = 0.0, 0

    was_training, old_mode = model.training, cell.mode
    model.eval()
    if follow == "centroid":
        cell.mode = "hard"
    try:
        order = sorted(range(len(strings)), key=lambda i: len(strings[i]))
        with torch.no_grad():
            for lo in range(0, len(order), batch_size):
                idx = order[lo : lo + batch_size]
                inputs, lengths = pad_ids([vocab.encode(strings[i]) for i in idx], vocab.pad_id)
                inputs = inputs.to(model.device)
                alpha = model.transition_trace(inputs, lengths.to(model.device)).float().cpu()  # [B, 1+T, k]
                best = alpha.argmax(-1).numpy()
                top = alpha.max(-1).values.numpy()
                if accepting == "predictions":
                    logits = model(inputs, lengths.to(model.device))
                    predictions[idx] = logits.argmax(-1).cpu().numpy()
                for row, i in enumerate(idx):
                    symbols = _as_symbols(strings[i])
                    path = best[row, : len(symbols) + 1]  # c_0 (start token), c_1 .. c_T
                    start_counts[path[0]] += 1
                    for t, a in enumerate(symbols, 1):
                        counts[path[t - 1], symbol_index[a], path[t]] += 1
                    final_state[i] = path[-1]
                    final_counts[path[-1]] += 1
                    max_prob_sum += float(top[row, : len(symbols) + 1].sum())
                    steps += len(symbols) + 1
    finally:
        cell.mode = old_mode
        model.train(was_training)

    start = int(start_counts.argmax())
    transitions: dict[tuple[int, Symbol], int] = {}
    for i in range(k):
        for a, s in symbol_index.items():
            if counts[i, s].sum() > 0:
                transitions[(i, a)] = int(counts[i, s].argmax())
    total = counts.sum()
    consistency = float(counts.max(-1).sum() / total) if total else 1.0

    accept_prob = None
    if hasattr(model, "centroid_decisions") and memoryless:
        try:
            accept_prob = model.centroid_decisions(vocab.end_id)[:, accept_class].detach().cpu().numpy()
        except NotImplementedError:
            accept_prob = None
    if accepting == "classifier" and accept_prob is None:
        raise DFAError("this model cannot give the classifier's decision at a centroid; use accepting='labels'")

    filled: list[tuple[int, Symbol, int]] = []
    states = {start} | {q for q, _ in transitions} | set(transitions.values())
    if fill_missing == "network":
        table = model.centroid_transitions([vocab.index[a] for a in alphabet]).argmax(-1).cpu().numpy()  # [k, S]
        queue = deque(sorted(states))
        while queue:
            q = queue.popleft()
            for a, s in symbol_index.items():
                if (q, a) not in transitions:
                    r = int(table[q, s])
                    transitions[(q, a)] = r
                    filled.append((q, a, r))
                    if r not in states:
                        states.add(r)
                        queue.append(r)

    if accepting == "classifier":
        accept = {q for q in states if accept_prob[q] > 0.5}
    else:
        votes = np.asarray(labels if accepting == "labels" else predictions) == accept_class
        accept = set()
        for q in states:
            mine = votes[final_state == q]
            if len(mine):
                if mine.mean() > 0.5:
                    accept.add(q)
            elif accept_prob is not None and accept_prob[q] > 0.5:
                accept.add(q)

    dfa = DFA(alphabet, transitions, start, accept, states)
    return Extraction(
        dfa=dfa,
        counts=counts,
        start_counts=start_counts,
        final_counts=final_counts,
        consistency=consistency,
        mean_max_probability=max_prob_sum / max(steps, 1),
        accepting_source=accepting,
        centroid_accept_probability=accept_prob,
        filled=filled,
    )

