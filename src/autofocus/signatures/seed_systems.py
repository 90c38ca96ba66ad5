"""DSPy signatures of the LLM steps of the other seed systems: 4StepFocus, FocusedRetriever, HybGRAG.

AF-Retriever's own signatures live in ``autofocus.signatures.afr``; steps a system shares with AF
(target type, rerankers) reuse those, so that ``autofocus compare`` hits the DSPy cache for them.
The docstrings paraphrase each paper's prompt without any dataset-specific example.
"""

from __future__ import annotations

from typing import Literal

import dspy
from pydantic import BaseModel, Field

# --- 4StepFocus, step 1 (paper 003, Algorithm 1 line 1) ------------------------------------------


class TripletTerm(BaseModel):
    """One end of a triplet: a constant (a named entity) or a variable (an unknown entity)."""

    type: str = Field(description="one of the node types")
    name: str | None = Field(None, description="the entity's name if the question names it (a constant), else null")
    variable: str | None = Field(None, description="for an unknown entity: a variable such as ?1 or ?2, else null")


class RawTriplet(BaseModel):
    head: TripletTerm
    relation: str = Field(description="one of the relation types")
    tail: TripletTerm


class TripletGeneration(dspy.Signature):
    """Formalise the question as a sequence of triplets (head, relation, tail) over the knowledge
    base. Each head and tail is either a constant, i.e. a specific entity named in the question
    (give its name), or a variable, i.e. an unknown entity (write ?1, ?2, ...; the same unknown
    entity always gets the same variable). Give every entity one of the node types and connect them
    only with the given relation types. Finally, name the variable that denotes the answer."""

    kb_description: str = dspy.InputField(desc="what the knowledge base is about")
    node_types: list[str] = dspy.InputField()
    relation_types: list[str] = dspy.InputField(desc="as (source type)-[relation]->(target type)")
    question: str = dspy.InputField()
    triplets: list[RawTriplet] = dspy.OutputField()
    target: str = dspy.OutputField(desc="the variable that denotes the answer, e.g. ?1")


# --- FocusedRetriever, DERIVE_CYPHER (paper 000, appendix B) --------------------------------------


class DeriveCypher(dspy.Signature):
    """Return a Cypher query derived from the given question. But follow my requirements precisely!
    Use a very basic, short Cypher syntax. Contentwise, omit everything that cannot be captured
    exactly with one of the given, available labels. Omit quantifications. Do not use OR or |.
    Format dates as YYYY-MM-DD. Only return one solution.
    Available keywords: MATCH, WHERE, RETURN, AND.
    Example: MATCH (x:label_a)-[:relation_label]->(c:label_b) WHERE c.name = 'some name' RETURN x.name"""

    question: str = dspy.InputField()
    node_labels: list[str] = dspy.InputField(desc="available node labels")
    properties: list[str] = dspy.InputField(desc="available properties")
    relation_labels: list[str] = dspy.InputField(desc="available relation labels as (source)-[type]->(target)")
    cypher: str = dspy.OutputField(desc="one Cypher query")


# --- HybGRAG (paper 004, appendix C.2) ------------------------------------------------------------

Source = Literal["knowledge graph", "text documents"]
ErrorType = Literal[
    "incorrect entity/relation",
    "missing entity",
    "no entity",
    "no intersection",
    "incorrect intersection",
    "incorrect retrieval module",
]

# Table 4 of the paper: the corrective feedback the router receives for each error type.
FEEDBACK: dict[str, str] = {
    "incorrect entity/relation": "Entity/relation {item} is incorrect. Please remove or substitute this entity/relation.",
    "missing entity": "There is only one entity but there may be more. Please extract one more entity and relation.",
    "no entity": "There is no entity extracted. Please extract at least one entity and one relation.",
    "no intersection": "There is no intersection between the entities. Please remove or substitute one entity and "
    "relation.",
    "incorrect intersection": "There is an intersection between the entities, but the answer is not within it. Please "
    "remove or substitute one entity and relation.",
    "incorrect retrieval module": "The retrieved document is incorrect. The current retrieval module may not be "
    "helpful to narrow down the search space.",
}


class TopicEntity(BaseModel):
    name: str = Field(description="the entity as named in the question")
    type: str = Field(description="exactly one of the entity types")


class HybRoute(dspy.Signature):
    """You are a helpful, pattern-following assistant. Based on the entity types and the relation
    types, extract the topic entities and the useful relations from the question. The relations must
    come from the given relation types; each entity must have exactly one entity type.
    Documents are required to answer the question, and each entity in the knowledge graph is
    associated with a document. Based on the extracted entities and relations, is the knowledge
    graph or are the text documents helpful to narrow down the search space?
    If earlier attempts were rejected, follow their feedback and answer again with newly extracted
    topic entities and useful relations."""

    kb_description: str = dspy.InputField(desc="what the knowledge base is about")
    entity_types: list[str] = dspy.InputField()
    relation_types: list[str] = dspy.InputField(desc="as (source type)-[relation]->(target type)")
    question: str = dspy.InputField()
    feedback: str = dspy.InputField(desc="earlier attempts and the critic's feedback; empty on the first attempt")
    topic_entities: list[TopicEntity] = dspy.OutputField()
    useful_relations: list[str] = dspy.OutputField(desc="relation names from the relation types")
    source: Source = dspy.OutputField(desc="which source narrows down the search space")


class HybValidate(dspy.Signature):
    """You are a helpful, pattern-following assistant. Is the document aligned with the requirements
    of the question? Reply with only yes or no."""

    question: str = dspy.InputField()
    document: str = dspy.InputField(desc="the retrieved document and the reasoning paths that lead to it")
    aligned: bool = dspy.OutputField(desc="yes or no")


class HybComment(dspy.Signature):
    """You are a helpful, pattern-following assistant. The document retrieved for the question was
    judged incorrect. Please point out the wrong entity or relation extracted from the question, if
    there is any, or else what went wrong, as one of the error types."""

    question: str = dspy.InputField()
    topic_entities: list[str] = dspy.InputField(desc="the extracted topic entities as name (type)")
    useful_relations: list[str] = dspy.InputField()
    retrieval_module: Source = dspy.InputField(desc="the source the router chose")
    observation: str = dspy.InputField(desc="what the retrieval found: linked entities, ego-graph sizes, top document")
    error_type: ErrorType = dspy.OutputField()
    wrong_item: str = dspy.OutputField(desc="for 'incorrect entity/relation': the wrong entity or relation; else empty")
