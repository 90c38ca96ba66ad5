"""Entities and relations an LLM names (4StepFocus's triplets, HybGRAG's topic entities) as parts of a
query graph, so that step 4 searches them as it searches AF-Retriever's Cypher constants."""

from __future__ import annotations

import re

from autofocus.cypher.mapping import SchemaMapper
from autofocus.query_graph import Constraint, Symbol

_BRACKETED = re.compile(r"\[:?\s*([^\]]+?)\s*\]")


def named_node(var: str, name: str, label: str, mapper: SchemaMapper) -> Symbol:
    """A constant of a query graph: the node called ``name``, of the schema type ``label`` maps to
    (untyped when it maps to none)."""
    node_type = mapper.node_type(label).name if label else None
    return Symbol(var=var, type=node_type, label=label, constraints=[Constraint(key="name", value=name)])


def relation_label(raw: str) -> str:
    """The relationship type inside ``(a)-[r]->(b)``, the form the prompts list them in, else the text."""
    found = _BRACKETED.search(raw)
    return found.group(1) if found else raw.strip()
