"""Steps 6 and 7: vector similarity search over the grounded candidates, then over the rest of the
target type, merged into one list of ``k`` with the strand of each answer recorded.

Step 7's whole-type scan does not need steps 3-5, only the question's vector and the target type(s):
``ScanAhead`` embeds the question and scans those types on worker threads while steps 3-5 run, keeping
each type's ``depth`` best nodes (``NodeIndex.head``); step 7 then drops the grounded nodes from those
(``NodeIndex.search_head``), which gives the same ranking as the scan after grounding would have.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from autofocus.program.steps.reading import Naming, QuestionReading

if TYPE_CHECKING:
    from autofocus.config import MergeConfig
    from autofocus.index.search import Head
    from autofocus.kb import KnowledgeBaseLike
    from autofocus.program.steps.grounded_strand import Strand
    from autofocus.skb.model import SKB

SCAN_SLACK = 4096  # a head keeps k + this many nodes: grounded sets up to this size are excluded from it
SCAN_WORKERS = max(4, os.cpu_count() or 1)  # threads of the process-wide pool that embeds and scans ahead

_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def scan_pool() -> ThreadPoolExecutor:
    """The process's pool of scan-ahead threads (at most ``SCAN_WORKERS``, started as needed and then
    kept: starting a thread per question cost up to 4 ms on a busy machine). A forked child gets its own."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=SCAN_WORKERS, thread_name_prefix="autofocus-scan")
            _pool_pid = os.getpid()
        return _pool


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
    kb: KnowledgeBaseLike, qvec: np.ndarray, node_types: list[str] | None, exclude: np.ndarray, n: int, variant: str,
    heads: dict[str, Head] | None = None,
) -> tuple[list[int], list[float]]:
    """Top ``n`` nodes of the target type(s) by similarity, skipping ``exclude``.

    ``heads`` (``ScanAhead.heads``): scans of some of the types done already; a type whose head is deep
    enough for this exclusion is answered from it (the same result), any other is searched now.
    """
    if n <= 0:
        return [], []
    index = kb.index(variant)

    def search(node_type: str | None) -> tuple[np.ndarray, np.ndarray]:
        head = heads.get(node_type) if heads and node_type is not None else None
        found = index.search_head(head, k=n, exclude=exclude) if head is not None else None
        return found if found is not None else index.search(qvec, node_type=node_type, k=n, exclude=exclude)

    if node_types is None or len(node_types) == 1:
        ids, scores = search(None if node_types is None else node_types[0])
        return [int(i) for i in ids], [float(s) for s in scores]
    pooled: list[tuple[float, int]] = []
    for t in node_types:
        ids, scores = search(t)
        pooled += [(float(s), int(i)) for i, s in zip(ids, scores, strict=True)]
    pooled.sort(key=lambda x: (-x[0], x[1]))
    return [i for _, i in pooled[:n]], [s for s, _ in pooled[:n]]


RRF_K = 60  # the rank offset of reciprocal rank fusion (Cormack et al., 2009)


def merge(
    step6: list[int], step7: list[int], k: int, scores: dict[int, float] | None = None, bonus: float | None = None,
    rrf_weight: float | None = None,
) -> Merged:
    """Concatenate ``y_cypher + y_vss`` (Algorithm 1, line 13), deduplicated, at most ``k`` long.

    With ``bonus`` (``merge_rule`` score, or evidence where the evidence is weak) the same ``k``
    candidates are ordered together by ``scores`` (one similarity scale for both strands), a grounded
    candidate's raised by ``bonus``: a wrong grounded set no longer takes the first ranks from VSS's
    much closer hits, and a large bonus is the block order. With ``rrf_weight`` they are ordered by
    reciprocal rank fusion instead (``fuse_strands``): ranks, not similarities, so the fusion does not
    depend on how one embedder spreads its scores.
    """
    ids: list[int] = []
    seen: set[int] = set()
    for i in [*step6, *step7]:
        if i not in seen:
            seen.add(i)
            ids.append(i)
        if len(ids) >= k:
            break
    in6, in7 = set(step6), set(step7)
    if rrf_weight is not None and scores:
        ids = fuse_strands(ids, scores, step6, step7, rrf_weight)
    elif bonus is not None and scores:
        position = {i: n for n, i in enumerate(ids)}
        ids.sort(key=lambda i: (-(scores.get(i, -np.inf) + (bonus if i in in6 else 0.0)), position[i]))
    strand = {i: "both" if i in in6 and i in in7 else ("grounded" if i in in6 else "vss") for i in ids}
    return Merged(ids=ids, strand=strand, step6=list(step6), step7=list(step7), scores=dict(scores or {}))


