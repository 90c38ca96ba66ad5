"""English: the words reading an English question needs (``autofocus.language``)."""

from __future__ import annotations

import inflect

from autofocus.language import Language

_ENGINE = inflect.engine()


def singular(word: str) -> str:
    """``word`` in the singular where it reads as a plural ("genera" -> "genus"), else as written."""
    one = _ENGINE.singular_noun(word)
    return one if isinstance(one, str) and one else word


def plurals(word: str) -> set[str]:
    """``word`` as written, in the plural, and in the singular where it reads as a plural (irregular
    forms included: "people" is "person")."""
    return {word, _ENGINE.plural_noun(word), singular(word)} - {""}


def verb_stem(word: str) -> str:
    """The first letters that "depends", "depend" and "depending" share: two endings' letters off,
    at least four kept."""
    return word[: max(4, len(word) - 2)]


LANGUAGE = Language(
    code="en",
    ask_words=frozenset(["which", "what", "list", "find", "name", "show", "give"]),
    person_words=frozenset(["who"]),
    determiners=frozenset(["the", "a", "an", "all", "some", "its", "their"]),
    copulas=frozenset(["is", "are", "was", "were"]),
    auxiliaries=frozenset(["be", "been", "can", "could", "did", "do", "does", "had", "has", "have", "may", "might",
                           "must", "should", "would", "will"]),
    stop_words=frozenset(["a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from",
                          "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on",
                          "or", "that", "the", "their", "them", "these", "they", "this", "those", "to", "was",
                          "what", "when", "where", "which", "who", "whose", "why", "will", "with"]),
    join_word="of",
    agent_word="by",
    clitics=("'s",),
    plural_endings=("s", "es"),
    relation_stem=5,
    singular=singular,
    plurals=plurals,
    verb_stem=verb_stem,
)
