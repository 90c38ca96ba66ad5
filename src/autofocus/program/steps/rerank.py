"""Step 8: LLM rerankers of the top-k candidates (paper section 3.2, Table 1, prompts in A.2): what they
share (``Reranker``, the ``Session`` that builds and fits their prompts, salvaging, fusion with steps 1-7's
order); the rerankers themselves are in ``program.steps.rerankers``.

- ``PointwiseReranker``: one ``PointwiseScore`` call per candidate, concurrently; or, for the
  offline llama.cpp LM, P(yes) of the first answer token (``scoring="yes_no"``), which orders
  candidates well where small models cannot write a ranking.
- ``ListwiseReranker``: one ``ListwiseRank`` call with all k candidates (the paper's cheapest).
- ``PairwiseReranker``: binary insertion sort, one ``PairwiseCompare`` call per comparison, all
  sequential (the paper's best on first hits, ~58 sequential calls for k = 20).
- ``TournamentReranker``: pairwise comparisons in few concurrent rounds
  (``autofocus.program.steps.sorting.tournament_sort``: ~5 rounds, ~80 calls for k = 20).

Every candidate is described by ``describe_node`` with all relations; when a prompt would exceed
``config.rerank.context_budget_tokens`` (estimated as characters / 4, as ``autofocus.usage`` counts),
or the LM reports a context overflow, it is rebuilt with only the relations to retrieved
non-target candidates (paper: incident (a) of Table 7), then with none (incident (b)); beyond the
paper, descriptions are then truncated to share the budget instead of giving up.

Every reranker returns a permutation of its (de-duplicated) input: malformed output is salvaged
where possible and otherwise keeps the pre-rerank order; each such fallback is a trace event
(step ``8_rerank``) and ``trace.data["rerank"]`` records the decisions (scores, raw ranking,
comparisons), the prompts, rounds, description levels and overflow incidents. An LM call that gave
no answer (``autofocus.program.steps.llm_call.is_lm_outage``) also marks the trace degraded. The
caller times the step (``trace.step("8_rerank")``); the rerankers only add events and data.
"""

from __future__ import annotations

import numbers
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy
import numpy as np

from autofocus.config import AutofocusConfig
from autofocus.program.steps.llm_call import (
    CONTEXT_WINDOW,
    bounded_answers,
    cap_text,
    describe_cuts,
    describe_error,
    is_context_overflow,
    is_lm_outage,
)
from autofocus.skb.documents import describe_node
from autofocus.skb.model import SKB
from autofocus.trace import Trace
from autofocus.usage import CHARS_PER_TOKEN, check_deadline

STEP = "8_rerank"
# description levels: the paper's three scenarios, then truncation to a share of the budget
LEVELS: tuple[str, ...] = ("full", "retrieved", "none", "truncated")
NEUTRAL_SCORE = 0.5
MIN_SHARE_TOKENS = 16
EVIDENCE_LEAD = "matches the question's graph query: "

Describer = Callable[..., str]
Messages = list[dict[str, Any]]
YesScorer = Callable[[Any, list[Messages]], "list[float | None] | None"]

YES_NO_INSTRUCTIONS = "Answer Yes if there is explicit evidence that the candidate satisfies the query, otherwise No."

_INT = re.compile(r"(?<![\w.])(\d+)(?!\w|\.\d)")
_NUMBER = re.compile(r"(?<![\w.])(\d*\.\d+|\d+)(?![\w.]?\d)")


def estimate_tokens(messages: Messages) -> int:
    return sum(len(str(m.get("content", ""))) for m in messages) // CHARS_PER_TOKEN


def salvage_ids(text: str) -> list[int]:
    """Whole numbers in free text, in order (for ids in a malformed answer)."""
    return [int(m) for m in _INT.findall(text)]


def salvage_score(text: str) -> float | None:
    """The last number in [0, 1] in free text (the paper's prompt ends with "...score is: 0.8")."""
    for raw in reversed(_NUMBER.findall(text)):
        value = float(raw)
        if 0.0 <= value <= 1.0:
            return value
    return None


