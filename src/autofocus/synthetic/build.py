"""Synthesise QA pairs from the SKB alone: sample patterns, self-check them, verbalise, filter.

Order of work (cheap before costly): sample a pattern around a target node of the type furthest
behind its share, execute it exactly, drop duplicates (same type and answer set), run the
program's own steps 3-5 on its gold Cypher (the self-check), and only then ask the LM for a
question, which must pass ``verbalise.question_problem`` and, with ``round_trip``, the program's
own steps 1-5 on the question as written (they must ground its answers). Sampling is
single-threaded from one seeded generator, and questions are kept in sampling order, so a seed and
a deterministic LM give the same file; LM calls run in threads.

The self-check parses the gold Cypher with ``parse_cypher`` and grounds it by the constants'
*names* (vector search with exact-name-first, one candidate per constant: ``l_max = 1``), as the
program would; a pattern whose names are ambiguous or whose filters the program reads otherwise
fails it and never reaches a question. Nothing here opens a QA file.

A malformed LM answer costs one pattern. An LM that gives no answer (``is_lm_outage``: down, timing
out, refusing the key) ``OUTAGES_TO_STOP`` times in a row stops the synthesis (``stopped``) instead of
trying every pattern the graph has, each after a full LM timeout; the patterns not asked then are
not counted as verbalised or rejected.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dspy
import numpy as np

from autofocus.config import AutofocusConfig
from autofocus.cypher import to_cypher
from autofocus.options import SynthOptions
from autofocus.program.steps.llm_call import is_lm_outage
from autofocus.redact import redact
from autofocus.signatures import StateFact, VerbalizePattern
from autofocus.synthetic.clues import FACT_DOC_CHARS, FACT_SIMILAR, ClueFinder, fact_problem, tidy_fact
from autofocus.synthetic.paraphrase import Paraphraser, ParaphraseWriter
from autofocus.synthetic.patterns import Pattern, PatternSampler, pattern_key
from autofocus.synthetic.templates import TemplateWriter
from autofocus.synthetic.verbalise import clean_question, describe, question_problem
from autofocus.trace import Trace
from autofocus.usage import UsageCallback, map_concurrently, usage_scope

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike

Tick = Callable[[str, int], None]  # (stage, amount)
OUTAGES_TO_STOP = 3  # LM outages in a row that stop a synthesis: the LM is down, not one request unlucky


@dataclass
class SyntheticPair:
    """One kept question with the pattern and gold Cypher behind it."""

    id: int
    question: str
    pattern: Pattern
    cypher: str
    description: str


@dataclass
class SynthesisResult:
    pairs: list[SyntheticPair]
    rejected: Counter = field(default_factory=Counter)  # reason -> patterns dropped
    sampled: int = 0  # sampling attempts
    self_checked: int = 0  # patterns that passed the self-check
    verbalised: int = 0  # patterns sent to the LM
    facts_asked: int = 0  # fact clues asked of the LM (``clue_kind="fact"``), one call each
    round_trips: int = 0  # questions put through the program's steps 1-5 (``round_trip``)
    lm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    lm_seconds: float = 0.0
    settings: dict[str, Any] = field(default_factory=dict)
    stopped: str | None = None  # why the synthesis stopped before ``n`` questions: an LM outage

    def coverage(self) -> dict[str, dict[str, int]]:
        """Questions per target type, triplets per edge type, questions per shape and with filters."""
        return {
            "target_types": dict(Counter(p.pattern.target_type for p in self.pairs)),
            "edge_types": dict(Counter(e for p in self.pairs for e in p.pattern.edge_types)),
            "shapes": dict(Counter(p.pattern.shape for p in self.pairs)),
            "filters": dict(Counter(c.op for p in self.pairs for _, c in p.pattern.filters)),
            "text_clues": sum(p.pattern.clue is not None for p in self.pairs),
        }

    def summary(self) -> dict[str, Any]:
        return {
            "questions": len(self.pairs),
            "stopped": self.stopped,
            "sampled": self.sampled,
            "self_checked": self.self_checked,
            "verbalised": self.verbalised,
            "facts_asked": self.facts_asked,
            "round_trips": self.round_trips,
            "rejected": dict(self.rejected),
            "lm_calls": self.lm_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "minutes": round(self.seconds / 60, 2),
            "lm_minutes": round(self.lm_seconds / 60, 2),
            "coverage": self.coverage(),
            "settings": self.settings,
        }


def type_shares(kb: KnowledgeBaseLike, n: int) -> dict[str, float]:
    """Each candidate type's share of the questions: its share of the candidate nodes, at least 1/n."""
    counts = {t: len(kb.skb.ids_of_type(t)) for t in kb.skb.schema.answer_types}
    counts = {t: c for t, c in counts.items() if c}
    total = sum(counts.values()) or 1
    floor = 1 / max(n, 1)
    shares = {t: max(c / total, floor) for t, c in counts.items()}
    norm = sum(shares.values())
    return {t: s / norm for t, s in shares.items()}


