"""Build the WordNet benchmark directory: graph, schema, questions with their constraints, splits.

The schema holds nothing that depends on the questions (their summary goes to ``qa_summary.json``),
so rewording or adding questions keeps the SKB's content digest, and with it its vector indexes.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autofocus.bench.bench_dir import edge_types, scratch_build, write_questions
from autofocus.bench.wordnet_questions import (
    SEALED_FILE,
    SEALED_SPLIT,
    Dropped,
    assign_splits,
    load_question_specs,
    resolve_questions,
    resolve_sealed,
)
from autofocus.bench.wordnet_skb import (
    EDGE_DESCRIPTIONS,
    FULL,
    LABEL_DESCRIPTIONS,
    LABEL_ORDER,
    SMALL,
    Variant,
    WordNetGraph,
    build_graph,
)
from autofocus.bench.wordnet_source import DATA_FILES, locate_wordnet, read_synsets
from autofocus.skb.skbdir import load_skb_dir
from autofocus.skb.writer import write_skb_dir


@dataclass
class BenchBuild:
    """What a build wrote, for the CLI summary."""

    path: Path
    wordnet_dir: Path
    node_counts: dict[str, int]
    edge_counts: dict[str, int]
    qa_counts: dict[str, dict[str, int]]  # kind -> split -> count
    dropped: list[Dropped] = field(default_factory=list)
    seconds: float = 0.0


def build_wordnet_skb(out: Path | str, small: bool = False, wordnet_dir: Path | str | None = None) -> BenchBuild:
    """Build the WordNet benchmark (``small``: the body-part and natural-object files only) into ``out``.

    Questions whose constraint has no answer in this graph, or too many, are dropped and listed
    (the small variant keeps the questions its graph can answer). The development questions come
    first in ``qa.csv`` and are split into train, val and test; the sealed questions follow them and
    make the split ``sealed`` alone, so adding them changes no development row or split. The files
    are written to a scratch folder next to ``out`` and moved in only where they changed, so a
    rebuild that changes the questions alone leaves the graph files, their cache and their indexes
    untouched.
    """
    start = time.perf_counter()
    out = Path(out)
    folder = locate_wordnet(wordnet_dir)
    noun_file = folder / DATA_FILES["n"]
    variant = SMALL if small else FULL
    graph = build_graph(read_synsets(noun_file), variant)
    node_counts = Counter(n["type"] for n in graph.nodes)
    edge_counts = Counter(t for _, t, _ in graph.edges)
    schema = _schema(graph, variant, node_counts, edge_counts, noun_file)
    with scratch_build(out) as new:
        write_skb_dir(new, schema, graph.nodes, graph.edges)
        skb = load_skb_dir(new, progress=False)
        development_specs = load_question_specs()
        development, dropped = resolve_questions(development_specs, skb)
        sealed, sealed_dropped = resolve_sealed(load_question_specs(SEALED_FILE), skb, development_specs, development)
        dropped += sealed_dropped
        questions = development + sealed
        splits = assign_splits(development)
        splits[SEALED_SPLIT] = list(range(len(development), len(questions)))
        split_rule = ("train 0.3 / val 0.3 / test 0.4 per kind, by stable hash of the question key; "
                      f"{SEALED_SPLIT}: every question of {SEALED_FILE.rsplit('/', 1)[-1]}")  # fmt: skip
        qa_counts = write_questions(new, questions, splits, split_rule, dropped)
    return BenchBuild(
        out,
        folder,
        {t: node_counts[t] for t in LABEL_ORDER if node_counts[t]},
        {t: edge_counts[t] for t in EDGE_DESCRIPTIONS if edge_counts[t]},
        qa_counts,
        dropped,
        time.perf_counter() - start,
    )


def _schema(
    graph: WordNetGraph, variant: Variant, node_counts: Counter[str], edge_counts: Counter[str], noun_file: Path
) -> dict[str, Any]:
    node_types = {
        t: {
            "count": node_counts[t],
            "name_field": "name",
            "attributes": ["synonyms", "wordnet_id", "lexical_file"],
            "attribute_types": {"synonyms": "json", "wordnet_id": "string", "lexical_file": "string"},
            "description": LABEL_DESCRIPTIONS[t],
        }
        for t in LABEL_ORDER
        if node_counts[t]
    }
    core_rule = "every noun synset of " + ", ".join(variant.core_files)
    if variant.named_people:
        core_rule += ", and every noun.person synset that is an instance (a named person)"
    return {
        "name": "wordnet-nouns" if variant is FULL else "wordnet-nouns-small",
        "description": (
            "English nouns from WordNet 3.0 as a knowledge graph. Each node is one sense of a noun (a synset): "
            "animals and their biological classification, foods and dishes, body parts, natural objects "
            "(stars, mountains, rivers), substances, places (countries, cities, regions) and named people, "
            "with the abstract notions, plants, artifacts and groups they link to. A node's name is its "
            "first word form (names repeat across senses); its document is the definition, its other names "
            "and example sentences. Edges: x is_a y (a kind of y), x instance_of y (a named individual of the "
            "class y: Paris instance_of national capital), x member_of y (a species of a genus, a genus of a "
            "family, a country of an alliance), x part_of y (an organ of a body system, a city of a country), "
            "x made_of y (a substance), x has_topic y (a field it belongs to), x in_region y (a region it is "
            "particular to), x related_form y and x antonym_of y (words that derive from each other, "
            "opposites)."
        ),
        "node_types": node_types,
        "edge_types": edge_types(graph.nodes, graph.edges, edge_counts, EDGE_DESCRIPTIONS),
        "candidate_types": list(node_types),
        "source": {
            "builder": "autofocus.bench.wordnet_build.build_wordnet_skb",
            "data": "Princeton WordNet 3.0 (Debian package wordnet-base), WordNet 3.0 licence: "
            "https://wordnet.princeton.edu/license-and-commercial-use",
            "data_sha256": hashlib.sha256(noun_file.read_bytes()).hexdigest(),
            "variant": variant.name,
            "selection": f"core: {core_rule}; plus every noun synset a core synset points to with a kept "
            "pointer (one hop); edges: the kept pointers between selected synsets; labels: by lexicographer "
            "file (noun.Tops: the label of most of its direct hyponyms)",
            "core_nodes": graph.core,
        },
    }
