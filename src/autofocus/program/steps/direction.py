"""Which way a question reads a relationship between nodes of one type.

Between two types the types tell "the modules json imports" from "the modules that import json"
apart; between nodes of one type (``depends_on``, ``cites``, ``subclass_of``) only the edge's
direction does, and a small LM writing a query, or a question for ``autofocus synth``, often turns it
round. The question's own wording says which reading it means: the relationship's words just before
a name ("Which packages depend on numpy?": the answers point to numpy) or the name before them
("Which packages does numpy depend on?", and the passive "... depended on by numpy": numpy points to
the answers). Matching is on words, so a relationship the question words otherwise reads neither way.
"""

from __future__ import annotations

import re

_FILLER = r"(?:\s+(?!by\b)[\w\"',-]+){0,3}?"  # "the package", "both", a list; not the passive's "by"


def relation_phrase(rel: str, src_type: str | None, dst_type: str | None) -> str:
    """An edge label as words, without the endpoint types it repeats: ``function_defined_in_module`` -> ``defined in``."""
    words = [w for w in re.split(r"[_\W]+", rel) if w]
    for type_name, end in ((src_type, 0), (dst_type, -1)):
        if type_name and len(words) > 1 and words[end].lower() == type_name.lower():
            words.pop(end)
    return " ".join(words) or rel


def _verb(phrase: str) -> str:
    """The phrase as a pattern, its first word by its stem ("depends on" also reads "depend on")."""
    words = phrase.split()
    first = re.escape(words[0][: max(4, len(words[0]) - 2)]) + r"\w*"
    return first + "".join(rf"\s+{re.escape(w)}" for w in words[1:])


def points_to(question: str, phrase: str, name: str) -> bool:
    """The question asks for what relates to ``name`` ("depend on numpy"): answer -[rel]-> name."""
    return re.search(rf"\b{_verb(phrase)}{_FILLER}\s+\W?{re.escape(name)}", question, re.IGNORECASE) is not None


def points_from(question: str, phrase: str, name: str) -> bool:
    """The question asks for what ``name`` relates to ("does numpy depend on", "depended on by numpy"):
    name -[rel]-> answer."""
    n, verb = re.escape(name), _verb(phrase)
    return (re.search(rf"{n}\W?(?:\s+[\w-]+){{0,2}}?\s+{verb}", question, re.IGNORECASE) is not None
            or re.search(rf"\b{verb}\s+by\s+\W?{n}", question, re.IGNORECASE) is not None)  # fmt: skip