def fuse_strands(ids: list[int], scores: dict[int, float], grounded: list[int], vss: list[int], weight: float) -> list[int]:
    """Reciprocal rank fusion of the two strands' orders of ``ids``: what VSS alone ranks (by
    similarity, over the candidates at least as close as step 7's last hit, the ones a plain VSS
    would also have ranked this high) and step 6's grounded order, that one times ``weight``. A
    candidate both strands rank high comes first; one only the graph supports sits among VSS's hits
    at its own rank instead of above all of them. Ties keep the merged order."""
    n = len(ids)
    sim = np.array([scores.get(i, -np.inf) for i in ids])
    floor = min((scores.get(i, -np.inf) for i in vss), default=-np.inf)
    rank_sim = np.empty(n, dtype=np.int64)
    rank_sim[np.lexsort((np.arange(n), -sim))] = np.arange(n)
    from_vss = np.where(sim >= floor, 1.0 / (RRF_K + 1 + rank_sim), 0.0)
    rank6 = {i: r for r, i in enumerate(grounded)}
    from_graph = np.array([weight / (RRF_K + 1 + rank6[i]) if i in rank6 else 0.0 for i in ids])
    return [ids[j] for j in np.lexsort((np.arange(n), -(from_vss + from_graph)))]


def named_in_question(skb: SKB, ids: list[int], reading: QuestionReading) -> set[int]:
    """The candidates whose whole name the question writes verbatim (``Naming.VERBATIM``: case and all;
    ``queue.SimpleQueue`` is not named by ``queue.SimpleQueue.put``, nor ``jsonschema`` by
    ``jsonschema-specifications``): a question names the nodes it starts from, not its answers, so such a
    candidate is a constant of the question, e.g. the paper whose citations it asks. A looser grade
    (``Naming.NEAR``: any case, fuzzy for long names) would also catch answers ("socket server" in a
    question whose answer is ``socketserver``)."""
    return {int(i) for i in ids if reading.names(skb.name(i), Naming.VERBATIM)}


def named_last(ids: list[int], named: set[int]) -> list[int]:
    """``ids`` with the ``named`` ones moved to the end, each part in its own order (``named_last``)."""
    return [i for i in ids if i not in named] + [i for i in ids if i in named]


def grounded_first(ids: list[int], strand: dict[int, str]) -> list[int]:
    """``ids`` with the grounded ones (``strand`` grounded or both) first, each part in its own order:
    a reranker's order with the block of strong evidence kept (``rerank_keep_block``)."""
    first = [i for i in ids if strand.get(i) in ("grounded", "both")]
    return first + [i for i in ids if strand.get(i) not in ("grounded", "both")]


