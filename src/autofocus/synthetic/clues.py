"""Text clues: a relational pattern narrowed to one of its answers by a phrase from that answer's text.

Real questions over an SKB mix two kinds of requirement (STaRK's are built that way): relations the
graph can check, and properties only a node's text states. A purely relational synthetic question is
answered by its grounded set alone, so step-8 settings tuned on such questions learn to trust the
retrieval order over the reranker, which is wrong for the questions that need the text (docs/results.md,
2026-11-26). A clue question keeps the pattern's gold query, whose grounded set is
still the pattern's answers, and adds a two-word phrase that occurs in one answer's document and in
no other answer's: only reading the text singles that answer out, as in a hybrid question.

A phrase qualifies when both words are at least four letters, neither is common in the SKB's documents
(in more than ``COMMON_SHARE`` of a seeded sample of them: function words and the domain's stock
vocabulary), neither is part of a name the pattern shows, and the phrase, as words, occurs in no
other answer's document. The first such phrase in document order is taken: a document's opening
states what the node is for.

A rare phrase makes questions that read unlike real ones ("... and mentions "averaging ratios"?"),
and vector search matches the literal phrase. A *fact* clue is STaRK's way: an LM reads the answer's
text and states one thing it says, in its own words, so the question paraphrases the text as a
person would ("Which os.path function returns the last part of a path?"). The LM is shown the other
answers' names and asked for a fact they do not share; a fact is rejected when it names an answer,
says nothing specific, shares no word with the answer's text (made up), repeats the prompt ("not
shared by the similar nodes"), or all its words occur in another answer's text (it would fit that
one too).
Nothing checks a fact with a retriever or a reranker: questions chosen by what a retriever gets
right would teach the optimisers to trust that retriever.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable

import numpy as np

from autofocus.language import DEFAULT, Language, language
from autofocus.skb.model import SKB

FACT_WORDS = (3, 25)  # a fact's length in words
FACT_DOC_CHARS = 1200  # the text the LM reads: a document's opening says what the node is
FACT_SIMILAR = 10  # other answers' names shown to the LM
STATED_SHARE = 0.5  # of a fact's content words, this share must be in the question
COMMON_SHARE = 0.01  # a word in more than this share of the documents carries no clue
SAMPLE_DOCS = 5000  # documents read to judge which words are common
MIN_COMMON_DOCS = 10  # in a small SKB, a word in this many documents or fewer is never common
_PAIR = re.compile(r"(?<![\w-])(?=([A-Za-z][A-Za-z]{3,}) ([A-Za-z][A-Za-z]{3,})(?![\w-]))")
_WORDS = re.compile(r"[a-z0-9]+")


def _words(text: str) -> str:
    """Lower-case words joined by single spaces: phrases compare as words, not as punctuation."""
    return " ".join(_WORDS.findall(text.lower()))


class ClueFinder:
    """Finds text clues in one SKB; which words are common is computed once."""

    def __init__(self, skb: SKB, seed: int = 0) -> None:
        self.skb = skb
        self.seed = seed
        self._common: set[str] | None = None

    def common_words(self) -> set[str]:
        if self._common is None:
            n = self.skb.num_nodes
            rng = np.random.default_rng(self.seed)
            sample = rng.choice(n, size=min(SAMPLE_DOCS, n), replace=False)
            df: Counter = Counter()
            for node in sample.tolist():  # once per synthesis, at most SAMPLE_DOCS documents
                df.update(set(_WORDS.findall(self.skb.doc(node).lower())))
            cut = max(COMMON_SHARE * len(sample), MIN_COMMON_DOCS)
            self._common = {w for w, c in df.items() if c > cut}
        return self._common

    def phrase(self, node: int, others: list[int], shown_names: list[str]) -> str | None:
        """The first qualifying phrase of ``node``'s document that no document of ``others`` holds."""
        common = self.common_words()
        shown = set(_WORDS.findall(" ".join([self.skb.name(node), *shown_names]).lower()))
        other_docs = [_words(self.skb.doc(o)) for o in others]
        for m in _PAIR.finditer(self.skb.doc(node)):
            pair = (m.group(1).lower(), m.group(2).lower())
            if any(w in common or w in shown for w in pair):
                continue
            text = " ".join(pair)
            if not any(f" {text} " in f" {d} " for d in other_docs):
                return f"{m.group(1)} {m.group(2)}"
        return None

    def clue(
        self, answers: np.ndarray, shown_names: list[str], rng: np.random.Generator
    ) -> tuple[int, str] | None:
        """``(an answer, its phrase)`` for an answer set of at least two nodes (answers tried in random
        order), or None."""
        if len(answers) < 2:
            return None
        ids = [int(a) for a in answers]
        for node in rng.permutation(ids).tolist():
            found = self.phrase(node, [o for o in ids if o != node], shown_names)
            if found is not None:
                return node, found
        return None