class SelfCheck:
    """The program's own steps 3-5 on a gold Cypher query, constants found by name (``l_max = 1``)."""

    def __init__(self, kb: KnowledgeBaseLike) -> None:
        from autofocus.program.systems.afr import AutofocusRetriever
        from autofocus.runtime import assemble

        self.kb = kb
        # the gold query is schema-valid and grounds: nothing to repair or relax
        self.config = AutofocusConfig(l_max=1, steps="1-5", reranker="none", repairs=[], relax=[])
        program = assemble("afr", kb, self.config, lms=False)  # steps 3-5 only: no LM
        assert isinstance(program, AutofocusRetriever)
        self.program = program

    @staticmethod
    def _query_text(pattern: Pattern) -> str:
        return " ".join(_names(pattern))

    def prefetch(self, patterns: list[Pattern]) -> None:
        """Embed every search string the checks will need in one batch (the embedding cache keeps them)."""
        texts = {t for p in patterns for t in (self._query_text(p), *_names(p))}
        if texts:
            self.kb.embed_queries(sorted(texts))

    def __call__(self, pattern: Pattern, cypher: str) -> bool:
        found = self.program.retrieve(self._query_text(pattern), pattern.target_type, cypher, self.config)
        return np.array_equal(np.sort(np.asarray(found.grounded, np.int64)), pattern.answers)


def _names(pattern: Pattern) -> list[str]:
    return [str(pattern.query.symbols[v].name_value()) for v in pattern.constants]


class _Stream:
    """Self-checked, deduplicated patterns in sampling order, target types kept in proportion."""

    def __init__(self, kb: KnowledgeBaseLike, sampler: PatternSampler, shares: dict[str, float], seed: int,
                 max_attempts: int, result: SynthesisResult, tick: Tick | None) -> None:
        self.sampler, self.shares, self.result, self.tick = sampler, dict(shares), result, tick
        self.rng = np.random.default_rng(seed)
        self.check = SelfCheck(kb)
        self.counts: Counter = Counter()
        self.failures: Counter = Counter()
        self.seen: set[tuple[str, tuple[int, ...]]] = set()
        self.max_attempts = max_attempts

    def next_type(self) -> str | None:
        live = [t for t in self.shares if self.failures[t] < 50 * (self.counts[t] + 1)]
        if not live:
            return None
        return min(live, key=lambda t: ((self.counts[t] + 1) / self.shares[t], t))

    def _sample(self, k: int) -> list[Pattern]:
        """Up to ``k`` new distinct patterns; a type counts as served once sampled (types stay in step)."""
        out: list[Pattern] = []
        res = self.result
        while len(out) < k and res.sampled < self.max_attempts:
            t = self.next_type()
            if t is None:
                break
            res.sampled += 1
            pattern = self.sampler.sample(t, self.rng)
            if pattern is not None and pattern_key(pattern) in self.seen:
                res.rejected["duplicate answer set"] += 1
                pattern = None
            if pattern is None:
                self.failures[t] += 1
                continue
            self.seen.add(pattern_key(pattern))
            self.counts[t] += 1
            self.sampler.count_edges(pattern)
            out.append(pattern)
        return out

    def take(self, k: int) -> list[tuple[Pattern, str]]:
        """Up to ``k`` patterns that passed the self-check, with their gold Cypher."""
        out: list[tuple[Pattern, str]] = []
        while len(out) < k:
            sampled = self._sample(k - len(out))
            if not sampled:
                break
            self.check.prefetch(sampled)
            for pattern in sampled:
                cypher = to_cypher(pattern.query)
                if not self.check(pattern, cypher):
                    self.result.rejected["self-check failed"] += 1
                    self.counts[pattern.target_type] -= 1
                    self.failures[pattern.target_type] += 1
                    continue
                self.result.self_checked += 1
                out.append((pattern, cypher))
                if self.tick:
                    self.tick("patterns", 1)
        return out


