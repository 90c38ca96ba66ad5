"""HybGRAG: router -> retriever bank (text / hybrid module) -> validator -> commenter feedback loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dspy
import numpy as np
import pytest
from dspy.utils.exceptions import LMAuthError

from autofocus.index.cache import EmbeddingCache
from autofocus.kb import KnowledgeBase
from autofocus.program.systems.hybgrag import (
    KG,
    TEXT,
    Action,
    RetrieverBankResult,
    ego_graph,
    oracle_feedback,
    reasoning_paths,
)
from autofocus.program.systems.registry import build_program
from autofocus.signatures.seed_systems import FEEDBACK, TopicEntity
from autofocus.skb.model import SKB
from autofocus.skb.qa import load_qa
from autofocus.skb.skbdir import load_skb_dir
from tests.test_systems_common import HashEmbedder, ScriptedLM, field_value, make_kb, run, scripted_config

WRITES = "author_writes_paper"


@pytest.fixture(scope="module")
def kb(tiny_skb: SKB, tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    return make_kb(tiny_skb, tmp_path_factory.mktemp("kb"))


def route(*entities: tuple[str, str], relations: tuple[str, ...] = (WRITES,), source: str = KG) -> dict[str, Any]:
    return {"topic_entities": [{"name": n, "type": t} for n, t in entities], "useful_relations": list(relations),
            "source": source}


def test_commenter_feedback_changes_the_next_route_and_the_loop_stops_on_acceptance(kb: KnowledgeBase) -> None:
    def router(u: str) -> dict[str, Any]:
        if "Ada Lovelace is incorrect" in field_value(u, "feedback"):
            return route(("Grace Hopper", "author"), relations=("(author)-[author_writes_paper]->(paper)",))
        return route(("Ada Lovelace", "author"), relations=("writes",))

    lm = ScriptedLM({
        "topic_entities": router,
        # accepts only a document that the reasoning paths connect to Grace Hopper
        "aligned": lambda u: {"aligned": "Grace Hopper -> author_writes_paper ->" in field_value(u, "document")},
        "error_type": lambda u: {"error_type": "incorrect entity/relation", "wrong_item": "Ada Lovelace"},
    })
    q = "Which paper by Grace Hopper is a survey?"
    pred = run("hybgrag", kb, lm, q, scripted_config(k=5))
    assert lm.fields() == ["topic_entities", "aligned", "error_type", "topic_entities", "aligned"]
    second = field_value(lm.calls[3][1], "feedback")
    assert "Attempt 1: topic entities: Ada Lovelace (author); useful relations: writes" in second
    assert "Entity/relation Ada Lovelace is incorrect. Please remove or substitute this entity/relation." in second
    first, final = pred.trace.data["rounds"]
    assert first["accepted"] is False and sorted(first["top"]) == [0, 1, 11]  # Ada's papers
    assert final["accepted"] is True and sorted(pred.ranked_ids) == [3, 11]  # Grace Hopper's papers, by VSS
    assert pred.trace.flags["accepted"] is True and set(pred.trace.data["strand"].values()) == {"grounded"}
    assert pred.trace.data["grounded_ids"] == [3, 11]  # the ego-graph, as the grounded set of the funnel
    assert pred.trace.steps["router"].lm_calls == 2 and pred.trace.steps["commenter"].lm_calls == 1


def test_at_most_t_rounds_and_no_feedback_after_the_last(kb: KnowledgeBase) -> None:
    lm = ScriptedLM({
        "topic_entities": lambda u: route(("Alan Turing", "author")),
        "aligned": lambda u: {"aligned": False},
        "error_type": lambda u: {"error_type": "missing entity", "wrong_item": ""},
    })
    pred = run("hybgrag:critic_rounds=2", kb, lm, "Which papers did Alan Turing write?", scripted_config(k=5))
    assert lm.fields() == ["topic_entities", "aligned", "error_type", "topic_entities", "aligned"]
    assert "There is only one entity but there may be more." in field_value(lm.calls[3][1], "feedback")
    assert pred.trace.flags["accepted"] is False and sorted(pred.ranked_ids) == [1, 2]


def test_text_module_is_the_vss_ranking(kb: KnowledgeBase) -> None:
    lm = ScriptedLM({"topic_entities": lambda u: route(source=TEXT), "aligned": lambda u: {"aligned": True}})
    q = "Which papers are about question answering?"
    pred = run("hybgrag", kb, lm, q, scripted_config(k=4))
    assert pred.ranked_ids == run("vss", kb, ScriptedLM({}), q, scripted_config(k=4)).ranked_ids
    assert pred.trace.data["rounds"][0]["module"] == "text"
    # the knowledge graph without any linkable entity also falls back to text retrieval, and says so
    lm = ScriptedLM({"topic_entities": lambda u: route(), "aligned": lambda u: {"aligned": True}})
    pred = run("hybgrag", kb, lm, q, scripted_config(k=4))
    assert "without entities" in pred.trace.data["rounds"][0]["observation"]


def test_ego_graphs_intersect_and_the_observation_reports_an_empty_intersection(kb: KnowledgeBase) -> None:
    lm = ScriptedLM({
        "topic_entities": lambda u: route(("Alan Turing", "author"), ("Grace Hopper", "author"), relations=("wrote",)),
        "aligned": lambda u: {"aligned": False},
        "error_type": lambda u: {"error_type": "no intersection", "wrong_item": ""},
    })
    pred = run("hybgrag:critic_rounds=2,ego_radius=1", kb, lm, "Papers by Alan Turing and Grace Hopper?",
               scripted_config(k=5))
    observation = pred.trace.data["rounds"][0]["observation"]
    assert "ego-graph with 2 candidates" in observation and "intersection: 0 candidates" in observation
    assert "relation wrote: author_writes_paper" in observation and pred.ranked_ids == []
    # nothing retrieved is rejected without asking the validator
    assert lm.fields() == ["topic_entities", "error_type", "topic_entities"]
    assert "There is no intersection between the entities." in field_value(lm.calls[2][1], "feedback")


def test_oracle_feedback_covers_table_4() -> None:
    ada, grace = TopicEntity(name="Ada Lovelace", type="author"), TopicEntity(name="Grace Hopper", type="author")
    two = Action([ada, grace], [WRITES], KG)
    ego = {"Ada Lovelace (author)": np.array([0, 1, 11]), "Grace Hopper (author)": np.array([3, 11])}
    linked = {"Ada Lovelace (author)": 4, "Grace Hopper (author)": 6}

    def hybrid(pool: list[int], **kw: Any) -> RetrieverBankResult:
        return RetrieverBankResult(ids=pool, module="hybrid", linked=kw.get("linked", linked), relations=kw.get(
            "relations", {WRITES: WRITES}), ego=kw.get("ego", ego), pool=np.array(pool, dtype=np.int64))

    assert oracle_feedback(Action([], [], TEXT), RetrieverBankResult(ids=[2], module="text"), {3}) == (
        "incorrect retrieval module", "")
    assert oracle_feedback(Action([], [], KG), RetrieverBankResult(ids=[2], module="text"), {3}) == ("no entity", "")
    assert oracle_feedback(two, hybrid([11], relations={"wrote on": None}), {11}) == (
        "incorrect entity/relation", "wrote on")
    assert oracle_feedback(two, hybrid([11]), {1}) == ("incorrect entity/relation", "Grace Hopper")
    one = {"Ada Lovelace (author)": 4}
    assert oracle_feedback(Action([ada], [WRITES], KG), hybrid([0, 1], linked=one), {1}) == ("missing entity", "")
    disjoint = {"Ada Lovelace (author)": np.array([0, 1]), "Grace Hopper (author)": np.array([3])}
    assert oracle_feedback(two, hybrid([], ego=disjoint), {1, 3}) == ("no intersection", "")
    assert oracle_feedback(two, hybrid([11]), {0, 3}) == ("incorrect intersection", "")


def test_ego_graph_and_reasoning_paths(tiny_skb: SKB) -> None:
    edges = {(s, d) for s, e, d in _edges(tiny_skb) if e in (WRITES, "paper_cites_paper")}
    frontier, seen = {4}, {4}
    for _ in range(2):  # breadth-first search over both directions, the brute-force ego-graph
        frontier = {b for a in frontier for s, d in edges for x, b in ((s, d), (d, s)) if x == a} - seen
        seen |= frontier
    mask = ego_graph(tiny_skb, 4, [WRITES, "paper_cites_paper"], 2)
    assert set(np.flatnonzero(mask).tolist()) == seen - {4}
    assert reasoning_paths(tiny_skb, 6, 11, [WRITES], 1) == ["Grace Hopper -> author_writes_paper -> Multi-hop "
                                                              "Reasoning over Graphs"]
    assert reasoning_paths(tiny_skb, 4, 2, [WRITES, "paper_cites_paper"], 2) == [
        "Ada Lovelace -> author_writes_paper -> Graph Retrieval at Scale -> paper_cites_paper -> Dense Passage Ranking"]


def _edges(skb: SKB) -> list[tuple[int, str, int]]:
    out = []
    for e in skb.graph.edge_types:
        csr = skb.graph.forward[e]
        src, dst = csr.gather(np.arange(skb.num_nodes))
        out += [(int(s), e, int(d)) for s, d in zip(src, dst, strict=True)]
    return out


def test_commenter_examples_are_collected_on_the_training_split(tiny_skb_dir: Path, tmp_path: Path) -> None:
    kb = make_kb(load_skb_dir(tiny_skb_dir, progress=False), tmp_path)
    train = load_qa(tiny_skb_dir, "train")
    ada_neurips = "Which papers by Ada Lovelace were published at NeurIPS?"  # gold: 0 and 11

    def router(u: str) -> dict[str, Any]:
        if field_value(u, "question") != ada_neurips:
            return route(source=TEXT)
        if "Alan Turing is incorrect" in field_value(u, "feedback"):
            return route(("Ada Lovelace", "author"), ("NeurIPS", "venue"),
                         relations=(WRITES, "paper_published_in_venue"))
        return route(("Alan Turing", "author"))

    lm = ScriptedLM({
        "topic_entities": router,
        "aligned": lambda u: {"aligned": False},
        "error_type": lambda u: {"error_type": "missing entity", "wrong_item": ""},
    })
    program = build_program("hybgrag:critic_examples=1,critic_rounds=2", kb, scripted_config(), with_lms=False)
    with dspy.context(lm=lm):
        assert program.collect_examples(train) == 1
        [demo] = program.commenter.demos  # verified by ground truth: its feedback led to the gold answers
        assert demo.question == ada_neurips and demo.topic_entities == ["Alan Turing (author)"]
        assert (demo.error_type, demo.wrong_item) == ("incorrect entity/relation", "Alan Turing")
        assert any(d.question == ada_neurips and d.feedback for d in program.router.demos)
        assert [d.aligned for d in program.validator.demos] == [False, True]  # a wrong and a right top paper
        assert set(lm.fields()) == {"topic_entities"}  # the critic was the ground truth, not the LM
        lm.calls.clear()
        program(question="Which paper extends Cypher Queries from Text?")
    [comment] = [messages for field, _, messages in lm.calls if field == "error_type"]
    assert any("Alan Turing (author)" in m["content"] for m in comment[:-1])  # the in-context example
    route_prompt = next(messages for field, _, messages in lm.calls if field == "topic_entities")
    assert any(ada_neurips in m["content"] for m in route_prompt[:-1])  # an accepted route as a demonstration


def test_concurrent_collection_keeps_the_serial_order(tiny_skb_dir: Path, tmp_path: Path) -> None:
    kb = make_kb(load_skb_dir(tiny_skb_dir, progress=False), tmp_path)
    train = load_qa(tiny_skb_dir, "train")

    def router(u: str) -> dict[str, Any]:  # wrong at first, right after feedback: every question yields a comment
        if "incorrect" in field_value(u, "feedback"):
            return route(source=TEXT)
        return route(("Alan Turing", "author"))

    collected = []
    for threads in (1, 3):
        lm = ScriptedLM({"topic_entities": router})
        program = build_program("hybgrag:critic_examples=30,critic_rounds=2", kb,
                                scripted_config(concurrency=threads), with_lms=False)
        with dspy.context(lm=lm):
            program.collect_examples(train)
        collected.append([(d.question, d.error_type) for d in program.commenter.demos]
                         + [d.question for d in program.router.demos] + [d.aligned for d in program.validator.demos])
    assert collected[0] == collected[1] and len(collected[0]) >= 4


def test_commenter_examples_over_the_context_window_are_halved_until_they_fit(kb: KnowledgeBase) -> None:
    lm = ScriptedLM({
        "topic_entities": lambda u: route(("Alan Turing", "author")),
        "aligned": lambda u: {"aligned": False},
        "error_type": lambda u: {"error_type": "no intersection", "wrong_item": ""},
    }, max_messages=2 + 2 * 3)  # system, three demonstrations (user + assistant each), the question
    program = build_program("hybgrag:critic_rounds=2", kb, scripted_config(), with_lms=False)
    program.commenter.demos = [
        dspy.Example(question=f"q{i}", topic_entities=["A (author)"], useful_relations=[WRITES],
                     retrieval_module=KG, observation="intersection: 0 candidates", error_type="no intersection",
                     wrong_item="") for i in range(8)]
    with dspy.context(lm=lm):
        pred = program(question="Which papers did Alan Turing write?")
    [comment] = [messages for field, _, messages in lm.calls if field == "error_type"]
    assert len(comment) == 2 + 2 * 2  # 8 -> 4 (refused) -> 2 demonstrations
    [event] = [e for e in pred.trace.events if e.kind == "demos_trimmed"]
    assert event.step == "commenter" and "kept 2 of 8" in event.detail
    assert pred.trace.data["rounds"][0]["feedback"] == FEEDBACK["no intersection"]  # the LM's, not the fallback


def test_zero_shot_commenter_without_a_training_split(kb: KnowledgeBase) -> None:
    lm = ScriptedLM({
        "topic_entities": lambda u: route(("Alan Turing", "author")),
        "aligned": lambda u: {"aligned": False},
        "error_type": lambda u: {"error_type": "missing entity", "wrong_item": ""},
    })
    program = build_program("hybgrag:critic_rounds=2", kb, scripted_config(), with_lms=False)
    with dspy.context(lm=lm):
        program(question="Which papers did Alan Turing write?")
    assert program.commenter.demos == [] and program.router.demos == []
    [comment] = [messages for field, _, messages in lm.calls if field == "error_type"]
    assert len(comment) == 2  # system + user: no demonstrations


def test_examples_are_collected_once_from_the_kb_source_on_first_use(tiny_skb_dir: Path, tmp_path: Path) -> None:
    kb = KnowledgeBase.open(tiny_skb_dir, HashEmbedder(), tmp_path, build_missing=True, progress=False,
                            cache=EmbeddingCache(None))
    assert kb.source == tiny_skb_dir  # where the SKB was loaded from: its QA splits
    lm = ScriptedLM({"topic_entities": lambda u: route(source=TEXT), "aligned": lambda u: {"aligned": True}})
    program = build_program("hybgrag", kb, scripted_config(), with_lms=False)
    with dspy.context(lm=lm):
        first = program(question="Which paper extends Cypher Queries from Text?")
        routes = len([f for f in lm.fields() if f == "topic_entities"])
        program(question="Which papers cite Graph Retrieval at Scale?")
        # another program on the same KB (the runner builds one per thread) reuses the examples
        other = build_program("hybgrag", kb, scripted_config(), with_lms=False)
        other(question="Which papers cite Graph Retrieval at Scale?")
    assert routes >= 4  # the three training questions (1-4 rounds each), then the question itself
    assert len([f for f in lm.fields() if f == "topic_entities"]) == routes + 2
    assert [e.kind for e in first.trace.events] == ["examples_collected"] and program.validator.demos
    assert other.validator.demos == program.validator.demos and other.router.demos == program.router.demos


def _down(u: str) -> dict[str, Any]:
    raise LMAuthError("401 invalid key")  # an outage DSPy does not retry (with backoff)


def test_a_validator_without_a_verdict_stops_the_loop_without_accepting(kb: KnowledgeBase) -> None:
    for aligned, degraded in ((_down, ["validator"]), (lambda u: {"aligned": "perhaps, perhaps not"}, [])):
        lm = ScriptedLM({"topic_entities": lambda u: route(("Alan Turing", "author")), "aligned": aligned})
        pred = run("hybgrag", kb, lm, "Which papers did Alan Turing write?", scripted_config(k=5))
        assert lm.fields().count("topic_entities") == 1  # no second round
        assert pred.trace.flags["accepted"] is False and pred.trace.data["rounds"][0]["accepted"] is None
        assert [d.step for d in pred.trace.degraded] == degraded
        assert sorted(pred.ranked_ids) == [1, 2]  # this round's answer is kept


def test_an_outage_while_collecting_examples_degrades_and_the_next_question_collects_again(
    tiny_skb_dir: Path, tmp_path: Path
) -> None:
    kb = KnowledgeBase.open(tiny_skb_dir, HashEmbedder(), tmp_path, build_missing=True, progress=False,
                            cache=EmbeddingCache(None))
    up = {"router": False}
    lm = ScriptedLM({
        "topic_entities": lambda u: route(source=TEXT) if up["router"] else _down(u),
        "aligned": lambda u: {"aligned": True},
    })
    program = build_program("hybgrag", kb, scripted_config(), with_lms=False)
    with dspy.context(lm=lm):
        first = program(question="Which paper extends Cypher Queries from Text?")
        assert [d.step for d in first.trace.degraded][:1] == ["critic"]
        assert "collecting in-context examples failed" in first.trace.degraded[0].error
        assert program.router.demos == program.validator.demos == []  # nothing from a failing LM
        up["router"] = True
        second = program(question="Which papers cite Graph Retrieval at Scale?")
    assert second.trace.degraded == [] and [e.kind for e in second.trace.events] == ["examples_collected"]
    assert program.validator.demos
