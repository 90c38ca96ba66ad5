"""``orient_by_question``: a same-type relationship at the target, turned the way the question reads it."""

from __future__ import annotations

from autofocus.program.steps.direction import points_from, points_to, relation_phrase
from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs.base import Context, Repair, Rewrite
from autofocus.query_graph import QueryGraph


class OrientByQuestion(Rewrite):
    """A relationship between the target and a named node of the same type (only the edge's direction
    tells the two readings apart) is turned the way the question's wording reads it
    (``program.steps.direction``); left as written where the wording reads neither way or both."""

    name = "orient_by_question"

    def rewrite(self, query: QueryGraph, reading: QuestionReading, ctx: Context) -> tuple[QueryGraph, list[Repair]]:
        target, text, lang = query.target, reading.text, reading.lang
        triplets, repairs = list(query.triplets), []
        for i, t in enumerate(query.triplets):
            info = ctx.skb.schema.edge_types.get(str(t.rel)) if t.rel else None
            other = t.other(target)
            name = query.symbols[other].name_value() if other is not None else None
            if info is None or info.src_type != info.dst_type or name is None or t.head == t.tail:
                continue
            phrase = relation_phrase(str(t.rel), info.src_type, info.dst_type)
            to, away = points_to(text, phrase, str(name), lang), points_from(text, phrase, str(name), lang)
            if (t.head == target and away and not to) or (t.tail == target and to and not away):
                triplets[i] = t.model_copy(update={"head": t.tail, "tail": t.head, "directed": True})
                repairs.append(Repair("direction", f"{t.rel} as the question reads it: ({t.tail})->({t.head})"))
        return (query.model_copy(update={"triplets": triplets}), repairs) if repairs else (query, [])
