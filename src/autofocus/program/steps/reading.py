"""One reading of a question, made once and shared by step 1's cue, step 3b's rules and the merge.

A question is split into tokens once (``WORD``: what whitespace and sentence punctuation separate), and
every view the steps need is derived from those tokens: its words in lower case, the phrases that name
nodes (``Mention``: with the label words beside them and the node ids they name), the phrase after its
question word (``asked_phrases``: names of a class it may ask about), the label it asks for by name
(``asked_label``) and the labels it writes anywhere. "The question names X" is one graded test
(``Naming``, ``QuestionReading.names``): each caller says how closely it needs the name given. Every
word of a natural language comes from the reading's ``Language`` (``autofocus.language``); the views
are computed when first asked for.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property

import numpy as np
from rapidfuzz import fuzz

from autofocus.language import DEFAULT, Language, language
from autofocus.program.steps.label_phrases import LabelPhrases, asked_label, asked_start
from autofocus.skb.model import SKB
from autofocus.skb.names import named_ids
from autofocus.skb.schema_graph import SchemaGraph, schema_graph

WORD = re.compile(r"[^\s,;!?()\[\]{}\"`]+")  # a token: what whitespace and sentence punctuation separate
_PARTS = re.compile(r"[\W_]+")  # a token's parts: "json.loads" -> json, loads
_EDGES = ".:'"  # punctuation a token may carry at either end ("Oslo.", "'json'")
_IDENTIFIER = re.compile(r"[._\d/:]|[a-z][A-Z]")  # json.loads, base64, snake_case, camelCase: a name, not a word
language(DEFAULT)  # loaded with the steps that read questions, not on the first question (inflections load slowly)
MAX_MENTION_WORDS = 4  # words of a phrase that may name a node
MAX_PHRASE_WORDS = 5  # words of the asked phrase read after the question word
SHORT_NAME = 8  # a name shorter than this is matched as a whole word, not inside one ("sys" is not in "system")
MIN_VERBATIM = 3  # shorter names ("re", "os") are too often parts of ordinary text to count as named verbatim


class Naming(IntEnum):
    """How closely a question gives a name, each grade implying the ones below it."""

    NONE = 0
    NEAR = 2  # the name itself up to case: nearly verbatim; a short name as a word of its own (or its plural)
    VERBATIM = 3  # as written, case and all, not inside a longer name; at least ``MIN_VERBATIM`` characters


@dataclass(frozen=True)
class Mention:
    """A name the question gives: its text, the labels whose word stands beside it, the nodes it names."""

    text: str
    beside: frozenset[str]
    labels: frozenset[str]  # the labels of the nodes it names


def tokenise(text: str, lang: Language) -> list[str]:
    """The tokens of ``text`` as written, without the punctuation and clitics at their ends: the one place
    a question is split."""
    return [lang.strip_clitics(t.strip(_EDGES)) for t in WORD.findall(text)]


def words_of(tokens: list[str]) -> list[str]:
    """The tokens in lower case, a token that joins words (``body_part``, ``well-known``) as its words."""
    return [w for t in tokens for w in re.split(r"[_\-]+", t.lower()) if w]


def label_words(labels: set[str] | list[str], lang: Language) -> dict[str, str]:
    """Words that name a label in a question: the label, its regular plurals, its parts (``gene/protein``)."""
    out: dict[str, str] = {}
    for label in labels:
        for word in {label.lower(), *_PARTS.split(label.lower())} - {""}:
            for form in (word, *(word + ending for ending in lang.plural_endings)):
                out.setdefault(form, label)
    return out


class QuestionReading:
    """The question ``text`` as the steps read it against one SKB's schema, in language ``lang``."""

    def __init__(self, text: str, skb: SKB, lang: Language) -> None:
        self.text, self.skb, self.lang = text, skb, lang
        self.graph: SchemaGraph = schema_graph(skb)
        self.memo: dict[object, object] = {}  # what a rule looks up once per question (``repairs.asked_class``)

    @cached_property
    def tokens(self) -> list[str]:
        """The question's tokens (``tokenise``)."""
        return tokenise(self.text, self.lang)

    @cached_property
    def words(self) -> list[str]:
        """The question's words (``words_of``)."""
        return words_of(self.tokens)

    @cached_property
    def phrases(self) -> LabelPhrases:
        """The schema's labels as phrases (``label_phrases``)."""
        return LabelPhrases.of(self.graph.labels, self.lang)

    @cached_property
    def label_words(self) -> dict[str, str]:
        """Single words that name a label (``label_words``)."""
        return label_words(self.graph.labels, self.lang)

    @cached_property
    def named_labels(self) -> frozenset[str]:
        """The labels whose whole phrase the question writes anywhere."""
        return frozenset(self.phrases.named(self.words))

    @cached_property
    def asked_label(self) -> str | None:
        """The label the question asks for by name (``label_phrases.asked_label``), None where it names none."""
        return asked_label(self.words, self.phrases, self.lang, self.graph.related)

    @cached_property
    def mentions(self) -> list[Mention]:
        """The phrases that may be names and name nodes: next to a label's word ("the logging module") or
        looking like a name (``base64``, ``json.loads``), so "a list of words" names no class ``list``.
        Longest first."""
        if not self.text:
            return []
        found: list[Mention] = []
        for text, near in self._phrases_beside_labels():
            beside = frozenset(self.label_words[w] for w in near)
            if not (beside or _IDENTIFIER.search(text)):
                continue
            ids, _ = named_ids(self.skb, text)
            if len(ids):
                labels = frozenset(self.skb.node_type_names[int(c)] for c in np.unique(self.skb.node_type[ids]))
                found.append(Mention(text, beside, labels))
        return found

    def _phrases_beside_labels(self) -> list[tuple[str, set[str]]]:
        """Runs of tokens that could be node names, longest first, each with the label words next to it
        ("the collections.abc module"), which say what kind of node it names."""
        words, stop, labels = self.tokens, self.lang.stop_words, self.label_words
        out: dict[str, set[str]] = {}
        for n in range(MAX_MENTION_WORDS, 0, -1):
            for i in range(len(words) - n + 1):
                gram = words[i : i + n]
                if not gram[0] or not gram[-1] or gram[0].lower() in stop or gram[-1].lower() in stop:
                    continue
                text = " ".join(gram)
                if len(text) < 2 or text.lower() in labels:
                    continue
                near = {w.lower() for w in words[max(0, i - 1) : i] + words[i + n : i + n + 1]} & set(labels)
                out.setdefault(text, set()).update(near)
        return list(out.items())

    @cached_property
    def asked_phrases(self) -> list[str]:
        """Candidate names in the phrase after the question word, the rightmost-ending first, then the
        longest: "Which chess players live in Oslo?" gives "chess players live", "players live", "live",
        "chess players", "chess player", ...; the head word also in the singular (the last
        word, or the first before the join word: "works of art")."""
        lang = self.lang
        rest = asked_start(self.words, lang) or []
        join = lang.join_word
        start = 0
        while start < len(rest) and (rest[start] in lang.determiners or rest[start] == join):
            start += 1
        span: list[str] = []
        for w in rest[start : start + MAX_PHRASE_WORDS]:
            if (w in lang.stop_words and w != join) or w in lang.copulas or w in lang.auxiliaries:
                break  # the asked phrase ends where the question's verb or preposition begins
            span.append(w)
        out: list[str] = []
        for end in range(len(span), 0, -1):
            for begin in range(end):
                gram = span[begin:end]
                if gram[0] == join or gram[-1] == join:
                    continue
                forms = (gram, [*gram[:-1], lang.singular(gram[-1])],
                         [lang.singular(gram[0]), *gram[1:]] if join in gram else gram)
                for form in (" ".join(f) for f in forms):
                    if form not in out:
                        out.append(form)
        return out

    def names(self, name: str, at_least: Naming = Naming.NEAR) -> bool:
        """Whether the question gives ``name`` at least as closely as ``at_least`` (``Naming``): the one test
        of "the question names X"."""
        if at_least <= Naming.NONE:
            return True
        if at_least >= Naming.VERBATIM:
            name = name.strip()
            return len(name) >= MIN_VERBATIM and re.search(rf"(?<![\w.-]){re.escape(name)}(?!\w|[.-]\w)",
                                                           self.text) is not None
        q, n = self.text.lower(), name.strip().lower()
        return bool(n) and self._appears(n, q)

    def _appears(self, name: str, text: str) -> bool:
        """Nearly verbatim in ``text``; a short name as a word of its own, or with a plural ending or clitic."""
        if len(name) >= SHORT_NAME:
            return fuzz.partial_ratio(name, text) >= 85
        endings = [*self.lang.plural_endings, *(c for c in self.lang.clitics if c.startswith("'"))]
        after = "(?:" + "|".join(map(re.escape, endings)) + ")?" if endings else ""
        return re.search(rf"(?<![a-z0-9]){re.escape(name)}{after}(?![a-z0-9])", text) is not None


class Readings:
    """The readings a program made of its last ``size`` questions, so that step 1 and steps 3-7 share one.
    A copy or a pickle of the program starts empty: the readings hold the knowledge base, which is shared."""

    def __init__(self, size: int = 256) -> None:
        self.size, self._kept, self._lock = size, dict[tuple[str, str], QuestionReading](), threading.Lock()

    def get(self, text: str, skb: SKB, lang: Language) -> QuestionReading:
        key = (text, lang.code)
        with self._lock:
            found = self._kept.get(key)
            if found is None or found.skb is not skb:
                found = self._kept[key] = QuestionReading(text, skb, lang)
                while len(self._kept) > self.size:
                    self._kept.pop(next(iter(self._kept)))
        return found

    def __deepcopy__(self, memo: dict[int, object]) -> Readings:
        return Readings(self.size)

    def __reduce__(self) -> tuple[type[Readings], tuple[int]]:
        return Readings, (self.size,)