def synthesise(
    kb: KnowledgeBaseLike,
    n: int,
    options: SynthOptions | None = None,
    *,
    round_trip: Any | None = None,
    oversample: float = 1.25,
    max_attempts: int | None = None,
    tick: Tick | None = None,
) -> SynthesisResult:
    """``n`` question/answer pairs made from ``kb``'s graph, verbalised by the configured DSPy LM.

    Args:
        kb: the knowledge base (``autofocus.kb.KnowledgeBase``); its QA files are never read.
        n: questions wanted (fewer when the graph runs out of distinct patterns).
        options: the sampler's and the checks' settings (``SynthOptions``: seed, answer-set size,
            triplets, filters, clues, threads); its ``round_trip`` flag, ``out`` and ``chat`` are
            ``synthetic.run``'s. A fact-clue question's round trip counts its pattern's whole answer
            set, since its clue narrows by text, not by graph.
        round_trip: a program (``AutofocusRetriever``) whose own steps 1-5 must ground the question's
            answers from the question as written, or the question is dropped: it catches questions
            the LM wrote wrong (a relation turned round, a condition garbled). Steps 1-2 are LM calls.
        oversample: patterns verbalised per missing question (questions can be rejected).
        max_attempts: sampling attempts before giving up (default ``200 n + 1000``).
        tick: ``(stage, amount)`` progress callback; stages ``patterns`` and ``questions``.
    """
    o = options or SynthOptions()
    seed, max_answers, max_triplets, filter_rate = o.seed, o.max_answers, o.max_triplets, o.filter_rate
    clue_share, clue_kind, round_trip_precision, threads = o.clue_share, o.clue_kind, o.round_trip_precision, o.threads
    start = time.perf_counter()
    settings = {"n": n, "seed": seed, "max_answers": max_answers, "max_triplets": max_triplets,
                "filter_rate": filter_rate, "clue_share": clue_share, "clue_kind": clue_kind,
                "round_trip": round_trip is not None,
                "round_trip_precision": round_trip_precision if round_trip is not None else None,
                "lm": getattr(dspy.settings.lm, "model", None)}
    result = SynthesisResult(pairs=[], settings=settings)
    sampler = PatternSampler(kb.skb, max_answers=max_answers, max_triplets=max_triplets, filter_rate=filter_rate)
    stream = _Stream(kb, sampler, type_shares(kb, n), seed, max_attempts or 200 * n + 1000, result, tick)
    clues, clue_rng = ClueFinder(kb.skb, seed), np.random.default_rng([seed, 1])
    if clue_kind not in ("fact", "phrase"):
        raise ValueError(f"clue_kind must be 'fact' or 'phrase', not {clue_kind!r}")
    if o.writer not in ("lm", "template", "paraphrase"):
        raise ValueError(f"writer must be 'lm', 'template' or 'paraphrase', not {o.writer!r}")
    template = (TemplateWriter(kb.skb, seed=seed) if o.writer == "template"
                else ParaphraseWriter(kb.skb, seed=seed) if o.writer == "paraphrase" else None)
    if template is not None:
        clue_kind = "paraphrase" if o.writer == "paraphrase" else "phrase"  # a fact clue is the LM's words
        settings.update(clue_kind=clue_kind, writer=o.writer, lm=None)
    paraphraser = Paraphraser(kb.skb, seed=seed) if clue_kind == "paraphrase" else None
    verbalizer, stater = dspy.Predict(VerbalizePattern), dspy.Predict(StateFact)
    kb_description = kb.skb.schema.description or f"A knowledge base named {kb.skb.schema.name}."
    texts: set[str] = set()

    lock, streak = threading.Lock(), [0]  # LM outages in a row

    def ask(item: tuple[Pattern, str]) -> tuple[str | None, str | None]:
        """(the question or None, the pattern's text or why it was rejected); (None, None): not asked."""
        if result.stopped:
            return None, None
        try:
            if item[0].clue_kind == "fact" and item[0].clue_answer is not None:
                state_fact(item[0])
            text = describe(item[0], kb.skb)
            if template is not None:
                question = template(item[0])
            else:
                pred = verbalizer(kb_description=kb_description, answer_type=item[0].target_type, pattern=text)
                question = clean_question(str(pred.question))
            if round_trip is not None and question_problem(question, item[0], kb.skb) is None:
                missed = check_round_trip(question, item[0])
                if missed is not None:
                    return None, missed
        except Exception as exc:  # a malformed or failed LM answer costs one pattern, not the run
            if is_lm_outage(exc):
                with lock:
                    streak[0] += 1
                    if streak[0] >= OUTAGES_TO_STOP and result.stopped is None:
                        result.stopped = (f"the LM gave no answer {OUTAGES_TO_STOP} times in a row, the last: "
                                          + redact(f"{type(exc).__name__}: {exc}")[:500])
            return None, f"LM error: {type(exc).__name__}"
        finally:
            if tick:
                tick("questions", 1)
        with lock:
            streak[0] = 0
        return question, text

    def check_round_trip(question: str, pattern: Pattern) -> str | None:
        """Why the program's own steps 1-5 on the question miss its answers or ground far more than
        them (``None``: neither)."""
        with lock:
            result.round_trips += 1
        trace = Trace(system="afr", question=question)
        target_type, cypher = round_trip.llm_steps(question, trace)
        if trace.degraded:
            return f"round trip: LM error in {trace.degraded[0].step}"
        found = round_trip.retrieve(question, target_type, cypher, round_trip.config, trace)
        grounded = np.asarray(found.grounded, np.int64)
        if not np.isin(pattern.asked, grounded).all():
            return "round trip: the question's own query misses its answers"
        if pattern.answers.size < round_trip_precision * grounded.size:
            return "round trip: the question's own query grounds far more than its answers"
        return None

    def state_fact(pattern: Pattern) -> None:
        """Narrows the pattern to its clue answer by a fact the LM reads in that answer's text, or
        leaves it a plain question when the fact cannot single the answer out."""
        node = int(pattern.clue_answer)
        others = [int(a) for a in pattern.answers if a != node]
        with lock:
            result.facts_asked += 1
        pred = stater(node_type=pattern.target_type, text=kb.skb.doc(node)[:FACT_DOC_CHARS],
                      similar=[kb.skb.name(o) for o in others[:FACT_SIMILAR]])
        fact = tidy_fact(clean_question(str(pred.fact)), kb.skb.name(node), kb.skb.schema.node_types)
        problem = fact_problem(fact, node, others, kb.skb)
        if problem is None:
            pattern.clue = fact
            return
        pattern.clue_answer = None
        with lock:
            result.rejected[f"no fact clue ({problem}): kept as a plain question"] += 1

    callbacks = list(dspy.settings.get("callbacks") or [])
    if not any(isinstance(c, UsageCallback) for c in callbacks):
        callbacks.append(UsageCallback())  # counts the LM calls (a dspy.context hides later configure calls)
    with dspy.context(callbacks=callbacks), usage_scope() as usage:
        while len(result.pairs) < n:
            batch = stream.take(math.ceil((n - len(result.pairs)) * oversample))
            if not batch:
                break
            clued = sum(p.pattern.clue is not None for p in result.pairs)
            for i, (pattern, _) in enumerate(batch):  # a quota, as for the types: clues stay in step
                if len(pattern.answers) >= 2 and clued < clue_share * (len(result.pairs) + i + 1):
                    if clue_kind == "fact":  # the LM states the fact when the pattern is asked
                        pattern.clue_kind, pattern.clue_answer = "fact", int(clue_rng.choice(pattern.answers))
                        clued += 1
                        continue
                    finder = paraphraser or clues
                    found = finder.clue(pattern.answers, _names(pattern), clue_rng)
                    if found is None:
                        result.rejected["no text clue: kept as a plain question"] += 1
                    else:
                        pattern.clue_answer, pattern.clue = found
                        pattern.clue_kind = clue_kind
                        clued += 1
            result.verbalised += len(batch)
            t0 = time.perf_counter()
            answers = map_concurrently(ask, batch, threads)
            result.lm_seconds += time.perf_counter() - t0
            for (pattern, cypher), (question, text) in zip(batch, answers, strict=True):
                if text is None:  # not asked: the LM was down
                    result.verbalised -= 1
                    continue
                if len(result.pairs) >= n:
                    break
                problem = text if question is None else question_problem(question, pattern, kb.skb)
                if problem is None and question.lower() in texts:
                    problem = "duplicate question"
                if problem is not None:
                    result.rejected[problem] += 1
                    continue
                texts.add(question.lower())
                result.pairs.append(SyntheticPair(len(result.pairs), question, pattern, cypher, text))
            if result.stopped:
                break
    result.rejected.update(sampler.stats.rejected)
    result.lm_calls, result.input_tokens, result.output_tokens = usage.calls, usage.input_tokens, usage.output_tokens
    result.seconds = time.perf_counter() - start
    return result
