"""Top-k inner-product search over one embedding store, per node type, optionally inside a filter.

The retriever ranks in three shapes: step 4 ranks a constant's name inside a hard-filter mask,
step 6 ranks grounded candidates (usually tens to thousands), step 7 ranks all nodes of the target
type minus those already taken. Each gets the fastest exact method for its size:

- small candidate sets: gather the float16 rows, decode with FAISS's SIMD fp16 decoder, dot with the
  query (``fvec_inner_products_ny``, single-threaded; numpy's ``astype`` and a threaded BLAS gemv are
  several times slower at these sizes, see ``benchmarks/bench_search.py``);
- large candidate sets: scan the type's flat FAISS index with an ``IDSelectorBitmap``;
- no candidates: the type's FAISS index (exact fp16 flat scan, or HNSW / IVF when asked), asking for
  ``k + |excluded|`` and dropping the excluded (a bitmap selector when the exclusion is large).

A whole-type exact scan can also start before the excluded nodes are known: ``head`` keeps the type's
``depth`` best nodes (the scan split into ``shards`` ranges that threads run side by side), and
``search_head`` later answers ``search(qvec, node_type, k, exclude)`` from it, with the same ids in the
same order, whenever ``k`` plus the excluded nodes of that type fit in ``depth`` (None otherwise: then
``search`` scans). Step 7 uses this to scan while steps 3-5 run (``program.steps.vss.ScanAhead``).

``flat`` is a float16 scalar-quantizer index: the same bits as the store (fp16 is lossless here), half
the memory of ``IndexFlatIP`` and faster to scan. Indexes are built per node type on first use, written
next to the embeddings and memory-mapped on later opens. Ties are broken by node id everywhere.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import faiss
import numpy as np

from autofocus import digests, paths
from autofocus.index.store import EmbeddingStore, IndexIncompleteError
from autofocus.skb.graph import sorted_unique

log = logging.getLogger(__name__)

IndexKind = Literal["flat", "hnsw", "ivf"]
INDEX_KINDS: tuple[str, ...] = ("flat", "hnsw", "ivf")
GATHER_CHUNK = 8192
TIE_EPS = 1e-6  # scores this close count as tied: FAISS kernels may differ in the last bit


@dataclass(frozen=True)
class AnnParams:
    """Settings of the approximate kinds; types smaller than ``min_ann_size`` always use the exact scan."""

    hnsw_m: int = 32
    hnsw_ef_construction: int = 80
    hnsw_ef_search: int = 128
    ivf_nlist: int | None = None  # None: 4 * sqrt(n) per type
    ivf_nprobe: int = 32
    min_ann_size: int = 50_000

    def tag(self, kind: str) -> str:
        if kind == "hnsw":
            return f"hnsw-m{self.hnsw_m}-efc{self.hnsw_ef_construction}"
        if kind == "ivf":
            return f"ivf-{self.ivf_nlist or 'auto'}"
        return "flat"


@dataclass
class _Part:
    """One node type's FAISS index; ``ids`` maps its positions to node ids (sorted)."""

    ids: np.ndarray
    index: faiss.Index
    exact: faiss.Index | None  # flat codes of the same rows when ``index`` itself is approximate


