"""English: the words reading an English question needs (``autofocus.language``)."""

from __future__ import annotations

import builtins
import importlib.util
import sys
import types
from typing import Any

from autofocus.language import Language


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """``typeguard.typechecked`` as it is under ``python -O``: the function (or a decorator) as it is."""
    return target if target is not None else (lambda function: function)


def _inflect_engine() -> Any:
    """inflect's engine, its module imported with typeguard's run-time checks off, as ``python -O`` does:
    inflect decorates its functions with ``typeguard.typechecked``, which recompiles each one at import
    (4 s of CPU on 2 cores, the larger part of starting ``autofocus ask``, against 0.2 s); the checks
    guard the types of inflect's own arguments, and this module gives it words. Only inflect's own
    ``from typeguard import typechecked`` sees the unchecked decorator (its module's ``__import__``):
    typeguard itself, and every other module, stay as they are."""
    if "inflect" in sys.modules:
        return sys.modules["inflect"].engine()
    spec = importlib.util.find_spec("inflect")
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError("inflect, which the English language resource reads plurals with, is not installed")
    unchecked = types.ModuleType("typeguard")
    unchecked.typechecked = _unchecked  # type: ignore[attr-defined]

    def imports(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if name == "typeguard" and level == 0:
            return unchecked
        return builtins.__import__(name, globals, locals, fromlist, level)

    module = importlib.util.module_from_spec(spec)
    module.__builtins__ = {**vars(builtins), "__import__": imports}  # type: ignore[attr-defined]
    sys.modules["inflect"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["inflect"]
        raise
    return module.engine()


_ENGINE = _inflect_engine()


def singular(word: str) -> str:
    """``word`` in the singular where it reads as a plural ("genera" -> "genus"), else as written."""
    one = _ENGINE.singular_noun(word)
    return one if isinstance(one, str) and one else word


def plurals(word: str) -> set[str]:
    """``word`` as written, in the plural, and in the singular where it reads as a plural (irregular
    forms included: "people" is "person")."""
    return {word, _ENGINE.plural_noun(word), singular(word)} - {""}


def name_singular(word: str) -> str:
    """A name's word without a regular plural ending, by rule alone ("genes" -> "gene", "studies" ->
    "study"; "class", "status", "analysis" as written): names are compared loosely, not read."""
    if len(word) <= 3 or not word.endswith("s") or word.endswith(("ss", "us", "is")):
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    return word[:-1]


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
    name_fillers=frozenset(["a", "an", "and", "are", "be", "by", "for", "had", "has", "have", "in", "is", "of", "on",
                            "the", "to", "was", "with"]),
    name_singular=name_singular,
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
    templates={
        # (opener, end, whether the asked label may take its first relationship without "that")
        "openers": (("Which", "?", True), ("What", "?", True), ("Find the", ".", False), ("List the", ".", False),
                    ("Name the", ".", False), ("Show me the", ".", False)),
        "articles": ("a", "an", "the"),
        "asked_last": "{subject} {verb} which {label}?",  # "India is part of which location?"
        "relative": "that",
        "and": "and",
        "copula": "is",
        "verbs": ("is", "has", "was", "had", "does", "can"),  # first words that are verbs as they stand
        "verb_ending": "s",  # a third-person verb ("raises", "depends on") needs no copula
        "text_clue": ('whose text mentions "{clue}"', 'described with the words "{clue}"', "mentioning {clue}"),
        "fact_clue": ("that {clue}",),
        "ops": {"=": "is", "<": "is less than", ">=": "is at least", "CONTAINS": "contains"},
        "filter": "whose {key} {op} {value}",
    },
    plural_noun=_ENGINE.plural_noun,
    plural_verb=_ENGINE.plural_verb,
    with_article=_ENGINE.a,
    lead_words=frozenset(["the", "this", "that", "a", "an", "it", "its"]),
    comparison_words=("which", "unlike", "whereas", "while"),
    comparison_phrases=("unlike", "as opposed to"),
    naming_words=("named", "called"),
    number_words=("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                  "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"),
)
