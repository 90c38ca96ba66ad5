"""The signatures of the question writers: a fact read from one answer's text, the question a sampled
query pattern becomes (``autofocus synth``), and questions written from one node's text and relations
(``autofocus adapt --questions lm``)."""

from __future__ import annotations

import dspy


class VerbalizePattern(dspy.Signature):
    """Write one natural question that asks for every node of the answer type that matches the
    pattern. Mention every quoted name exactly as written and every condition, in plain words.
    The answer is unknown: never call it by a quoted name, which belongs to another node. Do not
    mention variables, arrows or labels in code form, and do not name, hint at or count the answers.
    Keep every relationship's direction: a fact "X cites the unknown answer" asks for what X cites,
    not for what cites X. Write it as a person searching this knowledge base would ask it, in one
    sentence. Examples: for the facts "the unknown answer (a paper) written by the author "Ada
    Lovelace"" and "the year of the unknown answer (a paper) is at least 2019", write "Which papers
    did Ada Lovelace write in 2019 or later?"; for the fact "the paper "Deep Residual Learning"
    cites the unknown answer (a paper)", write "Which papers does "Deep Residual Learning" cite?"."""

    kb_description: str = dspy.InputField(desc="what the knowledge base is about")
    answer_type: str = dspy.InputField(desc="the type of the nodes the question asks for")
    pattern: str = dspy.InputField(desc="the facts every answer satisfies, with what each relationship means")
    question: str = dspy.OutputField(desc="one question, ending with a question mark")


class StateFact(dspy.Signature):
    """Read the text about one node of a knowledge base and state one specific thing it says about
    this node (what it does, returns or is for, or a distinctive detail) that the similar nodes
    listed do not share. Write a short phrase in your own words that starts with a verb and completes
    "the <node type> that ...", e.g. "returns the last part of a file path". Never write the node's
    name or the name of a similar node."""

    node_type: str = dspy.InputField()
    text: str = dspy.InputField(desc="the node's document")
    similar: list[str] = dspy.InputField(desc="names of similar nodes the phrase must not fit")
    fact: str = dspy.OutputField(desc="a phrase of 4 to 15 words")


class AskAboutNode(dspy.Signature):
    """Read what one node of a knowledge base is and a few of its relations, and write three questions
    a person would type into a search box to find exactly this node, in everyday words. Never write the
    node's name or any part of it, and do not copy the relation labels: say what they mean.
    textual: describe what the node is or does, in your own words, naming no other node.
    hybrid: name one related node and add one thing the text says about this node.
    relational: ask through its relations only, naming one or two related nodes.
    Use only the names given in the relations. Example, for a film whose text says "A 1979
    science-fiction horror film in which the crew of a spaceship is hunted by an alien" with the
    relation "this node directed by -> Ridley Scott": textual "Which sci-fi horror movie has a
    spaceship crew hunted by a creature?", hybrid "Which Ridley Scott film is about an alien hunting a
    ship's crew?", relational "What films did Ridley Scott direct?"."""

    kb_description: str = dspy.InputField(desc="what the knowledge base is about")
    node_type: str = dspy.InputField(desc="the kind of node the questions ask for")
    text: str = dspy.InputField(desc="what the node is: the opening of its document")
    relations: list[str] = dspy.InputField(desc="some of its relations: relation -> related node")
    textual: str = dspy.OutputField(desc="one question that describes the node without naming anything")
    hybrid: str = dspy.OutputField(desc="one question with a related node and a described property")
    relational: str = dspy.OutputField(desc="one question through its relations")