def complete_ranking(raw: Iterable[object], candidates: Sequence[int]) -> tuple[list[int], dict[str, int]]:
    """A full permutation of ``candidates`` from an LM's ranking: unknown ids dropped, repeats
    removed, missing candidates appended in their pre-rerank order. Also returns what was fixed."""
    valid = set(candidates)
    seen: set[int] = set()
    order: list[int] = []
    fixed = {"unknown": 0, "duplicate": 0, "missing": 0}
    for item in raw:
        try:
            value = int(item)  # type: ignore[call-overload]
        except (TypeError, ValueError, OverflowError):
            fixed["unknown"] += 1
            continue
        if value not in valid:
            fixed["unknown"] += 1
        elif value in seen:
            fixed["duplicate"] += 1
        else:
            seen.add(value)
            order.append(value)
    missing = [c for c in candidates if c not in seen]
    fixed["missing"] = len(missing)
    return order + missing, fixed


def yes_no_question(question: str, candidate: str) -> str:
    return f"Query: {question}\n\nCandidate: {candidate}\n\nYes or No?"


def yes_no_turns(demos: Iterable[Any]) -> Messages:
    """The pointwise predictor's demos as earlier turns of the yes/no chat (the same for every candidate
    and question, so the server evaluates them once): a score of 0.5 or more answered Yes."""
    turns: Messages = []
    for demo in demos:
        try:
            answer = "Yes" if float(demo["score"]) >= 0.5 else "No"
            turns += [{"role": "user", "content": yes_no_question(demo["question"], demo["candidate"])},
                      {"role": "assistant", "content": answer}]  # fmt: skip
        except (KeyError, TypeError, ValueError):  # a demo of another shape (e.g. a bootstrapped trace)
            continue
    return turns


def _adapter() -> dspy.Adapter:
    return dspy.settings.adapter or dspy.ChatAdapter()


def lm_of(predictor: dspy.Predict) -> Any:
    return predictor.lm or dspy.settings.lm


def _raw_texts(exc: BaseException, lm: Any, markers: Sequence[str]) -> list[str]:
    """The LM's raw answers behind a failed parse: recent history entries whose prompt contains
    every marker (the adapter may have retried in another format), then the exception's text."""
    texts: list[str] = []
    for entry in list(getattr(lm, "history", None) or [])[-8:]:
        contents = [str(m.get("content", "")) for m in entry.get("messages") or []]
        if all(any(mk in c for c in contents) for mk in markers):
            for out in entry.get("outputs") or []:
                texts.append(out if isinstance(out, str) else str(out.get("text", out)))
    response = getattr(exc, "lm_response", None)
    if isinstance(response, str) and response not in texts:
        texts.append(response)
    return texts


