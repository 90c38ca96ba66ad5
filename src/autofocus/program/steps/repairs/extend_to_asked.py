"""``extend_to_asked``: a query that answers with another label than the one asked for is carried there."""

from __future__ import annotations

import itertools

from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs.base import Context, Repair, Rewrite
from autofocus.program.steps.repairs.links import fresh, link, only_link
from autofocus.query_graph import QueryGraph, Symbol


class ExtendToAsked(Rewrite):
    """Where the query's answers have another label than the one the question asks for by name
    (``QuestionReading.asked_label``) and no symbol of the query has the asked label, the answers become
    the asked label's nodes that the schema connects to them in exactly one way (one relationship, else
    one two-hop path): a small LM often answers with the node the question's condition is about. Applies
    to the second readings too."""

    name = "extend_to_asked"
    readings = True

    def rewrite(self, query: QueryGraph, reading: QuestionReading, ctx: Context) -> tuple[QueryGraph, list[Repair]]:
        sg, asked = ctx.graph, reading.asked_label
        target = query.symbols.get(query.target)
        tlabel = target.type if target is not None else None
        if asked is None or tlabel not in sg.labels or asked == tlabel or asked in {s.type for s in query.symbols.values()}:
            return query, []
        hops = only_link(sg, tlabel, asked)
        if hops is None:
            return query, []
        symbols, triplets = dict(query.symbols), list(query.triplets)
        counter = itertools.count(1)
        var = fresh(symbols, counter, "_asked")
        shown = link(symbols, triplets, query.target, var, hops, counter)
        symbols[var] = Symbol(var=var, type=asked, label=asked)
        detail = f"the question asks for {asked} nodes, the query for {tlabel}: ({query.target}){shown}, the answers"
        update = {"symbols": symbols, "triplets": triplets, "target": var, "target_type": asked}
        return query.model_copy(update=update), [Repair("asked", detail)]
