"""A candidate as a trained reranker reads it: a short text that reads like the node, within a budget.

Why this layout: a reranker compares a question with about a hundred tokens per candidate. A question
that describes what its answer is or does is matched by the node's document, so the document (its
start: what the node is) always keeps at least ``DOC_TOKENS`` of the budget, and all of it where it is
short. The rest goes to what a question can also name:

- relationship lines, one per edge type and direction (``part of: X; Y (+23)``): the specific ones
  first (fewer neighbours), and of each the neighbours whose names say something (words of the
  knowledge base, not codes) and are specific (fewer edges of their own), the others counted;
- attributes whose values say something: a column is left out where it is a flag (two values at most),
  an identifier (nearly one value per node, with no word content) or a size or count (numbers spread
  over orders of magnitude), as the knowledge base's own columns show; a value held by most nodes, or
  already in the name or the document, is not repeated.

What counts as a word is learnt from the knowledge base: a letter run that occurs in at least two of its
documents. Everything learnt (the vocabulary, the columns' verdicts, the nodes' degrees) is computed
once per knowledge base; relationships are gathered for a batch of nodes at once
(``documents.gather_relations``), so only the formatting is per node.
"""

from __future__ import annotations

import json
import re
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autofocus.skb.documents import (
    CHARS_PER_TOKEN,
    RelationGroup,
    gather_relations,
    readable_label,
    truncate_to_tokens,
)
from autofocus.skb.model import SKB, Column

CANDIDATE_TOKENS = 100  # the whole description, in estimated tokens
DOC_TOKENS = 50  # what the document keeps at least (all of it where it is shorter)
SHOWN_NEIGHBOURS = 2  # neighbours named per relationship line; the others are counted
SCANNED_NEIGHBOURS = 64  # neighbours read per line to choose the shown ones from
NAME_CHARS = 40  # a neighbour's name or an attribute's value, cut
VOCABULARY_DOCS = 20_000  # documents read to learn the knowledge base's words (a seeded sample)
WORD_SHARE = 0.5  # a value says something where words make at least this share of its letters and digits
UNIQUE_SHARE = 0.5  # a column with at least this many distinct values per node names or measures each node
SCALE_SPREAD = 2.0  # a number column whose 95th percentile is within this factor of its 5th is a scale's points
LETTERS = re.compile(r"[^\W\d_]+")
ALNUM = re.compile(r"[^\W_]+")


def _words_of(text: str) -> list[str]:
    return [w.lower() for w in LETTERS.findall(text)]


@dataclass
class _Learnt:
    """What the layout learns from one knowledge base."""

    vocabulary: frozenset[str]  # letter runs found in two documents or more
    columns: dict[str, frozenset[str]]  # the attribute columns that say something -> their too common values
    degree: np.ndarray  # edges per node, all types and directions
    name_words: np.ndarray  # per node: the word share of its name (NaN: not computed yet)

    def word_share(self, text: str) -> float:
        """The share of ``text``'s letters and digits that are in words of the knowledge base."""
        total = sum(len(t) for t in ALNUM.findall(text))
        if not total:
            return 0.0
        return sum(len(w) for w in LETTERS.findall(text) if w.lower() in self.vocabulary) / total


_LEARNT: dict[int, _Learnt] = {}


def _learnt(skb: SKB) -> _Learnt:
    key = id(skb)
    if key not in _LEARNT:
        _LEARNT[key] = _learn(skb)
        weakref.finalize(skb, _LEARNT.pop, key, None)
    return _LEARNT[key]


def _learn(skb: SKB) -> _Learnt:
    n = skb.num_nodes
    rng = np.random.default_rng(0)
    sample = rng.choice(n, size=min(n, VOCABULARY_DOCS), replace=False) if n else np.zeros(0, np.int64)
    df = Counter(w for doc in skb.docs.take(np.sort(sample).tolist()) for w in set(_words_of(doc)))
    vocabulary = frozenset(w for w, c in df.items() if c >= 2)
    degree = np.zeros(n, dtype=np.int64)
    rows = np.arange(n, dtype=np.int64)
    for edge_type in skb.graph.edge_types:
        for direction in ("out", "in"):
            degree += skb.graph.adjacency(edge_type, direction).degree(rows)
    learnt = _Learnt(vocabulary, {}, degree, np.full(n, np.nan))
    for key, col in skb.columns.items():
        kept, common = _says_something(learnt, col)
        if kept:
            learnt.columns[key] = common
    return learnt


