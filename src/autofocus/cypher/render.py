"""Render a `QueryGraph` as Cypher, for traces, for the typed query format and for the database
``autofocus skb export`` writes (``console_cypher``).

``parse_cypher(to_cypher(qg))`` gives back ``qg`` (without a schema) for every graph the parser
can produce: one ``MATCH`` per triplet, then one per symbol outside any triplet, all
constraints in one ``WHERE`` (in order), and ``RETURN`` the target. Types are written where a
symbol first appears (a symbol of several, ``Symbol.also``, as the ``WHERE``'s first condition); names
that are not plain identifiers, or are keywords, are backticked.
"""

from __future__ import annotations

import re

from autofocus.cypher.parser import KEYWORDS
from autofocus.query_graph import KIND_DEPTH, Constraint, QueryGraph, Triplet
from autofocus.skb.schema import Schema

_PLAIN = re.compile(r"[^\W\d]\w*")
_STRING_ESCAPES = str.maketrans({"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def to_cypher(qg: QueryGraph) -> str:
    """Cypher text for a query graph.

    Example:
        >>> to_cypher(parse_cypher("MATCH (a:author)-[:writes]->(p:paper) RETURN p"))
        'MATCH (a:author)-[:writes]->(p:paper)\\nRETURN p'
    """
    seen: set[str] = set()

    def node(var: str) -> str:
        s = qg.symbols.get(var)
        label = (s.type or s.label) if s else None
        if var in seen or not label or (s and s.also):  # either of several labels: a WHERE condition
            seen.add(var)
            return f"({name(var)})"
        seen.add(var)
        return f"({name(var)}:{name(label)})"

    lines = [f"MATCH {node(t.head)}{_kinds(qg, t.head, True)}{_rel(t)}{_kinds(qg, t.tail, False)}{node(t.tail)}"
             for t in qg.triplets]
    lines += [f"MATCH {node(var)}" for var in qg.symbols if var not in seen]
    # ``(y:A|B)`` is Neo4j 5's, not FalkorDB's: the labels as one condition both databases read
    conditions = [f"({' OR '.join(f'{name(var)}:{name(t)}' for t in s.types)})"
                  for var, s in qg.symbols.items() if s.also]
    conditions += [_condition(var, c) for var, s in qg.symbols.items() for c in s.constraints]
    if conditions:
        lines.append("WHERE " + " AND ".join(conditions))
    if qg.target is not None:
        lines.append(f"RETURN {name(qg.target)}")
    return "\n".join(lines)


def name(text: str) -> str:
    """An identifier, label or key as Cypher: bare if plain, else in backticks."""
    if _PLAIN.fullmatch(text) and text.upper() not in KEYWORDS:
        return text
    return "`" + text.replace("`", "``") + "`"


def literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    return "'" + str(value).translate(_STRING_ESCAPES) + "'"


def _rel(t: Triplet) -> str:
    types = t.edge_types or (t.rel_label.split("|") if t.rel_label else [])
    inner = f"[:{'|'.join(name(x) for x in types)}]" if types else ""
    return f"-{inner}->" if t.directed else f"-{inner}-"


def _kinds(qg: QueryGraph, var: str, head: bool) -> str:
    """Where ``var`` is a class that stands for its kinds too (``Symbol.kinds_via``), the hops from any
    kind to it, the class itself included: ``(y)-[:is_a]->()-[:is_a*0..16]->(class)`` where members
    point at the class, ``(class)-[:has*0..16]->()-[:has]->(y)`` where it points at them."""
    s = qg.symbols.get(var)
    if s is None or not s.kinds_via:
        return ""
    hops = f"[:{name(s.kinds_via)}*0..{KIND_DEPTH}]"
    return f"-{hops}->()" if head else f"()-{hops}->"


def _condition(var: str, c: Constraint) -> str:
    return f"{name(var)}.{name(c.key)} {c.op} {literal(c.value)}"


def console_cypher(qg: QueryGraph, schema: Schema) -> str:
    """The query as Cypher for the graph ``export_skb`` writes, to paste into its console.

    Names are the SKB's (backticked where Cypher needs it); a constant's name condition uses its
    type's ``name_field``; it returns the answers' SKB ids and names. Unlike autofocus, which
    grounds names loosely and reads ``= '2019'`` on a date as the whole year, the database
    compares exactly.
    """
    qg = qg.model_copy(deep=True)
    for s in qg.symbols.values():
        info = schema.node_types.get(s.type or "")
        if info is None:
            continue
        for c in s.constraints:
            if c.key.lower() in ("name", "title"):
                c.key = info.name_field
    lines = to_cypher(qg).splitlines()
    target = qg.symbols.get(qg.target or "")
    if lines and lines[-1].startswith("RETURN ") and target is not None:
        info = schema.node_types.get(target.type or "")
        var = name(target.var)
        field = name(info.name_field if info else "name")
        lines[-1] = f"RETURN DISTINCT {var}.id AS id, {var}.{field} AS name"
    return "\n".join(lines)
