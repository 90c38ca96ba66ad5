"""A MAG-sized synthetic SKB for scale benchmarks, generated with vectorised numpy only.

At ``--scale 1``: 1.9 M nodes in four types with the proportions of STaRK-MAG (authors 59 %,
institutions 0.5 %, fields of study 3 %, papers 37 %), 40 M typed directed edges over four edge
types with ogbn-mag's proportions (writes 34 %, cites 26 %, has_topic 36 %, affiliated_with
5 %), endpoints drawn with a power-law popularity (a few hub fields, institutions and highly
cited papers, as in real citation graphs), a ``year`` attribute on papers, short pronounceable
names, and 384-d random unit float16 embeddings as a ``.npy`` memmap for the index benchmark.

Outputs (``--format cache``, the default) the SKB directly in the binary cache layout
(``autofocus.skb.cache``), or (``--format dir``) the SKB directory format, e.g. for the 100k
node load check.

    .venv/bin/python benchmarks/synthetic_skb.py --out /tmp/mag-synth --scale 0.01
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autofocus.skb.cache import write_cache
from autofocus.skb.graph import TypedGraph
from autofocus.skb.model import SKB, Column
from autofocus.skb.schema import EdgeTypeInfo, NodeTypeInfo, Schema
from autofocus.skb.text import TextArray

FULL_NODES = 1_900_000
FULL_EDGES = 40_000_000
NODE_SHARES = {"author": 0.5897, "institution": 0.0046, "field_of_study": 0.0318, "paper": 0.3739}
EDGE_TYPES = {  # name: (src type, dst type, share, dst popularity exponent)
    "author___writes___paper": ("author", "paper", 0.34, 1.5),
    "paper___cites___paper": ("paper", "paper", 0.26, 3.0),
    "paper___has_topic___field_of_study": ("paper", "field_of_study", 0.35, 3.0),
    "author___affiliated_with___institution": ("author", "institution", 0.05, 3.0),
}
SYLLABLES = np.array(
    ["ka", "lo", "mi", "ren", "sa", "to", "vi", "zu", "an", "bel", "cor", "dan", "el", "fir", "gor", "hal",
     "is", "jor", "kel", "lin", "mor", "nor", "os", "pal", "qui", "ros", "sel", "tam", "ul", "val", "wen", "yor"]
)  # fmt: skip


@dataclass
class SyntheticArrays:
    type_names: list[str]
    node_type: np.ndarray  # int16 [N], types in contiguous id ranges as in STaRK-MAG
    src: np.ndarray  # int64 [E]
    dst: np.ndarray
    etype: np.ndarray  # int8 [E]
    edge_names: list[str]
    year: np.ndarray  # float64 [N], NaN except papers
    names: list[str]


def _power_law_ids(rng: np.random.Generator, lo: int, count: int, size: int, exponent: float) -> np.ndarray:
    """``size`` ids in ``[lo, lo+count)``, popularity ~ rank^-(1-1/exponent), hubs scattered by a permutation."""
    rank = (count * rng.random(size, dtype=np.float32) ** exponent).astype(np.int64)
    np.minimum(rank, count - 1, out=rank)
    return lo + rng.permutation(count)[rank]


def _names(rng: np.random.Generator, n: int, parts: int) -> np.ndarray:
    out = SYLLABLES[rng.integers(0, len(SYLLABLES), n)]
    for _ in range(parts - 1):
        out = np.char.add(out, SYLLABLES[rng.integers(0, len(SYLLABLES), n)])
    return np.char.capitalize(out)


def generate(scale: float = 1.0, seed: int = 0) -> SyntheticArrays:
    rng = np.random.default_rng(seed)
    n_total = max(100, round(FULL_NODES * scale))
    counts = {t: max(2, round(share * n_total)) for t, share in NODE_SHARES.items()}
    type_names = list(counts)
    starts = dict(zip(type_names, np.cumsum([0, *counts.values()])[:-1].tolist(), strict=True))
    n = sum(counts.values())
    node_type = np.repeat(np.arange(len(type_names), dtype=np.int16), list(counts.values()))

    e_total = round(FULL_EDGES * scale)
    src_parts, dst_parts, type_parts = [], [], []
    for code, (src_t, dst_t, share, exponent) in enumerate(EDGE_TYPES.values()):
        m = round(share * e_total)
        src_parts.append(_power_law_ids(rng, starts[src_t], counts[src_t], m, 1.3))
        dst_parts.append(_power_law_ids(rng, starts[dst_t], counts[dst_t], m, exponent))
        type_parts.append(np.full(m, code, dtype=np.int8))

    year = np.full(n, np.nan)
    p0, pn = starts["paper"], counts["paper"]
    year[p0 : p0 + pn] = 2021 - np.floor(70 * rng.random(pn) ** 2)  # skewed to recent years

    names = np.empty(n, dtype=object)
    for t in type_names:
        s, c = starts[t], counts[t]
        if t == "author":
            names[s : s + c] = np.char.add(np.char.add(_names(rng, c, 2), " "), _names(rng, c, 3))
        elif t == "paper":
            names[s : s + c] = np.char.add(np.char.add(_names(rng, c, 3), " of "), _names(rng, c, 4))
        else:
            names[s : s + c] = np.char.add(f"{t.replace('_', ' ').title()} ", _names(rng, c, 3))
    return SyntheticArrays(
        type_names, node_type, np.concatenate(src_parts), np.concatenate(dst_parts), np.concatenate(type_parts),
        list(EDGE_TYPES), year, names.tolist(),
    )  # fmt: skip


def build_skb(arrays: SyntheticArrays) -> SKB:
    n = len(arrays.node_type)
    counts = np.bincount(arrays.node_type, minlength=len(arrays.type_names))
    edge_counts = np.bincount(arrays.etype, minlength=len(arrays.edge_names))
    schema = Schema(
        name="synthetic-mag",
        description="A synthetic MAG-sized SKB of authors, institutions, fields of study and papers (benchmarks only).",
        node_types={
            t: NodeTypeInfo(count=int(c), name_field="name", attributes=["year"] if t == "paper" else [])
            for t, c in zip(arrays.type_names, counts, strict=True)
        },
        edge_types={
            e: EdgeTypeInfo(count=int(c), src_type=EDGE_TYPES[e][0], dst_type=EDGE_TYPES[e][1])
            for e, c in zip(arrays.edge_names, edge_counts, strict=True)
        },
        candidate_types=["paper"],
        source={"generator": "benchmarks/synthetic_skb.py"},
    )
    present = ~np.isnan(arrays.year)
    return SKB(
        schema=schema,
        node_type_names=arrays.type_names,
        node_type=arrays.node_type,
        names=TextArray.from_strings(arrays.names),
        docs=TextArray(np.zeros(0, np.uint8), np.zeros(n + 1, np.int64)),
        columns={"year": Column("number", arrays.year, present)},
        graph=TypedGraph.from_edges(n, arrays.src, arrays.dst, arrays.etype, arrays.edge_names),
        fingerprint="synthetic",
    )


def write_embeddings(path: Path, n: int, dim: int = 384, seed: int = 0, chunk: int = 131072) -> Path:
    """Random unit vectors as float16, written chunk by chunk into a ``.npy`` memmap."""
    rng = np.random.default_rng(seed + 1)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(n, dim))
    for start in range(0, n, chunk):
        block = rng.standard_normal((min(chunk, n - start), dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start : start + len(block)] = block
    out.flush()
    del out
    return path


def write_dir_format(path: Path, arrays: SyntheticArrays) -> Path:
    """The same SKB in the SKB directory format (nodes.jsonl, edges.csv, schema.json, qa.csv)."""
    from autofocus.skb.writer import write_skb_dir

    skb_schema = build_schema_dict(arrays)
    year = arrays.year

    def nodes():
        for i, (code, name) in enumerate(zip(arrays.node_type.tolist(), arrays.names, strict=True)):
            node = {"id": i, "type": arrays.type_names[code], "name": name}
            if not np.isnan(year[i]):
                node["year"] = int(year[i])
                node["text"] = f"{name} is a paper published in {int(year[i])}."
            yield node

    edges = zip(
        arrays.src.tolist(),
        (arrays.edge_names[t] for t in arrays.etype.tolist()),
        arrays.dst.tolist(),
        strict=True,
    )
    papers = np.flatnonzero(~np.isnan(year))
    qa = [
        {"id": q, "query": f"Which paper is called {arrays.names[p]}?", "answer_ids": [int(p)]}
        for q, p in enumerate(papers[:50])
    ]
    return write_skb_dir(path, skb_schema, nodes(), edges, qa, {"test": list(range(len(qa)))})


def build_schema_dict(arrays: SyntheticArrays) -> dict:
    return {
        "name": "synthetic-mag",
        "description": "A synthetic MAG-like SKB (benchmarks only).",
        "node_types": {t: {"name_field": "name"} for t in arrays.type_names},
        "edge_types": {e: {"src_type": s, "dst_type": d} for e, (s, d, _, _) in EDGE_TYPES.items()},
        "candidate_types": ["paper"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--scale", type=float, default=1.0, help="1.0 = 1.9 M nodes, 40 M edges")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", choices=["cache", "dir"], default="cache")
    parser.add_argument("--no-embeddings", action="store_true", help="skip the 384-d float16 embeddings")
    args = parser.parse_args()
    t0 = time.perf_counter()
    arrays = generate(args.scale, args.seed)
    print(
        f"generated {len(arrays.node_type):,} nodes, {len(arrays.src):,} edges in {time.perf_counter() - t0:.1f} s"
    )
    t0 = time.perf_counter()
    if args.format == "dir":
        write_dir_format(args.out, arrays)
    else:
        write_cache(build_skb(arrays), args.out, source="synthetic")
        if not args.no_embeddings:
            write_embeddings(args.out / "embeddings.f16.npy", len(arrays.node_type), seed=args.seed)
    print(f"wrote {args.out} ({args.format}) in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
