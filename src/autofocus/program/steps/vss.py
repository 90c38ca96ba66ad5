"""Steps 6 and 7: vector similarity search over the grounded candidates, then over the rest of the
target type, merged into one list of ``k`` with the strand of each answer recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike


@dataclass
class Merged:
    ids: list[int]
    strand: dict[int, str] = field(default_factory=dict)  # id -> "grounded" | "vss" | "both"
    step6: list[int] = field(default_factory=list)
    step7: list[int] = field(default_factory=list)
    scores: dict[int, float] = field(default_factory=dict)


def grounded_slots(alpha: float, k: int) -> int:
    """``round(alpha * k)`` with halves rounded up (2/3 * 20 = 13.3 -> 13), as the paper writes it."""
    return int(np.floor(alpha * k + 0.5))


def step6_rank_grounded(
    kb: KnowledgeBaseLike, qvec: np.ndarray, grounded: np.ndarray, n: int, variant: str, round_of: dict[int, int] | None = None
) -> tuple[list[int], list[float]]:
    """Rank grounded candidates by similarity to the question; keep ``n``.

    With ``round_of`` (the reference code's order) earlier expansion rounds come first.
    """
    if n <= 0 or len(grounded) == 0:
        return [], []
    index = kb.index(variant)
    if round_of is None:
        ids, scores = index.search(qvec, candidates=np.asarray(grounded), k=n)
        return [int(i) for i in ids], [float(s) for s in scores]
    scores = np.asarray(index.scores(qvec, np.asarray(grounded)))
    rounds = np.array([round_of.get(int(i), 0) for i in grounded])
    order = np.lexsort((np.asarray(grounded), -scores, rounds))[:n]
    return [int(grounded[i]) for i in order], [float(scores[i]) for i in order]


def step7_rank_rest(
    kb: KnowledgeBaseLike, qvec: np.ndarray, node_types: list[str] | None, exclude: np.ndarray, n: int, variant: str
) -> tuple[list[int], list[float]]:
    """Top ``n`` nodes of the target type(s) by similarity, skipping ``exclude``."""
    if n <= 0:
        return [], []
    index = kb.index(variant)
    if node_types is None or len(node_types) == 1:
        ids, scores = index.search(qvec, node_type=None if node_types is None else node_types[0], k=n, exclude=exclude)
        return [int(i) for i in ids], [float(s) for s in scores]
    pooled: list[tuple[float, int]] = []
    for t in node_types:
        ids, scores = index.search(qvec, node_type=t, k=n, exclude=exclude)
        pooled += [(float(s), int(i)) for i, s in zip(ids, scores, strict=True)]
    pooled.sort(key=lambda x: (-x[0], x[1]))
    return [i for _, i in pooled[:n]], [s for s, _ in pooled[:n]]


def merge(step6: list[int], step7: list[int], k: int, scores: dict[int, float] | None = None) -> Merged:
    """Concatenate ``y_cypher + y_vss`` (Algorithm 1, line 13), deduplicated, at most ``k`` long."""
    ids: list[int] = []
    seen: set[int] = set()
    for i in [*step6, *step7]:
        if i not in seen:
            seen.add(i)
            ids.append(i)
        if len(ids) >= k:
            break
    in6, in7 = set(step6), set(step7)
    strand = {i: "both" if i in in6 and i in in7 else ("grounded" if i in in6 else "vss") for i in ids}
    return Merged(ids=ids, strand=strand, step6=list(step6), step7=list(step7), scores=dict(scores or {}))
