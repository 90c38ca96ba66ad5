"""``either_target``: a target step 1 types differently from the query is grounded as either label."""

from __future__ import annotations

from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs.base import Context, Repair, Rewrite
from autofocus.query_graph import QueryGraph


class EitherTarget(Rewrite):
    """Where step 1's type and the query's label for the target differ and every relationship of the
    query at the target links step 1's type too, in the direction written, the target is grounded as
    either label: the two LM steps disagree on what is asked and the graph cannot tell, so both kinds of
    answer stay. A relationship step 1's type lacks is the query's own reading, which other rules keep or
    carry to the asked label. Applies to the second readings too."""

    name = "either_target"
    readings = True

    def rewrite(self, query: QueryGraph, reading: QuestionReading, ctx: Context) -> tuple[QueryGraph, list[Repair]]:
        sg, step1 = ctx.graph, ctx.step1
        target = query.symbols.get(query.target or "")
        at = [t for t in query.triplets if query.target in (t.head, t.tail)]
        if (step1 is None or step1 not in sg.labels or target is None or target.type in (None, step1)
                or step1 in target.also or target.is_constant or target.extent or not at):
            return query, []
        for t in at:
            other = query.symbols.get(t.other(query.target) or "")
            if other is None or t.head == t.tail:
                return query, []
            ends = [(step1, other.type) if t.head == query.target else (other.type, step1)]
            if not t.directed:
                ends.append(ends[0][::-1])
            if not any(sg.fits(src, rel, dst) for src, dst in ends for rel in t.edge_types or sg.rel_names):
                return query, []
        symbols = {**query.symbols, target.var: target.model_copy(update={"also": [*target.also, step1]})}
        detail = (f"step 1 reads the target as {step1}, the query as {target.type}, and the query's relationships link "
                  f"both: ({target.var}:{target.type}|{step1})")
        return query.model_copy(update={"symbols": symbols}), [Repair("either", detail)]
