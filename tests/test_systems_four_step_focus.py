"""4StepFocus: triplets with a target variable, constants substituted by name similarity, set
intersections, grounded candidates ranked first by VSS, then pointwise LLM reranking."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from autofocus.kb import KnowledgeBase
from autofocus.program.systems.four_step_focus import NameMatcher, triplets_to_query_graph
from autofocus.signatures.seed_systems import RawTriplet
from autofocus.skb.model import SKB
from autofocus.skb.skbdir import load_skb_dir
from autofocus.skb.writer import write_skb_dir
from tests.test_systems_common import ScriptedLM, field_value, make_kb, run, scripted_config


@pytest.fixture(scope="module")
def kb(tiny_skb: SKB, tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    return make_kb(tiny_skb, tmp_path_factory.mktemp("kb"))


def var(t: str, v: str = "?1") -> dict[str, Any]:
    return {"type": t, "variable": v}


def const(t: str, name: str) -> dict[str, Any]:
    return {"type": t, "name": name}


def lm_for(triplets: list[dict[str, Any]], target: str = "?1", favour: int | None = None) -> ScriptedLM:
    """Triplet generation returns ``triplets``; the pointwise reranker scores ``favour`` 1.0, others 0.1."""
    return ScriptedLM({
        "triplets": lambda u: {"triplets": triplets, "target": target},
        "score": lambda u: {"score": 1.0 if field_value(u, "candidate").startswith(f"[{favour}]") else 0.1},
    })


def test_misspelt_constant_is_substituted_by_string_similarity(kb: KnowledgeBase) -> None:
    lm = lm_for([{"head": var("paper"), "relation": "paper_cites_paper",
                  "tail": const("paper", "Knowledge Base Question Answering Survy")}], favour=0)
    pred = run("4stepfocus", kb, lm, "Which papers cite Knowledge Base Question Answering Survy?", scripted_config(k=5))
    sub = pred.trace.data["substitutions"]["c0"]
    assert sub["ids"] == [3] and sub["similarity"] == pytest.approx(78 / 79)  # 1 deletion in 40 characters
    assert pred.trace.data["grounded_ids"] == [2]  # the only paper linked to paper 3
    # the reranker prefers paper 0, but C_filtered stays ahead of C_additional
    assert pred.ranked_ids[0] == 2 and pred.ranked_ids[1] == 0 and len(pred.ranked_ids) == 5
    assert pred.trace.data["strand"]["2"] == "grounded" and pred.trace.data["strand"]["0"] == "vss"
    assert pred.trace.data["support"]["2"] == [[("?1", 2, "*", 3)]]
    assert lm.fields() == ["triplets"] + ["score"] * 5
    assert pred.trace.flags == {"has_triplet": True, "has_constant": True, "grounded_nonempty": True}


def test_without_an_almost_exact_match_the_triplet_is_dropped_or_the_vss_top1_taken(kb: KnowledgeBase) -> None:
    triplets = [{"head": var("paper"), "relation": "cites", "tail": const("paper", "Knowledge Base QA Survey")}]
    question = "Which papers cite Knowledge Base QA Survey?"
    pred = run("4stepfocus:reranker=none", kb, lm_for(triplets), question, scripted_config(k=5))
    assert [e.kind for e in pred.trace.events] == ["constant_unmatched"]
    assert pred.trace.flags["has_constant"] is False and pred.trace.data["strand"] == dict.fromkeys(
        map(str, pred.ranked_ids), "vss")
    vss = run("vss", kb, ScriptedLM({}), question, scripted_config(k=5))
    assert pred.ranked_ids == vss.ranked_ids  # no grounded candidates: 4StepFocus is VSS
    loose = run("4stepfocus:reranker=none,name_similarity=0.6", kb, lm_for(triplets), question, scripted_config(k=5))
    assert loose.trace.data["substitutions"]["c0"]["ids"] == [3] and loose.ranked_ids[0] == 2
    code = run("4stepfocus:reranker=none,unmatched_constant=vss", kb, lm_for(triplets), question, scripted_config(k=5))
    sub = code.trace.data["substitutions"]["c0"]
    assert sub["ids"] == [3] and math.isnan(sub["similarity"]) and code.ranked_ids[0] == 2


def test_triplets_are_intersected_to_a_fixpoint(kb: KnowledgeBase) -> None:
    lm = lm_for([
        {"head": const("author", "ada lovelace"), "relation": "writes", "tail": var("paper")},
        {"head": var("paper"), "relation": "published in", "tail": const("venue", "NeurIPS")},
    ])
    pred = run("4stepfocus:reranker=none", kb, lm, "Which papers by Ada Lovelace were published at NeurIPS?",
               scripted_config(k=5))
    assert sorted(pred.ranked_ids[:2]) == [0, 11] and pred.trace.data["num_grounded"] == 2
    assert [pred.trace.data["strand"][str(i)] for i in pred.ranked_ids] == ["grounded"] * 2 + ["vss"] * 3


def test_algorithm_3_rules_and_strict_edges(tiny_skb: SKB) -> None:
    raw = [RawTriplet.model_validate(t) for t in [
        {"head": const("author", "Ada Lovelace"), "relation": "writes", "tail": const("paper", "Graph Retrieval")},
        {"head": var("paper"), "relation": "(author)-[author_writes_paper]->(paper)",
         "tail": const("author", "Grace Hopper")},
        {"head": var("paper"), "relation": "cites", "tail": var("paper")},
    ]]
    qg = triplets_to_query_graph(raw, "?9", tiny_skb, edge_mode="strict")
    reasons = [d.reason for d in qg.dropped]
    assert any("two constants" in r for r in reasons) and any("a symbol related to itself" in r for r in reasons)
    assert qg.target == "?1" and any("using ?1" in r for r in reasons)  # the only variable is the target
    [trip] = qg.triplets  # written paper -> author: the edge type fits the other way, so it is turned round
    assert (trip.head, trip.rel, trip.tail, trip.directed) == ("c2", "author_writes_paper", "?1", True)
    lenient = triplets_to_query_graph(raw, "?1", tiny_skb, edge_mode="lenient")
    assert [(t.rel, t.directed) for t in lenient.triplets] == [(None, False)]


def test_strict_edges_follow_the_direction(kb: KnowledgeBase) -> None:
    # "papers citing Graph Retrieval at Scale", but written as if it cited them
    backwards = [{"head": const("paper", "Graph Retrieval at Scale"), "relation": "paper_cites_paper",
                  "tail": var("paper")}]
    lenient = run("4stepfocus:reranker=none", kb, lm_for(backwards), "Which papers cite it?", scripted_config(k=5))
    assert lenient.trace.data["grounded_ids"] == [1, 2, 11]  # the paper's setting: any edge type, either way
    strict = run("4stepfocus:reranker=none,edge_mode=strict", kb, lm_for(backwards), "Which papers cite it?",
                 scripted_config(k=5))
    assert strict.trace.data["grounded_ids"] == [] and strict.trace.flags["grounded_nonempty"] is False
    forward = [{"head": var("paper"), "relation": "cites", "tail": const("paper", "Graph Retrieval at Scale")}]
    strict = run("4stepfocus:reranker=none,edge_mode=strict", kb, lm_for(forward), "Which papers cite it?",
                 scripted_config(k=5))
    assert strict.trace.data["grounded_ids"] == [1, 2, 11]


def test_name_matcher_keeps_ties_restricts_types_and_reads_aliases(tiny_skb_data: dict, tmp_path: Path) -> None:
    data = tiny_skb_data
    data["nodes"][4]["aliases"] = ["Augusta Ada King", "Countess of Lovelace"]
    data["nodes"].append({"id": 12, "type": "author", "name": "Alan Turing"})
    write_skb_dir(tmp_path, data["schema"], data["nodes"], data["edges"])
    skb = load_skb_dir(tmp_path, progress=False)
    matcher = NameMatcher.of(skb)
    assert NameMatcher.of(skb) is matcher  # built once per SKB
    (turing, score), (ada, _), (none, _) = matcher.match(["ALAN TURING", "countess of lovelace", "Grace"], "author", 0.9)
    assert turing.tolist() == [5, 12] and score == 1.0 and ada.tolist() == [4] and none.size == 0
    [(paper, _)] = matcher.match(["alan turing"], "paper", 0.9)
    assert paper.size == 0
