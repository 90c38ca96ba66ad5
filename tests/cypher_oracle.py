"""An independent execution of the benchmarks' stored constraints, sharing no code with the build.

A small reader of the benchmarks' Cypher subset (regular expressions) matched by backtracking over a
networkx graph of ``edges.csv``, and the text condition as whole-word regular expressions: the tests
compare every gold answer set the build computes with what this finds.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import networkx as nx


def rows(skb: Path) -> list[dict[str, str]]:
    with (skb / "qa.csv").open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def nodes_of(skb: Path) -> list[dict[str, Any]]:
    with (skb / "nodes.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


_NODE = r"\((\w+)(?::(\w+))?(?:\s*\{name:\s*'([^']*)'\})?\)"
_REL = r"(<?-)\[:(\w+)\](->|-)"


def parse_subset(cypher: str) -> tuple[str, dict[str, tuple[str | None, str | None]], list[tuple[str, str, str, bool]]]:
    """The benchmark's Cypher subset: comma-separated chains of ``(v:label {name: '...'})`` linked by
    ``-[:rel]->``, ``<-[:rel]-`` or ``-[:rel]-``; returns the RETURN variable, the variables and the edges
    ``(head, rel, tail, directed)``."""
    m = re.fullmatch(r"MATCH (.+) RETURN (\w+)", cypher.strip())
    assert m, cypher
    variables: dict[str, tuple[str | None, str | None]] = {}
    edges: list[tuple[str, str, str, bool]] = []
    for chain in re.split(r", (?=\()", m.group(1)):  # a name may hold ", "; a pattern starts with "("
        parts = re.split(_REL, chain)
        names = []
        for node in parts[::4]:
            nm = re.fullmatch(_NODE, node.strip())
            assert nm, node
            var, label, name = nm.groups()
            old = variables.get(var, (None, None))
            variables[var] = (label or old[0], name or old[1])
            names.append(var)
        for i, (left, rel, right) in enumerate(zip(parts[1::4], parts[2::4], parts[3::4], strict=True)):
            a, b = names[i], names[i + 1]
            if left == "<-":
                edges.append((b, rel, a, True))
            else:
                edges.append((a, rel, b, right == "->"))
    return m.group(2), variables, edges


def matches(graph: nx.MultiDiGraph, cypher: str) -> set[int]:
    """Every value of the RETURN variable over all assignments that satisfy the pattern: backtracking
    from the named variables, each next variable drawn from the neighbours of one already assigned."""
    target, variables, edges = parse_subset(cypher)

    def fits(var: str, node: int) -> bool:
        label, name = variables[var]
        data = graph.nodes[node]
        return data["type"] == label and (name is None or data["name"] == name)

    def holds(a: int, rel: str, b: int, directed: bool) -> bool:
        has = rel in graph.get_edge_data(a, b, default={})
        return has or (not directed and rel in graph.get_edge_data(b, a, default={}))

    def neighbours(node: int, rel: str, outwards: bool, directed: bool) -> set[int]:
        found = set()
        if outwards or not directed:
            found |= {b for _, b, k in graph.out_edges(node, keys=True) if k == rel}
        if not outwards or not directed:
            found |= {a for a, _, k in graph.in_edges(node, keys=True) if k == rel}
        return found

    order = sorted(variables, key=lambda v: variables[v][1] is None)[:1]
    while len(order) < len(variables):  # breadth first along the pattern's edges
        linked = [v for h, _, t, _ in edges for v in (h, t) if v not in order and ({h, t} & set(order))]
        order.append(linked[0] if linked else next(v for v in variables if v not in order))

    def candidates(var: str, assigned: dict[str, int]) -> set[int]:
        for h, rel, t, directed in edges:
            if h == var and t in assigned:
                return {n for n in neighbours(assigned[t], rel, False, directed) if fits(var, n)}
            if t == var and h in assigned:
                return {n for n in neighbours(assigned[h], rel, True, directed) if fits(var, n)}
        return {n for n in graph.nodes if fits(var, n)}

    def extend(i: int, assigned: dict[str, int]) -> Iterator[dict[str, int]]:
        if i == len(order):
            yield assigned
            return
        var = order[i]
        for node in sorted(candidates(var, assigned)):
            trial = {**assigned, var: node}
            if all(holds(trial[h], r, trial[t], d) for h, r, t, d in edges if h in trial and t in trial):
                yield from extend(i + 1, trial)

    return {solution[target] for solution in extend(0, {})}


def independent_graph(skb: Path) -> tuple[nx.MultiDiGraph, dict[int, str]]:
    graph = nx.MultiDiGraph()
    docs: dict[int, str] = {}
    for n in nodes_of(skb):
        graph.add_node(n["id"], type=n["type"], name=n["name"])
        docs[n["id"]] = n.get("text") or ""
    with (skb / "edges.csv").open(newline="") as fh:
        for r in csv.DictReader(fh):
            graph.add_edge(int(r["src"]), int(r["dst"]), key=r["type"])
    return graph, docs


def independent_answers(graph: nx.MultiDiGraph, docs: dict[int, str], cypher: str, text: list[list[str]]) -> set[int]:
    found = matches(graph, cypher)
    for group in text:
        found = {i for i in found if any(re.search(rf"(?<!\w){re.escape(p)}(?!\w)", docs[i], re.I) for p in group)}
    return found


def independent_gold(skb: Path) -> dict[str, set[int]]:
    graph, docs = independent_graph(skb)
    return {r["key"]: independent_answers(graph, docs, r["cypher"], json.loads(r["text_condition"] or "[]"))
            for r in rows(skb)}  # fmt: skip
