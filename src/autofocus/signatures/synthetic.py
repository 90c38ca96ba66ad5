"""The signature that turns a sampled query pattern into a question (``autofocus synth``)."""

from __future__ import annotations

import dspy


class VerbalizePattern(dspy.Signature):
    """Write one natural question that asks for every node of the answer type that matches the
    pattern. Mention every quoted name exactly as written and every condition, in plain words.
    The answer is unknown: never call it by a quoted name, which belongs to another node. Do not
    mention variables, arrows or labels in code form, and do not name, hint at or count the answers.
    Write it as a person searching this knowledge base would ask it, in one sentence.
    Example: for the facts "the unknown answer (a paper) written by the author "Ada Lovelace"" and
    "the year of the unknown answer (a paper) is at least 2019", write
    "Which papers did Ada Lovelace write in 2019 or later?"."""

    kb_description: str = dspy.InputField(desc="what the knowledge base is about")
    answer_type: str = dspy.InputField(desc="the type of the nodes the question asks for")
    pattern: str = dspy.InputField(desc="the facts every answer satisfies, with what each relationship means")
    question: str = dspy.OutputField(desc="one question, ending with a question mark")
