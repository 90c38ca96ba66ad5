"""What the LLM steps are told about an SKB: its description, labels, relationship types, attributes."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from autofocus.cypher.render import name as cypher_name
from autofocus.skb.model import SKB
from autofocus.skb.schema import Schema
from autofocus.skb.schema_graph import schema_graph

# The triples step 2 is shown, in characters (~1,500 tokens): a graph of many labels has hundreds of
# (label, relationship, label) triples (WordNet-like schemas: ~300, 12k characters), which alone would
# fill a small LM's 4k-token context and fail every step-2 call. Most of the budget goes to the same
# triples for every question, so that the LM server reuses the evaluated prompt prefix across questions
# (re-evaluating ~2,500 prompt tokens per question took a minute on 2 cores); the rest to the target
# type's own triples, after them.
RELATIONSHIP_BUDGET_CHARS = 6_000
SHARED_BUDGET_CHARS = 4_500


@dataclass(frozen=True)
class SchemaContext:
    kb_description: str
    node_labels: list[str]
    relationship_labels: list[str]
    attribute_names: list[str]
    candidate_types: list[str]
    type_descriptions: list[str] = field(default_factory=list)  # one line per candidate type (step 1)

    @classmethod
    def from_schema(cls, schema: Schema) -> SchemaContext:
        """From ``schema.json`` alone, as the seed systems' papers prompt (one domain and range per type)."""
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

    @classmethod
    def from_skb(cls, skb: SKB, type_parts: str = "full") -> SchemaContext:
        """From the graph itself (``SchemaGraph``): every (label, relationship, label) triple that occurs,
        most frequent first, and for step 1 what distinguishes each candidate type (``type_parts``:
        ``QueryConfig.step1_type_parts``)."""
        base = cls.from_schema(skb.schema)
        sg = schema_graph(skb)
        rels = [
            f"(:{cypher_name(r.src)})-[:{cypher_name(r.rel)}]->(:{cypher_name(r.dst)})"
            for r in sorted(sg.relations, key=lambda r: -r.count)
        ]
        return cls(
            kb_description=base.kb_description,
            node_labels=base.node_labels,
            relationship_labels=rels or base.relationship_labels,
            attribute_names=base.attribute_names,
            candidate_types=base.candidate_types,
            type_descriptions=[] if type_parts == "names" else [
                sg.describe_label(t, max_relations=0 if type_parts == "no_relations" else 6,
                                  description=_described(skb, t), example=type_parts != "no_examples")
                for t in base.candidate_types],
        )

    def relationships_for(self, target_type: str | None) -> list[str]:
        """The triples step 2 is shown: all of them where they fit ``RELATIONSHIP_BUDGET_CHARS``; else the
        most frequent ones within ``SHARED_BUDGET_CHARS`` (the same for every question: a prefix the LM
        server evaluates once), then the target type's own that are left, most frequent first, as many as
        fit the rest, and a line saying how many rarer ones are left out (the step's grammar still admits
        them)."""
        rels, shared = self.relationship_labels, self._shared_relationships
        if shared is None:
            return rels
        own = f"(:{cypher_name(target_type)})" if target_type else None
        rest = [r for r in rels[len(shared):] if own and own in r]
        kept = [*shared, *_within(rest, RELATIONSHIP_BUDGET_CHARS - _length(shared))]
        return [*kept, f"... and {len(rels) - len(kept)} rarer triples"]

    @functools.cached_property
    def _shared_relationships(self) -> list[str] | None:
        """The triples every question's step 2 starts with, or None where all of them fit the budget
        (the same for every call: computed once)."""
        rels = self.relationship_labels
        return None if _length(rels) <= RELATIONSHIP_BUDGET_CHARS else _within(rels, SHARED_BUDGET_CHARS)

    def query_inputs(self, question: str, target_type: str | None) -> dict[str, object]:
        return {
            "kb_description": self.kb_description,
            "node_labels": self.node_labels,
            "relationship_labels": self.relationships_for(target_type),
            "attribute_names": self.attribute_names,
            "target_type": target_type or "any",
            "question": question,
        }

    def target_type_inputs(self, question: str) -> dict[str, object]:
        return {
            "kb_description": self.kb_description,
            "candidate_types": self.candidate_types,
            "type_descriptions": self.type_descriptions,
            "question": question,
        }


def _length(lines: list[str]) -> int:
    """Characters ``lines`` take in a prompt, a separator each."""
    return sum(len(line) + 2 for line in lines)


def _within(lines: list[str], budget: int) -> list[str]:
    """The first ``lines`` whose lengths (plus a separator each) fit ``budget`` characters."""
    kept, used = [], 0
    for line in lines:
        used += len(line) + 2
        if used > budget:
            break
        kept.append(line)
    return kept


def _described(skb: SKB, label: str) -> str:
    info = skb.schema.node_types.get(label)
    return info.description if info is not None else ""
