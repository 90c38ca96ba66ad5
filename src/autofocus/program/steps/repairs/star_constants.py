"""``star_constants``: a triplet between two named nodes, one of them tied to the target, moves to the target."""

from __future__ import annotations

from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs.base import Context, Repair, Rewrite
from autofocus.query_graph import QueryGraph


class StarConstants(Rewrite):
    """A triplet between two named nodes constrains no unknown: where the first is tied to the target,
    the LM has chained what the question lists (two conditions on the answer written as one named node
    related to the other), so the triplet moves to the target when the schema lets the target's label
    take that relationship at the same end."""

    name = "star_constants"

    def rewrite(self, query: QueryGraph, reading: QuestionReading, ctx: Context) -> tuple[QueryGraph, list[Repair]]:
        target = query.symbols.get(query.target)
        if target is None or target.type is None:
            return query, []
        named = {v for v, s in query.symbols.items() if s.is_constant and v != query.target}
        tied = {t.other(query.target) for t in query.triplets if query.target in (t.head, t.tail)}
        triplets, repairs = list(query.triplets), []
        for i, t in enumerate(query.triplets):
            if t.head not in named or t.tail not in named or t.rel is None:
                continue
            for end in ("head", "tail"):
                var, other = (t.head, t.tail) if end == "head" else (t.tail, t.head)
                src, dst = (target.type, query.symbols[other].type) if end == "head" else (query.symbols[other].type, target.type)
                if var in tied and ctx.graph.fits(src, t.rel, dst):
                    triplets[i] = t.model_copy(update={end: query.target})
                    repairs.append(Repair("star", f"({t.head})-[:{t.rel}]->({t.tail}) joins two named nodes: "
                                                  f"({triplets[i].head})-[:{t.rel}]->({triplets[i].tail})"))
                    break
        return (query.model_copy(update={"triplets": triplets}), repairs) if repairs else (query, [])
