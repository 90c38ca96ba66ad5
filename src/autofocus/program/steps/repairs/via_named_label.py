"""``via_named_label``: labels the question names and the query skips, for the solver's two-hop paths."""

from __future__ import annotations

from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs.base import Context, Draft


class ViaNamedLabel:
    """The labels whose phrase the question writes that neither a symbol of the query nor a name the
    question gives ("the logging module") accounts for: a hop the query may have skipped ("the functions
    of logging"). The solver prefers two-hop paths through such a label, and offers one as the second
    reading of a relationship written exactly right."""

    name = "via_named_label"

    def apply(self, draft: Draft, reading: QuestionReading, ctx: Context) -> Draft:
        accounted = {s.type for s in draft.query.symbols.values()} | {label for m in reading.mentions for label in m.beside}
        return draft.but(via=reading.named_labels - accounted)
