"""How a question writes the schema's labels: each label as the phrases a person would write for it.

Labels come in many spellings (``module``, ``body_part``, ``BodyPart``, ``gene/protein``, ``Sports team``);
a question writes them as words, often in the plural ("Which body parts ..."). Read word by word, a
multi-word label misreads: "part" alone would name ``body_part``, and in "which film series" the word
"film" names the label ``film`` before "series" is read. So each label becomes its phrases
(alternatives split at ``/`` and ``|``, words split at separators and at case changes), matched whole
and longest first, the last word also in its plural or singular (``inflect``, so "genera" is "genus"
and "people" is "person"). A question that writes no label's whole phrase ("who ...", "which team ..." for
``sports_team``) names none here: step 1's LM and its VSS prior read such questions.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from autofocus.skb.documents import CASE_CHANGE


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """``typeguard.typechecked`` as it is under ``python -O``: the function (or a decorator) as it is."""
    return target if target is not None else (lambda function: function)


def _inflect_engine() -> Any:
    """inflect's engine, its module imported with typeguard's run-time checks off, as ``python -O`` does:
    inflect decorates its functions with ``typeguard.typechecked``, which recompiles each one at import
    (4 s of CPU, the larger part of starting ``autofocus ask`` on 2 cores, against 0.2 s); the checks guard
    the types of inflect's own arguments, and this module gives it words."""
    import typeguard

    checked = typeguard.typechecked
    typeguard.typechecked = _unchecked
    try:
        import inflect
    finally:
        typeguard.typechecked = checked
    return inflect.engine()


_ENGINE = _inflect_engine()
WORD = re.compile(r"[^\s,;!?()\[\]{}\"`]+")
_ALTERNATIVES = re.compile(r"[/|]")
_SEPARATORS = re.compile(r"[\W_]+")

# English function words: how a question introduces what it asks for (not any schema's vocabulary)
_ASK = frozenset(["which", "what", "list", "find", "name", "show", "give"])
DETERMINERS = frozenset(["the", "a", "an", "all", "some", "its", "their"])
COPULA = frozenset(["is", "are", "was", "were"])
AUXILIARIES = frozenset(["be", "been", "can", "could", "did", "do", "does", "had", "has", "have", "may", "might", "must", "should", "would", "will"])
STOP_WORDS = frozenset(["a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "that", "the", "their", "them", "these", "they", "this", "those", "to", "was", "what", "when", "where", "which", "who", "whose", "why", "will", "with"])
MAX_MODIFIERS = 3  # words between the question word and the asked label: "Which standard library modules"


def singular(word: str) -> str:
    """``word`` in the singular where it reads as a plural ("genera" -> "genus"), else as written."""
    one = _ENGINE.singular_noun(word)
    return one if isinstance(one, str) and one else word


def _inflections(word: str) -> set[str]:
    """A label's last word as written, in the plural, and in the singular where it reads as a plural."""
    return {word, _ENGINE.plural_noun(word), singular(word)} - {""}


def label_phrase_words(label: str) -> list[tuple[str, ...]]:
    """The phrases of one label as lower-case words: ``body_part`` -> [("body", "part")],
    ``gene/protein`` -> [("gene",), ("protein",)], ``SportsTeam`` -> [("sports", "team")]."""
    out: list[tuple[str, ...]] = []
    for alternative in _ALTERNATIVES.split(label):
        words = tuple(w.lower() for w in _SEPARATORS.split(CASE_CHANGE.sub(" ", alternative)) if w)
        if words and words not in out:
            out.append(words)
    return out


def question_words(text: str) -> list[str]:
    """The question's words in lower case; a written label (``body_part``) counts as its words."""
    out: list[str] = []
    for token in WORD.findall(text):
        token = token.strip(".:'\"").removesuffix("'s").lower()
        out.extend(w for w in re.split(r"[_\-]+", token) if w)
    return out


@dataclass(frozen=True)
class LabelPhrases:
    """Every label's phrases, looked up by their words; a phrase two labels share names neither."""

    phrases: dict[tuple[str, ...], str]
    longest: int

    @classmethod
    def of(cls, labels: Iterable[str]) -> LabelPhrases:
        return _phrases(frozenset(labels))

    def at(self, words: list[str], i: int) -> tuple[str, int] | None:
        """The label whose phrase starts at ``words[i]`` (the longest one) and how many words it takes."""
        for n in range(min(self.longest, len(words) - i), 0, -1):
            label = self.phrases.get(tuple(words[i : i + n]))
            if label is not None:
                return label, n
        return None

    def named(self, question: str) -> set[str]:
        """The labels whose whole phrase the question writes anywhere."""
        words, found, i = question_words(question), set(), 0
        while i < len(words):
            hit = self.at(words, i)
            if hit is not None:
                found.add(hit[0])
            i += hit[1] if hit is not None else 1
        return found


@functools.lru_cache(maxsize=64)
def _phrases(labels: frozenset[str]) -> LabelPhrases:
    owners: dict[tuple[str, ...], set[str]] = {}
    for label in labels:
        for words in label_phrase_words(label):
            for last in _inflections(words[-1]):
                owners.setdefault((*words[:-1], last), set()).add(label)
    phrases = {words: next(iter(ls)) for words, ls in owners.items() if len(ls) == 1}
    return LabelPhrases(phrases, max((len(w) for w in phrases), default=0))


def after_question_word(question: str) -> list[str] | None:
    """The question's words after its first question word ("which", "what", "list", ...); None where
    it has none."""
    words = question_words(question)
    start = next((i for i, w in enumerate(words) if w in _ASK), None)
    return None if start is None else words[start + 1 :]


def asked_label(question: str, phrases: LabelPhrases, related: Callable[[str, str], bool] | None = None) -> str | None:
    """The label the question asks for: the head of the phrase after its first question word, past a
    few modifiers ("What shutil functions", "Which standard library modules", "which of its
    functions", "What is the function ..."); none where a verb or a preposition comes first ("What
    errors can the functions ..." asks for no label it names). Of two labels in a row, the second
    is the head where the schema relates the two ("class methods" are methods of a class), else the
    first names the kind ("exception classes" are exceptions)."""
    rest = after_question_word(question)
    if rest is None:
        return None
    if rest[:1] == ["of"] or (rest[:1] and rest[0] in COPULA and rest[1:2] and rest[1] in DETERMINERS):
        rest = rest[1:]  # "which of its functions", "What is the function that ..."
    found: str | None = None
    skipped, i = 0, 0
    while i < len(rest):
        hit = phrases.at(rest, i)
        if hit is not None:
            label, n = hit
            if found is None or related is None or related(found, label):
                found = label
            i += n
            continue
        w = rest[i]
        if found is not None or (w in STOP_WORDS and w not in DETERMINERS):
            break
        if w not in DETERMINERS:
            skipped += 1
            if skipped > MAX_MODIFIERS:
                break
        i += 1
    return found
