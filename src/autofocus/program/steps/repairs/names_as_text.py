"""``names_as_text``: a text filter whose value the question gives as a node's name becomes a link."""

from __future__ import annotations

from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs.base import Context, Repair, Rewrite
from autofocus.query_graph import QueryGraph


class NamesAsText(Rewrite):
    """A text filter (``=`` or ``CONTAINS``, not on a name) whose value is a name the question gives for
    nodes of another label than the filtered symbol's is dropped: the LM wrote a condition on a named
    node as text. The named node is a relationship's end, which ``constrain_mentions`` links."""

    name = "names_as_text"

    def rewrite(self, query: QueryGraph, reading: QuestionReading, ctx: Context) -> tuple[QueryGraph, list[Repair]]:
        symbols, repairs = dict(query.symbols), []
        for var, sym in query.symbols.items():
            kept = []
            for c in sym.constraints:
                value = c.value.strip().lower() if isinstance(c.value, str) else None
                match = next((m for m in reading.mentions if m.text.lower() == value), None)
                labels = match.labels if match is not None else frozenset()
                if c.key.lower() in ("name", "title") or c.op not in ("=", "CONTAINS") or not labels or sym.type in labels:
                    kept.append(c)
                    continue
                repairs.append(Repair("text_name", f"{var}.{c.key} {c.op} {c.value!r} names a {'/'.join(sorted(labels))}: "
                                                   "a relationship to it, not text"))  # fmt: skip
            symbols[var] = sym.model_copy(update={"constraints": kept})
        return (query.model_copy(update={"symbols": symbols}), repairs) if repairs else (query, [])
