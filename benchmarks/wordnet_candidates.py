"""Curation aid for the WordNet benchmark: propose candidate questions with their constraints and answers.

Not part of the build. It walks a built WordNet SKB (``autofocus bench build wordnet DIR``), proposes
relational constraints (one or two hops from a named node whose name is unique in its label) and,
for hybrid questions, a relational set narrowed by a phrase of its members' documents, each with a
plain default wording and its answers (name and document). A person reads them, keeps some,
rewrites the wording, and adds them to ``src/autofocus/bench/data/wordnet_questions.json``; the
build recomputes every gold answer from the stored constraint. Candidates are ordered by a stable
hash, so two runs propose the same ones.

    .venv/bin/python benchmarks/wordnet_candidates.py data/wordnet --per-template 8 > /tmp/candidates.txt
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

Edges = dict[str, dict[int, set[int]]]


def stable(text: str) -> int:
    return int(hashlib.sha1(text.encode()).hexdigest()[:12], 16)


class Graph:
    def __init__(self, skb: Path) -> None:
        with (skb / "nodes.jsonl").open(encoding="utf-8") as fh:
            self.nodes = [json.loads(line) for line in fh]
        self.out: Edges = defaultdict(lambda: defaultdict(set))
        self.inn: Edges = defaultdict(lambda: defaultdict(set))
        with (skb / "edges.csv").open(encoding="utf-8", newline="") as fh:
            for row in csv.DictReader(fh):
                s, t, d = int(row["src"]), row["type"], int(row["dst"])
                self.out[t][s].add(d)
                self.inn[t][d].add(s)
        self.label_name = Counter((n["type"], n["name"]) for n in self.nodes)

    def unique(self, node: int) -> bool:
        n = self.nodes[node]
        return self.label_name[(n["type"], n["name"])] == 1 and "'" not in n["name"]

    def name(self, node: int) -> str:
        return self.nodes[node]["name"]

    def label(self, node: int) -> str:
        return self.nodes[node]["type"]


Candidate = tuple[str, str, str, set[int]]  # key, default wording, cypher, answers


def one_hop(g: Graph, edge: str, label: str, anchor_label: str, backwards: bool, wording: str) -> Iterator[Candidate]:
    """``(y:label)-[:edge]->(x {name})`` (``backwards``: ``(x)-[:edge]->(y)``) for every unique-named x."""
    index = g.out if backwards else g.inn
    for x, ys in index[edge].items():
        if g.label(x) != anchor_label or not g.unique(x):
            continue
        ys = {y for y in ys if g.label(y) == label}
        if not ys:
            continue
        arrow = (f"(x:{anchor_label} {{name: '{g.name(x)}'}})-[:{edge}]->(y:{label})" if backwards
                 else f"(y:{label})-[:{edge}]->(x:{anchor_label} {{name: '{g.name(x)}'}})")  # fmt: skip
        yield f"{edge}|{label}|{anchor_label}|{g.name(x)}|{backwards}", wording.format(x=g.name(x)), \
            f"MATCH {arrow} RETURN y", ys


def instances_in(g: Graph, label: str, cls: str, where_label: str) -> Iterator[Candidate]:
    """``(y:label)-[:part_of]->(x {name}), (y)-[:instance_of]->(c {name: cls})``: cities in a country."""
    members = {y for c in g.inn["instance_of"] if g.name(c) == cls and g.label(c) == label
               for y in g.inn["instance_of"][c]}  # fmt: skip
    by_place: dict[int, set[int]] = defaultdict(set)
    for y in members:
        for x in g.out["part_of"].get(y, ()):
            if g.label(x) == where_label and g.unique(x):
                by_place[x].add(y)
    for x, ys in by_place.items():
        yield (f"in|{cls}|{g.name(x)}", f"Which {cls} instances are in {g.name(x)}?",
               f"MATCH (y:{label})-[:part_of]->(x:{where_label} {{name: '{g.name(x)}'}}), "
               f"(y)-[:instance_of]->(c:{label} {{name: '{cls}'}}) RETURN y", set(ys))


def phrases_of(g: Graph, ids: set[int]) -> Counter[str]:
    """Words and two-word phrases of the members' definitions, by how many members use them."""
    seen: Counter[str] = Counter()
    for i in ids:
        words = re.findall(r"[A-Za-z][A-Za-z-]+", g.nodes[i]["text"].split(" Also called:")[0])
        grams = {w for w in words if len(w) > 4} | {f"{a} {b}" for a, b in pairwise(words)}
        seen.update(grams)
    return seen