def _says_something(learnt: _Learnt, col: Column) -> tuple[bool, frozenset[str]]:
    """Whether a column's values can tell a question something, and its values too common to tell anything
    (held by more than half the nodes that have one). Left out: flags (two values at most); identifiers
    (about one value per node, little word content); sizes and counts (numbers spread over orders of
    magnitude, unlike a year or another point on a scale, which a question can name)."""
    present = np.flatnonzero(col.present)
    if not len(present):
        return False, frozenset()
    if col.kind in ("number", "date"):
        values = np.asarray(col.values)[present]
        uniq, counts = np.unique(values, return_counts=True)
        common = frozenset(col.display(int(present[np.argmax(values == v)])) or "" for v in uniq[counts * 2 > len(present)])
        if len(uniq) <= 2 or len(uniq) >= UNIQUE_SHARE * len(present):
            return False, common
        low, high = np.percentile(values, [5, 95])
        return col.kind == "date" or bool(low > 0 and high <= SCALE_SPREAD * low), common
    counts = Counter(col.text.take(present.tolist()))
    common = frozenset(v for v, c in counts.items() if c * 2 > len(present))
    if len(counts) <= 2:
        return False, common
    if len(counts) < UNIQUE_SHARE * len(present):
        return True, common  # a category: its values recur
    sample = [t for t, _ in counts.most_common()][:: max(1, len(counts) // 500)]
    return float(np.mean([learnt.word_share(t) for t in sample])) >= WORD_SHARE, common


def _name_shares(skb: SKB, learnt: _Learnt, ids: np.ndarray) -> np.ndarray:
    """The word share of the nodes' names, computed once per node."""
    todo = ids[np.isnan(learnt.name_words[ids])]
    for i in np.unique(todo).tolist():
        learnt.name_words[i] = learnt.word_share(skb.name(i))
    return learnt.name_words[ids]


def _relation_lines(skb: SKB, learnt: _Learnt, groups: list[RelationGroup]) -> list[str]:
    """Lines of the informative relationships first: groups whose neighbours' names say something, then the
    specific ones (fewer neighbours); in each, the wordy and specific neighbours named."""
    ranked = []
    for g in groups:
        shown = np.asarray(g.shown, dtype=np.int64)
        wordy = _name_shares(skb, learnt, shown) >= WORD_SHARE
        order = np.lexsort((shown, learnt.degree[shown], ~wordy))[:SHOWN_NEIGHBOURS]
        ranked.append(((not wordy.any(), g.total), g, shown[order]))
    ranked.sort(key=lambda r: r[0])
    lines = []
    for _, g, shown in ranked:
        names = "; ".join(skb.name(int(i))[:NAME_CHARS] for i in shown)
        more = f" (+{g.total - len(shown)})" if g.total > len(shown) else ""
        arrow = "" if g.direction == "out" else "<- "
        lines.append(f"{arrow}{readable_label(g.edge_type)}: {names}{more}")
    return lines


def _attribute_line(skb: SKB, learnt: _Learnt, node: int, seen: str) -> str:
    parts = []
    for key, common in learnt.columns.items():
        col = skb.columns[key]
        value = col.display(node)
        if not value or value in common:
            continue
        items = _listed(value) if col.kind == "json" else [value]
        told = [v for v in items if not _mentions(seen, v.lower())]
        if told:
            parts.append(f"{readable_label(key)}: {', '.join(told)[:NAME_CHARS]}")
    return "; ".join(parts)


def _listed(value: str) -> list[str]:
    """A json column's list as its items (another value as it is)."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return [value]
    return [str(v) for v in parsed if str(v)] if isinstance(parsed, list) else [value]


def _mentions(text: str, value: str) -> bool:
    """Whether ``text`` holds ``value`` as a whole (a short value "c" is not in "class")."""
    before = r"(?<!\w)" if value[:1].isalnum() else ""
    after = r"(?!\w)" if value[-1:].isalnum() else ""
    return re.search(f"{before}{re.escape(value)}{after}", text) is not None


def _fit(lines: Sequence[str], room: int) -> list[str]:
    """The lines, in order, that fit in ``room`` characters (a longer one is skipped, a shorter may fit)."""
    kept, used = [], 0
    for line in lines:
        if line and used + len(line) + 1 <= room:
            kept.append(line)
            used += len(line) + 1
    return kept


def candidate_texts(skb: SKB, ids: Sequence[int] | np.ndarray, budget_tokens: int = CANDIDATE_TOKENS) -> list[str]:
    """The descriptions of ``ids`` (module docstring), each within ``budget_tokens``."""
    ids = np.asarray(ids, dtype=np.int64)
    if not len(ids):
        return []
    learnt = _learnt(skb)
    groups = gather_relations(skb, ids, two_hop=False, max_neighbours=SCANNED_NEIGHBOURS)
    out = []
    for node, node_groups in zip(ids.tolist(), groups, strict=True):
        name, doc = skb.name(node), skb.doc(node).strip()
        head = f"{name} ({readable_label(skb.type_of(node))})"
        room = budget_tokens * CHARS_PER_TOKEN - len(head) - 1
        doc_room = min(len(doc) + 1, DOC_TOKENS * CHARS_PER_TOKEN)  # what the document keeps at least
        extra = [*_relation_lines(skb, learnt, node_groups),
                 _attribute_line(skb, learnt, node, f"{name}\n{doc}".lower())]  # fmt: skip
        kept = _fit(extra, room - doc_room)
        body = truncate_to_tokens(doc, (room - sum(len(x) + 1 for x in kept) - 1) // CHARS_PER_TOKEN)
        out.append("\n".join(p for p in [head, body, *kept] if p))
    return out


def candidate_text(skb: SKB, node: int, budget_tokens: int = CANDIDATE_TOKENS) -> str:
    """One candidate's description (``candidate_texts``)."""
    return candidate_texts(skb, [node], budget_tokens)[0]

