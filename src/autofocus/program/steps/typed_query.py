"""The typed query format: a ``QuerySpec`` filled by the LLM becomes Cypher text for the step-3 parser,
so both query formats share one label mapping and one set of drop rules."""

from __future__ import annotations

import json
import re

from autofocus.signatures import QuerySpec

_VAR = re.compile(r"[^A-Za-z0-9_]")


def _var(name: str) -> str:
    cleaned = _VAR.sub("_", name.strip()) or "v"
    return cleaned if not cleaned[0].isdigit() else f"v{cleaned}"


def _label(label: str) -> str:
    return f"`{label.replace('`', '')}`"


def spec_to_cypher(spec: QuerySpec) -> str:
    """Render the spec as one MATCH ... WHERE ... RETURN query (names JSON-quoted, labels backticked)."""
    patterns: list[str] = []
    wheres: list[str] = []
    declared: set[str] = set()

    def node(var: str) -> str:
        for n in spec.nodes:
            if _var(n.var) == var and var not in declared:
                declared.add(var)
                props = f" {{name: {json.dumps(n.name)}}}" if n.name else ""
                return f"({var}:{_label(n.label)}{props})"
        return f"({var})"

    for e in spec.edges:
        h, t = _var(e.head), _var(e.tail)
        patterns.append(f"{node(h)}-[:{_label(e.rel)}]->{node(t)}")
    for n in spec.nodes:
        v = _var(n.var)
        if v not in declared:
            patterns.append(node(v))
        for cond in n.where:
            cond = cond.strip()
            if cond:
                wheres.append(cond if cond.startswith(f"{v}.") else f"{v}.{cond}")
    target = _var(spec.target)
    text = "MATCH " + ", ".join(patterns) if patterns else f"MATCH ({target})"
    if wheres:
        text += "\nWHERE " + " AND ".join(wheres)
    return text + f"\nRETURN {target}"
