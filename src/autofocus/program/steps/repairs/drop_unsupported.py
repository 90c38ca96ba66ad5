"""``drop_unsupported``: a constant whose name the question does not give becomes a variable again."""

from __future__ import annotations

from autofocus.program.steps.reading import Naming, QuestionReading
from autofocus.program.steps.repairs.base import Context, Repair, Rewrite
from autofocus.query_graph import QueryGraph


class DropUnsupported(Rewrite):
    """A constant whose name the question does not give even in part (``Naming.PART``) loses that name: a
    small LM also invents constants (an example's name, the answer itself)."""

    name = "drop_unsupported"

    def rewrite(self, query: QueryGraph, reading: QuestionReading, ctx: Context) -> tuple[QueryGraph, list[Repair]]:
        symbols, repairs = dict(query.symbols), []
        for var, sym in query.symbols.items():
            name = sym.name_value()
            if name is not None and not reading.names(name, Naming.PART):
                kept = [c for c in sym.constraints if not (c.key.lower() in ("name", "title") and c.value == name)]
                symbols[var] = sym.model_copy(update={"constraints": kept})
                repairs.append(Repair("unsupported", f"{var}: {name!r} is not in the question: not a constant"))
        return (query.model_copy(update={"symbols": symbols}), repairs) if repairs else (query, [])