class ScanAhead:
    """Step 7's whole-type scans started before steps 3-5: the question is embedded and the scans run on
    worker threads (``scan_pool``; FAISS and the embedders release the GIL), so steps 3-5 and the scans
    overlap.

    ``question_vector()`` waits for the embedding; ``heads(types)`` for those types' scans (types never
    passed to ``scan`` are left out: ``step7_rank_rest`` searches them then). Each type is scanned in
    ``shards`` ranges, one job each, which run side by side on free threads of the pool. Use as a
    context manager: leaving it cancels the jobs not started (a scan of a type step 7 did not need);
    one already running finishes, and its thread goes back to the pool.

    Example:
        >>> with ScanAhead(kb, question, "text+rel", depth=20 + SCAN_SLACK, types=["paper"]) as ahead:  # doctest: +SKIP
        ...     strand = ...  # steps 3-5
        ...     ids, _ = step7_rank_rest(kb, ahead.question_vector(), ["paper"], strand.answers, 20, "text+rel",
        ...                              heads=ahead.heads(["paper"]))
    """

    def __init__(
        self, kb: KnowledgeBaseLike, question: str, variant: str, depth: int, types: list[str] | None = None,
        shards: int = 1, qvec: np.ndarray | None = None,
    ) -> None:
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        self.kb, self.variant, self.depth, self.shards = kb, variant, depth, shards
        self.embed_s = 0.0
        self.scan_s: dict[str, float] = {}
        self.waited_s = 0.0
        self._lock = threading.Lock()
        self._scans: dict[str, list[Future[Head | None]]] = {}
        self._pool = scan_pool()
        if qvec is not None:
            self._qvec: Future[np.ndarray] = Future()
            self._qvec.set_result(qvec)
        else:
            self._qvec = self._submit(self._embed, question)
        self.scan(types or [])

    def __enter__(self) -> ScanAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cancel the jobs not started; a running one finishes on its own."""
        with self._lock:
            jobs = [self._qvec, *(f for futures in self._scans.values() for f in futures)]
        for job in jobs:
            job.cancel()

    def _submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """A job on the pool. Jobs start in the order submitted, and a scan waits only for the embedding,
        submitted before it: however many questions share the pool, a job never waits for one behind it."""
        context = contextvars.copy_context()  # usage scopes and DSPy settings follow the work
        return self._pool.submit(context.run, fn, *args)

    def _embed(self, question: str) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            return self.kb.embed_query(question)
        finally:
            self.embed_s = time.perf_counter() - t0

    def _scan(self, node_type: str, shard: int) -> Head | None:
        qvec = self._qvec.result()
        t0 = time.perf_counter()
        index = self.kb.index(self.variant)
        head = getattr(index, "head", None)
        try:
            return head(qvec, node_type, self.depth, shard=shard, shards=self.shards) if head is not None else None
        finally:
            with self._lock:
                self.scan_s[node_type] = self.scan_s.get(node_type, 0.0) + time.perf_counter() - t0

    def scan(self, types: list[str]) -> None:
        """Start scanning these types (once each) as soon as the question's vector exists."""
        with self._lock:
            for t in types:
                if t not in self._scans:
                    self._scans[t] = [self._submit(self._scan, t, s) for s in range(self.shards)]

    def question_vector(self) -> np.ndarray:
        """The question's vector (waits for the embedding; raises what it raised)."""
        t0 = time.perf_counter()
        try:
            return self._qvec.result()
        finally:
            self.waited_s += time.perf_counter() - t0

    def heads(self, types: list[str]) -> dict[str, Head]:
        """The finished scans of those of ``types`` that were started (waits for them); a type whose
        index is approximate has none."""
        from autofocus.index.search import Head

        t0 = time.perf_counter()
        with self._lock:
            started = {t: self._scans[t] for t in types if t in self._scans}
        out: dict[str, Head] = {}
        try:
            for t, futures in started.items():
                parts = [f.result() for f in futures]
                if all(p is not None for p in parts):
                    out[t] = Head.merge([p for p in parts if p is not None])
        finally:
            self.waited_s += time.perf_counter() - t0
        return out

    def summary(self) -> dict[str, Any]:
        """What the trace keeps: seconds embedding, scanning (per type, all shards) and waiting."""
        with self._lock:
            scans = {t: round(s, 6) for t, s in self.scan_s.items()}
        return {"embed_s": round(self.embed_s, 6), "scan_s": scans, "waited_s": round(self.waited_s, 6),
                "shards": self.shards, "depth": self.depth}


def evidence_factor(strand: Strand, types1: list[str], merge: MergeConfig) -> tuple[float, list[str] | None]:
    """The grounded strand's weight against its evidence (``merge.alpha_rule`` evidence): 1 for the paper's
    fixed alpha or an empty strand, else less for a relaxed query, a huge grounded set or steps 1 and 2
    disagreeing; it scales the grounded share of the k slots (alpha) and the merge's grounded bonus.
    Returns the factor and why it is below 1 (None where the rule does not apply)."""
    if merge.alpha_rule == "fixed" or strand.empty:
        return 1.0, None
    factor, why = 1.0, []
    if strand.relaxed:
        factor *= merge.alpha_relaxed ** len(strand.relaxed)
        why.append(f"relaxed x{len(strand.relaxed)}")
    if strand.repairs:
        factor *= merge.alpha_repaired
        why.append("repaired")
    if len(strand.answers) > merge.alpha_large_size:
        factor *= merge.alpha_large
        why.append(f"|C|={len(strand.answers)}")
    label = strand.query_graph.target_type if strand.query_graph is not None else None
    if types1 and label is not None and label not in types1:
        factor *= merge.alpha_disagree
        why.append(f"query asks for {label}")
    return factor, why
