"""``named_relations``: the relationships the question words, for the solver to read a hop by."""

from __future__ import annotations

from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs.base import Context, Draft
from autofocus.program.steps.repairs.solver import EXACT, relation_scores


class NamedRelations:
    """The relationships the question words by a word of their own (``QuestionReading.relations``) and
    the query does not write. Where a written relationship fits none that connects its two labels, the
    solver then reads the hop as a two-hop path of such relationships when the path covers more of them
    than the best single relationship, and keeps that relationship as the second reading."""

    name = "named_relations"

    def apply(self, draft: Draft, reading: QuestionReading, ctx: Context) -> Draft:
        written = {r for scores in relation_scores(draft.query, ctx) if scores for r, v in scores.items() if v >= EXACT}
        return draft.but(worded=reading.relations - written)
