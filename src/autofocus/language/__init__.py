"""The words of one natural language that reading a question needs, as a resource chosen by a setting.

Step 1's cue and step 3b's rules read a question through a few closed classes of words: how a question
introduces what it asks for, determiners, copulas, auxiliaries, stop words, the word that joins a head
noun to its complement ("bodies *of* water"), the passive's agent ("depended on *by*"), and how nouns
and verbs inflect; mapping an LLM's labels onto the schema (``cypher.mapping``) compares names without
their filler words and plural endings; synthetic training questions (``synthetic``) are written and checked
with its template words, inflections, number words and the words that open a subject or a comparison.
Each language is one module here (``en``, ``fr``) holding a ``LANGUAGE``;
``query.language`` picks it (English by default), as bm25s takes ``stopwords="en"``. Nothing else in
the package keeps a list of a language's words (the prompts aside, which are the LM's instructions).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

DEFAULT = "en"  # English: the default of ``query.language``


@dataclass(frozen=True)
class Language:
    """The closed word classes and inflections of one language, as question reading uses them."""

    code: str
    ask_words: frozenset[str]  # words after which a question names what it asks for ("which", "list")
    person_words: frozenset[str]  # question words that ask for a person and are followed by a verb ("who")
    determiners: frozenset[str]
    copulas: frozenset[str]
    auxiliaries: frozenset[str]
    stop_words: frozenset[str]
    join_word: str  # joins a head noun to its complement: "bodies of water", "which of its functions"
    agent_word: str  # introduces the passive's agent: "depended on by numpy"
    clitics: tuple[str, ...]  # attached to a word and not part of it: a possessive "'s", an elided "l'"
    plural_endings: tuple[str, ...]  # regular plural endings, for a word matched loosely ("modules")
    singular: Callable[[str], str]  # a noun in the singular where it reads as a plural, else as written
    plurals: Callable[[str], set[str]]  # a noun as written, in the plural and in the singular
    verb_stem: Callable[[str], str]  # a verb's stem, so that its inflected forms share it
    # the schema's names (labels, relationship types) as Cypher mapping compares them, not as a question reads
    name_fillers: frozenset[str]  # words dropped when names are compared: "author_writes_paper", "has_brand"
    name_singular: Callable[[str], str]  # a name's word without its plural ending, by rule ("genes" -> "gene")
    # how a training question describes a node in other words than the knowledge base's own
    # (``synthetic.paraphrase``): frames by use, each filled with ``{noun}``, ``{clause}``, ``{name}``, ``{link}``
    paraphrase: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False)
    # how a synthetic question is written from a pattern without an LM (``synthetic.templates``): openers,
    # the relative pronoun, copula, operators' words ... by use; empty where the language has none yet
    templates: Mapping[str, Any] = field(default_factory=dict, compare=False)
    plural_noun: Callable[[str], str] | None = None  # a noun phrase in the plural ("module" -> "modules")
    plural_verb: Callable[[str], str] | None = None  # a verb in the third person plural ("raises" -> "raise")
    with_article: Callable[[str], str] | None = None  # a noun phrase after its indefinite article ("an index")
    # how a sentence from a document or an LM is read (``synthetic.clues``, ``synthetic.verbalise``)
    lead_words: frozenset[str] = frozenset()  # what opens a sentence's subject: "the", "this", "it"
    comparison_words: tuple[str, ...] = ()  # after a comma, open a comparison tacked on: ", which", ", unlike"
    comparison_phrases: tuple[str, ...] = ()  # between spaces, open one: " unlike ", " as opposed to "
    naming_words: tuple[str, ...] = ()  # what names a thing as the answer: "named", "called"
    number_words: tuple[str, ...] = ()  # the numbers zero, one, two ... in words, in order

    def strip_clitics(self, token: str) -> str:
        """``token`` without the clitics attached to it ("module's" -> "module", "l'os" -> "os")."""
        for clitic in self.clitics:
            if clitic.startswith("'") and token.endswith(clitic):
                token = token[: -len(clitic)]
            elif clitic.endswith("'") and token.lower().startswith(clitic) and len(token) > len(clitic):
                token = token[len(clitic) :]
        return token


def available() -> list[str]:
    """The language codes that have a resource module."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


@cache
def language(code: str) -> Language:
    """The resource of language ``code`` (``en``, ``fr``); a clear error for one that has none."""
    if code not in available():
        raise ValueError(f"no language resource {code!r}; available: {', '.join(available())}")
    return importlib.import_module(f"{__name__}.{code}").LANGUAGE
