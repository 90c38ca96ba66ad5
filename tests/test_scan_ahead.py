"""Step 7's scan ahead of steps 3-5 (``NodeIndex.head`` / ``search_head``, ``program.steps.vss.ScanAhead``):
the same rankings as the scan after grounding, for any query, depth, shard count and exclusion (ties
included); concurrent questions; no thread outlives its question; approximate indexes untouched."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autofocus.config import AutofocusConfig
from autofocus.index.embedders import l2_normalise
from autofocus.index.search import AnnParams, Head, NodeIndex
from autofocus.index.store import EmbeddingStore
from autofocus.kb import KnowledgeBase
from autofocus.program.steps import vss
from autofocus.program.systems import afr as afr_module
from autofocus.program.systems.afr import AutofocusRetriever
from autofocus.trace import Trace
from tests.skb_factory import make_skb
from tests.test_systems_common import make_kb

TYPES = ["a", "b", "c"]
N, D = 600, 12


def scan_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("autofocus-scan")]


@pytest.fixture(autouse=True)
def scan_threads_stay_few() -> Iterator[None]:
    yield
    assert len(scan_threads()) <= vss.SCAN_WORKERS


# -- NodeIndex.head / search_head --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tied_index(tmp_path_factory: pytest.TempPathFactory) -> tuple[NodeIndex, np.ndarray]:
    """Random vectors over three types, with groups of identical vectors (ties) and rows without one."""
    rng = np.random.default_rng(3)
    x = l2_normalise(rng.standard_normal((N, D)).astype(np.float32))
    for start in range(0, N, 60):  # ten groups of 8 identical rows, spread over the types
        x[start + 1 : start + 9] = x[start]
    node_type = (np.arange(N) % 3).astype(np.int16)
    done = np.ones(N, bool)
    done[rng.choice(N, 20, replace=False)] = False
    root = tmp_path_factory.mktemp("tied")
    store = EmbeddingStore.create(root / "s", model="m", dim=D, variant="text", doc_budget_tokens=8,
                                  skb_fingerprint="fp", num_nodes=N)
    store.write_rows(np.flatnonzero(done), x[done])
    store.finish()
    return NodeIndex(EmbeddingStore.open(root / "s"), node_type, TYPES), x


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    node_type=st.sampled_from(TYPES),
    depth=st.integers(1, 260),
    shards=st.integers(1, 4),
    k=st.integers(0, 30),
)
def test_search_head_answers_exactly_as_search(
    tied_index: tuple[NodeIndex, np.ndarray], data: st.DataObject, node_type: str, depth: int, shards: int, k: int
) -> None:
    index, x = tied_index
    row = data.draw(st.integers(0, N - 1))
    noise = data.draw(st.sampled_from([0.0, 1e-4, 0.3, 3.0]))  # 0: the query is a stored vector (ties at the top)
    rng = np.random.default_rng(row)
    q = l2_normalise(x[row] + noise * rng.standard_normal(D).astype(np.float32))[0]
    n_excl = data.draw(st.sampled_from([0, 1, 5, 40, 150, 400]))
    exclude = rng.choice(N, n_excl, replace=False) if n_excl else None
    head = Head.merge([index.head(q, node_type, depth, shard=s, shards=shards) for s in range(shards)])  # type: ignore[misc]
    found = index.search_head(head, k=k, exclude=exclude)
    ids, scores = index.search(q, node_type=node_type, k=k, exclude=exclude)
    code = TYPES.index(node_type)
    excl_here = 0 if exclude is None else int(((np.arange(N) % 3)[exclude] == code).sum())
    if head.complete or k + excl_here <= depth:
        assert found is not None
    if found is not None:
        np.testing.assert_array_equal(found[0], ids)
        np.testing.assert_array_equal(found[1], scores)


def test_head_of_an_approximate_index_is_none(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 900
    x = l2_normalise(rng.standard_normal((n, 8)).astype(np.float32))
    store = EmbeddingStore.create(tmp_path / "s", model="m", dim=8, variant="text", doc_budget_tokens=8,
                                  skb_fingerprint="fp", num_nodes=n)
    store.write_rows(np.arange(n), x)
    store.finish()
    node_type = np.r_[np.zeros(800), np.ones(100)].astype(np.int16)
    index = NodeIndex(EmbeddingStore.open(tmp_path / "s"), node_type, ["big", "small"], kind="hnsw",
                      params=AnnParams(min_ann_size=500))
    assert index.head(x[0], "big", 50) is None and not index.exact("big")
    assert index.head(x[0], "small", 50) is not None and index.exact("small")  # below min_ann_size: flat
    with pytest.raises(ValueError, match="depth"):
        index.head(x[0], "small", 0)
    with pytest.raises(ValueError, match="shard"):
        index.head(x[0], "small", 5, shard=2, shards=2)


# -- the retriever ---------------------------------------------------------------------------------------
WORDS = ["graph", "retrieval", "protein", "drug", "camera", "river", "music", "theorem", "cloud", "laser"]


@pytest.fixture(scope="module")
def biblio(tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    """Papers, authors and fields with random edges; a fifth of the papers have no text (identical
    vectors: ties), and names repeat."""
    rng = np.random.default_rng(7)
    n_paper, n_author, n_field = 220, 90, 8
    types = [0] * n_paper + [1] * n_author + [2] * n_field
    authors = [f"{WORDS[i % 10].title()} {WORDS[(i * 3) % 10].title()}" for i in range(n_author)]
    names = ([" ".join(rng.choice(WORDS, 3)) for _ in range(n_paper)] + authors + WORDS[:n_field])
    docs = ["" if rng.random() < 0.2 else " ".join(rng.choice(WORDS, 8)) for _ in range(n_paper)]
    docs += ["an author" for _ in range(n_author)] + ["a field of study" for _ in range(n_field)]
    a0, f0 = n_paper, n_paper + n_author
    edges = [(a0 + int(rng.integers(n_author)), "writes", p) for p in range(n_paper) for _ in range(2)]
    edges += [(p, "cites", int(rng.integers(n_paper))) for p in range(n_paper) for _ in range(3)]
    edges += [(p, "has_topic", f0 + int(rng.integers(n_field))) for p in range(n_paper)]
    skb = make_skb(["paper", "author", "field"], types, edges,
                   {"writes": ("author", "paper"), "cites": ("paper", "paper"), "has_topic": ("paper", "field")},
                   names=names, docs=docs, candidate_types=["paper", "author"])  # fmt: skip
    return make_kb(skb, tmp_path_factory.mktemp("biblio"))


def a_query(kb: KnowledgeBase, rng: np.random.Generator) -> tuple[str, str]:
    """A question and a Cypher query of one of four shapes around a random node."""
    skb = kb.skb
    author = int(rng.choice(skb.ids_of_type("author")))
    field = int(rng.choice(skb.ids_of_type("field")))
    paper = int(rng.choice(skb.ids_of_type("paper")))
    a, f, p = skb.name(author), skb.name(field), skb.name(paper)
    shape = int(rng.integers(5))
    cypher = [
        f'MATCH (x:author {{name: "{a}"}})-[:writes]->(y:paper) RETURN y.name',
        f'MATCH (y:paper)-[:has_topic]->(f:field {{name: "{f}"}}) RETURN y.name',  # large grounded sets
        f'MATCH (y:author)-[:writes]->(p:paper {{name: "{p}"}}) RETURN y.name',  # the query asks for authors
        f'MATCH (x:author {{name: "{a}"}})-[:writes]->(y:paper)-[:has_topic]->(f:field {{name: "{f}"}}) RETURN y.name',
        "MATCH (y:paper) RETURN y.name",  # nothing to ground
    ][shape]
    question = f"Which papers about {' '.join(rng.choice(WORDS, 2))} by {a} on {f} or like {p}?"
    return question, cypher


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    types1=st.sampled_from([["paper"], ["author"], ["paper", "author"], ["author", "paper"], None, ["nonsense"]]),
    k=st.sampled_from([1, 3, 10, 20]),
    slack=st.sampled_from([0, 1, 7, 4096]),
    shards=st.integers(1, 3),
    steps=st.sampled_from(["1-7", "1-8", "1+7"]),
    exclude=st.sampled_from(["grounded", "none"]),
    types7=st.sampled_from(["agree", "step1"]),
    alpha=st.sampled_from([0.0, 2 / 3, 1.0]),  # 0: every grounded node is excluded from step 7's k
)
def test_scan_ahead_ranks_as_the_sequential_path(
    biblio: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, seed: int, types1: list[str] | None, k: int, slack: int,
    shards: int, steps: str, exclude: str, types7: str, alpha: float,
) -> None:
    monkeypatch.setattr(afr_module, "SCAN_SLACK", slack)  # shallow heads: grounded sets overflow them
    question, cypher = a_query(biblio, np.random.default_rng(seed))
    common = {"k": k, "steps": steps, "step7_exclude": exclude, "step7_types": types7, "reranker": "none",
              "alpha": alpha, "alpha_rule": "fixed"}
    sequential = AutofocusConfig(scan_ahead=False, **common)
    ahead = AutofocusConfig(scan_ahead=True, scan_shards=shards, **common)
    program = AutofocusRetriever(biblio, sequential)
    ref = program.retrieve(question, types1, cypher, sequential, Trace(question=question))
    trace = Trace(question=question)
    got = program.retrieve(question, types1, cypher, ahead, trace)
    assert got.ids == ref.ids
    assert got.strand == ref.strand
    np.testing.assert_array_equal(got.grounded, ref.grounded)
    assert set(trace.data["scan_ahead"]) >= {"embed_s", "scan_s", "waited_s"}


def test_concurrent_questions_rank_as_one_at_a_time(biblio: KnowledgeBase) -> None:
    rng = np.random.default_rng(11)
    queries = [a_query(biblio, rng) for _ in range(40)]
    program = AutofocusRetriever(biblio, AutofocusConfig(reranker="none", steps="1-7"))
    sequential = AutofocusConfig(scan_ahead=False, steps="1-7", reranker="none")
    ref = [program.retrieve(q, "paper", c, sequential).ids for q, c in queries]
    counts = []
    for _ in range(2):
        for shards in (1, 2, 3):
            cfg = AutofocusConfig(scan_ahead=True, scan_shards=shards, steps="1-7", reranker="none")
            with ThreadPoolExecutor(8) as pool:
                got = list(pool.map(lambda qc: program.retrieve(qc[0], "paper", qc[1], cfg).ids, queries))  # noqa: B023
            assert got == ref
        counts.append(threading.active_count())
    assert counts[1] <= counts[0]  # the pool's threads are reused, never more than SCAN_WORKERS
    assert len(scan_threads()) <= vss.SCAN_WORKERS


def test_steps_3_to_5_run_while_the_question_is_embedded(biblio: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    """The question's embedding waits for step 5 to start: it can finish only if they overlap."""
    grounding = threading.Event()
    seen: list[bool] = []
    embed = biblio.embed_query

    def slow_embed(text: str) -> np.ndarray:
        if text.startswith("Which papers"):
            seen.append(grounding.wait(timeout=30))
        return embed(text)

    real_ground = afr_module.ground_strand

    def ground(*args: object, **kwargs: object) -> object:
        grounding.set()
        return real_ground(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(biblio, "embed_query", slow_embed)
    monkeypatch.setattr(afr_module, "ground_strand", ground)
    question, cypher = a_query(biblio, np.random.default_rng(1))
    program = AutofocusRetriever(biblio, AutofocusConfig(steps="1-7", reranker="none"))
    program.retrieve(question, "paper", cypher)
    assert seen == [True]


def test_failures_reach_the_caller_and_leave_no_thread(biblio: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    question, cypher = a_query(biblio, np.random.default_rng(2))
    program = AutofocusRetriever(biblio, AutofocusConfig(steps="1-7", reranker="none"))

    def broken_grounding(*args: object, **kwargs: object) -> object:
        raise RuntimeError("grounding broke")

    with monkeypatch.context() as m:
        m.setattr(afr_module, "ground_strand", broken_grounding)
        with pytest.raises(RuntimeError, match="grounding broke"):
            program.retrieve(question, "paper", cypher)

    def broken_embedding(text: str) -> np.ndarray:
        time.sleep(0.01)
        raise ValueError("embedder down")

    with monkeypatch.context() as m:
        m.setattr(biblio, "embed_query", broken_embedding)
        with pytest.raises(ValueError, match="embedder down"):
            program.retrieve(question, "paper", cypher)
    # nothing is left waiting in the pool: the next question is answered as one at a time would be
    ref = program.retrieve(question, "paper", cypher, AutofocusConfig(scan_ahead=False, steps="1-7", reranker="none"))
    assert program.retrieve(question, "paper", cypher).ids == ref.ids


def test_a_forked_child_gets_its_own_pool(biblio: KnowledgeBase) -> None:
    """The parent's pool threads do not exist in a forked child (its idle count says they do)."""
    import multiprocessing

    question, cypher = a_query(biblio, np.random.default_rng(4))
    program = AutofocusRetriever(biblio, AutofocusConfig(steps="1-7", reranker="none"))
    ref = program.retrieve(question, "paper", cypher).ids  # the parent's pool has threads now
    ctx = multiprocessing.get_context("fork")
    reader, writer = ctx.Pipe(duplex=False)

    def child() -> None:  # a forked child: nothing is pickled
        ran = vss.scan_pool().submit(int, "7").result(timeout=20)
        writer.send((ran, program.retrieve(question, "paper", cypher).ids))

    proc = ctx.Process(target=child)
    proc.start()
    assert reader.poll(60), "the child's question never finished"
    assert reader.recv() == (7, ref)
    proc.join(30)
    assert proc.exitcode == 0


def test_an_approximate_index_keeps_its_own_search(tmp_path: Path) -> None:
    """``index_kind`` hnsw: step 7 searches HNSW as before (no head), with or without scan_ahead."""
    rng = np.random.default_rng(5)
    n = 700
    names = [" ".join(rng.choice(WORDS, 3)) for _ in range(n)]
    skb = make_skb(["paper", "author"], [0] * 600 + [1] * 100, [(600 + i % 100, "writes", i) for i in range(600)],
                   {"writes": ("author", "paper")}, names=names, docs=names, candidate_types=["paper"])  # fmt: skip
    kb = make_kb(skb, tmp_path)
    kb.index_kind = "hnsw"
    kb.ann_params = AnnParams(min_ann_size=200)
    program = AutofocusRetriever(kb, AutofocusConfig(reranker="none"))
    cypher = f'MATCH (x:author {{name: "{names[600]}"}})-[:writes]->(y:paper) RETURN y.name'
    question = f"Papers by {names[600]} on {names[3]}"
    for steps in ("1-7", "1+7"):
        ref = program.retrieve(question, "paper", cypher, AutofocusConfig(scan_ahead=False, steps=steps))
        trace = Trace(question=question)
        got = program.retrieve(question, "paper", cypher, AutofocusConfig(steps=steps), trace)
        assert got.ids == ref.ids and len(got.ids) == 20
        assert not kb.index("text+rel").exact("paper")


def test_scan_ahead_is_execution_only() -> None:
    from autofocus.evaluation.runner import EXECUTION_ONLY

    assert {"scan_ahead", "scan_shards"} <= EXECUTION_ONLY
    assert vss.SCAN_SLACK >= 1024  # at least the exclusions search() takes from one top-k scan
