"""Per-question scores of a program's prediction, and the objective an optimiser maximises.

Three families, with ``autofocus.metrics`` (STaRK) definitions:

- end to end, on the final ranking: ``hit@k``, ``recall@k``, ``mrr`` (what the reranker changes);
- on the grounded strand, the candidates in the pre-rerank list that the query graph produced
  (``trace.data["strand"]`` is ``grounded`` or ``both``): ``grounded_hit@k``, ``grounded_recall@k``.
  Steps 1 and 2 (target type, Cypher) decide this strand, and it needs no reranker to measure;
- on the whole grounded set ``C_cypher`` (``trace.data["grounded_ids"]``): ``grounded_f1``, the F1
  of that set against the gold answers. It asks for exactly the answers and no more, which suits
  synthetic questions, whose gold set is the exact answer set of the query behind them
  (``autofocus synth``): a query that grounds the same set scores 1, one that grounds a superset
  is penalised by its precision. It depends on steps 1-5 only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from autofocus.metrics import Candidates, CandidatesLike, as_candidates, compute_metrics

GROUNDED = ("grounded", "both")
# the columns of the before/after tables, in order
REPORTED: tuple[str, ...] = (
    "hit@1", "hit@5", "recall@20", "mrr", "grounded_hit@20", "grounded_recall@20", "grounded_f1",
)
_NAME = re.compile(r"^(grounded_)?(hit|recall)@(\d+)$|^mrr$|^grounded_f1$")
SET_METRICS = ("grounded_f1",)

Objective = Callable[..., float]


def grounded_strand(pred: Any) -> list[int]:
    """The pre-rerank candidates that came from the grounded set, best first."""
    data = getattr(getattr(pred, "trace", None), "data", None) or {}
    strand = data.get("strand") or {}
    pre_rerank = data.get("pre_rerank")
    return [int(i) for i in (pre_rerank if pre_rerank is not None else []) if strand.get(str(i)) in GROUNDED]


def check_metric(name: str) -> str:
    """``name`` normalised, or a ``ValueError`` listing the metrics there are."""
    norm = name.strip().lower()
    match = _NAME.match(norm)
    if match is None or (match.group(3) is not None and int(match.group(3)) < 1):
        raise ValueError(
            f"unknown metric {name!r}: use mrr, hit@K, recall@K (final ranking), "
            "grounded_hit@K, grounded_recall@K (grounded strand), e.g. grounded_recall@20, "
            "or grounded_f1 (the whole grounded set)"
        )
    return norm


def question_scores(
    gold: Iterable[int], pred: Any, candidates: Candidates | None = None, names: Iterable[str] = REPORTED
) -> dict[str, float]:
    """The named scores of one prediction (``ranked_ids`` + ``trace``) against the gold answers."""
    gold = list(gold)
    names = [check_metric(n) for n in names]
    out: dict[str, float] = {}
    if "grounded_f1" in names:
        out["grounded_f1"] = grounded_set_f1(gold, pred)
    for grounded in (False, True):
        wanted = [n for n in names if n.startswith("grounded_") == grounded and n not in SET_METRICS]
        if not wanted:
            continue
        ranked = grounded_strand(pred) if grounded else list(getattr(pred, "ranked_ids", None) or [])
        ks = sorted({int(n.rsplit("@", 1)[1]) for n in wanted if "@" in n}) or [1]
        scores = compute_metrics(ranked, gold, candidates, ks=ks)
        prefix = "grounded_" if grounded else ""
        out.update({n: scores[n.removeprefix(prefix)] for n in wanted})
    return out


def grounded_set_f1(gold: Iterable[int], pred: Any) -> float:
    """F1 of the whole grounded set against the gold answers (0 when nothing was grounded).

    Systems that keep only the first ids in the trace record the set's size in ``num_grounded``.
    """
    data = getattr(getattr(pred, "trace", None), "data", None) or {}
    grounded = np.asarray(data.get("grounded_ids", []), dtype=np.int64).ravel()
    gold_ids = np.unique(np.asarray(list(gold), dtype=np.int64))
    size = max(int(data.get("num_grounded") or 0), int(np.unique(grounded).size))
    hits = int(np.intersect1d(grounded, gold_ids).size)
    if hits == 0:
        return 0.0
    return 2 * hits / (size + gold_ids.size)


def objective(name: str, candidates: CandidatesLike | None = None) -> Objective:
    """A DSPy metric ``(example, pred, trace=None, pred_name=None, pred_trace=None) -> float``.

    The example needs ``answer_ids``. GEPA's extra arguments are accepted so every optimiser can use it.
    """
    name = check_metric(name)
    cand = as_candidates(candidates)

    def metric(example: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
               pred_trace: Any = None) -> float:
        return question_scores(example.answer_ids, pred, cand, (name,))[name]

    metric.__name__ = f"autofocus_{name.replace('@', '_at_')}"
    return metric


END_TO_END_STEPS = frozenset({"reranker", "router", "validator", "commenter"})


def default_metric(system: str, steps: Iterable[str]) -> str:
    """The objective for optimising ``steps`` of ``system`` (a registry name).

    Steps that shape the query graph are judged by the grounded strand; a reranker, and HybGRAG's
    router/critic (which pick the final list), by the final ranking. FocusedRetriever's target
    type only steers its VSS strand, so it is judged by the pre-rerank recall.
    """
    steps = set(steps)
    if steps & END_TO_END_STEPS:
        return "mrr"
    if system == "focusedretriever" and steps == {"target_type"}:
        return "recall@20"
    return "grounded_recall@20"


def needs_final_order(metric: str, k: int) -> bool:
    """Whether the reranker can change ``metric``: any order-sensitive score of the final ranking."""
    if metric.startswith("grounded_"):
        return False  # the grounded strand and set come before step 8
    return metric == "mrr" or int(metric.rsplit("@", 1)[1]) < k
