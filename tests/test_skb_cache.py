"""The binary cache: exact round trip, hit, miss, invalidation, and nothing cached from a failed load."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from autofocus import digests
from autofocus.skb.cache import cache_dir_for, load_cached, read_cache, write_cache
from autofocus.skb.errors import SKBFormatError
from autofocus.skb.io import is_cached, load_skb
from autofocus.skb.skbdir import load_skb_dir, source_files


@pytest.fixture
def skb_copy(tiny_skb_dir, tmp_path):
    path = tmp_path / "tiny"
    shutil.copytree(tiny_skb_dir, path)
    return path


def _same(a, b) -> None:
    assert a.schema == b.schema
    assert a.node_type_names == b.node_type_names
    assert np.array_equal(a.node_type, b.node_type)
    assert list(a.names) == list(b.names) and list(a.docs) == list(b.docs)
    assert a.columns.keys() == b.columns.keys()
    for key, col in a.columns.items():
        other = b.columns[key]
        assert col.kind == other.kind and np.array_equal(col.present, other.present)
        if col.kind in ("number", "date"):
            assert np.array_equal(col.values, other.values, equal_nan=True)
        else:
            assert list(col.values) == list(other.values)
    assert a.graph.edge_types == b.graph.edge_types
    for e in a.graph.edge_types:
        for d in ("out", "in"):
            x, y = a.graph.adjacency(e, d), b.graph.adjacency(e, d)
            assert np.array_equal(x.indptr, y.indptr) and np.array_equal(x.indices, y.indices)


def test_round_trip(tiny_skb, tmp_path):
    write_cache(tiny_skb, tmp_path / "c")
    loaded = read_cache(tmp_path / "c")
    _same(tiny_skb, loaded)
    assert isinstance(loaded.graph.adjacency("paper_cites_paper", "out").indices, np.memmap)
    assert not list(tmp_path.glob(".c.tmp-*"))  # the temp folder was renamed, not left behind


def test_a_hit_reads_no_source_again_and_a_touch_keeps_the_cache(skb_copy, monkeypatch):
    calls, read = [], []
    real = digests.whole
    monkeypatch.setattr(digests, "whole", lambda path: read.append(Path(path).name) or real(path))

    def loader():
        calls.append(1)
        return load_skb_dir(skb_copy, progress=False)

    files = source_files(skb_copy)
    first = load_cached(skb_copy, loader, files=files)
    assert sorted(read) == sorted(f.name for f in files)
    read.clear()
    second = load_cached(skb_copy, loader, files=files)
    assert len(calls) == 1 and read == []  # every stat as recorded: no file read again
    assert first.fingerprint == second.fingerprint and len(first.fingerprint) == 32
    assert isinstance(second.node_type, np.memmap)
    _same(first, second)

    st = os.stat(skb_copy / "edges.csv")
    os.utime(skb_copy / "edges.csv", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # `touch`
    third = load_cached(skb_copy, loader, files=files)
    assert read == ["edges.csv"]  # its stat changed: read again, the same content
    assert len(calls) == 1 and third.fingerprint == first.fingerprint


def test_same_size_same_mtime_content_change_invalidates(skb_copy):
    assert load_skb(skb_copy, progress=False) is not None
    assert is_cached(skb_copy)
    nodes = skb_copy / "nodes.jsonl"
    st = os.stat(nodes)
    text = nodes.read_text()
    nodes.write_text(text.replace("Ada Lovelace", "Ada Lovelacf"))
    os.utime(nodes, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert nodes.stat().st_size == st.st_size
    assert not is_cached(skb_copy)
    assert load_skb(skb_copy, progress=False).name(4) == "Ada Lovelacf"


def test_failed_load_caches_nothing(skb_copy):
    with (skb_copy / "edges.csv").open("a") as fh:
        fh.write("4,author_writes_paper,999\n")
    with pytest.raises(SKBFormatError):
        load_skb(skb_copy, progress=False)
    directory = cache_dir_for(skb_copy)
    assert not directory.exists()
    assert not list(directory.parent.glob(f".{directory.name}*"))


def test_stale_cache_is_not_used_after_failed_rebuild(skb_copy):
    load_skb(skb_copy, progress=False)
    (skb_copy / "nodes.jsonl").write_text('{"id": 0, "type": "nope"}\n')
    with pytest.raises(SKBFormatError):
        load_skb(skb_copy, progress=False)
    assert not is_cached(skb_copy)


def test_damaged_cache_is_rebuilt(skb_copy):
    load_skb(skb_copy, progress=False)
    directory = cache_dir_for(skb_copy)
    (directory / "names.data.npy").unlink()
    assert load_skb(skb_copy, progress=False).name(0) == "Graph Retrieval at Scale"
    assert (directory / "names.data.npy").exists()


def test_cache_disabled_writes_nothing(skb_copy):
    skb = load_skb(skb_copy, cache=False, progress=False)
    assert skb.fingerprint and not cache_dir_for(skb_copy).exists()


def test_rebuild_keeps_the_indexes_of_unchanged_content_and_removes_stale_ones(skb_copy):
    """Indexes live in the cache folder; a rebuild must not throw away hours of embedding for a `touch`."""
    from autofocus.index.cache import EmbeddingCache
    from autofocus.index.store import EmbeddingStore
    from autofocus.kb import IndexNotFoundError, KnowledgeBase
    from tests.test_systems_common import HashEmbedder

    def open_kb(build: bool) -> KnowledgeBase:
        return KnowledgeBase.open(skb_copy, embedder=HashEmbedder(), build_missing=build, progress=False,
                                  cache=EmbeddingCache(None))

    first = open_kb(build=True)
    first.index("text")
    store = first.store_dir("text")
    assert store.parent.parent == cache_dir_for(skb_copy) / "index"
    vectors = (store / "embeddings.f16.npy").read_bytes()

    nodes = skb_copy / "nodes.jsonl"  # the same nodes written another way: new bytes, the same content
    lines = nodes.read_text().splitlines()
    nodes.write_text("".join(json.dumps(json.loads(line), separators=(",", ":")) + "\n" for line in lines))
    touched = open_kb(build=False)  # would raise IndexNotFoundError if the index had gone
    assert touched.skb.fingerprint != first.skb.fingerprint
    ids, _ = touched.index("text").search(touched.embed_query("Ada Lovelace"), k=3)
    assert len(ids) == 3 and (store / "embeddings.f16.npy").read_bytes() == vectors
    assert EmbeddingStore.open(store).manifest.skb_fingerprint == touched.skb.fingerprint

    assert load_skb(skb_copy, progress=False, rebuild=True) is not None  # a forced rebuild keeps them too
    assert (store / "embeddings.f16.npy").is_file()

    nodes.write_text(nodes.read_text().replace("Ada Lovelace", "Ada King"))
    with pytest.warns(UserWarning, match=r"changed: its 1 index\(es\) \(.*/text-\d+t\) may not match"):
        changed = open_kb(build=False)
    assert not store.exists()
    with pytest.raises(IndexNotFoundError):
        changed.index("text")
