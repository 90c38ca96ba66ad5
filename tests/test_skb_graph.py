"""The per-edge-type CSR graph against a naive edge-list reference on random graphs (hypothesis)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autofocus.skb.graph import TypedGraph

TYPES = ["a", "b", "c"]


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 25))
    edges = draw(
        st.lists(
            st.tuples(st.integers(0, n - 1), st.integers(0, len(TYPES) - 1), st.integers(0, n - 1)),
            max_size=80,
        )
    )
    rows = draw(st.lists(st.integers(0, n - 1), max_size=8))
    return n, edges, np.asarray(rows, dtype=np.int64)


def _build(n: int, edges: list[tuple[int, int, int]]) -> TypedGraph:
    arr = np.asarray(edges, dtype=np.int64).reshape(-1, 3)
    return TypedGraph.from_edges(n, arr[:, 0], arr[:, 2], arr[:, 1], TYPES)


def _naive(edges, rows, types, direction) -> list[int]:
    rows = set(rows.tolist())
    out = set()
    for s, t, d in edges:
        if TYPES[t] not in types:
            continue
        if direction in ("out", "both") and s in rows:
            out.add(d)
        if direction in ("in", "both") and d in rows:
            out.add(s)
    return sorted(out)


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_neighbours_match_naive(case):
    n, edges, rows = case
    g = _build(n, edges)
    for direction in ("out", "in", "both"):
        for types in ([t] for t in TYPES):
            assert g.neighbours(rows, types, direction).tolist() == _naive(edges, rows, types, direction)
        assert g.neighbours(rows, None, direction).tolist() == _naive(edges, rows, TYPES, direction)
        assert g.neighbours(rows, ["a", "c"], direction).tolist() == _naive(
            edges, rows, ["a", "c"], direction
        )
        mask = g.neighbour_mask(rows, ["b"], direction)
        assert np.flatnonzero(mask).tolist() == _naive(edges, rows, ["b"], direction)


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_gather_pairs_and_counts(case):
    n, edges, rows = case
    g = _build(n, edges)
    for t, name in enumerate(TYPES):
        distinct = {(s, d) for s, tt, d in edges if tt == t}  # same-type duplicates collapse
        assert g.num_edges(name) == len(distinct)
        src, nbr = g.adjacency(name, "out").gather(rows)
        expected = sorted((r, d) for r in rows.tolist() for s, d in distinct if s == r)
        assert sorted(zip(src.tolist(), nbr.tolist(), strict=True)) == expected
        src, nbr = g.adjacency(name, "in").gather(rows)
        expected = sorted((r, s) for r in rows.tolist() for s, d in distinct if d == r)
        assert sorted(zip(src.tolist(), nbr.tolist(), strict=True)) == expected
        degree = g.adjacency(name, "out").degree(np.arange(n))
        assert degree.tolist() == [sum(1 for s, _ in distinct if s == i) for i in range(n)]
    assert g.num_edges() == len({(s, t, d) for s, t, d in edges})  # parallel edges of different types kept


@settings(max_examples=30, deadline=None)
@given(graphs())
def test_save_load_round_trip(case):
    n, edges, rows = case
    g = _build(n, edges)
    with tempfile.TemporaryDirectory() as tmp:
        g.save(Path(tmp))
        loaded = TypedGraph.load(Path(tmp), n, TYPES)
        for direction in ("out", "in", "both"):
            assert (
                loaded.neighbours(rows, None, direction).tolist()
                == g.neighbours(rows, None, direction).tolist()
            )


def test_parallel_edges_of_different_types_stay_distinct():
    g = TypedGraph.from_edges(3, np.array([0, 0, 0]), np.array([1, 1, 1]), np.array([0, 1, 1]), ["x", "y"])
    assert g.num_edges("x") == 1 and g.num_edges("y") == 1 and g.num_edges() == 2
    assert g.neighbours(np.array([1]), ["x"], "in").tolist() == [0]
    assert g.neighbours(np.array([0]), ["y"], "in").tolist() == []
