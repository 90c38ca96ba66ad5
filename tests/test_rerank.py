"""Step 8 rerankers with scripted LMs: orders, malformed output, context fallbacks, permutations."""

from __future__ import annotations

import math
import random
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import dspy
import pytest
from dspy import lm15
from dspy.lm15 import Message, Response, Usage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autofocus.config import AutofocusConfig
from autofocus.program.steps.rerank import complete_ranking, salvage_ids, salvage_score
from autofocus.program.steps.rerankers import (
    ListwiseReranker,
    PairwiseReranker,
    PointwiseReranker,
    TournamentReranker,
    make_reranker,
)
from autofocus.trace import Trace
from autofocus.usage import install_usage_callback
from tests.skb_factory import make_skb

N_PAPERS = 30
SKB_ = make_skb(
    ["paper", "author"],
    [0] * N_PAPERS + [1] * 5,
    [(p, "written_by", N_PAPERS + p % 5) for p in range(N_PAPERS)],
    {"written_by": ("paper", "author")},
    candidate_types=["paper"],
)
RETRIEVED = {N_PAPERS, N_PAPERS + 1}
LONG, SHORT = "L" * 4000, "S" * 200  # relation text at the "full" and "retrieved" levels
DOC = "D" * 400


class Describer:
    """Descriptions whose size depends on the relation level, like ``describe_node``."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str, frozenset[int] | None, int]] = []
        self.lock = threading.Lock()

    def __call__(
        self, skb: Any, node_id: int, *, relations: str, retrieved: set[int] | None, budget_tokens: int
    ) -> str:
        with self.lock:
            self.calls.append(
                (node_id, relations, frozenset(retrieved) if retrieved is not None else None, budget_tokens)
            )
        rel = {"full": f" relations: {LONG}", "retrieved": f" relations: {SHORT}", "none": ""}[relations]
        return f"paper number {node_id}. {DOC}{rel}"[: budget_tokens * 4]


class Engine:
    """A DSPy engine answering from the prompt text with ``answer(user_text) -> raw LM text``."""

    def __init__(self, answer: Callable[[str], str], delay: float = 0.0) -> None:
        self.answer, self.delay = answer, delay
        self.calls = 0
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()

    def complete(self, request: Any) -> Response:
        with self.lock:
            self.calls += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:
                time.sleep(self.delay)
            text = self.answer(request.messages[-1].text or "")
        finally:
            with self.lock:
                self.in_flight -= 1
        return Response(id=None, model=request.model, message=Message.assistant(text), finish_reason="stop",
                        usage=Usage(input_tokens=1, output_tokens=1))  # fmt: skip

    def close(self) -> None:
        pass


def scripted(answer: Callable[[str], str], delay: float = 0.0) -> tuple[dspy.LM, Engine]:
    engine = Engine(answer, delay)
    return dspy.LM("scripted/rerank-test", engine=engine, cache=False, num_retries=0), engine


def field(name: str, value: object) -> str:
    return f"[[ ## {name} ## ]]\n{value}\n\n[[ ## completed ## ]]"


def first_id(text: str, field_name: str) -> int:
    m = re.search(rf"\[\[ ## {field_name} ## \]\]\n\[(\d+)\]", text)
    assert m, text[-500:]
    return int(m.group(1))


def pointwise_answer(scores: dict[int, object]) -> Callable[[str], str]:
    return lambda text: field("score", scores[first_id(text, "candidate")])


def comparator_answer(keys: dict[int, float], tie: str = "neither") -> Callable[[str], str]:
    """Answers with the id of the higher key; on equal keys with ``tie`` (an invalid answer)."""

    def answer(text: str) -> str:
        a, b = first_id(text, "first"), first_id(text, "second")
        if keys[a] == keys[b]:
            return field("better_id", tie)
        return field("better_id", a if keys[a] > keys[b] else b)

    return answer


def run(reranker: dspy.Module, lm: dspy.LM, candidates: list[int], **kwargs: Any) -> tuple[list[int], Trace]:
    trace = Trace()
    with dspy.context(lm=lm):
        out = reranker(question="Which paper is best?", candidates=candidates, skb=SKB_, target_type="paper",
                       retrieved=RETRIEVED, trace=trace, **kwargs)  # fmt: skip
    return out, trace


def config(**kw: Any) -> AutofocusConfig:
    return AutofocusConfig(**{"context_budget_tokens": 100_000, "rerank_depth": None, **kw})


def kinds(trace: Trace) -> set[str]:
    return {e.kind for e in trace.events}


# --- pointwise ------------------------------------------------------------------------------------


def test_pointwise_sorts_by_score_concurrently_and_ties_keep_the_input_order() -> None:
    candidates = [5, 3, 9, 1, 7, 2, 8, 4]
    scores = {5: 0.2, 3: 0.9, 9: 0.5, 1: 0.9, 7: 0.0, 2: 0.5, 8: 1.0, 4: 0.2}
    lm, engine = scripted(pointwise_answer(scores), delay=0.02)
    out, trace = run(PointwiseReranker(config(concurrency=4), describe=Describer()), lm, candidates)
    assert out == [8, 3, 1, 9, 2, 5, 4, 7]
    assert engine.calls == len(candidates) and engine.max_in_flight > 1
    data = trace.data["rerank"]
    assert data["scores"] == [scores[c] for c in candidates]
    assert data["output"] == out and data["prompts"] == len(candidates) and data["levels"] == {"full": 8}
    assert not trace.events


def test_pointwise_malformed_scores_are_salvaged_or_neutral() -> None:
    candidates = [1, 2, 3, 4]
    raw = {1: "0.3", 2: "The numeric score of this paper is: 0.8", 3: "definitely relevant", 4: "7.5"}

    def answer(text: str) -> str:
        node = first_id(text, "candidate")
        return raw[node] if node in (2, 3) else field("score", raw[node])  # 2 and 3: no field markers

    lm, _ = scripted(answer)
    out, trace = run(PointwiseReranker(config(), describe=Describer()), lm, candidates)
    # 4 -> clipped to 1.0; 2 -> salvaged 0.8; 3 -> neutral 0.5; 1 -> 0.3
    assert out == [4, 2, 3, 1]
    assert trace.data["rerank"]["scores"] == [0.3, 0.8, 0.5, 1.0]
    assert {"salvaged_score", "neutral_score", "llm_error"} <= kinds(trace)


def test_pointwise_yes_no_scoring_with_signature_fallback_and_usage() -> None:
    install_usage_callback()
    candidates = [4, 6, 2, 9]
    p_yes = {4: 0.1, 6: 0.7, 2: None, 9: 0.95}  # 2: the server could not score it
    seen: list[list[dict[str, Any]]] = []

    def scorer(lm: Any, conversations: list[list[dict[str, Any]]]) -> list[float | None]:
        seen.extend(conversations)
        return [
            p_yes[int(re.search(r"Candidate: paper number (\d+)\.", c[-1]["content"]).group(1))] for c in conversations
        ]

    lm, engine = scripted(pointwise_answer({2: 0.8}))
    reranker = PointwiseReranker(config(), describe=Describer(), scoring="yes_no", yes_scorer=scorer)
    trace = Trace()
    with dspy.context(lm=lm), trace.step("8_rerank"):
        out = reranker(question="Which paper?", candidates=candidates, skb=SKB_, trace=trace)
    assert out == [9, 2, 6, 4]
    assert trace.data["rerank"]["scored_by"] == ["yes_no", "yes_no", "signature", "yes_no"]
    assert engine.calls == 1
    # shared prefix first (KV-cache reuse on the server), candidate last
    prefixes = {c[-1]["content"].split("Candidate")[0] for c in seen}
    assert len(prefixes) == 1 and all(c[0]["role"] == "system" for c in seen)
    # the signature call; a yes/no scorer counts its own requests (``local_lm.scoring``: one per batch)
    assert trace.steps["8_rerank"].lm_calls == 1


def test_pointwise_demos_are_earlier_turns_of_every_yes_no_chat() -> None:
    seen: list[list[dict[str, Any]]] = []

    def scorer(lm: Any, conversations: list[list[dict[str, Any]]]) -> list[float | None]:
        seen.extend(conversations)
        return [0.5] * len(conversations)

    lm, _ = scripted(pointwise_answer({}))
    reranker = PointwiseReranker(config(), describe=Describer(), scoring="yes_no", yes_scorer=scorer)
    reranker.score.demos = [
        dspy.Example(question="Who wrote it?", node_type="author", candidate="Ann (author)", score=1.0),
        dspy.Example(question="Who wrote it?", node_type="author", candidate="Bob (author)", score=0.0),
        dspy.Example(question="no score here", candidate="x"),  # another shape: left out
    ]
    run(reranker, lm, [1, 2])
    assert len(seen) == 2
    for chat in seen:
        assert [m["role"] for m in chat] == ["system", "user", "assistant", "user", "assistant", "user"]
        assert [m["content"] for m in chat if m["role"] == "assistant"] == ["Yes", "No"]
        assert "Candidate: Ann (author)" in chat[1]["content"] and chat[-1]["content"].startswith("Query: ")
    assert seen[0][:5] == seen[1][:5]  # the same prefix for every candidate


def test_pointwise_yes_no_unavailable_uses_the_signature() -> None:
    lm, engine = scripted(pointwise_answer({1: 0.1, 2: 0.9}))
    reranker = PointwiseReranker(
        config(), describe=Describer(), scoring="yes_no", yes_scorer=lambda lm, c: None
    )
    out, trace = run(reranker, lm, [1, 2])
    assert out == [2, 1] and engine.calls == 2
    assert "yes_no_unavailable" in kinds(trace)


# --- listwise -------------------------------------------------------------------------------------

CANDS = [11, 4, 17, 2, 25, 8]


@pytest.mark.parametrize(
    ("raw", "expected", "events"),
    [
        (field("ranking", [17, 2, 11, 4, 25, 8]), [17, 2, 11, 4, 25, 8], set()),
        (field("ranking", [25, 8]), [25, 8, 11, 4, 17, 2], {"ranking_missing_ids"}),
        (
            field("ranking", [8, 8, 17, 8]),
            [8, 17, 11, 4, 2, 25],
            {"ranking_duplicate_ids", "ranking_missing_ids"},
        ),
        (
            field("ranking", [99, 2, 1234, 4]),
            [2, 4, 11, 17, 25, 8],
            {"ranking_unknown_ids", "ranking_missing_ids"},
        ),
        ("Best is 17, then 25 and 11. Year 2019 is irrelevant.", [17, 25, 11, 4, 2, 8], {"salvaged_ranking"}),
        ("I cannot rank these.", CANDS, {"unparsable_ranking", "llm_error"}),
    ],
)
def test_listwise_validates_and_salvages(raw: str, expected: list[int], events: set[str]) -> None:
    lm, engine = scripted(lambda text: raw)
    out, trace = run(ListwiseReranker(config(), describe=Describer()), lm, CANDS)
    assert out == expected
    assert events <= kinds(trace)
    if not events:
        assert not trace.events and engine.calls == 1
    prompt = lm.history[0]["messages"][-1]["content"]
    assert all(f"[{c}] paper: paper number {c}." in prompt for c in CANDS)


def test_listwise_salvages_the_first_answer_when_the_json_retry_is_worse() -> None:
    answers = iter(["Ranking: 8 > 2 > 4", "{}"])  # ChatAdapter answer, then the JSONAdapter retry
    lm, engine = scripted(lambda text: next(answers))
    out, trace = run(ListwiseReranker(config(), describe=Describer()), lm, CANDS)
    assert engine.calls == 2
    assert out == [8, 2, 4, 11, 17, 25]
    assert "salvaged_ranking" in kinds(trace)


# --- pairwise -------------------------------------------------------------------------------------


def keys_for(candidates: list[int], seed: int, ties: bool = False) -> dict[int, float]:
    rng = random.Random(seed)
    return {c: float(rng.randint(0, 4)) if ties else rng.random() for c in candidates}


def stable_order(candidates: list[int], keys: dict[int, float]) -> list[int]:
    return sorted(candidates, key=lambda c: (-keys[c], candidates.index(c)))


def test_pairwise_insertion_sort_follows_the_comparator_with_about_k_log_k_calls() -> None:
    candidates = random.Random(1).sample(range(N_PAPERS), 20)
    keys = keys_for(candidates, 1)
    lm, engine = scripted(comparator_answer(keys))
    out, trace = run(PairwiseReranker(config(), describe=Describer()), lm, candidates)
    assert out == stable_order(candidates, keys)
    data = trace.data["rerank"]
    assert data["rounds"] == engine.calls == len(data["comparisons"]) == data["prompts"]
    assert 19 <= engine.calls <= sum(math.ceil(math.log2(i + 1)) for i in range(1, 20))  # <= 69
    for a, b, outcome in data["comparisons"]:
        assert candidates.index(a) < candidates.index(b)  # the pre-rerank favourite is shown first
        assert outcome == (1 if keys[a] > keys[b] else -1)


def test_pairwise_invalid_answers_are_ties_that_keep_the_order() -> None:
    candidates = [3, 1, 4, 5, 9, 2, 6]
    keys = keys_for(candidates, 7, ties=True)
    lm, _ = scripted(comparator_answer(keys, tie="the first one"))
    out, trace = run(PairwiseReranker(config(), describe=Describer()), lm, candidates)
    assert out == stable_order(candidates, keys)
    assert kinds(trace) == {"llm_error", "unparsable_comparison"}  # "the first one" names no candidate


def test_pairwise_salvages_an_id_from_prose() -> None:
    lm, _ = scripted(lambda text: f"Clearly {first_id(text, 'second')} fits better.")
    out, trace = run(PairwiseReranker(config(), describe=Describer()), lm, [1, 2, 3])
    assert out == [3, 2, 1]  # the later candidate always wins
    assert "salvaged_comparison" in kinds(trace)


@pytest.mark.parametrize("seed", range(4))
def test_tournament_matches_insertion_sort_with_far_fewer_rounds(seed: int) -> None:
    candidates = random.Random(seed).sample(range(N_PAPERS), 20)
    keys = keys_for(candidates, seed, ties=seed % 2 == 1)
    results = {}
    for cls in (PairwiseReranker, TournamentReranker):
        lm, engine = scripted(comparator_answer(keys), delay=0.003)
        out, trace = run(cls(config(concurrency=8), describe=Describer()), lm, candidates)
        results[cls.method] = (out, trace.data["rerank"]["rounds"], engine)
    assert results["tournament"][0] == results["pairwise"][0] == stable_order(candidates, keys)
    assert results["pairwise"][1] >= 40
    assert results["tournament"][1] <= 10
    assert results["tournament"][2].max_in_flight > 1


# --- context budget -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "level", "events"),
    [
        (100_000, "full", set()),
        (1500, "retrieved", {"context_overflow_full"}),
        (700, "none", {"context_overflow_full", "context_overflow_retrieved"}),
        (450, "truncated", {"context_overflow_full", "context_overflow_retrieved", "context_truncated"}),
    ],
)
def test_fallback_chain_on_a_small_budget(budget: int, level: str, events: set[str]) -> None:
    describer = Describer()
    lm, _ = scripted(lambda text: field("ranking", [2, 1, 3]))
    out, trace = run(
        ListwiseReranker(config(context_budget_tokens=budget), describe=describer), lm, [1, 2, 3]
    )
    assert out == [2, 1, 3]
    data = trace.data["rerank"]
    assert data["levels"] == {level: 1}
    assert kinds(trace) == events
    assert data["overflow"]["a"] == (level != "full") and data["overflow"]["b"] == (
        level in ("none", "truncated")
    )
    prompt = lm.history[-1]["messages"][-1]["content"]
    assert (LONG in prompt) == (level == "full") and (SHORT in prompt) == (level == "retrieved")
    assert len(prompt) // 4 <= budget
    retrieved_calls = [c for c in describer.calls if c[1] == "retrieved"]
    assert all(c[2] == frozenset(RETRIEVED) for c in retrieved_calls)
    assert bool(retrieved_calls) == (level != "full")


def test_default_describer_and_fallbacks_on_a_real_skb(tiny_skb: Any) -> None:
    """``describe_node`` on the tiny SKB: full descriptions when they fit, then fewer relations."""
    from autofocus.skb.documents import describe_node

    papers = [0, 1, 2, 3, 11]
    lm, _ = scripted(lambda text: field("ranking", papers[::-1]))
    levels = []
    for budget in (100_000, 1200, 900, 700, 500, 400, 300):
        reranker = ListwiseReranker(config(context_budget_tokens=budget))
        trace = Trace()
        with dspy.context(lm=lm):
            out = reranker(
                question="Which paper?", candidates=papers, skb=tiny_skb, retrieved={4}, trace=trace
            )
        assert out == papers[::-1]
        (level,) = trace.data["rerank"]["levels"]
        levels.append(level)
        prompt = lm.history[-1]["messages"][-1]["content"]
        if level in ("full", "retrieved", "none"):
            for p in papers:
                text = describe_node(tiny_skb, p, relations=level, retrieved={4} if level == "retrieved" else None,
                                     budget_tokens=budget)  # fmt: skip
                assert f"[{p}] paper: {text}" in prompt
    order = {name: i for i, name in enumerate(("full", "retrieved", "none", "truncated"))}
    assert levels[0] == "full" and levels[-1] != "full"
    assert [order[x] for x in levels] == sorted(order[x] for x in levels)


def test_an_lm_overflow_error_steps_down_a_level() -> None:
    def answer(text: str) -> str:
        if LONG in text:
            raise lm15.ContextLengthError("maximum context length exceeded")
        return field("better_id", first_id(text, "second"))

    lm, _ = scripted(answer)
    out, trace = run(PairwiseReranker(config(), describe=Describer()), lm, [1, 2])
    assert out == [2, 1]
    assert trace.data["rerank"]["levels"] == {"retrieved": 1}
    assert {"lm_context_overflow", "context_overflow_full"} <= kinds(trace)


# --- entry point ----------------------------------------------------------------------------------


def test_make_reranker_auto_and_named_predictors() -> None:
    assert make_reranker(AutofocusConfig(reranker="auto"), "local") is None  # steps 1-7's order for the offline LMs
    local = make_reranker(AutofocusConfig(reranker="pointwise"), "local")
    assert isinstance(local, PointwiseReranker) and local.scoring == "yes_no"
    hosted = make_reranker(AutofocusConfig(reranker="auto"), "openai/gpt-4o-mini")
    assert isinstance(hosted, ListwiseReranker)
    assert make_reranker(AutofocusConfig(reranker="none"), "local") is None
    assert make_reranker(AutofocusConfig(reranker="pointwise"), "openai/x").scoring == "signature"
    tour = make_reranker(AutofocusConfig(reranker="tournament"), "openai/x", seeds=4, anchors=1, group_size=6)
    assert isinstance(tour, TournamentReranker) and tour.seeds == 4
    names = {
        cls: [n for n, _ in make_reranker(AutofocusConfig(reranker=cls), "openai/x").named_predictors()]
        for cls in ("pointwise", "listwise", "pairwise", "tournament")
    }
    assert names == {
        "pointwise": ["score"],
        "listwise": ["rank"],
        "pairwise": ["compare"],
        "tournament": ["compare"],
    }
    with pytest.raises(ValueError, match="group_size"):
        TournamentReranker(seeds=6, anchors=2, group_size=7)


def test_input_validation_and_duplicates() -> None:
    lm, _ = scripted(lambda text: field("ranking", [3, 1]))
    reranker = ListwiseReranker(config(), describe=Describer())
    out, trace = run(reranker, lm, [1, 3, 1])
    assert out == [3, 1] and "duplicate_input" in kinds(trace)
    with pytest.raises(ValueError, match="not a node"):
        run(reranker, lm, [1, 10_000])
    with pytest.raises(ValueError, match="integers"):
        run(reranker, lm, [1, "2"])  # type: ignore[list-item]
    assert run(reranker, lm, [])[0] == [] and run(reranker, lm, [7])[0] == [7]


def test_helpers() -> None:
    assert salvage_ids("ids: 12, 7.5, x3, 44.") == [12, 44]
    assert salvage_score("score is: 0.75") == 0.75 and salvage_score("7 of 10, so .4") == 0.4
    assert salvage_score("no idea") is None
    assert complete_ranking(["3", 3, "x", 9, 1], [1, 2, 3]) == (
        [3, 1, 2],
        {"unknown": 2, "duplicate": 1, "missing": 1},
    )


# --- permutation property -------------------------------------------------------------------------

GARBAGE = st.one_of(
    st.text(max_size=40),
    st.lists(st.integers(-5, 40), max_size=12).map(lambda xs: field("ranking", xs)),
    st.integers(-5, 40).map(lambda x: field("better_id", x)),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda x: field("score", x)),
    st.lists(st.integers(0, 40), max_size=8).map(lambda xs: " ".join(map(str, xs))),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    candidates=st.lists(st.integers(0, N_PAPERS - 1), max_size=9, unique=True),
    answers=st.lists(GARBAGE, min_size=1, max_size=20),
    method=st.sampled_from(["pointwise", "listwise", "pairwise", "tournament"]),
)
def test_random_malformed_outputs_never_lose_or_duplicate_candidates(
    candidates: list[int], answers: list[str], method: str
) -> None:
    lock, cursor = threading.Lock(), iter(range(10**9))

    def answer(text: str) -> str:
        with lock:
            return answers[next(cursor) % len(answers)]

    lm, _ = scripted(answer)
    reranker = make_reranker(config(reranker=method, concurrency=3), "openai/x", describe=Describer())
    out, trace = run(reranker, lm, candidates)
    assert sorted(out) == sorted(candidates) and len(out) == len(candidates)
    assert trace.data["rerank"]["output"] == out


# --- fusion with the retrieval order ---------------------------------------------------------------


def test_rrf_fuse_keeps_what_both_orders_rank_high() -> None:
    from autofocus.program.steps.rerank import rrf_fuse

    assert rrf_fuse([0, 1, 2, 3]) == [0, 1, 2, 3]  # agreement changes nothing
    # the reranker puts the retrieval's last first and its first last: what both rank second leads,
    # the two swapped ones tie (1/61 + 1/64 each) and the tie goes to the reranker's order
    assert rrf_fuse([3, 1, 2, 0]) == [1, 3, 0, 2]
    assert rrf_fuse([1, 0], k=1) == [1, 0]
    assert rrf_fuse([]) == []
    order = [int(i) for i in random.Random(0).sample(range(20), 20)]
    assert sorted(rrf_fuse(order)) == list(range(20))


def test_pointwise_with_rrf_fusion_records_both_orders() -> None:
    candidates = [5, 3, 9, 1]
    scores = {5: 0.1, 3: 0.2, 9: 0.3, 1: 0.9}  # the reranker reverses the retrieval order but for 1
    lm, _ = scripted(pointwise_answer(scores))
    plain, _ = run(PointwiseReranker(config()), lm, candidates)
    assert plain == [1, 9, 3, 5]
    lm, _ = scripted(pointwise_answer(scores))
    fused, trace = run(PointwiseReranker(config(rerank_fusion="rrf")), lm, candidates)
    assert fused == [1, 5, 9, 3]  # 5 was retrieval's first: fusion keeps it above 9 and 3
    assert trace.data["rerank"]["reranker_output"] == plain and trace.data["rerank"]["output"] == fused


def test_prior_fuse_weighs_the_rerankers_confidence_against_the_retrieval_rank() -> None:
    from autofocus.program.steps.rerank import prior_fuse

    order = [1, 0, 2]  # the reranker's order of input positions
    near_tie = [0.60, 0.62, 0.10]
    assert prior_fuse(order, near_tie, 0.0) == [1, 0, 2]  # weight 0: the reranker alone
    assert prior_fuse(order, near_tie, 1.0) == [0, 1, 2]  # a near-tie keeps the retrieval order
    sure = [0.05, 0.99, 0.10]
    assert prior_fuse([1, 2, 0], sure, 1.0) == [1, 0, 2]  # a confident Yes still rises
    assert prior_fuse([1, 2, 0], sure, 20.0) == [0, 1, 2]  # a heavy prior: steps 1-7's order
    # no scores (listwise, pairwise): the reranker's rank stands in for its log-odds
    assert prior_fuse([2, 0, 1], None, 0.0) == [2, 0, 1]
    assert prior_fuse([2, 0, 1], None, 1.0) == [0, 2, 1]
    assert prior_fuse([2, 0, 1], None, 5.0) == [0, 1, 2]
    assert prior_fuse([0, 1], [1.0, 0.0], 1.0) == [0, 1]  # certain scores are clipped, not infinite
    assert prior_fuse([], [], 1.0) == []
    order = [int(i) for i in random.Random(1).sample(range(20), 20)]
    assert sorted(prior_fuse(order, [random.Random(i).random() for i in range(20)], 0.5)) == list(range(20))


def test_pointwise_with_prior_fusion_uses_the_scores() -> None:
    candidates = [5, 3, 9, 1]
    scores = {5: 0.45, 3: 0.5, 9: 0.3, 1: 0.97}
    lm, _ = scripted(pointwise_answer(scores))
    plain, _ = run(PointwiseReranker(config()), lm, candidates)
    assert plain == [1, 3, 5, 9]
    lm, _ = scripted(pointwise_answer(scores))
    fused, trace = run(PointwiseReranker(config(rerank_fusion="prior", rerank_prior_weight=1.0)), lm, candidates)
    # 1 is sure enough to lead from the last place; 5 (retrieval's first) keeps its lead over 3's near-tie
    assert fused == [1, 5, 3, 9]
    assert trace.data["rerank"]["reranker_output"] == plain and trace.data["rerank"]["output"] == fused


def test_yes_no_descriptions_show_the_grounding_evidence_within_the_budget(tiny_skb: Any) -> None:
    """A grounded candidate's path comes right after its name and type, and its description keeps the
    same token budget; candidates without evidence are described as before."""
    from autofocus.skb.documents import describe_node

    seen: dict[int, str] = {}

    def scorer(lm: Any, conversations: list[list[dict[str, Any]]]) -> list[float | None]:
        for c, node in zip(conversations, (0, 1), strict=True):
            seen[node] = c[-1]["content"]
        return [0.2, 0.9]

    lm, _ = scripted(pointwise_answer({}))
    path = "Paper A -[written_by]- Ada Lovelace -[works_at]- Analytical Institute"
    reranker = PointwiseReranker(config(yes_no_description_tokens=96), scoring="yes_no", yes_scorer=scorer)
    trace = Trace()
    with dspy.context(lm=lm):
        out = reranker(question="Which paper?", candidates=[0, 1], skb=tiny_skb, evidence={0: path}, trace=trace)
    assert out == [1, 0]
    grounded = seen[0].split("Candidate: ")[1].split("\n\nYes or No?")[0]
    name_line, evidence_line, *rest = grounded.split("\n")
    assert name_line == describe_node(tiny_skb, 0, budget_tokens=96).split("\n")[0]
    assert evidence_line == f"- matches the question's graph query: {path}" and rest
    assert len(grounded) <= 96 * 4 + 8  # the same budget as without evidence (characters / 4)
    plain = describe_node(tiny_skb, 1, budget_tokens=96)
    assert seen[1].split("Candidate: ")[1].startswith(plain) and "graph query" not in seen[1]


def test_rerank_depth_scores_only_the_first_candidates_and_keeps_the_rest_below() -> None:
    candidates = [5, 3, 9, 1, 7]
    scores = {5: 0.1, 3: 0.2, 9: 0.3, 1: 0.9, 7: 0.95}  # 7 would come first if it were scored
    lm, engine = scripted(pointwise_answer(scores))
    out, trace = run(PointwiseReranker(config(rerank_depth=3)), lm, candidates)
    assert out == [9, 3, 5, 1, 7] and engine.calls == 3
    data = trace.data["rerank"]
    assert data["input"] == candidates and data["output"] == out and data["depth"] == 3 and len(data["scores"]) == 3
    lm, engine = scripted(pointwise_answer(scores))
    out, trace = run(PointwiseReranker(config(rerank_depth=20)), lm, candidates)  # deeper than the list: all of it
    assert out == [7, 1, 9, 3, 5] and engine.calls == 5 and "depth" not in trace.data["rerank"]
    lm, engine = scripted(lambda text: field("ranking", [9, 3, 5]))
    out, trace = run(ListwiseReranker(config(rerank_depth=3), describe=Describer()), lm, candidates)
    assert out == [9, 3, 5, 1, 7] and not trace.events  # a complete ranking of the three it was shown
    assert "paper number 1." not in lm.history[0]["messages"][-1]["content"]
