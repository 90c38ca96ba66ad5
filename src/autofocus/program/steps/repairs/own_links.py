"""``own_links``: a last second reading where a named node lacks the relationship written: any relationship."""

from __future__ import annotations

from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs.base import Context, Draft, Reading, Repair
from autofocus.query_graph import QueryGraph
from autofocus.skb.names import exact_name_ids


class OwnLinks:
    """The query with each link between the target and a named node that has no link of the written
    relationship at all (either way) read as any relationship, either way: the graph says the
    relationship written cannot hold for that node. The last second reading, tried when the others
    ground nothing."""

    name = "own_links"

    def apply(self, draft: Draft, reading: QuestionReading, ctx: Context) -> Draft:
        loosened = unlinked_reading(draft.query, ctx)
        if loosened is None:
            return draft
        return draft.but(readings=(*draft.readings, (loosened[0], [*draft.repairs, *loosened[1]])))


def unlinked_reading(qg: QueryGraph, ctx: Context) -> Reading | None:
    """``qg`` with those links loosened, and the repair saying so; None: no such link."""
    skb = ctx.skb
    triplets, loosened = list(qg.triplets), []
    for i, t in enumerate(qg.triplets):
        other = t.other(qg.target)
        sym = qg.symbols.get(other) if other is not None else None
        if (t.rel is None or t.rel not in skb.graph.forward or sym is None or sym.extent or other == qg.target
                or sym.type not in skb.node_type_names or (name := sym.name_value()) is None):
            continue
        ids = exact_name_ids(skb, str(name))
        ids = ids[skb.node_type[ids] == skb.type_code(sym.type)]
        if not len(ids) or len(skb.graph.neighbours(ids, [t.rel], "both")):
            continue
        triplets[i] = t.model_copy(update={"rel": None, "rel_alternatives": [], "directed": False})
        loosened.append(f"{name!r} has no {t.rel} link: ({t.head})-[]-({t.tail})")
    if not loosened:
        return None
    return qg.model_copy(update={"triplets": triplets}), [Repair("path", "any relationship: " + "; ".join(loosened))]
