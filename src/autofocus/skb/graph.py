"""Typed, directed graph as one forward and one reverse CSR per edge type.

Grounding (step 5) asks "which nodes reach / are reached from this candidate set through edge
type e", for thousands of candidates at once; a CSR gather answers that with a few numpy calls
instead of the reference code's scan over all edges per candidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` for 1-d integer arrays via sort + neighbour comparison.

    On numpy 2.4, ``np.unique`` of 10^5-10^7 integers is 30-150x slower than this (measured in
    benchmarks/bench_skb_scale.py); use this in hot paths. Input that is already strictly increasing
    is returned as is (not copied).
    """
    values = np.asarray(values)
    if len(values) < 2 or bool((values[1:] > values[:-1]).all()):  # already sorted and unique: O(n), no copy
        return values
    out = np.sort(values)
    keep = np.empty(len(out), dtype=bool)
    keep[0] = True
    np.not_equal(out[1:], out[:-1], out=keep[1:])
    return out[keep]


@dataclass(frozen=True)
class CSR:
    """Row pointers and column indices (``int64`` / ``int32``) of one adjacency direction."""

    indptr: np.ndarray
    indices: np.ndarray

    @classmethod
    def from_edges(cls, src: np.ndarray, dst: np.ndarray, num_nodes: int) -> CSR:
        order = np.argsort(src.astype(np.int64) * num_nodes + dst)  # by (src, dst), faster than lexsort
        counts = np.bincount(src, minlength=num_nodes)
        indptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return cls(indptr, dst[order].astype(np.int32, copy=False))

    def degree(self, rows: np.ndarray) -> np.ndarray:
        return self.indptr[rows + 1] - self.indptr[rows]

    def gather(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All (row, neighbour) pairs of ``rows``, as two aligned arrays, without a Python loop."""
        rows = np.asarray(rows, dtype=np.int64)
        starts = self.indptr[rows]
        lens = self.indptr[rows + 1] - starts
        total = int(lens.sum())
        if total == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int32)
        shift = np.repeat(starts - (np.cumsum(lens) - lens), lens)
        pos = np.arange(total, dtype=np.int64) + shift
        return np.repeat(rows, lens), self.indices[pos]

    def neighbours(self, rows: np.ndarray) -> np.ndarray:
        """Sorted unique neighbours of a set of rows."""
        return sorted_unique(self.gather(rows)[1])


@dataclass(frozen=True)
class TypedGraph:
    """Per-edge-type forward (src -> dst) and reverse (dst -> src) adjacency."""

    num_nodes: int
    forward: dict[str, CSR]
    reverse: dict[str, CSR]

    @classmethod
    def from_edges(
        cls, num_nodes: int, src: np.ndarray, dst: np.ndarray, etype: np.ndarray, edge_type_names: list[str]
    ) -> TypedGraph:
        """Build from parallel edge arrays; ``etype`` indexes ``edge_type_names``.

        Duplicate edges of the same type collapse to one; parallel edges of different types stay distinct.
        """
        fwd: dict[str, CSR] = {}
        rev: dict[str, CSR] = {}
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        etype = np.asarray(etype)
        order = np.argsort(etype, kind="stable")
        bounds = np.searchsorted(etype[order], np.arange(len(edge_type_names) + 1))
        for t, name in enumerate(edge_type_names):
            sel = order[bounds[t] : bounds[t + 1]]
            pairs = sorted_unique(src[sel] * num_nodes + dst[sel]) if len(sel) else np.zeros(0, np.int64)
            s, d = pairs // num_nodes, pairs % num_nodes
            fwd[name] = CSR.from_edges(s, d, num_nodes)
            rev[name] = CSR.from_edges(d, s, num_nodes)
        return cls(num_nodes, fwd, rev)

    @property
    def edge_types(self) -> list[str]:
        return list(self.forward)

    def num_edges(self, edge_type: str | None = None) -> int:
        if edge_type is not None:
            return len(self.forward[edge_type].indices)
        return sum(len(c.indices) for c in self.forward.values())

    def adjacency(self, edge_type: str, direction: str) -> CSR:
        """``direction`` is ``"out"`` (follow src -> dst) or ``"in"`` (follow dst -> src)."""
        return self.forward[edge_type] if direction == "out" else self.reverse[edge_type]

    def neighbours(
        self, rows: np.ndarray, edge_types: list[str] | None = None, direction: str = "out"
    ) -> np.ndarray:
        """Sorted unique neighbours of ``rows`` over the given edge types (all if None); direction out/in/both."""
        names = self.edge_types if edge_types is None else edge_types
        dirs = ["out", "in"] if direction == "both" else [direction]
        parts = [self.adjacency(e, d).gather(rows)[1] for e in names for d in dirs]
        if not parts:
            return np.zeros(0, np.int32)
        return sorted_unique(np.concatenate(parts))

    def neighbour_mask(
        self, rows: np.ndarray, edge_types: list[str] | None = None, direction: str = "out"
    ) -> np.ndarray:
        """Boolean mask of length N marking the neighbours of ``rows``."""
        mask = np.zeros(self.num_nodes, dtype=bool)
        names = self.edge_types if edge_types is None else edge_types
        dirs = ["out", "in"] if direction == "both" else [direction]
        for e in names:
            for d in dirs:
                mask[self.adjacency(e, d).gather(rows)[1]] = True
        return mask

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for i, name in enumerate(self.edge_types):
            for tag, csr in (("fwd", self.forward[name]), ("rev", self.reverse[name])):
                np.save(directory / f"e{i}.{tag}.indptr.npy", csr.indptr)
                np.save(directory / f"e{i}.{tag}.indices.npy", csr.indices)

    @classmethod
    def load(cls, directory: Path, num_nodes: int, edge_type_names: list[str], mmap: bool = True) -> TypedGraph:
        mode = "r" if mmap else None
        fwd: dict[str, CSR] = {}
        rev: dict[str, CSR] = {}
        for i, name in enumerate(edge_type_names):
            for tag, target in (("fwd", fwd), ("rev", rev)):
                target[name] = CSR(
                    np.load(directory / f"e{i}.{tag}.indptr.npy", mmap_mode=mode),
                    np.load(directory / f"e{i}.{tag}.indices.npy", mmap_mode=mode),
                )
        return cls(num_nodes, fwd, rev)
