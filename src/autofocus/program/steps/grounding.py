"""Step 5: triplet grounding (paper Algorithm 2) with incremental scope expansion (Algorithm 1, lines 5-10).

Candidate sets are boolean masks over all nodes. A triplet ``(h, e, t)`` keeps the ``h`` candidates
that have an ``e``-edge into ``S(t)`` and the ``t`` candidates that have an ``e``-edge from ``S(h)``;
the triplets are applied until no set changes (a fixpoint). Each filter gathers edges from the
side with fewer edges, so a constant with three candidates never scans a million-node type.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from autofocus.query_graph import QueryGraph, Triplet
from autofocus.skb.graph import CSR
from autofocus.skb.model import SKB
from autofocus.usage import deadline_passed


@dataclass
class GroundingResult:
    answers: np.ndarray  # grounded target candidates (sorted ids), C_cypher
    rounds: list[dict] = field(default_factory=list)  # per expansion round: l, cut, |C|, new ids
    final_sets: dict[str, np.ndarray] = field(default_factory=dict)  # symbol -> ids after the last round
    round_of: dict[int, int] = field(default_factory=dict)  # answer id -> round in which it appeared
    cut: str | None = None  # why the expansion stopped before its schedule's end (the question's deadline)


def expansion_cuts(l_max: int, schedule: str = "paper") -> Iterator[int]:
    """The numbers of candidates per constant tried in successive rounds.

    ``paper``: ``l <- l^1.5 + 0.5`` from ``l = 1`` (Algorithm 1), using the first ``ceil(l)``
    candidates, then a last round at ``l_max`` itself: 1, 2, 3, 5, 9, 27, 100 for ``l_max = 100``.
    Algorithm 1 writes ``l < l_max``, which would ground nothing at ``l_max = 1`` and never reach
    ``l_max``; Table 19 grounds at ``l_max = 1`` and differs between 33 and 100, so the bound is
    inclusive and ``l_max`` is the ceiling of the scope, as the text says.
    ``code``: the authors' ``l <- int(1.5 l + 0.5)`` while ``l <= l_max``: 1, 2, 3, 5, 8, 12, 18, ...
    Rounds whose cut equals the previous one are skipped (they would ground the same sets).
    """
    last = 0
    if schedule == "paper":
        level = 1.0
        while level <= l_max:
            cut = math.ceil(level)
            if cut != last:
                yield cut
                last = cut
            level = level**1.5 + 0.5
        if 0 < last < l_max:
            yield l_max
    elif schedule == "code":
        level_i = 1
        while level_i <= l_max:
            if level_i != last:
                yield level_i
                last = level_i
            level_i = int(level_i * 1.5 + 0.5)
    else:
        raise ValueError(f"unknown expansion schedule {schedule!r} (paper or code)")


def _edge_types(skb: SKB, trip: Triplet) -> list[str]:
    known = [e for e in (trip.edge_types or []) if e in skb.graph.forward]
    return known or skb.graph.edge_types


def _has_edge_into(csr_from: CSR, csr_back: CSR, rows: np.ndarray, target_mask: np.ndarray,
                   target_ids: np.ndarray) -> np.ndarray:
    """Which of ``rows`` have an edge (in ``csr_from``) into ``target_mask``: cheapest side first."""
    if len(rows) == 0 or len(target_ids) == 0:
        return np.zeros(len(rows), dtype=bool)
    cost_rows = int(csr_from.degree(rows).sum())
    cost_targets = int(csr_back.degree(target_ids).sum())
    if cost_rows <= cost_targets:
        src, nbr = csr_from.gather(rows)
        hit = target_mask[nbr]
        ok = np.zeros(csr_from.indptr.shape[0] - 1, dtype=bool)
        ok[src[hit]] = True
        return ok[rows]
    reach = np.zeros(csr_back.indptr.shape[0] - 1, dtype=bool)
    reach[csr_back.gather(target_ids)[1]] = True
    return reach[rows]


def _reachable(skb: SKB, trip: Triplet, from_ids: np.ndarray, forward: bool) -> np.ndarray:
    """Mask of nodes reached from ``from_ids`` along the triplet (forward: head -> tail)."""
    mask = np.zeros(skb.num_nodes, dtype=bool)
    directions = [forward] if trip.directed else [True, False]
    for e in _edge_types(skb, trip):
        for fwd in directions:
            csr = skb.graph.adjacency(e, "out" if fwd else "in")
            mask[csr.gather(from_ids)[1]] = True
    return mask


def _filter(skb: SKB, trip: Triplet, rows: np.ndarray, other_mask: np.ndarray, other_ids: np.ndarray,
            rows_are_head: bool) -> np.ndarray:
    """Keep the ``rows`` that are linked by the triplet to some node of ``other``."""
    keep = np.zeros(len(rows), dtype=bool)
    directions = [True] if trip.directed else [True, False]
    for e in _edge_types(skb, trip):
        for same in directions:
            out_first = rows_are_head == same
            csr_from = skb.graph.adjacency(e, "out" if out_first else "in")
            csr_back = skb.graph.adjacency(e, "in" if out_first else "out")
            keep |= _has_edge_into(csr_from, csr_back, rows, other_mask, other_ids)
    return keep


def component_of(qg: QueryGraph, var: str) -> set[str]:
    """Symbols connected to ``var`` through triplets (only they constrain the target)."""
    seen, frontier = {var}, [var]
    while frontier:
        v = frontier.pop()
        for t in qg.triplets:
            for a, b in ((t.head, t.tail), (t.tail, t.head)):
                if a == v and b not in seen:
                    seen.add(b)
                    frontier.append(b)
    return seen


def ground_triplets(
    skb: SKB,
    triplets: list[Triplet],
    sets: dict[str, np.ndarray | None],
    type_masks: dict[str, np.ndarray | None],
    max_iterations: int = 50,
) -> dict[str, np.ndarray | None]:
    """Algorithm 2: intersect candidate sets along the triplets until nothing changes.

    ``sets[v]`` is a sorted id array or None (unconstrained); an unconstrained end is filled with the
    nodes reached from the other end (restricted by ``type_masks[v]`` in strict mode).
    """
    cur = dict(sets)
    for _ in range(max_iterations):
        changed = False
        for trip in triplets:
            h, t = cur.get(trip.head), cur.get(trip.tail)
            if h is None and t is None:
                continue
            for var, other_var, forward in ((trip.tail, trip.head, True), (trip.head, trip.tail, False)):
                mine, other = cur.get(var), cur.get(other_var)
                if other is None:
                    continue
                if mine is None:
                    reached = _reachable(skb, trip, other, forward=forward)
                    if type_masks.get(var) is not None:
                        reached &= type_masks[var]
                    cur[var] = np.flatnonzero(reached)
                    changed = True
                    continue
                other_mask = np.zeros(skb.num_nodes, dtype=bool)
                other_mask[other] = True
                keep = _filter(skb, trip, mine, other_mask, other, rows_are_head=not forward)
                if not keep.all():
                    cur[var] = mine[keep]
                    changed = True
        if not changed:
            break
    return cur


def ground_with_expansion(
    skb: SKB,
    qg: QueryGraph,
    constant_candidates: dict[str, np.ndarray],
    variable_sets: dict[str, np.ndarray | None],
    type_masks: dict[str, np.ndarray | None],
    k: int,
    l_max: int,
    schedule: str = "paper",
) -> GroundingResult:
    """Algorithm 1, lines 5-10: ground with the first ``l`` candidates per constant, growing ``l``
    until at least ``k`` target candidates are found or the schedule reaches ``l_max``."""
    if qg.target is None:
        return GroundingResult(answers=np.zeros(0, np.int64))
    scope = component_of(qg, qg.target)
    triplets = [t for t in qg.triplets if t.head in scope and t.tail in scope]
    if not triplets:
        return GroundingResult(answers=np.zeros(0, np.int64))
    result = GroundingResult(answers=np.zeros(0, np.int64))
    found: np.ndarray = np.zeros(0, np.int64)
    for round_no, cut in enumerate(expansion_cuts(l_max, schedule)):
        sets: dict[str, np.ndarray | None] = {v: variable_sets.get(v) for v in scope}
        for var, ranked in constant_candidates.items():
            if var in scope:
                sets[var] = np.sort(ranked[:cut])
        final = ground_triplets(skb, triplets, sets, type_masks)
        target = final.get(qg.target)
        target_ids = np.zeros(0, np.int64) if target is None else np.asarray(target, dtype=np.int64)
        new = np.setdiff1d(target_ids, found)
        for node in new.tolist():
            result.round_of[node] = round_no
        found = np.union1d(found, target_ids)
        result.rounds.append({"cut": cut, "num_target": len(found), "new": new[:50].tolist()})
        result.final_sets = {v: s for v, s in final.items() if s is not None}
        # more rounds cannot change anything once every constant's list is used up (exact names only)
        if len(found) >= k or target is None or all(cut >= len(r) for v, r in constant_candidates.items() if v in scope):
            break
        if deadline_passed():  # the question's time is up: the rounds so far are the result
            result.cut = f"the question's deadline passed after {round_no + 1} expansion round(s)"
            break
    result.answers = found
    return result


def support_paths(
    skb: SKB, qg: QueryGraph, final_sets: dict[str, np.ndarray], answer: int, max_paths: int = 3
) -> list[list[tuple[str, int, str, int]]]:
    """Triplet paths from a grounded answer to constants, as ``(var, node, rel, node)`` hops.

    Follows only nodes in the final candidate sets, so every returned hop is an edge of the SKB
    that satisfies the query graph: the answer's traceable justification.
    """
    if qg.target is None:
        return []
    masks = {}
    for v, ids in final_sets.items():
        m = np.zeros(skb.num_nodes, dtype=bool)
        m[ids] = True
        masks[v] = m
    paths: list[list[tuple[str, int, str, int]]] = []

    def walk(var: str, node: int, used: frozenset[int], path: list[tuple[str, int, str, int]]) -> None:
        if len(paths) >= max_paths:
            return
        extended = False
        for i, trip in enumerate(qg.triplets):
            if i in used or var not in (trip.head, trip.tail):
                continue
            other = trip.tail if trip.head == var else trip.head
            forward = trip.head == var
            reach = _reachable(skb, trip, np.array([node]), forward=forward)
            if other in masks:
                reach &= masks[other]
            for nxt in np.flatnonzero(reach)[:max_paths].tolist():
                extended = True
                walk(other, nxt, used | {i}, [*path, (var, node, trip.rel or "*", nxt)])
        if not extended and path:
            paths.append(path)

    walk(qg.target, int(answer), frozenset(), [])
    return paths

