"""Adding hops to a query: fresh variables, the one way the schema links two labels, a path as triplets."""

from __future__ import annotations

import itertools

from autofocus.query_graph import Symbol, Triplet
from autofocus.skb.schema_graph import Hop, SchemaGraph


def fresh(symbols: dict[str, Symbol], counter: itertools.count[int], stem: str = "_via") -> str:
    """A variable name no symbol has yet."""
    while True:
        name = f"{stem}{next(counter)}"
        if name not in symbols:
            return name


def only_link(sg: SchemaGraph, src: str, dst: str) -> list[Hop] | None:
    """The one way the schema connects two labels: one relationship (either direction), else one
    two-hop path; None where it offers several or none."""
    direct = [Hop(r.rel, True, dst) for r in sg.between(src, dst)] + [Hop(r.rel, False, dst) for r in sg.between(dst, src)]
    if direct:
        return direct if len(direct) == 1 else None
    paths = sg.paths(src, dst, hops=2)
    return paths[0] if len(paths) == 1 else None


def link(symbols: dict[str, Symbol], triplets: list[Triplet], start: str, end: str, hops: list[Hop],
         counter: itertools.count[int], written: Triplet | None = None) -> str:
    """Append the triplets of ``hops`` from ``start`` to ``end`` (fresh variables between them), in
    place of the ``written`` triplet if any; the path as text for the trace. A hop between one label
    and itself goes either way unless it is the relationship written (a subclass or a base class)."""
    node, shown = start, []
    for i, hop in enumerate(hops):
        nxt = end if i == len(hops) - 1 else fresh(symbols, counter)
        if nxt not in symbols:
            symbols[nxt] = Symbol(var=nxt, type=hop.dst)
        a, b = (node, nxt) if hop.forward else (nxt, node)
        either = symbols[node].type == hop.dst and (written is None or hop.rel != written.rel)
        triplets.append(Triplet(head=a, rel=hop.rel, rel_label=written and written.rel_label, tail=b, directed=not either))
        shown.append(f"-[:{hop.rel}]{'->' if hop.forward else '-'}({nxt}:{hop.dst})")
        node = nxt
    return "".join(shown)

