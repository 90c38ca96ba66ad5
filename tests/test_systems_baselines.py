"""STaRK's baselines on the shared components: BM25, VSS, VSS + pointwise LLM reranker."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bm25s
import numpy as np
import pytest

from autofocus.kb import KnowledgeBase
from autofocus.program.systems.baselines import BM25Index, bm25_index
from autofocus.program.systems.registry import build_program
from autofocus.skb.documents import render_documents
from autofocus.skb.model import SKB
from tests.test_systems_common import ScriptedLM, field_value, make_kb, run, scripted_config


@pytest.fixture(scope="module")
def kb(tiny_skb: SKB, tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    return make_kb(tiny_skb, tmp_path_factory.mktemp("kb"))


def test_bm25_ranks_candidate_documents_by_bm25(tiny_skb: SKB, tmp_path: Path) -> None:
    index = bm25_index(tiny_skb, "text", None, cache_root=tmp_path)
    papers = tiny_skb.ids_of_type("paper")
    assert index.ids.tolist() == papers.tolist()  # only candidate nodes are documents
    ids, scores = index.search("dense passage ranking with an encoder", k=3)
    assert ids[0] == 2 and scores == sorted(scores, reverse=True)
    # the scores are bm25s's for the candidate corpus (STaRK's BM25: English stopwords, no stemming)
    reference = bm25s.BM25()
    reference.index(bm25s.tokenize(render_documents(tiny_skb, papers, "text"), stopwords="en", show_progress=False),
                    show_progress=False)
    expected = reference.get_scores(["dense", "passage", "ranking", "encoder"])
    np.testing.assert_allclose(scores, np.sort(expected)[::-1][:3], rtol=1e-6)
    # no matching word: every score is 0 and ties go by node id; no word at all: nothing
    assert index.search("zebra", k=10) == (papers.tolist(), [0.0] * len(papers))
    assert index.search("the of and", k=10) == ([], [])


def test_bm25_index_is_built_once_and_cached_on_disk(tiny_skb: SKB, tmp_path: Path) -> None:
    first = bm25_index(tiny_skb, "text+rel", None, cache_root=tmp_path)
    assert bm25_index(tiny_skb, "text+rel", None, cache_root=tmp_path) is first  # once per process
    [directory] = list((tmp_path / "bm25").iterdir())
    loaded = BM25Index.load(directory)  # what the next process finds
    assert loaded.search("graph retrieval", 5) == first.search("graph retrieval", 5)


def test_bm25_programs_in_parallel_threads_share_one_index(kb: KnowledgeBase) -> None:
    """The evaluation runner builds one program per thread; the first searches must not race."""
    programs = [build_program("bm25", kb, scripted_config(k=3), with_lms=False) for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda p: p(question="dense passage ranking").ranked_ids, programs))
    assert results == [results[0]] * 4 and results[0][0] == 2


def test_bm25_system(kb: KnowledgeBase) -> None:
    pred = run("bm25", kb, ScriptedLM({}), "Which paper is about dense passage ranking?", scripted_config(k=3))
    assert pred.ranked_ids[0] == 2 and len(pred.ranked_ids) == 3
    assert set(pred.trace.data["strand"].values()) == {"bm25"} and "bm25" in pred.trace.steps


def test_vss_ranks_candidate_types_by_cosine(kb: KnowledgeBase, tiny_skb: SKB) -> None:
    question = "Which papers cite Graph Retrieval at Scale?"
    pred = run("vss", kb, ScriptedLM({}), question, scripted_config(k=4))
    papers = tiny_skb.ids_of_type("paper")
    scores = kb.index("text+rel").scores(kb.embed_query(question), papers)
    expected = papers[np.lexsort((papers, -scores))][:4].tolist()
    assert pred.ranked_ids == expected
    assert pred.trace.data["pre_rerank"] == expected and "8_rerank" not in pred.trace.steps


def test_vss_rerank_scores_each_of_the_top_k_pointwise(kb: KnowledgeBase) -> None:
    question = "Which paper is about ranking passages?"
    before = run("vss", kb, ScriptedLM({}), question, scripted_config(k=5)).ranked_ids
    lm = ScriptedLM({"score": lambda u: {"score": 1.0 if field_value(u, "candidate").startswith("[2]") else 0.2}})
    pred = run("vss-rerank", kb, lm, question, scripted_config(k=5))
    assert lm.fields() == ["score"] * 5  # one prompt per candidate (STaRK's LLM reranker)
    assert pred.trace.steps["8_rerank"].lm_calls == 5
    assert pred.ranked_ids == [2] + [i for i in before if i != 2]  # ties keep the VSS order
    assert pred.trace.data["pre_rerank"] == before
