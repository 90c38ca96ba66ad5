"""Text clues: a relational pattern narrowed to one of its answers by a phrase from that answer's text.

Real questions over an SKB mix two kinds of requirement (STaRK's are built that way): relations the
graph can check, and properties only a node's text states. A purely relational synthetic question is
answered by its grounded set alone, so step-8 settings tuned on such questions learn to trust the
retrieval order over the reranker, which is wrong for the questions that need the text (README,
"Optimising without labels"). A clue question keeps the pattern's gold query, whose grounded set is
still the pattern's answers, and adds a two-word phrase that occurs in one answer's document and in
no other answer's: only reading the text singles that answer out, as in a hybrid question.

A phrase qualifies when both words are at least four letters, neither is common in the SKB's documents
(in more than ``COMMON_SHARE`` of a seeded sample of them: function words and the domain's stock
vocabulary), neither is part of a name the pattern shows, and the phrase, as words, occurs in no
other answer's document. The first such phrase in document order is taken: a document's opening
states what the node is for.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from autofocus.skb.model import SKB

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
