"""A larger knowledge base for cost measurements: ``--copies`` disjoint copies of an SKB directory, side by side.

Every copy keeps the nodes' types, attributes and documents and the edges among its own nodes; names get the
copy's number (``dog #2``), so that a name still names one node (questions are written about named nodes).
The graph is ``copies`` times larger in nodes and edges, and so is its vector index: the sequences measured
on it (``autofocus adapt``, steps 3-7) meet a graph and an index of the larger size. No questions are written
(``adapt --templates`` writes its own).

    .venv/bin/python benchmarks/scaled_kb.py data/wordnet --copies 4 --out runs/wordnet-x4
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from autofocus.skb.skbdir import load_skb_dir
from autofocus.skb.writer import write_skb_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("skb", type=Path, help="an SKB directory")
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    skb = load_skb_dir(args.skb, progress=False)  # checks the source; the rows are copied from its files
    n = skb.num_nodes
    schema = json.loads((args.skb / "schema.json").read_text())
    schema["name"] = f"{schema.get('name', args.skb.name)}-x{args.copies}"
    schema["description"] = f"{args.copies} disjoint copies of {schema.get('name')}: {schema.get('description', '')}"
    for kind in ("node_types", "edge_types"):  # the counts a schema states are checked against the files
        for spec in schema.get(kind, {}).values():
            if isinstance(spec, dict) and isinstance(spec.get("count"), int):
                spec["count"] *= args.copies
    rows = [json.loads(line) for line in (args.skb / "nodes.jsonl").read_text().splitlines() if line.strip()]
    edges = [(int(s), t, int(d)) for s, t, d in (line.split(",") for line in
                                                  (args.skb / "edges.csv").read_text().splitlines()[1:] if line)]
    fields = {t: (spec.get("name_field") if isinstance(spec, dict) else None) or "name"
              for t, spec in schema.get("node_types", {}).items()}

    def copy(row: dict[str, Any], k: int) -> dict[str, Any]:
        out, field = {**row, "id": int(row["id"]) + k * n}, fields.get(row.get("type"), "name")
        if k and out.get(field):
            out[field] = f"{out[field]} #{k + 1}"
        return out

    nodes = (copy(row, k) for k in range(args.copies) for row in rows)
    write_skb_dir(args.out, schema, nodes, ((s + k * n, t, d + k * n) for k in range(args.copies) for s, t, d in edges))
    print(f"{args.out}: {args.copies * n:,} nodes, {args.copies * len(edges):,} edges ({args.copies} copies of {args.skb})")


if __name__ == "__main__":
    main()
