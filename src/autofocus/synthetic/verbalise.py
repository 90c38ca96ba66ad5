"""A pattern in readable form for the LM, and the checks its question must pass.

The LM sees names, relationship labels with the schema's descriptions, conditions and the asked
type; never the answers. A question is kept only when it names every constant, states every
attribute filter's value and any text clue, names no answer and shows no query syntax.
"""

from __future__ import annotations

import re

from autofocus.language import Language, language
from autofocus.program.steps.direction import points_to, relation_phrase
from autofocus.program.steps.reading import QuestionReading
from autofocus.skb.model import SKB
from autofocus.synthetic.clues import fact_stated
from autofocus.synthetic.patterns import VARS, Pattern

VERBALISED_IN: Language = language("en")  # the language the verbaliser's prompt asks for (``signatures.synthetic``)
_MARKER = re.compile(r"\[\[\s*##\s*\w+\s*##\s*\]\]")  # a chat adapter's field marker a small LM echoes
_SYNTAX = re.compile(r"-\[|\]->|\(\w+:\w+|\by\.\w+|\bMATCH\b|\bRETURN\b")
_OPS = {"=": "is", "<": "is less than", ">=": "is at least", "CONTAINS": "contains"}  # the prompt's words (English)


def describe(pattern: Pattern, skb: SKB) -> str:
    """The facts the answers satisfy, one per line, e.g. ``the unknown answer (a function) raises the exception "ValueError"``."""
    qg = pattern.query
    noun = {v: _noun(v, s.type or "node", pattern) for v, s in qg.symbols.items()}
    lines = [f"The question asks for the unknown answer (a {qg.target_type}); quoted names are other, known nodes.",
             "Facts:"]
    for t in qg.triplets:
        info = skb.schema.edge_types.get(str(t.rel))
        phrase = relation_phrase(str(t.rel), info.src_type if info else None, info.dst_type if info else None)
        lines.append(f"- {noun[t.head]} {phrase} {noun[t.tail]}")
    for var, c in pattern.filters:
        lines.append(f"- the {c.key.replace('_', ' ')} of {noun[var]} {_OPS.get(c.op, c.op)} {c.value!r}")
    if pattern.clue is not None and pattern.clue_kind == "fact":
        lines.append(f"- {noun[qg.target]} {pattern.clue}")
    elif pattern.clue is not None:
        lines.append(f'- the text about {noun[qg.target]} mentions "{pattern.clue}"')
    meanings = []
    for rel in dict.fromkeys(pattern.edge_types):
        info = skb.schema.edge_types.get(rel)
        if info is not None and info.description:
            meanings.append(f"- {relation_phrase(rel, info.src_type, info.dst_type)}: {info.description}")
    if meanings:
        lines += ["Relationships:", *meanings]
    return "\n".join(lines)


def _noun(var: str, type_name: str, pattern: Pattern) -> str:
    if var == pattern.query.target:
        return f"the unknown answer (a {type_name})"
    name = pattern.query.symbols[var].name_value()
    if name is not None:
        return f'the {type_name} "{name}"'
    return f"some {type_name} {var.upper()}"


def clean_question(text: str) -> str:
    """The LM's question on one line, without field markers it echoed (``[[ ## completed ## ]]``)."""
    return " ".join(_MARKER.sub(" ", text).split())


def question_problem(question: str, pattern: Pattern, skb: SKB) -> str | None:
    """Why the question cannot be kept (``None``: it can)."""
    text = " ".join(question.split())
    if not text or len(text) < 10:
        return "empty question"
    if _SYNTAX.search(text):
        return "query syntax in the question"
    lower = text.lower()
    names = [str(pattern.query.symbols[v].name_value()) for v in pattern.constants]
    unnamed = text
    for n in sorted(names, key=len, reverse=True):
        unnamed = unnamed.replace(n, " ")
    letters = "".join(v.upper() for v in VARS[1:])
    if "unknown answer" in lower or any(re.search(rf"\b{re.escape(t)} [{letters}](?![\w.-])", unnamed)
                                        for t in [*skb.schema.node_types, "node"]):  # fmt: skip
        return "the pattern's wording in the question"  # "the unknown answer", "some package A"
    if any(n.lower() not in lower for n in names):
        return "a constant is not named"
    naming = "|".join(map(re.escape, VERBALISED_IN.naming_words))
    if any(re.search(rf"\b({naming})\s+\W?{re.escape(n.lower())}", lower) for n in names):
        return "a constant is named as the answer"
    if any(not _states(c.value, lower) for _, c in pattern.filters):
        return "a filter's value is not stated"  # the question asks for a larger set than the answers
    if turned_round(text, pattern, skb):
        return "a relationship is turned round"
    if asks_another_label(QuestionReading(text, skb, VERBALISED_IN), pattern):
        return "the question asks for another label"
    if pattern.clue is not None and not (fact_stated(pattern.clue, lower) if pattern.clue_kind == "fact"
                                         else _states(pattern.clue, lower)):
        return "the text clue is not stated"
    rest = lower
    for n in sorted(names, key=len, reverse=True):  # an answer's name inside a constant's is no leak
        rest = rest.replace(n.lower(), " ")
    for node in pattern.answers.tolist():
        name = skb.name(node).strip().lower()
        if len(name) >= 2 and re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", rest):
            return "an answer is named"
    return None


def asks_another_label(reading: QuestionReading, pattern: Pattern) -> bool:
    """Whether the question asks for a label other than the answers' ("Which class defines the method
    ..." for methods), read as step 3b reads it (``QuestionReading.asked_label``). Such a question's label
    is another question's, and its gold query, shown as a demo, teaches step 2 the mismatch."""
    target = pattern.query.symbols[pattern.query.target].type
    asked = reading.asked_label
    return asked is not None and asked != target


def turned_round(question: str, pattern: Pattern, skb: SKB) -> bool:
    """Whether the question reads a same-type edge from a named node to the answer the wrong way: for
    "FalkorDB depends on the answer" it asks "which packages depend on FalkorDB?"
    (``program.steps.direction``). The label would then be another question's."""
    target = pattern.query.target
    for t in pattern.query.triplets:
        info = skb.schema.edge_types.get(str(t.rel))
        if t.tail != target or info is None or info.src_type != info.dst_type:
            continue
        phrase = relation_phrase(str(t.rel), info.src_type, info.dst_type)
        # the head's name, or those of the constants it is tied to
        if any(points_to(question, phrase, name, VERBALISED_IN) for name in _names_at(pattern, t.head)):
            return True
    return False


def _names_at(pattern: Pattern, var: str) -> list[str]:
    qg = pattern.query
    if var in pattern.constants:
        return [str(qg.symbols[var].name_value())]
    near = {t.tail if t.head == var else t.head for t in qg.triplets if var in (t.head, t.tail)}
    return [str(qg.symbols[v].name_value()) for v in near if v in pattern.constants and v != qg.target]


def _states(value: object, lower: str) -> bool:
    """Whether the question states a filter's value: a string as written, a number in digits or, as far
    as the language's number words go (to twenty), in words ("two parameters"); booleans read too many
    ways to check."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return True
    if isinstance(value, str):
        return value.lower() in lower
    numbers = VERBALISED_IN.number_words
    forms = [f"{value:g}"] + ([numbers[int(value)]] if float(value).is_integer() and 0 <= value < len(numbers) else [])
    return any(re.search(rf"(?<![\w.]){re.escape(f)}(?![\w])", lower) for f in forms)