def _top(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best by score, best first; scores within ``TIE_EPS`` of each other tie and go by id.

    Identical vectors (duplicate or empty documents) can score a few ulps apart depending on where
    they sit in a SIMD batch, so exact float equality would make their order depend on the code path.
    """
    if len(ids) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    if len(ids) > k:
        kth = np.partition(-scores, k - 1)[k - 1]
        keep = np.flatnonzero(-scores <= kth + TIE_EPS)
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((ids, -scores))
    gaps = -np.diff(scores[order]) > TIE_EPS
    group = np.concatenate([[0], np.cumsum(gaps)])
    order = order[np.lexsort((ids[order], group))][:k]
    return ids[order].astype(np.int64, copy=False), scores[order].astype(np.float32, copy=False)


@dataclass(frozen=True)
class Head:
    """The ``depth`` best nodes of one type for one query (``NodeIndex.head``), best first, plus every
    node tied with the last: enough to answer ``search(qvec, node_type, k, exclude)`` whenever ``k`` plus
    the excluded nodes of the type is at most ``depth`` (any ``k`` and exclusion when ``complete``)."""

    node_type: str
    depth: int
    ids: np.ndarray
    scores: np.ndarray
    complete: bool  # every node of the type (with a vector) is in it

    @staticmethod
    def merge(parts: list[Head]) -> Head:
        """One head from the heads of a type's shards (the same ``node_type`` and ``depth``).

        Each shard's head holds all of its nodes scoring at least its own ``depth``-th score (less
        ``TIE_EPS``), which is at most the whole type's, so the union holds everything the whole type's
        head would: ``search_head`` gives the same answers from it."""
        if not parts:
            raise ValueError("no heads to merge")
        first = parts[0]
        if any(p.node_type != first.node_type or p.depth != first.depth for p in parts):
            raise ValueError("heads of different types or depths")
        if len(parts) == 1:
            return first
        ids = np.concatenate([p.ids for p in parts])
        scores = np.concatenate([p.scores for p in parts])
        order = np.lexsort((ids, -scores))
        return Head(first.node_type, first.depth, ids[order], scores[order], all(p.complete for p in parts))


def _bitmap(n: int, positions: np.ndarray | None = None, mask: np.ndarray | None = None) -> np.ndarray:
    """Little-endian packed bits, the layout ``faiss.IDSelectorBitmap`` reads."""
    if mask is None:
        mask = np.zeros(n, dtype=bool)
        mask[positions] = True
    return np.packbits(mask, bitorder="little")


def _type_file(code: int, name: str) -> str:
    return f"{code:04d}-{re.sub(r'[^A-Za-z0-9._-]+', '_', name)[:60]}"


class NodeIndex:
    """Search one embedding store (one model, one document variant) by node type and candidate filter.

    Args:
        store: the embeddings (rows aligned with node ids).
        node_type: type code of every node (``SKB.node_type``).
        type_names: names of the codes (``SKB.node_type_names``).
        kind: ``flat`` (exact), ``hnsw`` or ``ivf`` for unfiltered searches.
        gather_max: candidate sets up to this size use gather + matmul; ``None`` picks by size
            (``max(4096, n_type // 80)``: at 1.1 M nodes the crossover lay between 10 k and 17 k).
        cache: write built FAISS indexes next to the store and reuse them.
        threads: OpenMP threads per search call (set for the calling thread only). One by default:
            a single query's scan is memory-bound, and on a busy 2-core machine waking a second
            thread cost 10-30 ms per call (bench_search.py); run questions concurrently instead.

    Example:
        >>> ids, scores = index.search(qvec, node_type="paper", k=20, exclude=np.array([3, 7]))
    """

    def __init__(
        self, store: EmbeddingStore, node_type: np.ndarray, type_names: list[str], *, kind: IndexKind = "flat",
        params: AnnParams | None = None, gather_max: int | None = None, cache: bool = True, threads: int = 1,
    ) -> None:
        if kind not in INDEX_KINDS:
            raise ValueError(f"index kind must be one of {INDEX_KINDS}, got {kind!r}")
        if not store.consistent:
            raise IndexIncompleteError(
                f"{store.directory}: the last build or import did not finish; run `autofocus index build` to resume"
            )
        if len(node_type) != store.manifest.num_nodes:
            raise ValueError(f"{len(node_type)} node types for a store of {store.manifest.num_nodes} rows")
        self.store = store
        self.kind = kind
        self.params = params or AnnParams()
        self.gather_max = gather_max
        self.cache = cache
        self.threads = threads
        self.node_type = np.asarray(node_type)
        self.type_names = list(type_names)
        self._vectors = store.vectors
        self._has_vector = np.asarray(store.done, dtype=bool)
        self._type_counts = np.bincount(self.node_type, minlength=len(self.type_names))
        self._decoder = faiss.ScalarQuantizer(self.dim, faiss.ScalarQuantizer.QT_fp16)
        self._parts: dict[tuple[str, int], _Part] = {}
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self.store.manifest.dim

    @property
    def model(self) -> str:
        return self.store.manifest.model

    @property
    def variant(self) -> str:
        return self.store.manifest.variant

    # -- public API ----------------------------------------------------------------------------------
    def scores(self, qvec: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Cosine of the query with each node in ``ids`` (NaN for nodes without a vector)."""
        q = self._query(qvec)
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        self._check_ids(ids)
        with self._omp_threads():
            out = self._dot(q, ids)
        out[~self._has_vector[ids]] = np.nan
        return out

    def search(
        self, qvec: np.ndarray, node_type: str | None = None, candidates: np.ndarray | None = None, k: int = 20,
        exclude: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` node ids and cosine scores, best first (ties by id).

        Args:
            qvec: query vector (``dim``,), L2-normalised.
            node_type: restrict to one node type (None: all types).
            candidates: restrict to these node ids, or a boolean mask over all nodes.
            k: how many to return (fewer if fewer nodes qualify).
            exclude: node ids never returned.
        """
        q = self._query(qvec)
        code = None if node_type is None else self._code(node_type)
        excl = None
        if exclude is not None and len(exclude):
            excl = sorted_unique(np.asarray(exclude, dtype=np.int64))
            self._check_ids(excl)
        if k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        if candidates is not None:
            cand = self._candidate_ids(candidates)
            with self._omp_threads():
                return self._search_candidates(q, cand, code, k, excl)
        codes = [code] if code is not None else np.flatnonzero(self._type_counts).tolist()
        for c in codes:
            self._part(c, self.kind)  # built (with every thread) outside the single-threaded search
        with self._omp_threads():
            found = [self._search_part(q, c, k, excl) for c in codes]
        return _top(np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found]), k)

    def exact(self, node_type: str) -> bool:
        """Whether whole-type searches of ``node_type`` scan exactly (flat), so ``head`` serves them."""
        part = self._part(self._code(node_type), self.kind)
        return not isinstance(part.index, faiss.IndexHNSW | faiss.IndexIVF)

    def head(self, qvec: np.ndarray, node_type: str, depth: int, shard: int = 0, shards: int = 1) -> Head | None:
        """The ``depth`` best nodes of ``node_type`` (plus ties with the last), from one exact scan of the
        type, for ``search_head`` to answer searches with exclusions from later; None when the type's
        index is approximate (HNSW / IVF: ``search`` keeps serving those).

        With ``shards`` > 1, only the ``shard``-th of that many equal ranges of the type is scanned (an
        ``IDSelectorRange``: the other codes are not read); ``Head.merge`` joins the shards' heads.
        Scores come from the same FAISS kernel as ``search``, bit for bit.
        """
        if depth <= 0:
            raise ValueError(f"depth must be positive, got {depth}")
        if not 0 <= shard < shards:
            raise ValueError(f"shard {shard} of {shards}")
        q = self._query(qvec)
        part = self._part(self._code(node_type), self.kind)
        if isinstance(part.index, faiss.IndexHNSW | faiss.IndexIVF):
            return None
        n = len(part.ids)
        lo, hi = n * shard // shards, n * (shard + 1) // shards
        selector = None if shards == 1 else faiss.IDSelectorRange(lo, hi)
        with self._omp_threads():
            ids, scores = self._faiss_search(part, part.index, q, min(depth, hi - lo), selector)
        return Head(node_type, depth, ids, scores, complete=depth >= hi - lo)

    def search_head(self, head: Head, k: int = 20, exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """``search(qvec, head.node_type, k=k, exclude=exclude)`` for the query ``head`` was scanned for,
        from the head alone: the same ids and scores, or None when the excluded nodes of the type leave
        the head too short to be sure (more than ``head.depth - k`` of them)."""
        code = self._code(head.node_type)
        excl_here = np.zeros(0, np.int64)
        if exclude is not None and len(exclude):
            excl = sorted_unique(np.asarray(exclude, dtype=np.int64))
            self._check_ids(excl)
            excl_here = excl[(self.node_type[excl] == code) & self._has_vector[excl]]
        if k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        if not head.complete and k + len(excl_here) > head.depth:
            return None
        ids, scores = head.ids, head.scores
        if len(excl_here):
            keep = ~np.isin(ids, excl_here, assume_unique=True)
            ids, scores = ids[keep], scores[keep]
        return _top(ids, scores, k)

    def prepare(self, node_types: list[str] | None = None) -> None:
        """Build (or load) the FAISS indexes of these types now instead of on first search."""
        names = self.type_names if node_types is None else node_types
        for name in names:
            self._part(self._code(name), self.kind)

    # -- helpers -------------------------------------------------------------------------------------
    @contextmanager
    def _omp_threads(self) -> Iterator[None]:
        before = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(self.threads)
        try:
            yield
        finally:
            faiss.omp_set_num_threads(before)

    def _query(self, qvec: np.ndarray) -> np.ndarray:
        q = np.ascontiguousarray(qvec, dtype=np.float32).reshape(-1)
        if len(q) != self.dim:
            raise ValueError(f"query vector has {len(q)} dimensions; this index ({self.model}) has {self.dim}")
        return q

    def _code(self, node_type: str) -> int:
        try:
            return self.type_names.index(node_type)
        except ValueError:
            raise KeyError(f"unknown node type {node_type!r}; known types: {', '.join(self.type_names)}") from None

    def _check_ids(self, ids: np.ndarray) -> None:
        n = len(self.node_type)
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= n):
            bad = ids[(ids < 0) | (ids >= n)][0]
            raise IndexError(f"node id {int(bad)} out of range (the index has {n} nodes)")

    def _candidate_ids(self, candidates: np.ndarray) -> np.ndarray:
        cand = np.asarray(candidates)
        if cand.dtype == np.bool_:
            if cand.shape != self.node_type.shape:
                raise ValueError(f"candidate mask has shape {cand.shape}, expected ({len(self.node_type)},)")
            return np.flatnonzero(cand & self._has_vector)
        cand = sorted_unique(cand.astype(np.int64, copy=False).reshape(-1))
        self._check_ids(cand)
        return cand[self._has_vector[cand]]

    def _gather_limit(self, part_size: int) -> int:
        return self.gather_max if self.gather_max is not None else max(4096, part_size // 80)

    def _dot(self, q: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """``E[ids] @ q`` in float32, chunked so buffers stay cache-sized."""
        out = np.empty(len(ids), dtype=np.float32)
        for start in range(0, len(ids), GATHER_CHUNK):
            chunk = ids[start : start + GATHER_CHUNK]
            n = len(chunk)
            half = np.ascontiguousarray(np.take(self._vectors, chunk, axis=0))
            full = np.empty((n, self.dim), dtype=np.float32)
            self._decoder.decode_c(faiss.swig_ptr(half.view(np.uint8)), faiss.swig_ptr(full), n)
            faiss.fvec_inner_products_ny(faiss.swig_ptr(out[start:]), faiss.swig_ptr(q), faiss.swig_ptr(full), self.dim, n)
        return out

    def _search_candidates(
        self, q: np.ndarray, cand: np.ndarray, code: int | None, k: int, excl: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        if code is not None:
            cand = cand[self.node_type[cand] == code]
        if excl is not None:
            cand = cand[~np.isin(cand, excl, assume_unique=True)]
        if len(cand) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        if code is None:  # np.unique hashes: ~50 ms on a million ids (numpy 2.4)
            codes = np.flatnonzero(np.bincount(self.node_type[cand], minlength=len(self.type_names)))
        else:
            codes = np.array([code])
        if len(cand) <= self._gather_limit(int(self._type_counts[codes].sum())):
            return _top(cand, self._dot(q, cand), k)
        found = []
        for c in codes:
            part = self._exact_part(int(c))
            local = np.searchsorted(part.ids, cand[self.node_type[cand] == c])
            bits = _bitmap(len(part.ids), positions=local)
            selector = faiss.IDSelectorBitmap(len(part.ids), faiss.swig_ptr(bits))
            found.append(self._faiss_search(part, part.index if part.exact is None else part.exact, q, min(k, len(local)), selector))
        return _top(np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found]), k)

    def _search_part(self, q: np.ndarray, code: int, k: int, excl: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        part = self._part(code, self.kind)
        n = len(part.ids)
        if n == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        excl_here = None if excl is None else excl[(self.node_type[excl] == code) & self._has_vector[excl]]
        n_excl = 0 if excl_here is None else len(excl_here)
        if n_excl <= max(1024, 4 * k):
            ids, scores = self._faiss_search(part, part.index, q, min(n, k + n_excl), None)
            if n_excl:
                keep = ~np.isin(ids, excl_here, assume_unique=True)
                ids, scores = ids[keep], scores[keep]
            return ids, scores
        allowed = np.ones(n, dtype=bool)
        allowed[np.searchsorted(part.ids, excl_here)] = False
        bits = _bitmap(n, mask=allowed)
        selector = faiss.IDSelectorBitmap(n, faiss.swig_ptr(bits))
        return self._faiss_search(part, part.index, q, min(k, n - n_excl), selector)

    def _params(self, index: faiss.Index, k: int, selector: faiss.IDSelector | None) -> faiss.SearchParameters:
        if isinstance(index, faiss.IndexHNSW):
            params = faiss.SearchParametersHNSW()
            params.efSearch = max(self.params.hnsw_ef_search, k)
        elif isinstance(index, faiss.IndexIVF):
            params = faiss.SearchParametersIVF()
            params.nprobe = self.params.ivf_nprobe
        else:
            params = faiss.SearchParameters()
        if selector is not None:
            params.sel = selector
        return params

    def _faiss_search(
        self, part: _Part, index: faiss.Index, q: np.ndarray, k: int, selector: faiss.IDSelector | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` of ``index``, plus every node tied with the k-th (FAISS's heap breaks ties arbitrarily;
        the caller's ``_top`` then orders them by id).

        A tie across the boundary is resolved by asking for twice as many until the tied group ends:
        the other way, ``range_search``, scans 35x slower than a top-k search on a 1.1 M fp16 index
        (0.9 s; it hit 1 % of the benchmark's queries, whose random vectors tie within ``TIE_EPS``).
        """
        if k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        n = len(part.ids)
        kk = min(k + 1, n)  # one more than asked: is the boundary tied?
        while True:
            scores, pos = index.search(q[None, :], kk, params=self._params(index, kk, selector))
            valid = pos[0] >= 0
            ids, scores = part.ids[pos[0][valid]], scores[0][valid]
            if len(scores) <= k or scores[k] < scores[k - 1] - TIE_EPS:
                return ids[:k], scores[:k]
            tied = scores >= scores[k - 1] - TIE_EPS
            if not tied[-1] or len(scores) < kk or kk == n:  # the tied group ends inside what came back
                return ids[tied], scores[tied]
            kk = min(2 * kk, n)

    # -- building and caching FAISS indexes ----------------------------------------------------------
    def _exact_part(self, code: int) -> _Part:
        part = self._part(code, self.kind)
        if part.exact is not None or self.kind == "flat" or part.index.ntotal < self.params.min_ann_size:
            return part
        return self._part(code, "flat")  # IVF keeps no flat copy; build one for large filtered searches

    def _part(self, code: int, kind: str) -> _Part:
        with self._lock:
            key = (kind, code)
            if key not in self._parts:
                rows = np.flatnonzero((self.node_type == code) & self._has_vector)
                use = kind if len(rows) >= self.params.min_ann_size else "flat"
                index = self._load_or_build(code, rows, use) if len(rows) else self._build(rows, "flat")
                exact = faiss.downcast_index(index.storage) if isinstance(index, faiss.IndexHNSW) else None
                self._parts[key] = _Part(rows, index, exact)
            return self._parts[key]

    def _index_path(self, code: int, kind: str) -> Path:
        return self.store.directory / "faiss" / self.params.tag(kind) / f"{_type_file(code, self.type_names[code])}.faiss"

    def _load_or_build(self, code: int, rows: np.ndarray, kind: str) -> faiss.Index:
        """The type's FAISS index from its file when the file's record (``.json``: the store's checksum,
        rows, kind, parameters and the file's sampled digest) matches, else built from the store (its
        vectors checked whole first: a FAISS copy of damaged vectors would outlive them) and written."""
        path = self._index_path(code, kind)
        meta_path = path.with_suffix(".json")
        meta = {"sha256": self.store.manifest.sha256, "rows": len(rows), "kind": kind,
                "params": asdict(self.params)}
        if self.cache and path.is_file() and meta_path.is_file():
            try:
                found = json.loads(meta_path.read_text())
                if isinstance(found, dict) and {k: v for k, v in found.items() if k != "digest"} == meta:
                    if found.get("digest") == digests.sampled(path):
                        return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC if kind == "flat" else 0)
                    log.warning("rebuilding FAISS index %s: %s", path, "its bytes changed since it was written"
                                if "digest" in found else "written by an older autofocus, without a digest to check it by")
            except (RuntimeError, ValueError) as exc:
                log.warning("rebuilding unreadable FAISS index %s: %s", path, exc)
        if not self.store.verified:
            self.store.verify()
        index = self._build(rows, kind)
        if not self.cache:
            return index
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with paths.replaced_atomically(path) as tmp:
                faiss.write_index(index, str(tmp))
            paths.replace_atomically(meta_path, json.dumps({**meta, "digest": digests.sampled(path)}))
        except (OSError, RuntimeError) as exc:  # RuntimeError: FAISS's own writer (a read-only folder)
            log.warning("could not cache FAISS index at %s (%s); keeping it in memory", path,
                        str(exc).strip().splitlines()[-1])
            return index
        if kind == "flat":  # reopen memory-mapped: page cache shared by processes instead of private memory
            return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC)
        return index

    def _rows_f32(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(np.take(self._vectors, rows, axis=0), dtype=np.float32)

    def _build(self, rows: np.ndarray, kind: str) -> faiss.Index:
        d, p = self.dim, self.params
        step = 65536
        if kind == "flat":
            index = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
            for start in range(0, len(rows), step):  # fp16 codes are the stored bytes: no decode/encode
                half = np.ascontiguousarray(np.take(self._vectors, rows[start : start + step], axis=0))
                index.add_sa_codes(half.view(np.uint8))
            return index
        if kind == "hnsw":
            index = faiss.IndexHNSWSQ(d, faiss.ScalarQuantizer.QT_fp16, p.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = p.hnsw_ef_construction
        else:
            nlist = p.ivf_nlist or max(1, int(4 * np.sqrt(len(rows))))
            nlist = min(nlist, max(1, len(rows) // 39))  # FAISS wants >= 39 training points per list
            index = faiss.IndexIVFScalarQuantizer(
                faiss.IndexFlatIP(d), d, nlist, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT, False
            )
            rng = np.random.default_rng(0)
            sample = np.sort(rng.choice(len(rows), size=min(len(rows), 64 * nlist), replace=False))
            index.train(self._rows_f32(rows[sample]))
        for start in range(0, len(rows), step):
            index.add(self._rows_f32(rows[start : start + step]))
        return index
