"""GEPA's feedback metric: the score plus a sentence or two telling the reflection LM what went wrong.

The feedback reads the question's trace (``pred.trace``: target type, flags, parser events, the
grounded set and the ranking) against the gold answers. When GEPA asks about one predictor
(``pred_name``), only the part of the story that predictor could have changed is told:

- ``target_type``: the predicted type against the gold answers' types;
- ``cypher`` / ``query_graph`` / ``triplets``: no parsable query, no usable triplet, no constant,
  dropped parts, empty grounding, whether the gold answers are in the grounded set;
- ``reranker`` and HybGRAG's ``router`` / ``validator`` / ``commenter``: where the first gold
  answer ended up in the final ranking, and what was ranked first instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dspy
import numpy as np

from autofocus.metrics import CandidatesLike
from autofocus.optimize.scoring import objective
from autofocus.skb.model import SKB

QUERY_STEPS = ("cypher", "query_graph", "triplets")
RANKING_STEPS = ("reranker", "router", "validator", "commenter")
MAX_NAMES = 3


def _names(skb: SKB, ids: Sequence[int]) -> str:
    shown = ", ".join(f"{skb.name(i)!r} ({skb.type_of(i)})" for i in ids[:MAX_NAMES])
    return shown + (f" and {len(ids) - MAX_NAMES} more" if len(ids) > MAX_NAMES else "")


def target_type_feedback(data: dict[str, Any], gold_types: list[str]) -> list[str]:
    if "target_type" not in data:
        return []
    predicted = data["target_type"]
    if predicted is None:
        return [f"No target type could be read from the answer; the correct answers are of type {', '.join(gold_types)}."]
    if predicted in gold_types:
        return [f"The target type {predicted!r} is right."]
    return [f"Wrong target type {predicted!r}: the correct answers are of type {', '.join(gold_types)}."]


def query_feedback(skb: SKB, data: dict[str, Any], flags: dict[str, Any], events: list[Any],
                   gold: list[int]) -> list[str]:
    """What the query (Cypher, typed query graph or triplets) did, from parse to grounding."""
    out: list[str] = []
    if flags.get("valid_cypher") is False:
        out.append("The query could not be parsed into any node pattern: write one short MATCH ... RETURN query.")
    elif flags.get("has_triplet") is False:
        out.append("The query has no usable relationship pattern (a)-[:REL]->(b) linking the answer to other nodes.")
    elif flags.get("has_constant") is False:
        out.append("No triplet reaches a named entity ({name: \"...\"}), so the query cannot be grounded in the graph.")
    dropped = [e.detail for e in events if getattr(e, "kind", None) == "dropped"]
    if dropped:
        out.append("Parts the parser dropped: " + "; ".join(dropped[:3]) + ".")
    returned = data.get("cypher_target_type")
    gold_types = sorted({skb.type_of(g) for g in gold})
    if returned and returned not in gold_types:
        out.append(f"The query returns {returned!r} nodes but the answers are {', '.join(gold_types)}.")
    if flags.get("grounded_nonempty") is False and flags.get("has_constant") is not False:
        out.append("No node satisfies the query: an entity name, relationship or condition does not match the graph.")
    grounded = np.asarray(data.get("grounded_ids", []), dtype=np.int64).ravel()  # a list, or the whole array
    if grounded.size:
        size = max(int(data.get("num_grounded") or 0), int(grounded.size))
        found = np.intersect1d(grounded, gold)
        if found.size:
            out.append(f"{len(found)} of the {len(gold)} correct answers satisfy the query ({size} nodes matched).")
        else:
            out.append(f"None of the correct answers satisfies the query ({size} nodes matched): "
                       "a constraint is wrong or too strict.")
    return out


def ranking_feedback(skb: SKB, pred: Any, gold: list[int]) -> list[str]:
    ranked = [int(i) for i in getattr(pred, "ranked_ids", None) or []]
    gold_set = set(gold)
    rank = next((r for r, i in enumerate(ranked, 1) if i in gold_set), None)
    if not ranked:
        return ["Nothing was returned."]
    if rank == 1:
        return ["A correct answer is ranked first."]
    where = f"The first correct answer is ranked {rank} of {len(ranked)}" if rank else \
        f"No correct answer is among the {len(ranked)} returned"
    return [f"{where}; ranked first instead: {_names(skb, ranked[:1])}."]


def critic_feedback(data: dict[str, Any]) -> list[str]:
    rounds = data.get("rounds") or []
    if not rounds:
        return []
    last = rounds[-1]
    verdict = "accepted" if last.get("accepted") else "never accepted"
    return [f"After {len(rounds)} round(s) the critic {verdict} the {last.get('module', '?')} retrieval."]


def explain(skb: SKB, gold: Sequence[int], pred: Any, pred_name: str | None = None) -> str:
    """Feedback on one prediction for the predictor ``pred_name`` (None: the whole program)."""
    gold = [int(g) for g in gold]
    trace = getattr(pred, "trace", None)
    data = dict(getattr(trace, "data", None) or {})
    flags = dict(getattr(trace, "flags", None) or {})
    events = list(getattr(trace, "events", None) or [])
    step = pred_name.split(".")[0] if pred_name else None
    gold_types = sorted({skb.type_of(g) for g in gold})
    lines: list[str] = []
    if step in (None, "target_type"):
        lines += target_type_feedback(data, gold_types)
    if step is None or step in QUERY_STEPS or step == "target_type":
        lines += query_feedback(skb, data, flags, events, gold)
    if step is None or step in RANKING_STEPS:
        lines += critic_feedback(data) + ranking_feedback(skb, pred, gold)
    errors = [e.detail for e in events if getattr(e, "kind", None) == "llm_error"]
    if errors:
        lines.append("The answer could not be parsed: " + errors[0][:200])
    lines.append(f"The correct answers: {_names(skb, gold)}.")
    return " ".join(lines)


def feedback_metric(
    name: str, skb: SKB, candidates: CandidatesLike | None = None
) -> Callable[..., dspy.Prediction]:
    """GEPA's metric: ``dspy.Prediction(score=<objective name>, feedback=explain(...))``."""
    score_of = objective(name, candidates)

    def metric(gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
               pred_trace: Any = None) -> dspy.Prediction:
        score = score_of(gold, pred)
        return dspy.Prediction(score=score, feedback=explain(skb, gold.answer_ids, pred, pred_name))

    metric.__name__ = f"{score_of.__name__}_with_feedback"
    return metric
