"""Which way a question reads a relationship between nodes of one type.

Between two types the types tell "the modules json imports" from "the modules that import json"
apart; between nodes of one type (``depends_on``, ``cites``, ``subclass_of``) only the edge's
direction does, and a small LM writing a query, or a question for ``autofocus synth``, often turns it
round. The question's own wording says which reading it means: the relationship's words just before
a name ("Which packages depend on numpy?": the answers point to numpy) or the name before them
("Which packages does numpy depend on?", and the passive "... depended on by numpy": numpy points to
the answers). Matching is on words, so a relationship the question words otherwise reads neither way.
The passive's agent word and the verb's stem come from the question's ``Language``.
"""

from __future__ import annotations

import re

from autofocus.language import Language


def relation_phrase(rel: str, src_type: str | None, dst_type: str | None) -> str:
    """An edge label as words, without the endpoint types it repeats: ``function_defined_in_module`` -> ``defined in``."""
    words = [w for w in re.split(r"[_\W]+", rel) if w]
    for type_name, end in ((src_type, 0), (dst_type, -1)):
        if type_name and len(words) > 1 and words[end].lower() == type_name.lower():
            words.pop(end)
    return " ".join(words) or rel


def relation_word(rel: str, src_type: str | None, dst_type: str | None, lang: Language) -> str:
    """A relationship's first word that is not a stop word, without its endpoint labels: near a name, it
    is wording enough ("subclass KeyError", "the parts of the heart", "the pubis is part of"). A phrase
    of stop words only is kept whole: the "is" of "where is Tepic" is no ``is_a``, "is a" would be."""
    phrase = relation_phrase(rel, src_type, dst_type)
    return next((w for w in phrase.split() if w.lower() not in lang.stop_words), phrase)


def _verb(phrase: str, lang: Language) -> str:
    """The phrase as a pattern, its first word by its stem ("depends on" also reads "depend on")."""
    words = phrase.split()
    first = re.escape(lang.verb_stem(words[0])) + r"\w*"
    return first + "".join(rf"\s+{re.escape(w)}" for w in words[1:])


def _filler(lang: Language) -> str:
    """Up to three words between a relationship's words and a name ("the package", "both", a list), not
    the passive's agent word."""
    return rf"(?:\s+(?!{re.escape(lang.agent_word)}\b)[\w\"',-]+){{0,3}}?"


def points_to(question: str, phrase: str, name: str, lang: Language) -> bool:
    """The question asks for what relates to ``name`` ("depend on numpy"): answer -[rel]-> name."""
    pattern = rf"\b{_verb(phrase, lang)}{_filler(lang)}\s+\W?{re.escape(name)}"
    return re.search(pattern, question, re.IGNORECASE) is not None


def points_from(question: str, phrase: str, name: str, lang: Language) -> bool:
    """The question asks for what ``name`` relates to ("does numpy depend on", "depended on by numpy"):
    name -[rel]-> answer."""
    n, verb, agent = re.escape(name), _verb(phrase, lang), re.escape(lang.agent_word)
    return (re.search(rf"{n}\W?(?:\s+[\w-]+){{0,2}}?\s+{verb}", question, re.IGNORECASE) is not None
            or re.search(rf"\b{verb}\s+{agent}\s+\W?{n}", question, re.IGNORECASE) is not None)  # fmt: skip
