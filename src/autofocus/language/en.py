"""English: the words reading an English question needs (``autofocus.language``)."""

from __future__ import annotations

from typing import Any

from autofocus.language import Language


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """``typeguard.typechecked`` as it is under ``python -O``: the function (or a decorator) as it is."""
    return target if target is not None else (lambda function: function)


def _inflect_engine() -> Any:
    """inflect's engine, its module imported with typeguard's run-time checks off, as ``python -O`` does:
    inflect decorates its functions with ``typeguard.typechecked``, which recompiles each one at import
    (4 s of CPU on 2 cores, the larger part of starting ``autofocus ask``, against 0.2 s); the checks
    guard the types of inflect's own arguments, and this module gives it words."""
    import typeguard

    checked = typeguard.typechecked
    typeguard.typechecked = _unchecked
    try:
        import inflect
    finally:
        typeguard.typechecked = checked
    return inflect.engine()


_ENGINE = _inflect_engine()


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
    singular=singular,
    plurals=plurals,
    verb_stem=verb_stem,
    paraphrase={
        "described": ("Which {noun} fits this description: {clause}?", "I'm looking for a {noun}: {clause}.",
                      "What {noun} is this about: {clause}?", "Find the {noun} for this: {clause}.",
                      "{clause} - which {noun} is that?"),
        "described_np": ("Which {noun} is {clause}?", "What do you call {clause}?", "Name the {noun} that is {clause}.",
                         "I'm looking for {clause}; which {noun}?"),
        "clue": ("described as {clause}", "that is about {clause}", "known for this: {clause}"),
        "verb_endings": ("s", "ed"),  # a verb as a relationship's label writes it: "raises", "defined"
        "link": ("linked to", "related to", "associated with", "connected to"),
    },
)