@dataclass
class Session:
    """One rerank call: descriptions per level, description levels used and issues; thread-safe."""

    question: str
    ids: list[int]
    skb: SKB
    retrieved: set[int]
    config: AutofocusConfig
    describe: Describer
    cap_tokens: int
    evidence: dict[int, str] = field(default_factory=dict)
    levels: list[int] = field(default_factory=list)
    issues: dict[str, list[str]] = field(default_factory=dict)
    outages: list[str] = field(default_factory=list)
    prompts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _descriptions: dict[tuple[int, str, int], str] = field(default_factory=dict)

    def issue(self, kind: str, detail: str) -> None:
        with self._lock:
            self.issues.setdefault(kind, []).append(detail)

    def failed(self, kind: str, exc: BaseException) -> None:
        """Record an LM failure as an issue of ``kind``, and as an outage if the LM gave no answer (a
        prompt still over the context window at the last level included)."""
        text = describe_error(exc)
        self.issue(kind, text[:200])
        if is_lm_outage(exc) or is_context_overflow(exc):
            with self._lock:
                self.outages.append(f"{CONTEXT_WINDOW}: {text}" if is_context_overflow(exc) else text)

    def block(self, node: int, level: int, budget_tokens: int | None = None) -> str:
        """``[ID] type: description`` at a description level (cached per call)."""
        return f"[{node}] {self.skb.type_of(node)}: {self.description(node, level, budget_tokens)}"

    def description(self, node: int, level: int, budget_tokens: int | None = None) -> str:
        """The node's description at a description level (cached per call); it starts with name and type."""
        relations = LEVELS[min(level, 2)]
        budget = budget_tokens if budget_tokens is not None else self.cap_tokens
        key = (node, relations, budget)
        text = self._descriptions.get(key)
        if text is None:
            retrieved = self.retrieved if relations == "retrieved" else None
            line = f"- {EVIDENCE_LEAD}{self.evidence[node]}" if node in self.evidence else ""
            line = cap_text(line, budget * CHARS_PER_TOKEN // 3) if line else ""
            text = self.describe(
                self.skb, node, relations=relations, retrieved=retrieved,
                budget_tokens=max(MIN_SHARE_TOKENS, budget - len(line) // CHARS_PER_TOKEN) if line else budget,
            )
            if line:  # right below the name and type, so no budget cut drops it
                head, _, rest = text.partition("\n")
                text = "\n".join(p for p in (head, line, rest) if p)
            self._descriptions[key] = text
        return text

    def payload(
        self,
        nodes: Sequence[int],
        build: Callable[[list[str]], Any],
        measure: Callable[[Any], int],
        level: int,
    ) -> Any:
        if level < 3:
            return build([self.block(n, level) for n in nodes])
        overhead = measure(build([""] * len(nodes)))
        share = max(MIN_SHARE_TOKENS, (self.config.rerank.context_budget_tokens - overhead) // max(1, len(nodes)))
        return build([self.block(n, 3, share) for n in nodes])

    def fit(
        self,
        nodes: Sequence[int],
        build: Callable[[list[str]], Any],
        measure: Callable[[Any], int],
        start: int = 0,
    ) -> tuple[int, Any]:
        """The first level from ``start`` whose prompt fits the context budget (3 = truncated)."""
        for level in range(start, 3):
            payload = self.payload(nodes, build, measure, level)
            if measure(payload) <= self.config.rerank.context_budget_tokens:
                return level, payload
        return 3, self.payload(nodes, build, measure, 3)

    def record_level(self, level: int) -> None:
        with self._lock:
            self.levels.append(level)
            self.prompts += 1


class Reranker(dspy.Module):
    """Shared entry point: validation, description budget, trace; subclasses rank positions."""

    method = ""
    uses_lm = True  # a replay of steps 1-2 still needs the LM for step 8

    def __init__(
        self,
        config: AutofocusConfig | None = None,
        *,
        describe: Describer | None = None,
        description_budget_tokens: int | None = None,
    ) -> None:
        super().__init__()
        self.config = config or AutofocusConfig()
        self.describe = describe or describe_node
        self.description_budget_tokens = description_budget_tokens

    def forward(
        self,
        question: str,
        candidates: Sequence[int],
        *,
        skb: SKB,
        target_type: str | None = None,
        retrieved: Iterable[int] | None = None,
        evidence: Mapping[int, str] | None = None,
        trace: Trace | None = None,
        config: AutofocusConfig | None = None,
    ) -> list[int]:
        """Rerank ``candidates`` (best first) for ``question``; returns a permutation of them.

        Args:
            retrieved: non-target nodes the retrieval found (step 4/5 symbol candidates); the
                "retrieved" fallback keeps only relations to these.
            evidence: per candidate, the graph path that satisfied the question's query (shown in its
                description: a candidate's own relations may not reach the facts a multi-hop question asks).
            target_type: the step-1 type, used as the pointwise prompt's node type.
            config: overrides the constructor's (budget, concurrency).
        """
        cfg = config or self.config
        trace = trace if trace is not None else Trace()
        ids = self._validate(candidates, skb, trace)
        depth = cfg.rerank.rerank_depth or len(ids)
        ids, below = ids[:depth], ids[depth:]  # below the depth: kept in their order
        session = Session(
            question=question,
            ids=ids,
            skb=skb,
            retrieved=set(retrieved or ()),
            config=cfg,
            describe=self.describe,
            cap_tokens=self.description_budget_tokens or cfg.rerank.context_budget_tokens,
            evidence={int(k): v for k, v in (evidence or {}).items() if v},
        )
        data: dict[str, Any] = {"method": self.method, "input": ids + below}
        order = self._rank(session, target_type, data) if len(ids) > 1 else list(range(len(ids)))
        if cfg.rerank.rerank_fusion != "none" and len(ids) > 1:
            data["reranker_output"] = [ids[i] for i in order] + below
            if cfg.rerank.rerank_fusion == "rrf":
                order = rrf_fuse(order, cfg.rerank.rerank_fusion_k)
            else:
                order = prior_fuse(order, data.get("scores"), cfg.rerank.rerank_prior_weight)
        if below:
            data["depth"] = len(ids)
        ranked = [ids[i] for i in order]
        if sorted(ranked) != sorted(ids):  # the sorts guarantee this; a failure is a bug, not LM noise
            raise RuntimeError(f"reranker {self.method} lost or duplicated candidates: {ids} -> {ranked}")
        ranked += below
        self._record(session, data, ranked, trace)
        return ranked

    def _rank(self, s: Session, target_type: str | None, data: dict[str, Any]) -> list[int]:
        raise NotImplementedError

    @staticmethod
    def _validate(candidates: Sequence[int], skb: SKB, trace: Trace) -> list[int]:
        ids: list[int] = []
        for c in candidates:
            if isinstance(c, bool) or not isinstance(c, numbers.Integral):
                raise ValueError(f"rerank: candidate ids must be integers, got {c!r}")
            if not 0 <= int(c) < skb.num_nodes:
                raise ValueError(
                    f"rerank: candidate id {int(c)} is not a node of the SKB (0..{skb.num_nodes - 1})"
                )
            ids.append(int(c))
        unique = list(dict.fromkeys(ids))
        if len(unique) < len(ids):
            trace.event(STEP, "duplicate_input", f"{len(ids) - len(unique)} repeated candidate ids removed")
        return unique

    def _record(self, s: Session, data: dict[str, Any], ranked: list[int], trace: Trace) -> None:
        used = Counter(LEVELS[level] for level in s.levels)
        overflow = {
            "a": any(level >= 1 for level in s.levels),  # a prompt with all relations was too long
            "b": any(level >= 2 for level in s.levels),  # ... and also with retrieved relations only
            "truncated": any(level >= 3 for level in s.levels),
        }
        data.update(
            output=ranked,
            prompts=s.prompts,
            levels=dict(used),
            overflow=overflow,
            issues={k: len(v) for k, v in s.issues.items()},
        )
        trace.data["rerank"] = data
        for key, kind in (
            ("a", "context_overflow_full"),
            ("b", "context_overflow_retrieved"),
            ("truncated", "context_truncated"),
        ):
            if overflow[key]:
                n = sum(1 for level in s.levels if level >= {"a": 1, "b": 2, "truncated": 3}[key])
                trace.event(STEP, kind, f"{n} of {len(s.levels)} prompts")
        for kind, details in s.issues.items():
            trace.event(STEP, kind, f"{len(details)}x: " + " | ".join(details[:3]))
        if s.outages:
            trace.degrade(STEP, f"{len(s.outages)} of {s.prompts} LM calls gave no answer; first: {s.outages[0]}")

    def _predict(
        self,
        s: Session,
        predictor: dspy.Predict,
        nodes: Sequence[int],
        build: Callable[[list[str]], dict[str, Any]],
    ) -> tuple[dspy.Prediction | None, list[str]]:
        """Call ``predictor`` on the fitted prompt, stepping down a level when the LM reports an
        overflow; returns the prediction, or None and the raw LM texts to salvage from."""

        def measure(inputs: dict[str, Any]) -> int:
            return estimate_tokens(_adapter().format(predictor.signature, predictor.demos, inputs))

        level, inputs = s.fit(nodes, build, measure)
        while True:
            with bounded_answers() as cuts:
                try:
                    check_deadline()
                    pred = predictor(**inputs)
                    error = None
                except Exception as exc:  # any LM/adapter failure degrades, never crashes
                    if level < 3 and is_context_overflow(exc):
                        s.issue("lm_context_overflow", f"at level {LEVELS[level]}: {exc}"[:200])
                        level, inputs = s.fit(nodes, build, measure, start=level + 1)
                        continue
                    error = exc
            if cuts:
                s.issue("answer_cut", describe_cuts(cuts))
            s.record_level(level)
            if error is None:
                return pred, []
            markers = [f"[{n}] {s.skb.type_of(n)}:" for n in nodes]
            texts = [cap_text(t) for t in _raw_texts(error, lm_of(predictor), markers)]
            s.failed("llm_error", error)
            return None, texts


def _ranks(order: Sequence[int]) -> np.ndarray:
    """Each input position's rank in a reranker's ``order`` of the positions (the inverse permutation)."""
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    return ranks


def rrf_fuse(order: Sequence[int], k: int = 60) -> list[int]:
    """Reciprocal rank fusion of the input order (0, 1, ...) with a reranker's ``order`` of those
    positions: a small LM's scores then reorder the list without discarding what steps 1-7 ranked
    first. Ties go to the reranker's order."""
    n = len(order)
    by_reranker = _ranks(order)
    fused = 1.0 / (k + 1 + np.arange(n)) + 1.0 / (k + 1 + by_reranker)
    return [int(i) for i in np.lexsort((by_reranker, -fused))]


def judge_logits(scores: Sequence[float]) -> np.ndarray:
    """The reranker's per-candidate scores as log-odds, clipped so a sure 0 or 1 stays finite: the
    evidence ``prior_fuse`` adds to, and what ``evaluation.fusion_fit`` fits its weight on."""
    p = np.clip(np.asarray(scores, dtype=np.float64), 1e-6, 1 - 1e-6)
    return np.log(p) - np.log1p(-p)


def prior_fuse(order: Sequence[int], scores: Sequence[float] | None, weight: float) -> list[int]:
    """The reranker's evidence plus a prior from steps 1-7: ``logit(score_i) - weight * ln(1 + i)``
    for the candidate at input position ``i``. Unlike rrf it keeps how sure the reranker is: a
    confident Yes lower down still rises, a near-tie keeps the retrieval order. Rerankers without
    per-candidate scores (listwise, pairwise) contribute ``-ln(1 + their rank)`` instead. Ties go to
    the reranker's order."""
    n = len(order)
    by_reranker = _ranks(order)
    if scores is not None and len(scores) == n:
        evidence = judge_logits(scores)
    else:
        evidence = -np.log1p(by_reranker.astype(np.float64))
    fused = evidence - weight * np.log1p(np.arange(n, dtype=np.float64))
    return [int(i) for i in np.lexsort((by_reranker, -fused))]


def rerank_candidates(
    reranker: dspy.Module | None, question: str, ids: list[int], skb: SKB, target_type: str | list[str] | None,
    retrieved: set[int], trace: Trace, evidence: dict[int, str] | None = None, config: AutofocusConfig | None = None,
) -> list[int]:
    """Step 8 on ``ids`` as the systems run it, timed under ``8_rerank``; without a reranker (or
    candidates) the ids as they are (a reranker keeps the order where it fails). ``evidence`` and
    ``config`` (a trial's settings instead of the reranker's own) are AF-Retriever's."""
    if reranker is None or not ids:
        return [int(i) for i in ids]
    with trace.step("8_rerank"):
        ranked = reranker(
            question=question, candidates=list(ids), skb=skb, target_type=target_type, retrieved=retrieved,
            evidence=evidence, trace=trace, config=config,
        )
    return [int(i) for i in ranked]
