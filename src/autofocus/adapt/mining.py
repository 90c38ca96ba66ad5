"""Candidate lists for training questions: where a trained reranker will meet their answers.

A reranker sees steps 1-7's top k, so it must learn to order the nodes steps 1-7 put there, not random
ones. Each training question gets up to two lists, both from the program's own steps 3-7 (no LM call):

- ``grounded``: the question's gold query (a synthetic question's pattern, ``QAItem.cypher``) as step 2's
  answer, the gold type as step 1's: the grounded set first. For a question narrowed by a text clue the
  pattern's other answers are its hardest negatives: they satisfy every relationship it asks and only
  the text tells them apart.
- ``vector``: no query, the gold type: vector search within the type, what steps 6-7 give when grounding
  fails (the nodes a question's words are nearest to).

Where a run of the program on the same questions exists (``autofocus eval`` with a real LM), its
pre-rerank lists (``runs``) are the truest: they are what steps 1-7 did.
Negatives are the list's non-answers, the highest ranked first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from autofocus.config import AutofocusConfig
from autofocus.skb.qa import QAItem
from autofocus.trace import Trace

SOURCES = ("grounded", "vector")


@dataclass
class Mined:
    """One training question with its candidate lists (ranked node ids) by source."""

    item: QAItem
    target_type: str
    lists: dict[str, list[int]] = field(default_factory=dict)
    kind: str = "all"  # the question's kind where it is known (judge questions: relational, hybrid, textual)

    @property
    def gold(self) -> set[int]:
        return set(self.item.answer_ids)

    def negatives(self, most: int) -> list[int]:
        """Non-answers of every list, by their best rank over the lists (ties: list order)."""
        best: dict[int, int] = {}
        for ids in self.lists.values():
            for rank, node in enumerate(ids):
                if node not in self.gold and rank < best.get(node, 1 << 30):
                    best[node] = rank
        return sorted(best, key=lambda n: best[n])[:most]

    def ranked(self, source: str) -> list[int]:
        """One source's list, or the first available."""
        return self.lists.get(source) or next(iter(self.lists.values()), [])


def answer_type(item: QAItem, type_of: Callable[[int], str]) -> str:
    """The type a question asks for: its own (synthetic), else its answers' most common type."""
    if item.target_type:
        return item.target_type
    counts: dict[str, int] = {}
    for node in item.answer_ids:
        t = type_of(int(node))
        counts[t] = counts.get(t, 0) + 1
    return max(counts, key=lambda t: (counts[t], t))


def mine(
    program: object,
    items: Sequence[QAItem],
    *,
    sources: Sequence[str] = SOURCES,
    runs: dict[str, list[int]] | None = None,
    tick: Callable[[int], None] | None = None,
) -> list[Mined]:
    """Candidate lists of ``items`` from ``program``'s steps 3-7 (an ``AutofocusRetriever`` built without
    LMs), by ``sources``; ``runs`` (question -> pre-rerank ids of a program run) adds a ``run`` list."""
    unknown = sorted(set(sources) - set(SOURCES))
    if unknown:
        raise ValueError(f"unknown candidate sources {', '.join(unknown)} (have: {', '.join(SOURCES)})")
    cfg: AutofocusConfig = program.config  # type: ignore[attr-defined]
    skb = program.kb.skb  # type: ignore[attr-defined]
    program.kb.embed_queries(sorted({i.query for i in items}))  # type: ignore[attr-defined]  # one batch
    out: list[Mined] = []
    for item in items:
        mined = Mined(item, answer_type(item, skb.type_of))
        for source in sources:
            cypher = item.cypher if source == "grounded" else None
            if source == "grounded" and not cypher:
                continue
            found = program.retrieve(item.query, mined.target_type, cypher, cfg,  # type: ignore[attr-defined]
                                     Trace(system="adapt", question=item.query))
            mined.lists[source] = [int(i) for i in found.ids]
        if runs and item.query in runs:
            mined.lists["run"] = [int(i) for i in runs[item.query]]
        out.append(mined)
        if tick:
            tick(1)
    return out


def run_lists(run_dir: object) -> dict[str, list[int]]:
    """Question -> steps 1-7's candidates (before any reranking) of an evaluation run's answered questions."""
    from pathlib import Path

    from autofocus.evaluation.traces import read_traces

    path = Path(str(run_dir)) / "traces.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no traces.jsonl (an `autofocus eval --out` run directory?)")
    records, _ = read_traces(path, repair=False)
    out: dict[str, list[int]] = {}
    for rec in records:
        data = (rec.get("trace") or {}).get("data") or {}
        ids = data.get("pre_rerank") or rec.get("ranked_ids")
        if rec.get("status") == "ok" and ids:
            out[rec["query"]] = [int(i) for i in ids]
    return out