def _content(text: str) -> set[str]:
    """Words of four letters or more, cut to five letters: "returns" and "returning" compare equal."""
    return {w[:5] for w in _WORDS.findall(text.lower()) if len(w) >= 4}


def _name_forms(name: str) -> list[str]:
    """A name as words and, for a dotted name, its last part (``os.path.basename`` -> ``basename``)."""
    forms = [_words(name)]
    last = name.rsplit(".", 1)[-1]
    if last != name and len(last) >= 4:
        forms.append(_words(last))
    return [f for f in forms if f]


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`'\"(])|[.!?]$")
# the prompt's own words (``signatures.synthetic``, English whatever the knowledge base's language), which
# small LMs parrot: in the fact they state, and as its subject
_INSTRUCTIONS = re.compile(r"\bsimilar nodes?\b|\bnodes? listed\b", re.IGNORECASE)
_PROMPT_SUBJECT = "node"


@functools.cache
def comparison_tail(lang: Language) -> re.Pattern[str]:
    """Where a sentence of ``lang`` goes on to compare its subject with another (", which is distinct
    from ...", " unlike ..."): what follows says nothing of the subject alone."""
    after_comma = "|".join(map(re.escape, lang.comparison_words))
    between = "|".join(map(re.escape, lang.comparison_phrases))
    return re.compile(rf",\s*({after_comma})\b|\s+({between})\s", re.IGNORECASE)


def tidy_fact(raw: str, name: str, type_names: Iterable[str], lang: Language | None = None) -> str:
    """The LM's fact as a phrase after "the <type> that": its first sentence, without a leading
    subject (articles, any node type's name, the node's own name: "The `hex()` method returns ..." ->
    "returns ...") and without a comparison tacked on (", which is distinct from ..."), read in ``lang``
    (the default language where None). Small LMs write sentences however they are asked."""
    lang = lang or language(DEFAULT)
    text = _SENTENCE_END.split(" ".join(raw.split()), maxsplit=1)[0]
    text = comparison_tail(lang).split(text, maxsplit=1)[0]
    lead = lang.lead_words | {_PROMPT_SUBJECT, name.lower(), name.rsplit(".", 1)[-1].lower()}
    lead |= {t.lower() for t in type_names}
    words = text.split()
    while words and words[0].strip("`'\"()[]:,").removesuffix("()").lower() in lead:
        words.pop(0)
    return " ".join(words).strip(" .,;:`'\"")


def fact_problem(fact: str, node: int, others: list[int], skb: SKB) -> str | None:
    """Why the fact an LM stated about ``node`` cannot narrow the question to it (``None``: it can)."""
    words = _WORDS.findall(fact.lower())
    if not FACT_WORDS[0] <= len(words) <= FACT_WORDS[1]:
        return "the fact is empty or too long"
    text = f" {' '.join(words)} "
    if any(f" {form} " in text for n in [node, *others] for form in _name_forms(skb.name(n))):
        return "the fact names an answer"
    if _INSTRUCTIONS.search(fact):
        return "the fact repeats the instructions"
    content = _content(fact)
    if not content:
        return "the fact says nothing specific"
    if not content & _content(skb.doc(node)):
        return "the fact is not in the answer's text"
    if any(content <= _content(skb.doc(o)) for o in others):
        return "the fact fits another answer's text"
    return None


def fact_stated(fact: str, question: str) -> bool:
    """Whether the question carries the fact: most of its content words, in any form and order."""
    content = _content(fact)
    return len(content & _content(question)) >= STATED_SHARE * len(content)
