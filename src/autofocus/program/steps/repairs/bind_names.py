"""``bind_names``: symbols take the names the query meant and the question gives."""

from __future__ import annotations

import functools
from collections.abc import Callable

from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs.base import Context, Repair, Rewrite
from autofocus.query_graph import Constraint, QueryGraph
from autofocus.skb.names import named_ids


def _extends(short: str, text: str) -> bool:
    """``text`` is ``short`` plus more of a qualified name (``os`` -> ``os.path``, not ``osmium``)."""
    return len(text) > len(short) and text.lower().startswith(short) and not text[len(short)].isalnum()


class BindNames(Rewrite):
    """A label that is really a node's name (``(b:ValueError)``) becomes that name; an unnamed symbol of a
    known label takes the node of its label the question names (the LM wrote the label and forgot the
    name); a named one takes a longer name the question gives for the same kind of node (``os`` where
    the question says ``os.path``). Among the question's mentions, one next to the label's own word
    comes first, then the longest. The target is what is asked for: never bound."""

    name = "bind_names"

    def rewrite(self, query: QueryGraph, reading: QuestionReading, ctx: Context) -> tuple[QueryGraph, list[Repair]]:
        skb, mapper = ctx.skb, ctx.mapper
        labels = set(skb.node_type_names)
        taken = {s.name_value() for s in query.symbols.values() if s.is_constant}
        in_triplet = {v for t in query.triplets for v in (t.head, t.tail)}
        symbols, repairs = dict(query.symbols), []

        def named_here(label: str, accept: Callable[[str], bool]) -> tuple[str, str] | None:
            found = [
                (label in m.beside, len(m.text), m.text, m.how)
                for m in reading.mentions
                if m.text not in taken and accept(m.text) and m.names_a(label)
                and (skb.node_type[m.ids] == skb.type_code(label)).any()
            ]
            return max(found)[2:] if found else None

        for var, sym in query.symbols.items():
            if var == query.target or var not in in_triplet:
                continue
            written = sym.label or ""
            typed = written in labels or (written and max(mapper.node_scores(written).values(), default=0) >= 0.95)
            if not sym.is_constant and written and not typed and len(named_ids(skb, written)[0]):
                symbols[var] = sym.model_copy(update={"label": None, "constraints": [*sym.constraints, Constraint(key="name", value=written)]})
                repairs.append(Repair("bind", f"{var}: label {written!r} is the name of a node, not a label"))
                taken.add(written)
                continue
            label = sym.type if sym.type in labels else None
            if label is None:
                continue
            name = sym.name_value()
            if name is None:
                hit = named_here(label, lambda text: True)
            else:  # a longer mention that starts with the name the LM wrote: "os" -> "os.path"
                hit = named_here(label, functools.partial(_extends, name.strip().lower()))
            if hit is None:
                continue
            text, how = hit
            kept = [c for c in sym.constraints if not (name is not None and c.key.lower() in ("name", "title") and c.value == name)]
            symbols[var] = sym.model_copy(update={"constraints": [*kept, Constraint(key="name", value=text)]})
            what = f"the question names the {label} {text!r}" if name is None else f"{name!r} -> {text!r}, as the question names the {label}"
            repairs.append(Repair("bind", f"{var}: {what} ({how} match)"))
            taken.add(text)
        if not repairs:
            return query, []
        return query.model_copy(update={"symbols": symbols}), repairs
