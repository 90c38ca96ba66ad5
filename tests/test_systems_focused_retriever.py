"""FocusedRetriever: Cypher without a target type, k-hat scope expansion, the grounded strand first,
the target type predicted for the VSS strand only, merge, pairwise reranking."""

from __future__ import annotations

import re

import numpy as np
import pytest

from autofocus.kb import KnowledgeBase
from autofocus.skb.model import SKB
from tests.skb_factory import make_skb
from tests.test_systems_common import ScriptedLM, field_value, make_kb, run, scripted_config

ADA = "MATCH (a:author {name: 'Ada Lovelace'})-[:author_writes_paper]->(p:paper) RETURN p.title"


@pytest.fixture(scope="module")
def kb(tiny_skb: SKB, tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    return make_kb(tiny_skb, tmp_path_factory.mktemp("kb"))


def by_score(kb: KnowledgeBase, question: str, variant: str, ids: list[int]) -> list[int]:
    arr = np.asarray(ids)
    scores = kb.index(variant).scores(kb.embed_query(question), arr)
    return arr[np.lexsort((arr, -scores))].tolist()


def cypher_lm(cypher: str, target_type: str = "paper") -> ScriptedLM:
    def compare(u: str) -> dict[str, int]:  # prefers the lower id: a consistent, checkable order
        first, second = (int(re.match(r"\[(\d+)\]", field_value(u, f)).group(1)) for f in ("first", "second"))
        return {"better_id": min(first, second)}

    return ScriptedLM({"cypher": lambda u: {"cypher": cypher}, "target_type": lambda u: {"target_type": target_type},
                       "better_id": compare})


def test_merge_puts_alpha_grounded_answers_first_and_excludes_all_grounded_from_the_vss_strand(
    kb: KnowledgeBase,
) -> None:
    q = "Which papers did Ada Lovelace write?"
    one_round = "focusedretriever:reranker=none,expansion=code,l_max=1"  # k-hat = 1 only: C_cypher = Ada's papers
    pred = run(one_round, kb, cypher_lm(ADA), q, scripted_config(k=5))
    grounded = by_score(kb, q, "text", [0, 1, 11])
    rest = by_score(kb, q, "text+rel", [2, 3])
    assert pred.trace.data["grounded_ids"].tolist() == [0, 1, 11]
    assert pred.ranked_ids == grounded + rest  # alpha = 0.6: 3 of k = 5 slots for C_cypher, then Y_vss
    assert [pred.trace.data["strand"][str(i)] for i in pred.ranked_ids] == ["grounded"] * 3 + ["vss"] * 2
    one_slot = run(f"{one_round},alpha=0.2", kb, cypher_lm(ADA), q, scripted_config(k=5))
    # Y_vss excludes all of C_cypher (line 12), so the two grounded papers without a slot are gone
    assert one_slot.ranked_ids == grounded[:1] + rest


def test_pairwise_reranking_by_default(kb: KnowledgeBase) -> None:
    lm = cypher_lm(ADA)
    pred = run("focusedretriever:expansion=code,l_max=1", kb, lm, "Which papers did Ada Lovelace write?",
               scripted_config(k=5))
    assert len(pred.ranked_ids) == 5 and pred.ranked_ids == sorted(pred.trace.data["pre_rerank"])  # the scripted comparator prefers low ids
    assert lm.fields()[0] == "cypher" and set(lm.fields()[1:]) == {"better_id"}
    assert "target_type" not in lm.calls[0][1]  # FR's Cypher prompt has no target type (AF's has)
    assert pred.trace.data["support"]["0"] == [[("p", 0, "author_writes_paper", 4)]]


def test_scope_expansion_grows_k_hat_until_k_answers(kb: KnowledgeBase) -> None:
    cypher = "MATCH (a:author {name: 'A. Lovelace'})-[:author_writes_paper]->(p:paper) RETURN p"
    pred = run("focusedretriever:reranker=none", kb, cypher_lm(cypher), "Papers of A. Lovelace?", scripted_config(k=4))
    rounds = pred.trace.data["grounding_rounds"]
    # k-hat = 1, 2, 3, ... (paper schedule) until at least k = 4 grounded answers (every author wrote 2-3 papers)
    assert [r["cut"] for r in rounds] == [1, 2, 3][: len(rounds)] and len(rounds) >= 2
    assert all(r["num_target"] < 4 for r in rounds[:-1]) and rounds[-1]["num_target"] >= 4
    capped = run("focusedretriever:reranker=none,l_max=1", kb, cypher_lm(cypher), "Papers of A. Lovelace?",
                 scripted_config(k=4))
    # k-hat_max = 1: one round with the best candidate only (the bound is inclusive, see expansion_cuts)
    assert [r["cut"] for r in capped.trace.data["grounding_rounds"]] == [1]


def test_target_type_is_predicted_after_the_cypher_for_the_vss_strand_only(tmp_path_factory: pytest.TempPathFactory,
                                                                            ) -> None:
    names = ["asthma", "influenza", "gout", "salbutamol", "budesonide", "oseltamivir", "colchicine"]
    skb = make_skb(["drug", "disease"], [1, 1, 1, 0, 0, 0, 0],
                   [(3, "indication", 0), (4, "indication", 0), (5, "indication", 1), (6, "indication", 2)],
                   {"indication": ("drug", "disease")}, names=names)
    kb = make_kb(skb, tmp_path_factory.mktemp("kb2"))
    lm = cypher_lm("MATCH (d:drug)-[:indication]->(x:disease {name: 'asthma'}) RETURN d.name", target_type="disease")
    pred = run("focusedretriever:reranker=none,expansion=code,l_max=1", kb, lm, "Which drugs treat asthma?",
               scripted_config(k=4))
    assert lm.fields() == ["cypher", "target_type"]
    assert pred.trace.data["cypher_target_type"] == "drug" and pred.trace.data["target_type"] == "disease"
    # the grounded strand keeps the Cypher's type; the VSS strand ranks only the predicted type
    assert sorted(pred.ranked_ids[:2]) == [3, 4] and len(pred.ranked_ids) == 4
    assert {skb.type_of(i) for i in pred.ranked_ids[2:]} == {"disease"}
