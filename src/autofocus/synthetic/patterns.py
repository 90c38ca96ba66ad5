"""Query patterns sampled from the graph itself, executed exactly: questions whose answers are known.

A pattern grows from a random target node: 1 to 3 real edges (either direction, as stored) walked
from the target or from the node reached last, so it is a chain, a star or a fork. The leaves are
named constants (the real nodes' names); inner nodes stay variables. Optional attribute filters
take real values of the walked nodes' typed columns (``=``, ``<``, ``>=``, ``CONTAINS``), so the
walked target always satisfies them. Executing the pattern is set algebra over the CSR graph
(``ground_triplets`` with each constant's exact node id): a pattern is a tree, so the fixpoint is
exactly its answer set. Nothing here reads a QA file.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from autofocus.program.steps.grounding import ground_triplets
from autofocus.program.steps.symbols import NAME_KEYS, constraint_mask
from autofocus.query_graph import Constraint, QueryGraph, Symbol, Triplet
from autofocus.skb.model import SKB, Column
from autofocus.skb.names import exact_name_ids

VARS = ("y", "a", "b", "c")  # the target first
MAX_NAME_CHARS = 120  # longer names (product titles, abstracts) make no question a person would ask
LOW_CARDINALITY = 20  # at most this many distinct values in a type: compare with `=`
_WORD = re.compile(r"[A-Za-z][A-Za-z_]{3,}")


@dataclass
class Pattern:
    """A sampled query: its query graph (constants by name), their exact ids and the exact answers."""

    query: QueryGraph
    constants: dict[str, int]  # var -> node id
    answers: np.ndarray  # sorted node ids
    shape: str  # "1", "2-chain", "2-star", "3-chain", "3-star", "3-fork"
    clue: str | None = None  # what singles out one answer by its text (``synthetic.clues``): the question states it
    clue_answer: int | None = None
    clue_kind: str = "phrase"  # "phrase": a rare phrase of the text; "fact": the LM's words for what the text says;
    # "paraphrase": the answer's defining clause in common words (``synthetic.paraphrase``)

    @property
    def asked(self) -> np.ndarray:
        """The question's answers: the clue's one node, else the whole answer set."""
        return self.answers if self.clue_answer is None else np.array([self.clue_answer], dtype=np.int64)

    @property
    def target_type(self) -> str:
        return str(self.query.target_type)

    @property
    def edge_types(self) -> list[str]:
        return [str(t.rel) for t in self.query.triplets]

    @property
    def filters(self) -> list[tuple[str, Constraint]]:
        return [(v, c) for v, s in self.query.symbols.items() for c in s.constraints if v not in self.constants]


@dataclass
class _Walk:
    nodes: list[int]
    edges: list[tuple[int, int, str, bool]]  # (from position, to position, edge type, stored from -> to)

    def degree(self, pos: int) -> int:
        return sum(pos in (a, b) for a, b, _, _ in self.edges)


@dataclass
class SamplerStats:
    """Why sampled walks did not become patterns (for the summary)."""

    rejected: Counter = field(default_factory=Counter)


class PatternSampler:
    """Samples patterns of any SKB schema; edge types are chosen to keep their use in proportion.

    Args:
        skb: the knowledge base.
        max_answers: largest answer set kept (a fair question lists at most this many).
        max_triplets: 1 to 3.
        filter_rate: share of patterns given an attribute filter although their answer set is small.
    """

    def __init__(self, skb: SKB, max_answers: int = 20, max_triplets: int = 3, filter_rate: float = 0.3) -> None:
        if not 1 <= max_triplets <= 3:
            raise ValueError(f"max_triplets must be 1, 2 or 3, got {max_triplets}")
        self.skb = skb
        self.max_answers = max_answers
        self.max_triplets = max_triplets
        self.filter_rate = filter_rate
        counts = {e: skb.graph.num_edges(e) for e in skb.graph.edge_types}
        total = sum(counts.values()) or 1
        self.edge_share = {e: c / total for e, c in counts.items()}
        self.edge_used: Counter = Counter()
        self.stats = SamplerStats()
        self._type_masks: dict[str, np.ndarray] = {}
        self._filter_columns: dict[str, list[tuple[str, Column, np.ndarray]]] = {}

    # --- the walk ---------------------------------------------------------------------------------
    def type_mask(self, type_name: str) -> np.ndarray:
        if type_name not in self._type_masks:
            self._type_masks[type_name] = self.skb.node_type == self.skb.type_code(type_name)
        return self._type_masks[type_name]

    def _step(self, node: int, visited: set[int], rng: np.random.Generator) -> tuple[int, str, bool] | None:
        """One real edge from ``node`` to an unvisited node: ``(neighbour, edge type, stored node -> nbr)``.

        Edge types are weighted by their share of the graph over their use so far, so the
        patterns' edge types follow the graph's proportions and rare ones still appear."""
        options: list[tuple[str, bool]] = []
        weights: list[float] = []
        rows = np.array([node], dtype=np.int64)
        for e in self.skb.graph.edge_types:
            for out in (True, False):
                if int(self.skb.graph.adjacency(e, "out" if out else "in").degree(rows)[0]) > 0:
                    options.append((e, out))
                    weights.append(self.edge_share[e] / (1 + self.edge_used[e]) + 1e-9)
        while options:
            p = np.asarray(weights) / sum(weights)
            i = int(rng.choice(len(options), p=p))
            e, out = options.pop(i)
            weights.pop(i)
            nbrs = self.skb.graph.adjacency(e, "out" if out else "in").gather(rows)[1]
            nbrs = nbrs[~np.isin(nbrs, list(visited))]
            if len(nbrs):
                return int(rng.choice(nbrs)), e, out
        return None

    def _walk(self, target: int, rng: np.random.Generator) -> _Walk | None:
        n_edges = int(rng.choice([1, 2, 3][: self.max_triplets], p=_size_weights(self.max_triplets)))
        walk = _Walk([target], [])
        for _ in range(n_edges):
            start = 0 if len(walk.nodes) == 1 or rng.random() < 0.5 else len(walk.nodes) - 1
            step = self._step(walk.nodes[start], set(walk.nodes), rng)
            if step is None:
                if not walk.edges:
                    return None
                break
            nbr, e, out = step
            walk.edges.append((start, len(walk.nodes), e, out))
            walk.nodes.append(nbr)
        return walk

    def _unique_name(self, node: int, name: str) -> bool:
        """No other node of its type has this name: a question naming it means one node."""
        same = exact_name_ids(self.skb, name)
        return int(self.type_mask(self.skb.type_of(node))[same].sum()) == 1

    # --- filters ----------------------------------------------------------------------------------
    def filter_columns(self, type_name: str) -> list[tuple[str, Column, np.ndarray]]:
        """Typed columns (number, date, string) present on nodes of the type, with their value sets."""
        if type_name not in self._filter_columns:
            mask = self.type_mask(type_name)
            name_field = self.skb.schema.node_types[type_name].name_field if type_name in self.skb.schema.node_types else ""
            out = []
            for key, col in self.skb.columns.items():
                if col.kind == "json" or key.lower() in NAME_KEYS or key == name_field:
                    continue
                ids = np.flatnonzero(mask & col.present)
                if len(ids) < 2:
                    continue
                if col.kind == "string":
                    values = np.unique(np.array([str(col.values[i]) for i in ids[:2000]], dtype=object))  # a sample
                else:
                    values = np.unique(np.asarray(col.values)[ids])
                if len(values) > 1:
                    out.append((key, col, values))
            self._filter_columns[type_name] = out
        return self._filter_columns[type_name]

    def _constraint(self, node: int, rng: np.random.Generator) -> Constraint | None:
        """A condition that ``node`` satisfies, on one of its type's typed columns."""
        columns = [c for c in self.filter_columns(self.skb.type_of(node)) if c[1].present[node]]
        if not columns:
            return None
        key, col, values = columns[int(rng.integers(len(columns)))]
        if col.kind == "string":
            text = str(col.values[node])
            if len(values) <= LOW_CARDINALITY and len(text) <= 60:
                return Constraint(key=key, op="=", value=text)
            words = sorted(set(_WORD.findall(text)) - {w for w in _WORD.findall(self.skb.name(node))})
            return Constraint(key=key, op="CONTAINS", value=str(rng.choice(words))) if words else None
        x = float(np.asarray(col.values)[node])
        render = (lambda v: str(np.datetime64(int(v), "D"))) if col.kind == "date" else _number
        if len(values) <= 2 and col.kind == "number":
            return Constraint(key=key, op="=", value=render(x))
        higher = values[values > x]
        ops = ["<", ">="] if len(higher) else [">="]
        if col.kind == "number" and len(values) <= LOW_CARDINALITY:
            ops.append("=")
        op = str(rng.choice(ops))
        if op == "<":
            return Constraint(key=key, op="<", value=render(float(rng.choice(higher[: max(1, len(higher) // 2)]))))
        return Constraint(key=key, op=op, value=render(x))  # type: ignore[arg-type]

    # --- a whole pattern --------------------------------------------------------------------------
    def sample(self, target_type: str, rng: np.random.Generator) -> Pattern | None:
        """A pattern whose answers are the nodes of ``target_type`` it matches (1..max_answers), or None."""
        ids = self.skb.ids_of_type(target_type)
        if len(ids) == 0:
            return None
        target = int(rng.choice(ids))
        walk = self._walk(target, rng)
        if walk is None:
            self.stats.rejected["no edge to walk"] += 1
            return None
        constants = {VARS[p]: walk.nodes[p] for p in range(1, len(walk.nodes)) if walk.degree(p) == 1}
        names = {v: self.skb.name(n).strip() for v, n in constants.items()}
        if any(not n or len(n) > MAX_NAME_CHARS for n in names.values()):
            self.stats.rejected["constant without a usable name"] += 1
            return None
        if any(not self._unique_name(node, names[v]) for v, node in constants.items()):
            self.stats.rejected["constant name shared in its type"] += 1
            return None
        filters: dict[str, list[Constraint]] = {}
        pattern = self._execute(walk, constants, names, filters)
        wants_filter = rng.random() < self.filter_rate
        if len(pattern.answers) > self.max_answers or wants_filter:
            pattern = self._with_filter(walk, constants, names, pattern, rng) or pattern
        if not 1 <= len(pattern.answers) <= self.max_answers:
            self.stats.rejected["too many answers"] += 1
            return None
        if np.isin(list(constants.values()), pattern.answers).any():
            self.stats.rejected["a constant is an answer"] += 1
            return None
        return pattern

    def _with_filter(
        self, walk: _Walk, constants: dict[str, int], names: dict[str, str], base: Pattern, rng: np.random.Generator
    ) -> Pattern | None:
        """The pattern with one real-valued filter on the target or a variable that narrows its answers."""
        free = [p for p in range(len(walk.nodes)) if VARS[p] not in constants]
        for _ in range(3):
            pos = int(rng.choice(free))
            c = self._constraint(walk.nodes[pos], rng)
            if c is None:
                continue
            narrowed = self._execute(walk, constants, names, {VARS[pos]: [c]})
            if 0 < len(narrowed.answers) < len(base.answers):
                return narrowed
        return None

    def _execute(
        self, walk: _Walk, constants: dict[str, int], names: dict[str, str], filters: dict[str, list[Constraint]]
    ) -> Pattern:
        skb = self.skb
        symbols: dict[str, Symbol] = {}
        sets: dict[str, np.ndarray | None] = {}
        type_masks: dict[str, np.ndarray | None] = {}
        for p, node in enumerate(walk.nodes):
            var, t = VARS[p], skb.type_of(node)
            type_masks[var] = self.type_mask(t)
            if var in constants:
                symbols[var] = Symbol(var=var, type=t, label=t, constraints=[Constraint(key="name", value=names[var])])
                sets[var] = np.array([node], dtype=np.int64)
                continue
            cons = filters.get(var, [])
            symbols[var] = Symbol(var=var, type=t, label=t, constraints=cons)
            mask = None
            for c in cons:
                cm = constraint_mask(skb, c)
                mask = cm if mask is None else mask & cm
            sets[var] = None if mask is None else np.flatnonzero(mask & type_masks[var])
        triplets = []
        for a, b, e, out in walk.edges:
            head, tail = (VARS[a], VARS[b]) if out else (VARS[b], VARS[a])
            triplets.append(Triplet(head=head, rel=e, rel_label=e, tail=tail))
        qg = QueryGraph(target="y", target_type=skb.type_of(walk.nodes[0]), symbols=symbols, triplets=triplets)
        final = ground_triplets(skb, triplets, sets, type_masks)
        answers = final.get("y")
        return Pattern(qg, dict(constants), np.asarray(answers if answers is not None else [], np.int64),
                       _shape(walk))

    def count_edges(self, pattern: Pattern) -> None:
        """Record a kept pattern's edge types (the weights of later walks)."""
        self.edge_used.update(pattern.edge_types)


def _size_weights(max_triplets: int) -> list[float]:
    w = [0.4, 0.4, 0.2][:max_triplets]
    return [x / sum(w) for x in w]


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def _shape(walk: _Walk) -> str:
    n = len(walk.edges)
    if n == 1:
        return "1"
    from_target = sum(a == 0 for a, _, _, _ in walk.edges)
    if from_target == n:
        return f"{n}-star"
    if from_target == 1:
        return f"{n}-chain"
    return f"{n}-fork"


def pattern_key(pattern: Pattern) -> tuple[str, tuple[int, ...]]:
    """Two patterns asking for the same set of the same type are one question (deduplication)."""
    return pattern.target_type, tuple(int(i) for i in pattern.answers)
