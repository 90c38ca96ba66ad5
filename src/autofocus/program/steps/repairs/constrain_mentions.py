"""``constrain_mentions``: entities the question names and the query left out are linked to the target."""

from __future__ import annotations

import itertools
import re

from autofocus.program.steps.reading import Mention, QuestionReading
from autofocus.program.steps.repairs.base import Context, Repair, Rewrite
from autofocus.program.steps.repairs.links import fresh, link, only_link
from autofocus.query_graph import Constraint, QueryGraph, Symbol

MAX_MENTIONED = 2  # constraints added for entities the question names and the query left out


def mentioned_entities(qg: QueryGraph, mentions: list[Mention]) -> list[tuple[str, str]]:
    """``(name, label)`` of the mentions that no constant of the query names, naming nodes of one label
    (the label's word beside the mention decides between several)."""
    names = [n.lower() for n in (s.name_value() for s in qg.symbols.values()) if n]
    found: list[tuple[str, str]] = []
    longer: list[str] = []  # mentions come longest first: "server" inside "socket server" is no name of its own
    for m in mentions:
        low = m.text.lower()
        inside = any(re.search(rf"(?<!\w){re.escape(low)}(?!\w)", t) for t in longer)
        longer.append(low)
        if inside or any(low in n or n in low for n in names):
            continue  # part of a longer name, or the query names it already
        named = set(m.labels)
        if len(named) > 1:
            named &= m.beside
        if len(named) == 1:
            found.append((m.text, named.pop()))
    return found


class ConstrainMentions(Rewrite):
    """Entities the question names but the query left out are linked to the target: a small LM often
    writes one of a question's two conditions. The link is the one relationship between the two labels,
    else the one two-hop schema path; where the schema offers several (or the labels are the same, so
    the direction is open), nothing is added. Relaxation drops the link again if the answers cannot
    satisfy it."""

    name = "constrain_mentions"

    def rewrite(self, query: QueryGraph, reading: QuestionReading, ctx: Context) -> tuple[QueryGraph, list[Repair]]:
        sg = ctx.graph
        target = query.symbols.get(query.target)
        tlabel = target.type if target is not None else None
        if tlabel not in sg.labels:
            return query, []
        symbols, triplets, repairs = dict(query.symbols), list(query.triplets), []
        counter = itertools.count(1)
        for name, label in mentioned_entities(query, reading.mentions)[:MAX_MENTIONED]:
            hops = only_link(sg, tlabel, label) if label != tlabel else None
            if hops is None:
                continue
            var = fresh(symbols, counter, "_named")
            symbols[var] = Symbol(var=var, type=label, label=label, constraints=[Constraint(key="name", value=name)])
            shown = link(symbols, triplets, query.target, var, hops, counter)
            repairs.append(Repair("mention", f"the question names the {label} {name!r}: ({query.target})" + shown))
        if not repairs:
            return query, []
        return query.model_copy(update={"symbols": symbols, "triplets": triplets}), repairs