def narrowed(g: Graph, cand: Candidate, min_set: int = 6, max_answers: int = 8) -> Iterator[tuple[str, set[int]]]:
    """Phrases that keep 1..max_answers of a relational set of at least ``min_set`` members."""
    _, _, _, ids = cand
    if len(ids) < min_set:
        return
    for phrase, count in phrases_of(g, ids).most_common():
        if 1 <= count <= min(max_answers, len(ids) // 2):
            pat = re.compile(rf"(?<!\w){re.escape(phrase)}(?!\w)", re.IGNORECASE)
            yield phrase, {i for i in ids if pat.search(g.nodes[i]["text"])}


TEMPLATES = {
    "species of a group": lambda g: one_hop(g, "member_of", "animal", "animal", False, "Which animals belong to {x}?"),
    "parts of a body part": lambda g: one_hop(g, "part_of", "body_part", "body_part", False,
                                              "What are the parts of the {x}?"),
    "where is a place": lambda g: one_hop(g, "part_of", "location", "location", True, "Where is {x}?"),
    "kinds of a food": lambda g: one_hop(g, "is_a", "food", "food", False, "What kinds of {x} are there?"),
    "kinds of a substance": lambda g: one_hop(g, "is_a", "substance", "substance", False, "What kinds of {x} are there?"),
    "foods of a region": lambda g: one_hop(g, "in_region", "food", "location", False, "Which foods come from {x}?"),
    "members of a group": lambda g: one_hop(g, "member_of", "location", "group", False, "Which countries belong to {x}?"),
    "peaks of a range": lambda g: one_hop(g, "part_of", "natural_object", "natural_object", False,
                                          "Which natural objects are part of {x}?"),
    "named people of a class": lambda g: one_hop(g, "instance_of", "person", "person", False,
                                                 "Who are the {x}s?"),
    "made of a substance": lambda g: one_hop(g, "made_of", "substance", "substance", False, "What contains {x}?"),
    "food made of": lambda g: one_hop(g, "made_of", "food", "food", False, "Which foods are made of {x}?"),
    "genus of an animal": lambda g: one_hop(g, "member_of", "animal", "animal", True, "Which group does {x} belong to?"),
    "whole of a body part": lambda g: one_hop(g, "part_of", "body_part", "body_part", True, "What is {x} part of?"),
    "cities in a place": lambda g: instances_in(g, "location", "city", "location"),
    "rivers in a place": lambda g: instances_in(g, "natural_object", "river", "location"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("skb", type=Path)
    parser.add_argument("--per-template", type=int, default=8)
    parser.add_argument("--hybrid", action="store_true", help="propose a phrase that narrows each set")
    args = parser.parse_args()
    g = Graph(args.skb)
    for title, make in TEMPLATES.items():
        cands = sorted(make(g), key=lambda c: stable(c[0]))
        if not args.hybrid:
            cands = [c for c in cands if 1 <= len(c[3]) <= 10]
        print(f"## {title} ({len(cands)} candidates)")
        shown = 0
        for cand in cands:
            key, wording, cypher, ids = cand
            found = list(narrowed(g, cand))[:3] if args.hybrid else [("", ids)]
            for phrase, ans in found:
                print(f"- {key} | {wording} | {cypher}" + (f" | text: {phrase!r}" if phrase else ""))
                for i in sorted(ans):
                    print(f"    {g.name(i)} ({g.label(i)}): {g.nodes[i]['text'][:140]}")
            shown += bool(found)
            if shown >= args.per_template:
                break


if __name__ == "__main__":
    main()
