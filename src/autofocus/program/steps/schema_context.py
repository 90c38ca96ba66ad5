"""What the LLM steps are told about an SKB: its description, labels, relationship types, attributes."""

from __future__ import annotations

from dataclasses import dataclass

from autofocus.skb.schema import Schema


@dataclass(frozen=True)
class SchemaContext:
    kb_description: str
    node_labels: list[str]
    relationship_labels: list[str]
    attribute_names: list[str]
    candidate_types: list[str]

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
        )

    def query_inputs(self, question: str, target_type: str | None) -> dict[str, object]:
        return {
            "kb_description": self.kb_description,
            "node_labels": self.node_labels,
            "relationship_labels": self.relationship_labels,
            "attribute_names": self.attribute_names,
            "target_type": target_type or "any",
            "question": question,
        }
