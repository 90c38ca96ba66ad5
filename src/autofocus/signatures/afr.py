"""DSPy signatures of every LLM step; the docstrings are the instructions (paper, appendix A.2).

Node types differ per SKB, so ``target_type_signature`` narrows the output to a ``Literal`` of the
SKB's candidate types at program construction; every other signature is static.
"""

from __future__ import annotations

from typing import Literal

import dspy
from pydantic import BaseModel, Field, create_model

# --- step 1 ---------------------------------------------------------------------------------------


class TargetType(dspy.Signature):
    """Given several instances of these types, decide: an instance of which type could correctly
    answer the query? Return nothing but the type of which the instance must be of."""

    kb_description: str = dspy.InputField(desc="what the knowledge base is about")
    candidate_types: list[str] = dspy.InputField(desc="the node types that can be answers")
    question: str = dspy.InputField()
    target_type: str = dspy.OutputField(desc="exactly one of the candidate types")


def target_type_signature(types: list[str], described: bool = False, kb_description: bool = True) -> type[dspy.Signature]:
    """Step 1's signature with its output constrained to the SKB's candidate types; ``described`` adds
    what distinguishes each type (its relationships and an example node), which a small LM needs;
    ``kb_description`` False leaves out what the knowledge base is about."""
    sig = TargetType.with_updated_fields("target_type", type_=Literal[tuple(types)])  # type: ignore[valid-type]
    if not kb_description:
        sig = sig.delete("kb_description")
    if described:
        sig = sig.insert(
            2 if kb_description else 1,
            "type_descriptions",
            dspy.InputField(desc="per candidate type: its relationships in the graph and an example node"),
            type_=list[str],
        )
    return sig


# --- step 2 ---------------------------------------------------------------------------------------


class TextToCypher(dspy.Signature):
    """Generate a Cypher query based on the given question. Please follow the restrictions precisely!
    - Simple syntax: use a very basic and short Cypher syntax.
    - Content accuracy: omit any information that cannot be exactly captured with one of the given,
      available node labels, relationship labels or attribute names.
    - No quantifications. No negations: skip negated facts, avoid NOT and <>. Do not use OR.
    - Available keywords: MATCH, WHERE, RETURN, AND, CONTAINS.
    - Date format: format dates as YYYY-MM-DD.
    - Give named entities as {name: "..."} properties of their node.
    - At the end of the query, RETURN y.name for the target node (y:target_type).
    Example of the syntax (replace the placeholders with the available labels and the question's names):
    MATCH (y:TARGET_LABEL)-[:RELATIONSHIP_LABEL]->(b:NODE_LABEL {name: "NAME FROM THE QUESTION"})
    RETURN y.name
    Only return one Cypher query, no additional information."""

    kb_description: str = dspy.InputField(desc="what the knowledge base is about")
    node_labels: list[str] = dspy.InputField(desc="available node labels")
    relationship_labels: list[str] = dspy.InputField(desc="available relationship labels as (:source)-[:type]->(:target)")
    attribute_names: list[str] = dspy.InputField(desc="attribute names usable in WHERE, besides name")
    target_type: str = dspy.InputField(desc="the label of the node the question asks for")
    question: str = dspy.InputField()
    cypher: str = dspy.OutputField(desc="one Cypher query")


# --- step 2, typed query format -------------------------------------------------------------------


class NodeSpec(BaseModel):
    var: str = Field(description="short variable name, e.g. y, a, g1")
    label: str = Field(description="one of the available node labels")
    name: str | None = Field(None, description="the entity's name if the question names it, else null")
    where: list[str] = Field(
        default_factory=list, description='attribute conditions like "year >= 2015" or "title CONTAINS \'graph\'"'
    )


class EdgeSpec(BaseModel):
    head: str = Field(description="variable of the source node")
    rel: str = Field(description="one of the available relationship labels")
    tail: str = Field(description="variable of the target node")


class QuerySpec(BaseModel):
    """A query graph filled into a fixed schema instead of free-form Cypher."""

    target: str = Field(description="variable of the node the question asks for")
    nodes: list[NodeSpec]
    edges: list[EdgeSpec] = Field(default_factory=list)


class TextToQueryGraph(dspy.Signature):
    """Describe the question as a small query graph over the knowledge base: the target node the
    question asks for, the other nodes it mentions (with their name when the question names them)
    and the relationships between them, using only the available labels. Omit anything that cannot
    be captured with them; skip negations and alternatives."""

    kb_description: str = dspy.InputField(desc="what the knowledge base is about")
    node_labels: list[str] = dspy.InputField(desc="available node labels")
    relationship_labels: list[str] = dspy.InputField(desc="available relationship labels as (:source)-[:type]->(:target)")
    attribute_names: list[str] = dspy.InputField(desc="attribute names usable in conditions, besides name")
    target_type: str = dspy.InputField(desc="the label of the node the question asks for")
    question: str = dspy.InputField()
    query: QuerySpec = dspy.OutputField()


def typed_query_signature(labels: list[str], relationships: list[str]) -> type[dspy.Signature]:
    """Step 2's typed format with the SKB's labels and relationship types as enums, so that an LM with
    JSON-schema structured outputs (OpenAI, vLLM) can only name what the graph has."""
    label_t = Literal[tuple(labels)]  # type: ignore[valid-type]
    rel_t = Literal[tuple(relationships)]  # type: ignore[valid-type]
    node = create_model("NodeSpec", __base__=NodeSpec, label=(label_t, Field(description="one of the node labels")))
    edge = create_model("EdgeSpec", __base__=EdgeSpec, rel=(rel_t, Field(description="one of the relationship labels")))
    spec = create_model(
        "QuerySpec", __base__=QuerySpec, nodes=(list[node], ...), edges=(list[edge], Field(default_factory=list))  # type: ignore[valid-type]
    )
    return TextToQueryGraph.with_updated_fields("query", type_=spec)



# --- step 8 ---------------------------------------------------------------------------------------


class PointwiseScore(dspy.Signature):
    """Examine if a candidate satisfies a given query and assign a score from 0.0 to 1.0. If the
    candidate does not satisfy the query, the score should be 0.0. If there exists explicit and strong
    evidence supporting that the candidate satisfies the query, the score should be 1.0. If partial or
    weak evidence exists, the score should be between 0.0 and 1.0."""

    question: str = dspy.InputField()
    node_type: str = dspy.InputField()
    candidate: str = dspy.InputField(desc="information about the candidate")
    score: float = dspy.OutputField(desc="between 0.0 and 1.0")


class ListwiseRank(dspy.Signature):
    """The rows of the following list consist of an ID number, a type and a corresponding descriptive
    text. Sort this list in descending order according to how well the elements can be considered as
    answers to the query. Make absolutely sure that the element which satisfies the query best is the
    first element in your order. Return only the ID numbers, in that order."""

    question: str = dspy.InputField()
    candidates: str = dspy.InputField(desc="one candidate per block: [ID] type: description")
    ranking: list[int] = dspy.OutputField(desc="all candidate ID numbers, best first")


class PairwiseCompare(dspy.Signature):
    """The following two elements consist of an ID number, a type and a corresponding descriptive
    text. Find out which of the elements satisfies the query better. Return only the ID number of the
    element that satisfies the query best."""

    question: str = dspy.InputField()
    first: str = dspy.InputField(desc="[ID] type: description")
    second: str = dspy.InputField(desc="[ID] type: description")
    better_id: int = dspy.OutputField(desc="the ID number of the better element")
