"""Embedding stores, resumable builds, .pt imports, FAISS search against brute force, KnowledgeBase checks."""

from __future__ import annotations

import json
import shutil
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from autofocus.index.build import build_embeddings, import_embeddings, import_query_embeddings
from autofocus.index.cache import EmbeddingCache
from autofocus.index.embedders import EmbedderError, PrecomputedEmbedder, l2_normalise
from autofocus.index.search import AnnParams, NodeIndex
from autofocus.index.store import (
    ChecksumError,
    EmbeddingStore,
    IndexCorruptError,
    IndexError_,
    IndexIncompleteError,
    IndexMismatchError,
    skb_fingerprint,
)
from autofocus.kb import IndexNotFoundError, KnowledgeBase
from autofocus.skb.model import SKB
from tests.skb_factory import make_skb

TYPES = ["a", "b", "c"]


class HashingEmbedder:
    """Character-trigram feature hashing: a real, deterministic embedder cheap enough for unit tests."""

    def __init__(self, name: str = "test:hashing", dim: int = 48) -> None:
        self.name = name
        self.dim = dim
        self.calls = 0
        self.texts_seen = 0

    def embed(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        self.calls += 1
        self.texts_seen += len(texts)
        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            padded = f"  {text.lower()} "
            for j in range(len(padded) - 2):
                out[row, zlib.crc32(padded[j : j + 3].encode()) % self.dim] += 1.0
        return l2_normalise(out)


def plain_documents(skb: SKB, ids: np.ndarray, variant: str, budget_tokens: int) -> list[str]:
    """Name + document (+ the node type for ``text+rel``), cut at ``4 * budget`` characters."""
    suffix = (lambda i: f" ({skb.type_of(i)})") if variant == "text+rel" else (lambda i: "")
    return [f"{skb.name(i)}. {skb.doc(i)}{suffix(i)}"[: 4 * budget_tokens] for i in ids.tolist()]


def word_skb(n: int = 60) -> SKB:
    words = ["graph", "retrieval", "protein", "drug", "camera", "laptop", "river", "music", "theorem", "cloud"]
    rng = np.random.default_rng(1)
    names = [f"{words[i % 10]} {words[(i * 7) % 10]} item {i}" for i in range(n)]
    docs = [" ".join(rng.choice(words, 6)) for _ in range(n)]
    return make_skb(TYPES, [i % 3 for i in range(n)], [(0, "link", 1)], {"link": (None, None)}, names=names, docs=docs)


def random_store(tmp_path: Path, n: int = 4000, d: int = 24, seed: int = 0, done: np.ndarray | None = None,
                 ) -> tuple[EmbeddingStore, np.ndarray, np.ndarray]:
    """A store of random unit vectors over three node types; returns (store, fp32 copy of stored rows, types)."""
    rng = np.random.default_rng(seed)
    x = l2_normalise(rng.standard_normal((n, d)))
    node_type = rng.integers(0, 3, n).astype(np.int16)
    store = EmbeddingStore.create(tmp_path / "store", model="m", dim=d, variant="text", doc_budget_tokens=64,
                                  skb_fingerprint="fp", num_nodes=n)
    rows = np.arange(n) if done is None else np.flatnonzero(done)
    store.write_rows(rows, x[rows])
    store.finish()
    return EmbeddingStore.open(tmp_path / "store"), x.astype(np.float16).astype(np.float32), node_type


def brute(e: np.ndarray, q: np.ndarray, allowed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.flatnonzero(allowed)
    s = e[ids] @ q
    order = np.lexsort((ids, -s))[:k]
    return ids[order], s[order]


# -- store ------------------------------------------------------------------------------------------------
def test_store_round_trip_and_checksum(tmp_path: Path) -> None:
    store, e, _ = random_store(tmp_path, n=500)
    assert store.complete and store.consistent
    assert store.vectors.dtype == np.float16 and store.vectors.shape == (500, 24)
    np.testing.assert_array_equal(np.asarray(store.vectors, dtype=np.float32), e)
    store.verify()
    manifest = json.loads((tmp_path / "store" / "manifest.json").read_text())
    assert manifest["rows_done"] == 500 and len(manifest["sha256"]) == 64 and manifest["dtype"] == "float16"
    raw = bytearray((tmp_path / "store" / "embeddings.f16.npy").read_bytes())
    raw[-7] ^= 0xFF
    (tmp_path / "store" / "embeddings.f16.npy").write_bytes(bytes(raw))
    with pytest.raises(IndexCorruptError, match="sampled digest"):  # a small file's sample is all of it
        EmbeddingStore.open(tmp_path / "store")
    (tmp_path / "store" / "manifest.json").write_text(json.dumps({**manifest, "sample": None}))  # an older store
    with pytest.raises(ChecksumError, match="sha256"):
        EmbeddingStore.open(tmp_path / "store").verify()


def test_store_check_names_every_mismatch(tmp_path: Path) -> None:
    store, _, _ = random_store(tmp_path, n=50)
    store.check(model="m", skb_fingerprint="fp", num_nodes=50, variant="text", doc_budget_tokens=64)
    with pytest.raises(IndexMismatchError) as err:
        store.check(model="other", variant="text+rel", doc_budget_tokens=32)
    msg = str(err.value)
    assert "model: index has 'm', expected 'other'" in msg and "variant" in msg and "doc_budget_tokens" in msg
    assert "embed queries with 'm'" in msg
    with pytest.raises(FileExistsError):
        EmbeddingStore.create(tmp_path / "store", model="m", dim=24, variant="text", doc_budget_tokens=64,
                              skb_fingerprint="fp", num_nodes=50)


def test_store_rejects_arrays_that_disagree_with_manifest(tmp_path: Path) -> None:
    random_store(tmp_path, n=50)
    np.save(tmp_path / "store" / "embeddings.f16.npy", np.zeros((49, 24), np.float16))
    with pytest.raises(IndexCorruptError, match=r"holds \(49, 24\) float16, the manifest says \(50, 24\)"):
        EmbeddingStore.open(tmp_path / "store")


# -- search against brute force ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def flat_setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[NodeIndex, np.ndarray, np.ndarray]:
    store, e, node_type = random_store(tmp_path_factory.mktemp("flat"))
    return NodeIndex(store, node_type, TYPES), e, node_type


def queries(d: int = 24, n: int = 5) -> np.ndarray:
    return l2_normalise(np.random.default_rng(7).standard_normal((n, d)))


def test_unfiltered_and_by_type_match_brute_force(flat_setup: tuple[NodeIndex, np.ndarray, np.ndarray]) -> None:
    index, e, node_type = flat_setup
    for q in queries():
        for t, allowed in [(None, np.ones(len(e), bool))] + [(n, node_type == c) for c, n in enumerate(TYPES)]:
            ids, scores = index.search(q, node_type=t, k=20)
            ref_ids, ref_scores = brute(e, q, allowed, 20)
            np.testing.assert_array_equal(ids, ref_ids)
            np.testing.assert_allclose(scores, ref_scores, atol=1e-5)


@pytest.mark.parametrize("gather_max", [None, 0])  # gather + matmul, and the FAISS bitmap-selector path
def test_candidates_type_and_exclude_match_brute_force(
    flat_setup: tuple[NodeIndex, np.ndarray, np.ndarray], gather_max: int | None
) -> None:
    base, e, node_type = flat_setup
    index = NodeIndex(base.store, node_type, TYPES, gather_max=gather_max)
    rng = np.random.default_rng(3)
    for q in queries():
        cand = rng.choice(len(e), 900, replace=False)
        exclude = rng.choice(cand, 40, replace=False)
        for t in (None, "b"):
            allowed = np.zeros(len(e), bool)
            allowed[cand] = True
            allowed[exclude] = False
            if t is not None:
                allowed &= node_type == 1
            ids, scores = index.search(q, node_type=t, candidates=cand, k=15, exclude=exclude)
            ref_ids, ref_scores = brute(e, q, allowed, 15)
            np.testing.assert_array_equal(ids, ref_ids)
            np.testing.assert_allclose(scores, ref_scores, atol=1e-5)
        mask = np.zeros(len(e), bool)
        mask[cand] = True
        np.testing.assert_array_equal(index.search(q, candidates=mask, k=15)[0], brute(e, q, mask, 15)[0])


def test_small_and_large_exclusions(flat_setup: tuple[NodeIndex, np.ndarray, np.ndarray]) -> None:
    index, e, node_type = flat_setup
    q = queries()[0]
    allowed = node_type == 0
    top = brute(e, q, allowed, 30)[0]
    small = top[:10]  # the best ten go: k + |exclude| search, then dropped
    big = np.flatnonzero(allowed)[: int(allowed.sum()) - 50]  # all but 50: bitmap selector path
    for exclude in (small, big):
        keep = allowed.copy()
        keep[exclude] = False
        ids, _ = index.search(q, node_type="a", k=20, exclude=exclude)
        np.testing.assert_array_equal(ids, brute(e, q, keep, 20)[0])
    assert len(index.search(q, node_type="a", k=100, exclude=big)[0]) == 50


def test_scores_and_edge_cases(flat_setup: tuple[NodeIndex, np.ndarray, np.ndarray]) -> None:
    index, e, _ = flat_setup
    q = queries()[1]
    ids = np.array([5, 3, 3999, 17])
    np.testing.assert_allclose(index.scores(q, ids), e[ids] @ q, atol=1e-6)
    assert index.search(q, k=0)[0].size == 0
    assert index.search(q, candidates=np.array([], np.int64), k=5)[0].size == 0
    ids, _ = index.search(q, candidates=np.array([9, 9, 4]), k=5)
    assert sorted(ids.tolist()) == [4, 9]
    with pytest.raises(ValueError, match="24"):
        index.search(np.ones(7, np.float32))
    with pytest.raises(KeyError, match="known types"):
        index.search(q, node_type="zzz")
    with pytest.raises(IndexError, match="out of range"):
        index.search(q, candidates=np.array([4000]))


def test_ties_break_by_node_id(tmp_path: Path) -> None:
    n, d = 200, 8
    x = np.tile(l2_normalise(np.arange(1, d + 1, dtype=np.float32)), (n, 1))
    store = EmbeddingStore.create(tmp_path / "s", model="m", dim=d, variant="text", doc_budget_tokens=8,
                                  skb_fingerprint="fp", num_nodes=n)
    store.write_rows(np.arange(n), x)
    store.finish()
    for gather_max in (None, 0):
        index = NodeIndex(EmbeddingStore.open(tmp_path / "s"), np.zeros(n, np.int16), ["a"], gather_max=gather_max)
        q = x[0]
        assert index.search(q, k=5)[0].tolist() == [0, 1, 2, 3, 4]
        assert index.search(q, k=3, exclude=np.array([1]))[0].tolist() == [0, 2, 3]
        assert index.search(q, candidates=np.arange(150, 10, -1), k=4)[0].tolist() == [11, 12, 13, 14]


def test_a_tie_across_the_k_boundary_returns_each_node_once(tmp_path: Path) -> None:
    """Eleven identical vectors rank behind a few others: a top k that cuts the group holds k distinct
    nodes, those of the group by id."""
    rng = np.random.default_rng(0)
    n, d = 1000, 8
    x = l2_normalise(rng.standard_normal((n, d)).astype(np.float32))
    x[500:510] = x[499]
    store = EmbeddingStore.create(tmp_path / "s", model="m", dim=d, variant="text", doc_budget_tokens=8,
                                  skb_fingerprint="fp", num_nodes=n)
    store.write_rows(np.arange(n), x)
    store.finish()
    q = l2_normalise(x[499] + 0.3 * rng.standard_normal(d).astype(np.float32))[0]
    exact = x.astype(np.float16).astype(np.float32) @ q
    ahead = int((exact > exact[499] + 1e-5).sum())
    assert ahead >= 5
    for gather_max in (None, 0):
        index = NodeIndex(EmbeddingStore.open(tmp_path / "s"), np.zeros(n, np.int16), ["a"], gather_max=gather_max)
        for k in (ahead + 1, ahead + 3, ahead + 15):
            for cand in (None, np.arange(n)):
                ids = index.search(q, k=k, candidates=cand)[0].tolist()
                assert len(ids) == len(set(ids)) == k
                group = ids[ahead : ahead + 11]
                assert group == list(range(499, 499 + len(group)))


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_approximate_kinds(tmp_path: Path, kind: str) -> None:
    store, e, node_type = random_store(tmp_path, n=3000, d=16)
    index = NodeIndex(store, node_type, TYPES, kind=kind, params=AnnParams(min_ann_size=500, ivf_nprobe=16))
    hits = 0
    for q in queries(16, 10):
        ids, _ = index.search(q, node_type="c", k=10)
        hits += len(set(ids.tolist()) & set(brute(e, q, node_type == 2, 10)[0].tolist()))
        # filtered searches stay exact whatever the kind
        cand = np.flatnonzero(node_type == 2)[::2]
        allowed = np.zeros(len(e), bool)
        allowed[cand] = True
        np.testing.assert_array_equal(
            NodeIndex(store, node_type, TYPES, kind=kind, gather_max=0, params=index.params)
            .search(q, candidates=cand, k=10)[0],
            brute(e, q, allowed, 10)[0],
        )
    assert hits / 100 >= 0.8
    assert list((store.directory / "faiss").glob(f"{kind}*/0002-c.faiss"))


def test_faiss_indexes_are_cached_and_invalidated(tmp_path: Path) -> None:
    store, _, node_type = random_store(tmp_path, n=800)
    q = queries()[0]
    first = NodeIndex(store, node_type, TYPES).search(q, node_type="a", k=10)
    path = store.directory / "faiss" / "flat" / "0000-a.faiss"
    assert path.is_file()
    stamp = path.stat().st_mtime_ns
    again = NodeIndex(EmbeddingStore.open(store.directory), node_type, TYPES).search(q, node_type="a", k=10)
    np.testing.assert_array_equal(first[0], again[0])
    assert path.stat().st_mtime_ns == stamp  # read back, not rebuilt
    writable = EmbeddingStore.open(store.directory, writable=True)
    writable.begin_write()
    writable.write_rows(np.array([1]), -l2_normalise(q[None]))
    with pytest.raises(IndexIncompleteError):
        NodeIndex(EmbeddingStore.open(store.directory), node_type, TYPES)
    writable.finish()
    ids, _ = NodeIndex(EmbeddingStore.open(store.directory), node_type, TYPES).search(-q, k=1)
    assert ids.tolist() == [1]  # the stale FAISS file was rebuilt from the new vectors


# -- resumable building -------------------------------------------------------------------------------------
def test_build_resumes_after_a_crash(tmp_path: Path) -> None:
    skb = word_skb(60)

    def crashing_documents(skb: SKB, ids: np.ndarray, variant: str, budget: int) -> list[str]:
        if ids[0] == 24:
            raise KeyboardInterrupt  # Ctrl-C during the fourth chunk
        return plain_documents(skb, ids, variant, budget)

    emb = HashingEmbedder()
    with pytest.raises(KeyboardInterrupt):
        build_embeddings(skb, emb, "text", tmp_path / "s", documents=crashing_documents, chunk_size=8, progress=False)
    partial = EmbeddingStore.open(tmp_path / "s")
    assert partial.manifest.rows_done == 24 and not partial.consistent
    assert np.asarray(partial.done).tolist() == [True] * 24 + [False] * 36
    with pytest.raises(IndexIncompleteError):
        NodeIndex(partial, skb.node_type, skb.node_type_names)

    emb2 = HashingEmbedder()
    store = build_embeddings(skb, emb2, "text", tmp_path / "s", documents=plain_documents, chunk_size=8, progress=False)
    assert emb2.texts_seen == 36  # only the rows not done before the crash
    clean = build_embeddings(skb, HashingEmbedder(), "text", tmp_path / "clean", documents=plain_documents,
                             chunk_size=8, progress=False)
    np.testing.assert_array_equal(np.asarray(store.vectors), np.asarray(clean.vectors))
    assert store.manifest.sha256 == clean.manifest.sha256 and store.complete
    emb3 = HashingEmbedder()
    build_embeddings(skb, emb3, "text", tmp_path / "s", documents=plain_documents, progress=False)
    assert emb3.calls == 0  # complete and consistent: nothing to do


def test_build_refuses_a_store_of_another_model_or_skb(tmp_path: Path) -> None:
    skb = word_skb(12)
    build_embeddings(skb, HashingEmbedder(), "text", tmp_path / "s", documents=plain_documents, progress=False)
    with pytest.raises(IndexMismatchError, match="model"):
        build_embeddings(skb, HashingEmbedder(name="other"), "text", tmp_path / "s", documents=plain_documents,
                         progress=False)
    with pytest.raises(IndexMismatchError, match="skb_fingerprint"):
        build_embeddings(word_skb(15), HashingEmbedder(), "text", tmp_path / "s",
                         documents=plain_documents, progress=False)
    with pytest.raises(IndexMismatchError, match="doc_budget_tokens"):
        build_embeddings(skb, HashingEmbedder(), "text", tmp_path / "s", documents=plain_documents,
                         doc_budget_tokens=16, progress=False)


def test_a_change_to_the_document_rendering_re_embeds(tmp_path: Path) -> None:
    """The SKB is the same, the rendering code is not: an index of the old documents is not reused."""
    skb = word_skb(40)

    def reworded(skb: SKB, ids: np.ndarray, variant: str, budget: int) -> list[str]:
        return [f"{t} (reworded)" for t in plain_documents(skb, ids, variant, budget)]

    old = build_embeddings(skb, HashingEmbedder(), "text", tmp_path / "s", documents=plain_documents, progress=False)
    old_vectors, old_digest = np.asarray(old.vectors).copy(), old.manifest.documents
    emb = HashingEmbedder()
    build_embeddings(skb, emb, "text", tmp_path / "s", documents=plain_documents, progress=False)
    assert emb.calls == 0  # same rendering: nothing to do
    new = build_embeddings(skb, emb, "text", tmp_path / "s", documents=reworded, progress=False)
    assert emb.texts_seen == 40 and new.manifest.documents not in (None, old_digest) and new.consistent
    assert not np.array_equal(np.asarray(new.vectors), old_vectors)

    fresh = KnowledgeBase(skb, HashingEmbedder(), tmp_path / "idx", documents=plain_documents, progress=False)
    fresh.build("text")
    stale = KnowledgeBase(skb, HashingEmbedder(), tmp_path / "idx", documents=reworded, build_missing=False,
                          progress=False)
    with pytest.raises(IndexMismatchError, match=r"rendered differently.*index build --variant text"):
        stale.index("text")
    rebuilding = KnowledgeBase(skb, emb := HashingEmbedder(), tmp_path / "idx", documents=reworded,
                               build_missing=True, progress=False)
    rebuilding.index("text")
    assert emb.texts_seen == 40
    assert EmbeddingStore.open(fresh.store_dir("text")).manifest.documents == new.manifest.documents


def test_an_index_from_before_document_digests_is_searched_as_is(tmp_path: Path) -> None:
    skb = word_skb(20)
    kb = KnowledgeBase(skb, searching := HashingEmbedder(), tmp_path / "idx", documents=plain_documents,
                       build_missing=True, progress=False)
    store = kb.build("text")
    store.manifest.documents = None  # as an older version wrote it
    store.save_manifest()
    seen = searching.texts_seen
    index = kb.index("text")
    assert index.store.manifest.documents is None and searching.texts_seen == seen  # opened, not rebuilt
    assert len(index.search(kb.embed_query(skb.name(3)), k=3)[0]) == 3
    emb = HashingEmbedder()
    build_embeddings(skb, emb, "text", kb.store_dir("text"), documents=plain_documents, progress=False)
    assert emb.texts_seen == 20  # an explicit build cannot tell, so it embeds again and records the digest
    assert EmbeddingStore.open(kb.store_dir("text")).manifest.documents is not None


def test_fingerprint_of_in_memory_skbs_follows_content() -> None:
    assert skb_fingerprint(word_skb(20)) == skb_fingerprint(word_skb(20))
    assert skb_fingerprint(word_skb(20)) != skb_fingerprint(word_skb(21))


# -- KnowledgeBase ----------------------------------------------------------------------------------------
def test_knowledge_base_builds_searches_and_checks(tmp_path: Path) -> None:
    skb = word_skb(30)
    emb = HashingEmbedder()
    cache = EmbeddingCache(tmp_path / "q.sqlite")
    kb = KnowledgeBase(skb, emb, tmp_path / "idx", documents=plain_documents, build_missing=True, progress=False,
                       cache=cache)
    index = kb.index("text+rel")
    assert index is kb.index("text+rel") and index.model == "test:hashing"
    q = kb.embed_query(skb.name(4))
    ids, _ = index.search(q, k=3)
    assert ids[0] == 4
    ids_b, _ = index.search(q, node_type="b", k=50)
    assert set(ids_b.tolist()) == set(skb.ids_of_type("b").tolist())
    seen = emb.texts_seen
    kb.embed_query(skb.name(4))
    np.testing.assert_array_equal(kb.embed_queries([skb.name(4), "new text"])[0], q)
    assert emb.texts_seen == seen + 1 and cache.hits >= 2

    refuses = KnowledgeBase(skb, HashingEmbedder(name="hosted/model"), tmp_path / "idx", build_missing=False,
                            progress=False, cache=cache)
    with pytest.raises(IndexNotFoundError, match=r"built with: test:hashing \(text\+rel, 512 tokens\)"):
        refuses.index("text+rel")
    moved = KnowledgeBase(skb, HashingEmbedder(name="other/model"), tmp_path / "idx", progress=False, cache=cache)
    shutil.copytree(kb.store_dir("text+rel"), moved.store_dir("text+rel"))
    with pytest.raises(IndexMismatchError, match="embed queries with 'test:hashing'"):
        moved.index("text+rel")
    wrong_skb = KnowledgeBase(word_skb(31), emb, tmp_path / "idx", documents=plain_documents, progress=False,
                              cache=cache)
    with pytest.raises(IndexMismatchError, match="num_nodes"):
        wrong_skb.index("text+rel")


# -- imports ----------------------------------------------------------------------------------------------
def test_import_tensor_dict_and_af_layouts(tmp_path: Path) -> None:
    skb = word_skb(30)
    rng = np.random.default_rng(5)
    full = rng.standard_normal((30, 12)).astype(np.float32)
    torch.save(torch.from_numpy(full), tmp_path / "tensor.pt")
    store = import_embeddings(tmp_path / "tensor.pt", skb, tmp_path / "t", variant="text", model="openai/x",
                              progress=False)
    assert store.complete and store.manifest.source == "imported:tensor.pt" and store.manifest.doc_budget_tokens is None
    np.testing.assert_allclose(np.asarray(store.vectors, np.float32), l2_normalise(full), atol=1e-3)

    cand = [2, 5, 8, 11, 29]  # STaRK layout: candidates only, (1, d) tensors
    torch.save({i: torch.from_numpy(full[i][None]) for i in cand}, tmp_path / "candidate_emb_dict.pt")
    part = import_embeddings(tmp_path / "candidate_emb_dict.pt", skb, tmp_path / "d", variant="text",
                             model="openai/x", progress=False)
    assert part.manifest.rows_done == 5 and np.flatnonzero(np.asarray(part.done)).tolist() == cand
    index = NodeIndex(part, skb.node_type, skb.node_type_names)
    q = l2_normalise(full[3][None])[0]
    assert set(index.search(q, k=30)[0].tolist()) == set(cand)  # nodes without a vector never come back
    assert set(index.search(q, node_type="c", k=30)[0].tolist()) == set(cand)  # all candidates have type c
    assert index.search(q, node_type="a", k=30)[0].size == 0
    assert np.isnan(index.scores(q, np.array([3, 5]))).tolist() == [True, False]

    ids = torch.tensor([29, 0, 7])
    torch.save({"indices": ids, "embeddings": torch.from_numpy(full[[29, 0, 7]]), "node_labels": ["a", "a", "b"]},
               tmp_path / "af.pt")
    af = import_embeddings(tmp_path / "af.pt", skb, tmp_path / "af", variant="text+rel", model="openai/x",
                           progress=False)
    np.testing.assert_allclose(np.asarray(af.vectors[0], np.float32), l2_normalise(full[0][None])[0], atol=1e-3)
    assert af.manifest.rows_done == 3


def test_import_errors(tmp_path: Path) -> None:
    skb = word_skb(10)
    torch.save({3: torch.ones(4), 10: torch.ones(4)}, tmp_path / "bad.pt")
    with pytest.raises(IndexError_, match="node id 10 out of range"):
        import_embeddings(tmp_path / "bad.pt", skb, tmp_path / "s", variant="text", model="m/x", progress=False)
    torch.save({"x": [1, 2]}, tmp_path / "keys.pt")
    with pytest.raises(IndexError_, match="keys must be node ids"):
        import_embeddings(tmp_path / "keys.pt", skb, tmp_path / "s2", variant="text", model="m/x", progress=False)
    torch.save(torch.ones(10, 4), tmp_path / "ok.pt")
    import_embeddings(tmp_path / "ok.pt", skb, tmp_path / "s3", variant="text", model="m/x", progress=False)
    with pytest.raises(IndexMismatchError, match="model"):
        import_embeddings(tmp_path / "ok.pt", skb, tmp_path / "s3", variant="text", model="m/y", progress=False)
    with pytest.raises(FileNotFoundError):
        import_embeddings(tmp_path / "missing.pt", skb, tmp_path / "s4", variant="text", model="m/x", progress=False)


def test_precomputed_query_vectors(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "q.sqlite")
    vecs = np.random.default_rng(2).standard_normal((2, 6)).astype(np.float32)
    torch.save({"aspirin": torch.from_numpy(vecs[0]), "BRCA1": torch.from_numpy(vecs[1][None])},
               tmp_path / "entity_emb_dict.pt")
    assert import_query_embeddings(tmp_path / "entity_emb_dict.pt", "openai/x", cache=cache) == 2
    torch.save({7: torch.from_numpy(vecs[1])}, tmp_path / "query_emb_dict.pt")
    with pytest.raises(IndexError_, match="question texts"):
        import_query_embeddings(tmp_path / "query_emb_dict.pt", "openai/x", cache=cache)
    assert import_query_embeddings(tmp_path / "query_emb_dict.pt", "openai/x", texts={7: "Which gene?"},
                                   cache=cache) == 1
    emb = PrecomputedEmbedder("openai/x", cache=EmbeddingCache(tmp_path / "q.sqlite"))  # a fresh reader: from disk
    assert emb.dim == 6
    out = emb.embed(["BRCA1", "aspirin", "Which gene?"])
    np.testing.assert_allclose(out, l2_normalise(vecs[[1, 0, 1]]), atol=1e-6)
    with pytest.raises(EmbedderError, match="1 of 2 texts have no precomputed"):
        emb.embed(["aspirin", "ibuprofen"])


# -- the query-embedding cache: damaged entries and files ----------------------------------------------------
def _overwrite_vectors(path: Path) -> None:
    """Every stored vector replaced by garbage of its own length, in whatever table holds vectors."""
    import sqlite3

    db = sqlite3.connect(path)
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        if "vec" in [c[1] for c in db.execute(f"PRAGMA table_info({table})")]:
            db.execute(f"UPDATE {table} SET vec = randomblob(length(vec))")
    db.commit()
    db.close()


def test_cached_vectors_overwritten_with_garbage_are_embedded_again_and_named(tmp_path: Path,
                                                                               caplog: pytest.LogCaptureFixture) -> None:
    """A candidate's cached vector replaced by same-length garbage is never used: it fails its digest, is
    embedded again, and the file is named in one line."""
    path, texts = tmp_path / "q.sqlite", [f"candidate {i}" for i in range(5)]
    emb = HashingEmbedder(name="bi-encoder-0123456789abcdef-128t")
    cache = EmbeddingCache(path)
    expected = cache.embed(emb, texts)
    cache.close()
    _overwrite_vectors(path)
    reopened, again = EmbeddingCache(path), HashingEmbedder(name=emb.name)
    with caplog.at_level("WARNING"):
        np.testing.assert_array_equal(reopened.embed(again, texts), expected)
    assert again.texts_seen == 5 and reopened.hits == 0  # every row failed its check and was embedded again
    assert [r.getMessage() for r in caplog.records if "digest" in r.getMessage()] == [
        f"{path}: 5 cached vectors of {emb.name} fail their digest (the file is damaged); embedding them again, "
        "as any others that fail it"]
    third = HashingEmbedder(name=emb.name)
    np.testing.assert_array_equal(EmbeddingCache(path).embed(third, texts), expected)
    assert third.texts_seen == 0  # the rows written again pass
    _overwrite_vectors(path)
    caplog.clear()
    later = EmbeddingCache(path)
    with caplog.at_level("WARNING"):
        later.embed(HashingEmbedder(name=emb.name), texts[:2])
        np.testing.assert_array_equal(later.embed(HashingEmbedder(name=emb.name), texts), expected)
    assert later.rejected == 5 and len(caplog.records) == 1  # later lookups: embedded again without another line


@pytest.mark.parametrize("damage", ["garbage", "truncated", "garbage after the header"])
def test_a_damaged_cache_file_is_moved_aside_and_every_use_goes_on(tmp_path: Path, damage: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    path, texts = tmp_path / "q.sqlite", [f"question {i} " * 20 for i in range(2000)]
    emb = HashingEmbedder()
    cache = EmbeddingCache(path)
    expected = cache.embed(emb, texts[:3])
    cache.embed(emb, texts)
    cache.close()
    data = path.read_bytes()
    path.write_bytes({"garbage": np.random.default_rng(0).bytes(len(data)), "truncated": data[: len(data) // 2],
                      "garbage after the header": data[:4096] + bytes(len(data) - 4096)}[damage])
    with caplog.at_level("WARNING"):
        reopened, again = EmbeddingCache(path), HashingEmbedder()
        np.testing.assert_array_equal(reopened.embed(again, texts[:3]), expected)
        assert reopened.dim(emb.name) == emb.dim
    lines = [r.getMessage() for r in caplog.records if "damaged cache" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith(f"{path}: damaged cache (")
    assert (tmp_path / "q.sqlite.damaged").is_file() and again.texts_seen == 3
    kb = KnowledgeBase(word_skb(12), HashingEmbedder(), tmp_path / "idx", documents=plain_documents,
                       build_missing=True, progress=False, cache=EmbeddingCache(path))
    assert kb.index("text").search(kb.embed_query("graph retrieval"), k=3)[0].size == 3  # the cache in use again


def test_the_cache_takes_over_the_rows_an_older_version_wrote(tmp_path: Path) -> None:
    """Vectors stored before digests (imported ones cannot be embedded again) are kept, now checked."""
    import sqlite3

    path, vec = tmp_path / "q.sqlite", np.arange(6, dtype=np.float32)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE vectors (model TEXT NOT NULL, key BLOB NOT NULL, vec BLOB NOT NULL, "
               "PRIMARY KEY (model, key)) WITHOUT ROWID")
    from autofocus.index.cache import text_key

    db.execute("INSERT INTO vectors VALUES (?, ?, ?)", ["openai/x", text_key("aspirin"), vec.tobytes()])
    db.commit()
    db.close()
    (found,) = EmbeddingCache(path).get_many("openai/x", ["aspirin"])
    np.testing.assert_array_equal(found, vec)
