"""Step 5: grounding against brute-force path enumeration, and the expansion schedule."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autofocus.program.steps.grounding import (
    expansion_cuts,
    ground_triplets,
    ground_with_expansion,
    support_paths,
)
from autofocus.query_graph import Constraint, QueryGraph, Symbol, Triplet
from tests.skb_factory import make_skb

ETYPES = {"r": ("a", "b"), "s": ("b", "a"), "u": ("b", "b")}


@st.composite
def random_case(draw):
    n = draw(st.integers(4, 9))
    node_type = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.sampled_from(list(ETYPES)), st.integers(0, n - 1)),
                          max_size=25))
    # a tree-shaped query over 2-4 symbols: each new symbol attaches to an earlier one
    n_sym = draw(st.integers(2, 4))
    trips = []
    for i in range(1, n_sym):
        parent = draw(st.integers(0, i - 1))
        head, tail = (f"x{parent}", f"x{i}") if draw(st.booleans()) else (f"x{i}", f"x{parent}")
        rel = draw(st.sampled_from([*ETYPES, None]))
        trips.append(Triplet(head=head, rel=rel, tail=tail, directed=draw(st.booleans())))
    sym_types = {f"x{i}": draw(st.sampled_from(["a", "b", None])) for i in range(n_sym)}
    const_sets = {}
    for i in range(n_sym):
        if draw(st.booleans()):
            const_sets[f"x{i}"] = np.array(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=3))))
    return n, node_type, edges, trips, sym_types, const_sets


def brute_force(skb, trips, sym_types, const_sets, target):
    syms = sorted({t.head for t in trips} | {t.tail for t in trips})
    edge_set = set()
    for e in skb.graph.edge_types:
        csr = skb.graph.forward[e]
        for s in range(skb.num_nodes):
            for d in csr.indices[csr.indptr[s]:csr.indptr[s + 1]]:
                edge_set.add((s, e, int(d)))

    def domain(v):
        ids = range(skb.num_nodes)
        if v in const_sets:
            ids = const_sets[v].tolist()
        if sym_types[v] is not None:
            ids = [i for i in ids if skb.type_of(i) == sym_types[v]]
        return list(ids)

    def linked(a, rel, b, directed):
        rels = [rel] if rel else skb.graph.edge_types
        return any((a, r, b) in edge_set or (not directed and (b, r, a) in edge_set) for r in rels)

    answers = set()
    for combo in itertools.product(*(domain(v) for v in syms)):
        assign = dict(zip(syms, combo, strict=True))
        if all(linked(assign[t.head], t.rel, assign[t.tail], t.directed) for t in trips):
            answers.add(assign[target])
    return answers


@settings(max_examples=150, deadline=None)
@given(random_case())
def test_grounding_matches_brute_force_on_tree_queries(case):
    _n, node_type, edges, trips, sym_types, const_sets = case
    skb = make_skb(["a", "b"], node_type, edges, ETYPES)
    type_masks = {v: (None if t is None else skb.node_type == skb.type_code(t)) for v, t in sym_types.items()}
    sets = {}
    for v in sym_types:
        if v in const_sets:
            ids = const_sets[v]
            sets[v] = ids if type_masks[v] is None else ids[type_masks[v][ids]]
        else:
            sets[v] = None
    if all(s is None for s in sets.values()):
        return
    final = ground_triplets(skb, trips, sets, type_masks)
    for v in sym_types:
        if final.get(v) is None:
            continue
        expected = brute_force(skb, trips, sym_types, const_sets, v)
        got = set(final[v].tolist())
        # Algorithm 2 is arc consistency: exact on tree-shaped queries once every symbol is constrained
        assert expected <= got
        if all(final.get(u) is not None for u in sym_types):
            assert got == expected


def _chain_skb():
    # diseases 0..3, drugs 10..15 (ids dense: fill with unrelated nodes)
    types = ["drug", "disease"]
    node_type = [1, 1, 1, 1] + [0] * 12
    edges = [(10, "indication", 0), (11, "indication", 0), (12, "indication", 1), (13, "indication", 2),
             (14, "indication", 3), (15, "indication", 3)]
    return make_skb(types, node_type, edges, {"indication": ("drug", "disease")})


def test_expansion_stops_at_k_and_schedule():
    skb = _chain_skb()
    qg = QueryGraph(
        target="x", target_type="drug",
        symbols={"x": Symbol(var="x", type="drug"),
                 "c": Symbol(var="c", type="disease", constraints=[Constraint(key="name", value="asthma")])},
        triplets=[Triplet(head="x", rel="indication", tail="c")],
    )
    ranked = {"c": np.array([0, 1, 2, 3])}
    masks = {"x": skb.node_type == 0, "c": skb.node_type == 1}
    res = ground_with_expansion(skb, qg, ranked, {"x": None}, masks, k=3, l_max=100, schedule="code")
    # l = 1 -> {10, 11}; l = 2 -> + {12}: 3 >= k, stop (the authors' toy run)
    assert [r["cut"] for r in res.rounds] == [1, 2]
    assert res.answers.tolist() == [10, 11, 12]
    assert res.round_of == {10: 0, 11: 0, 12: 1}
    res2 = ground_with_expansion(skb, qg, ranked, {"x": None}, masks, k=2, l_max=100)
    assert [r["cut"] for r in res2.rounds] == [1]
    # l_max bounds the rounds: with l_max = 2 the paper's loop runs only l = 1 and l = 1.5 (cut 2)
    res3 = ground_with_expansion(skb, qg, ranked, {"x": None}, masks, k=50, l_max=2)
    assert [r["cut"] for r in res3.rounds] == [1, 2]
    paths = support_paths(skb, qg, res.final_sets, 12)
    assert paths == [[("x", 12, "indication", 1)]]


def test_expansion_cut_sequences():
    assert list(expansion_cuts(100, "paper")) == [1, 2, 3, 5, 9, 27, 100]
    assert list(expansion_cuts(33, "paper")) == [1, 2, 3, 5, 9, 27, 33]
    assert list(expansion_cuts(27, "paper")) == [1, 2, 3, 5, 9, 27]
    assert list(expansion_cuts(100, "code")) == [1, 2, 3, 5, 8, 12, 18, 27, 41, 62, 93]
    assert list(expansion_cuts(1, "paper")) == [1]
    assert list(expansion_cuts(0, "paper")) == []
    assert list(expansion_cuts(3, "code")) == [1, 2, 3]


def test_direction_matters():
    skb = _chain_skb()
    qg = QueryGraph(
        target="x", symbols={"x": Symbol(var="x"), "c": Symbol(var="c", constraints=[Constraint(key="name", value="a")])},
        triplets=[Triplet(head="c", rel="indication", tail="x")],  # written backwards: disease -> drug
    )
    res = ground_with_expansion(skb, qg, {"c": np.array([0])}, {"x": None}, {"x": None, "c": None}, k=1, l_max=2)
    assert res.answers.size == 0
    undirected = qg.model_copy(update={"triplets": [Triplet(head="c", rel="indication", tail="x", directed=False)]})
    res = ground_with_expansion(skb, undirected, {"c": np.array([0])}, {"x": None}, {"x": None, "c": None}, k=1, l_max=2)
    assert res.answers.tolist() == [10, 11]
