"""What the LLM steps are told about an SKB: its description, labels, relationship types, attributes."""

from __future__ import annotations

from dataclasses import dataclass

from autofocus.skb.schema import EdgeTypeInfo, Schema


def _hop(a: str, edge: str, info: EdgeTypeInfo, a_type: str, b: str) -> str:
    """``(a)-[:edge]->(b)`` or ``(a)<-[:edge]-(b)``, whichever matches the edge's direction."""
    return f"({a})-[:{edge}]->({b})" if info.src_type == a_type else f"({a})<-[:{edge}]-({b})"


def example_query(schema: Schema) -> str:
    """A two-hop Cypher example in this SKB's own labels (the paper shows one; the authors' code showed
    PRIME's for every SKB), so that small LMs see the syntax the parser expects."""
    named = '{name: "..."}'
    cands = set(schema.answer_types)
    # edges between two different types first: they show more of the syntax than a self-loop
    typed = sorted(
        ((n, e) for n, e in schema.edge_types.items() if e.src_type and e.dst_type),
        key=lambda ne: ne[1].src_type == ne[1].dst_type,
    )
    first = next(((n, e) for n, e in typed if e.src_type in cands or e.dst_type in cands), None)
    if first is None:
        return f"MATCH (y:TYPE)-[:RELATION]->(b:TYPE {named})\nRETURN y.name"
    e1, i1 = first
    y_type = i1.src_type if i1.src_type in cands else i1.dst_type
    b_type = i1.dst_type if y_type == i1.src_type else i1.src_type
    second = next(((n, e) for n, e in typed if n != e1 and b_type in (e.src_type, e.dst_type)), None)
    if second is None:
        return f"MATCH {_hop(f'y:{y_type}', e1, i1, y_type, f'b:{b_type} {named}')}\nRETURN y.name"
    e2, i2 = second
    c_type = i2.dst_type if i2.src_type == b_type else i2.src_type
    return (
        f"MATCH {_hop(f'y:{y_type}', e1, i1, y_type, f'b:{b_type}')}\n"
        f"MATCH {_hop('b', e2, i2, b_type, f'c:{c_type} {named}')}\n"
        "RETURN y.name"
    )


@dataclass(frozen=True)
class SchemaContext:
    kb_description: str
    node_labels: list[str]
    relationship_labels: list[str]
    attribute_names: list[str]
    candidate_types: list[str]
    example: str

    @classmethod
    def from_schema(cls, schema: Schema) -> SchemaContext:
        rels = [
            f"(:{e.src_type or 'any'})-[:{name}]->(:{e.dst_type or 'any'})" for name, e in schema.edge_types.items()
        ]
        attrs = sorted(
            {a for t in schema.node_types.values() for a in t.attributes if a != t.name_field}
        )
        return cls(
            kb_description=schema.description or f"A knowledge base named {schema.name}.",
            node_labels=list(schema.node_types),
            relationship_labels=rels,
            attribute_names=attrs,
            candidate_types=schema.answer_types,
            example=example_query(schema),
        )

    def query_inputs(self, question: str, target_type: str | None) -> dict[str, object]:
        return {
            "kb_description": self.kb_description,
            "node_labels": self.node_labels,
            "relationship_labels": self.relationship_labels,
            "attribute_names": self.attribute_names,
            "target_type": target_type or "any",
            "example": self.example,
            "question": question,
        }
