"""``turn_round``: a second reading with the links between the target and a named node turned round."""

from __future__ import annotations

from autofocus.program.steps.direction import points_from, points_to
from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs.base import Context, Draft, Reading, Repair
from autofocus.program.steps.repairs.name_from_question import wording
from autofocus.query_graph import QueryGraph


class TurnRound:
    """The query with its relationships between the target and a named node turned round, where the
    graph links their labels both ways by that relationship and the question's wording does not read it
    the way it is written: the first second reading, tried when the query as written grounds nothing."""

    name = "turn_round"

    def apply(self, draft: Draft, reading: QuestionReading, ctx: Context) -> Draft:
        turned = reversed_reading(draft.query, reading, ctx)
        if turned is None:
            return draft
        return draft.but(readings=((turned[0], [*draft.repairs, *turned[1]]), *draft.readings))


def reversed_reading(qg: QueryGraph, reading: QuestionReading, ctx: Context) -> Reading | None:
    """``qg`` with those links turned round, and the repair saying so; None: nothing to turn."""
    triplets, turned = list(qg.triplets), []
    for i, t in enumerate(qg.triplets):
        head, tail = qg.symbols.get(t.head), qg.symbols.get(t.tail)
        if (not t.directed or t.rel is None or head is None or tail is None
                or qg.target not in (t.head, t.tail) or t.head == t.tail
                or head.extent or tail.extent  # a class link is the graph's, not the LM's
                or not ctx.graph.fits(tail.type, t.rel, head.type)):
            continue
        word = wording(ctx.skb, t.rel, reading)
        named = tail if t.head == qg.target else head
        reads = points_to if t.head == qg.target else points_from  # the wording of the direction written
        if named.name_value() is None or reads(reading.text, word, str(named.name_value()), reading.lang):
            continue
        triplets[i] = t.model_copy(update={"head": t.tail, "tail": t.head})
        turned.append(f"({t.tail})-[:{t.rel}]->({t.head})")
    if not turned:
        return None
    return qg.model_copy(update={"triplets": triplets}), [Repair("path", "turned round: " + ", ".join(turned))]
