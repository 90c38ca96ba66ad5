"""Step 8's rerankers: pointwise, listwise, pairwise and tournament (``program.steps.rerank`` holds what
they share: the session that builds and fits their prompts, salvaging, fusion), and the one the config picks."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import dspy

from autofocus.config import AutofocusConfig
from autofocus.lm import is_local_spec, scoring_weights_of, yes_probabilities
from autofocus.program.steps.rerank import (
    NEUTRAL_SCORE,
    YES_NO_INSTRUCTIONS,
    Messages,
    Reranker,
    Session,
    YesScorer,
    complete_ranking,
    estimate_tokens,
    lm_of,
    salvage_ids,
    salvage_score,
    yes_no_question,
    yes_no_turns,
)
from autofocus.program.steps.sorting import binary_insertion_sort, check_tournament, tournament_sort
from autofocus.program.trained import RERANKER_KINDS
from autofocus.signatures import ListwiseRank, PairwiseCompare, PointwiseScore
from autofocus.usage import map_concurrently


class PointwiseReranker(Reranker):
    """Scores each candidate alone, concurrently; stable sort by score (ties keep the input order).

    Args:
        scoring: ``"signature"`` (the paper's 0-1 score prompt) or ``"yes_no"`` (P(yes) of the first
            answer token from the offline LM, one batched request with a shared prompt prefix;
            candidates it cannot score, or any LM without the capability, use the signature).
        yes_scorer: ``(lm, conversations) -> list[P(yes) | None] | None``; defaults to
            ``autofocus.lm.yes_probabilities``.
    """

    method = "pointwise"

    def __init__(
        self,
        config: AutofocusConfig | None = None,
        *,
        scoring: Literal["signature", "yes_no"] = "signature",
        yes_scorer: YesScorer | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(config, **kwargs)
        self.scoring = scoring
        self.yes_scorer = yes_scorer or yes_probabilities
        self.score = dspy.Predict(PointwiseScore)

    def _rank(self, s: Session, target_type: str | None, data: dict[str, Any]) -> list[int]:
        n = len(s.ids)
        scores: list[float | None] = [None] * n
        how = ["signature"] * n
        if self.scoring == "yes_no":
            for i, p in self._yes_no(s, data).items():
                scores[i], how[i] = p, "yes_no"
        todo = [i for i in range(n) if scores[i] is None]
        for i, value in zip(
            todo,
            map_concurrently(lambda i: self._score_one(s, i, target_type), todo, s.config.runtime.concurrency),
            strict=True,
        ):
            scores[i] = value
        final = [NEUTRAL_SCORE if v is None else v for v in scores]
        data.update(scores=final, scored_by=how, rounds=int(bool(todo)) + int(self.scoring == "yes_no"))
        return sorted(range(n), key=lambda i: (-final[i], i))

    def _yes_no(self, s: Session, data: dict[str, Any]) -> dict[int, float]:
        lm = lm_of(self.score)
        if lm is None:
            return {}

        demos = yes_no_turns(self.score.demos)

        def build(blocks: list[str]) -> Messages:
            return [
                {"role": "system", "content": YES_NO_INSTRUCTIONS},
                *demos,
                {"role": "user", "content": yes_no_question(s.question, blocks[0])},
            ]

        budget = s.config.rerank.yes_no_description_tokens
        if budget:  # a short description per candidate: name and type, attributes, direct relations, the document's start
            fitted = [(0, build([s.description(node, 0, budget)])) for node in s.ids]
        else:
            fitted = [s.fit([node], build, estimate_tokens) for node in s.ids]
        conversations = [messages for _, messages in fitted]
        try:
            probs = self.yes_scorer(lm, conversations)
        except Exception as exc:  # the signature path takes over
            s.failed("yes_no_error", exc)
            return {}
        if probs is None:
            s.issue(
                "yes_no_unavailable",
                f"{getattr(lm, 'model', lm)} has no next-token scoring; used the signature",
            )
            return {}
        weights = scoring_weights_of(lm)
        if weights is not None:  # the same model's scores differ a little between its bf16 copy and itself
            data["yes_no_weights"] = weights
        out: dict[int, float] = {}
        for i, ((level, _), p) in enumerate(zip(fitted, probs, strict=True)):
            if p is not None and math.isfinite(p):
                out[i] = min(1.0, max(0.0, float(p)))
                s.record_level(level)
        return out

    def _score_one(self, s: Session, i: int, target_type: str | None) -> float | None:
        node = s.ids[i]
        node_type = target_type or s.skb.type_of(node)
        pred, raw = self._predict(
            s,
            self.score,
            [node],
            lambda b: {"question": s.question, "node_type": node_type, "candidate": b[0]},
        )
        if pred is not None:
            try:
                value = float(pred.score)
            except (TypeError, ValueError):
                value = math.nan
            if math.isfinite(value):
                return min(1.0, max(0.0, value))
            s.issue("invalid_score", f"{node}: {pred.score!r}")
            return None
        for text in raw:
            value = salvage_score(text)
            if value is not None:
                s.issue("salvaged_score", f"{node}: {value}")
                return value
        s.issue("neutral_score", f"{node}: no usable score, kept {NEUTRAL_SCORE}")
        return None


class ListwiseReranker(Reranker):
    """One prompt with all candidates; the LM's id list is validated and completed."""

    method = "listwise"

    def __init__(self, config: AutofocusConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.rank = dspy.Predict(ListwiseRank)

    def _rank(self, s: Session, target_type: str | None, data: dict[str, Any]) -> list[int]:
        pred, raw = self._predict(
            s, self.rank, s.ids, lambda b: {"question": s.question, "candidates": "\n\n".join(b)}
        )
        valid = set(s.ids)
        if pred is not None:
            answer = list(pred.ranking or [])
        else:
            # the answer with the most candidate ids among the raw texts the failure left
            answer = max(([i for i in salvage_ids(t) if i in valid] for t in raw), key=len, default=[])
            s.issue(
                "salvaged_ranking" if answer else "unparsable_ranking",
                f"{len(set(answer))} of {len(s.ids)} ids recovered",
            )
        ranked, fixed = complete_ranking(answer, s.ids)
        if pred is not None:
            for kind in ("unknown", "duplicate", "missing"):
                if fixed[kind]:
                    s.issue(f"ranking_{kind}_ids", f"{fixed[kind]} {kind} ids")
        data.update(raw_ranking=[str(x) for x in answer][:200], fixed=fixed, rounds=1)
        position = {node: i for i, node in enumerate(s.ids)}
        return [position[node] for node in ranked]


class PairwiseReranker(Reranker):
    """Binary insertion sort with one ``PairwiseCompare`` call per comparison (the paper's).

    The earlier candidate of the pre-rerank order is always shown first; an answer that is
    neither id is a tie, which keeps the current order.
    """

    method = "pairwise"

    def __init__(self, config: AutofocusConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.compare = dspy.Predict(PairwiseCompare)

    def _sort(self, n: int, compare: Callable[[list[tuple[int, int]]], list[int]]) -> list[int]:
        return binary_insertion_sort(n, compare)

    def _rank(self, s: Session, target_type: str | None, data: dict[str, Any]) -> list[int]:
        comparisons: list[list[int]] = []
        round_sizes: list[int] = []

        def compare(pairs: list[tuple[int, int]]) -> list[int]:
            round_sizes.append(len(pairs))
            outcomes = map_concurrently(lambda p: self._compare_one(s, *p), pairs, s.config.runtime.concurrency)
            comparisons.extend([s.ids[a], s.ids[b], o] for (a, b), o in zip(pairs, outcomes, strict=True))
            return outcomes

        order = self._sort(len(s.ids), compare)
        data.update(comparisons=comparisons, rounds=len(round_sizes), round_sizes=round_sizes)
        return order

    def _compare_one(self, s: Session, a: int, b: int) -> int:
        first, second = s.ids[a], s.ids[b]
        pred, raw = self._predict(
            s,
            self.compare,
            [first, second],
            lambda blk: {"question": s.question, "first": blk[0], "second": blk[1]},
        )
        if pred is not None:
            if pred.better_id == first:
                return 1
            if pred.better_id == second:
                return -1
            s.issue(
                "invalid_comparison", f"answered {pred.better_id!r} for ({first}, {second}); kept the order"
            )
            return 0
        named = {i for text in raw for i in salvage_ids(text)} & {first, second}
        if len(named) == 1:
            s.issue("salvaged_comparison", f"({first}, {second}) -> {next(iter(named))}")
            return 1 if first in named else -1
        s.issue("unparsable_comparison", f"({first}, {second}); kept the order")
        return 0


class TournamentReranker(PairwiseReranker):
    """Pairwise comparisons in a seeded tournament (``sorting.tournament_sort``): for k = 20 about
    5 concurrent rounds (at most 9) of ~80 calls in all, instead of ~58 sequential calls.

    Args:
        seeds: pre-rerank favourites ranked first, which the others challenge by binary search.
        anchors: extra seeds spread over the rest, to keep the brackets small.
        group_size: blocks up to this size play a round robin (one round, all pairs).
    """

    method = "tournament"

    def __init__(
        self,
        config: AutofocusConfig | None = None,
        *,
        seeds: int = 6,
        anchors: int = 2,
        group_size: int = 8,
        **kwargs: Any,
    ) -> None:
        super().__init__(config, **kwargs)
        check_tournament(seeds, anchors, group_size)
        self.seeds, self.anchors, self.group_size = seeds, anchors, group_size

    def _sort(self, n: int, compare: Callable[[list[tuple[int, int]]], list[int]]) -> list[int]:
        return tournament_sort(n, compare, seeds=self.seeds, anchors=self.anchors, group_size=self.group_size)


RERANKERS: dict[str, type[Reranker]] = {
    "pointwise": PointwiseReranker,
    "listwise": ListwiseReranker,
    "pairwise": PairwiseReranker,
    "tournament": TournamentReranker,
}


def make_reranker(config: AutofocusConfig, lm_spec: str, trained: Any | None = None, **kwargs: Any) -> Reranker | None:
    """The step-8 module for ``config.rerank.reranker``; None for ``"none"``.

    ``"auto"`` is the trained reranker (a cross-encoder or a bi-encoder) where ``trained``
    (``program.trained.TrainedParts``) has one; otherwise it picks by the rerank LM: for the small offline models (``local*`` specs) none,
    because their yes/no judge did not beat steps 1-7's order on either labelled benchmark (demo,
    WordNet: docs/results.md); for hosted LMs the listwise reranker, the paper's default (one prompt;
    Table 7). An explicit ``"pointwise"`` scores yes/no on a local LM (small models cannot write a
    usable ranking). Extra kwargs go to the reranker.
    """
    local = is_local_spec(lm_spec)
    choice = config.rerank.reranker
    model = getattr(trained, "reranker", None)
    if choice == "auto":
        choice = model.kind if model is not None else "none" if local else "listwise"
    if choice == "none":
        return None
    if choice in RERANKER_KINDS:
        if model is None or model.kind != choice:
            has = f"its trained reranker is a {model.kind}" if model is not None else "it has no trained reranker"
            raise ValueError(f"reranker {choice!r} needs a program made by `autofocus adapt --reranker-kind {choice}` "
                             f"(--program FILE); {has}")
        from autofocus.program.steps.trained_reranker import TrainedReranker

        return TrainedReranker(config, model=model, **kwargs)
    if choice == "pointwise":
        kwargs.setdefault("scoring", "yes_no" if local else "signature")
    return RERANKERS[choice](config, **kwargs)
