"""How a question writes the schema's labels: each label as the phrases a person would write for it.

Labels come in many spellings (``module``, ``body_part``, ``BodyPart``, ``gene/protein``, ``Sports team``);
a question writes them as words, often in the plural ("Which body parts ..."). Read word by word, a
multi-word label misreads: "part" alone would name ``body_part``, and in "which film series" the word
"film" names the label ``film`` before "series" is read. So each label becomes its phrases
(alternatives split at ``/`` and ``|``, words split at separators and at case changes), matched whole
and longest first, the last word also in its plural or singular (the language's ``plurals``, irregular
forms included). A question that writes no label's whole phrase names none here: step 1's LM and its
VSS prior read such questions.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from autofocus.language import Language
from autofocus.skb.documents import CASE_CHANGE

_ALTERNATIVES = re.compile(r"[/|]")
_SEPARATORS = re.compile(r"[\W_]+")
MAX_MODIFIERS = 3  # words between the question word and the asked label: "Which standard library modules"


def label_phrase_words(label: str) -> list[tuple[str, ...]]:
    """The phrases of one label as lower-case words: ``body_part`` -> [("body", "part")],
    ``gene/protein`` -> [("gene",), ("protein",)], ``SportsTeam`` -> [("sports", "team")]."""
    out: list[tuple[str, ...]] = []
    for alternative in _ALTERNATIVES.split(label):
        words = tuple(w.lower() for w in _SEPARATORS.split(CASE_CHANGE.sub(" ", alternative)) if w)
        if words and words not in out:
            out.append(words)
    return out


@dataclass(frozen=True)
class LabelPhrases:
    """Every label's phrases, looked up by their words; a phrase two labels share names neither."""

    phrases: dict[tuple[str, ...], str]
    longest: int

    @classmethod
    def of(cls, labels: Iterable[str], lang: Language) -> LabelPhrases:
        return _phrases(frozenset(labels), lang)

    def at(self, words: list[str], i: int) -> tuple[str, int] | None:
        """The label whose phrase starts at ``words[i]`` (the longest one) and how many words it takes."""
        for n in range(min(self.longest, len(words) - i), 0, -1):
            label = self.phrases.get(tuple(words[i : i + n]))
            if label is not None:
                return label, n
        return None

    def named(self, words: list[str]) -> set[str]:
        """The labels whose whole phrase the question's ``words`` write anywhere."""
        found, i = set(), 0
        while i < len(words):
            hit = self.at(words, i)
            if hit is not None:
                found.add(hit[0])
            i += hit[1] if hit is not None else 1
        return found


@functools.lru_cache(maxsize=64)
def _phrases(labels: frozenset[str], lang: Language) -> LabelPhrases:
    owners: dict[tuple[str, ...], set[str]] = {}
    for label in labels:
        for words in label_phrase_words(label):
            for last in lang.plurals(words[-1]):
                owners.setdefault((*words[:-1], last), set()).add(label)
    phrases = {words: next(iter(ls)) for words, ls in owners.items() if len(ls) == 1}
    return LabelPhrases(phrases, max((len(w) for w in phrases), default=0))


def asked_start(words: list[str], lang: Language) -> list[str] | None:
    """The question's words from where its asked phrase begins: after its first question word ("which",
    "what", "list", ...) and a copula ("What are the parts ...") or the join word ("which of its
    functions") right after it; after a person question word with a copula and a determiner ("Who are the
    astronauts ..."). None where it has no asked phrase ("Who wrote Hamlet?", "How do I ...")."""
    if words[:1] and words[0] in lang.person_words:
        ok = words[1:2] and words[1] in lang.copulas and words[2:3] and words[2] in lang.determiners
        return words[2:] if ok else None
    start = next((i for i, w in enumerate(words) if w in lang.ask_words), None)
    if start is None:
        return None
    rest = words[start + 1 :]
    if rest[:1] == [lang.join_word] or (rest[:1] and rest[0] in lang.copulas and rest[1:2] and rest[1] in lang.determiners):
        return rest[1:]
    return rest


def asked_label(words: list[str], phrases: LabelPhrases, lang: Language,
                related: Callable[[str, str], bool] | None = None) -> str | None:
    """The label the question (its ``words``) asks for: the head of its asked phrase (``asked_start``),
    past a few modifiers ("What shutil functions", "Which standard library modules", "which of its
    functions", "What is the function ...", "Who are the directors of ..."); none where a verb or a
    preposition comes first ("What errors can the functions ..." asks for no label it names). Of two
    labels in a row, the second is the head where the schema relates the two ("class methods" are methods
    of a class), else the first names the kind ("exception classes" are exceptions)."""
    rest = asked_start(words, lang)
    if rest is None:
        return None
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
        if found is not None or (w in lang.stop_words and w not in lang.determiners):
            break
        if w not in lang.determiners:
            skipped += 1
            if skipped > MAX_MODIFIERS:
                break
        i += 1
    return found
