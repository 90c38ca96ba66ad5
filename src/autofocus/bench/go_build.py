"""Build the GO benchmark directory: graph, schema, questions with their constraints, splits.

As for WordNet, the schema holds nothing that depends on the questions (their summary goes to
``qa_summary.json``), so rewording or adding questions keeps the SKB's content digest, and with it
its vector indexes; files are moved in only where their bytes changed.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autofocus.bench.bench_dir import edge_types, scratch_build, write_questions
from autofocus.bench.go_questions import (
    SPLIT_FRACTIONS,
    Dropped,
    GoQuestionSpec,
    assign_splits,
    load_question_specs,
    resolve_questions,
)
from autofocus.bench.go_skb import (
    DEFAULT,
    EDGE_DESCRIPTIONS,
    FULL,
    LABEL_DESCRIPTIONS,
    LABEL_ORDER,
    GoGraph,
    Variant,
    build_graph,
)
from autofocus.bench.go_source import locate_databases, read_go, read_org
from autofocus.skb.skbdir import load_skb_dir
from autofocus.skb.writer import write_skb_dir

_ATTRIBUTES: dict[str, dict[str, str]] = {
    "gene": {"full_name": "string", "entrez_id": "string", "gene_type": "string", "chromosome": "string",
             "map_location": "string", "aliases": "json"},
    "biological_process": {"go_id": "string", "synonyms": "json"},
    "molecular_function": {"go_id": "string", "synonyms": "json"},
    "cellular_component": {"go_id": "string", "synonyms": "json"},
    "chromosome": {"chromosome": "string", "length": "number"},
}  # fmt: skip


@dataclass
class GoBuild:
    """What a build wrote, for the CLI summary."""

    path: Path
    sources: tuple[Path, Path]
    node_counts: dict[str, int]
    edge_counts: dict[str, int]
    qa_counts: dict[str, dict[str, int]]  # kind -> split -> count
    dropped: list[Dropped] = field(default_factory=list)
    seconds: float = 0.0


def build_go_skb(out: Path | str, full: bool = False, bioc_dir: Path | str | None = None,
                 specs: list[GoQuestionSpec] | None = None) -> GoBuild:  # fmt: skip
    """Build the GO benchmark (``full``: every gene and GO term, not only the annotated protein-coding
    genes and their terms) into ``out`` with ``specs`` (default: the package's questions). Questions
    that fail their check are dropped and listed."""
    start = time.perf_counter()
    out = Path(out)
    go_file, org_file = locate_databases(bioc_dir)
    variant = FULL if full else DEFAULT
    graph = build_graph(read_go(go_file), read_org(org_file), variant)
    node_counts = Counter(n["type"] for n in graph.nodes)
    edge_counts = Counter(t for _, t, _ in graph.edges)
    schema = _schema(graph, variant, node_counts, edge_counts, (go_file, org_file))
    split_rule = (" / ".join(f"{s} {f}" for s, f in SPLIT_FRACTIONS.items())
                  + " per kind, by stable hash of the question key; test is sealed")  # fmt: skip
    with scratch_build(out) as new:
        write_skb_dir(new, schema, graph.nodes, graph.edges)
        skb = load_skb_dir(new, progress=False)
        questions, dropped = resolve_questions(load_question_specs() if specs is None else specs, skb)
        qa_counts = write_questions(new, questions, assign_splits(questions), split_rule, dropped)
    return GoBuild(
        out,
        (go_file, org_file),
        {t: node_counts[t] for t in LABEL_ORDER if node_counts[t]},
        {t: edge_counts[t] for t in EDGE_DESCRIPTIONS if edge_counts[t]},
        qa_counts,
        dropped,
        time.perf_counter() - start,
    )


def _schema(graph: GoGraph, variant: Variant, node_counts: Counter[str], edge_counts: Counter[str],
            files: tuple[Path, Path]) -> dict[str, Any]:  # fmt: skip
    node_types = {
        t: {
            "count": node_counts[t],
            "name_field": "name",
            "attributes": list(_ATTRIBUTES[t]),
            "attribute_types": _ATTRIBUTES[t],
            "description": LABEL_DESCRIPTIONS[t],
        }
        for t in LABEL_ORDER
        if node_counts[t]
    }
    selection = (
        "every protein-coding gene with at least one GO annotation; every GO term annotated to one of them and "
        "every ancestor of those terms over is_a, part_of, regulates, positively_regulates and "
        "negatively_regulates; every chromosome one of those genes lies on"
        if variant is DEFAULT
        else "every gene of org.Hs.eg.sqlite and every GO term of GO.sqlite; every chromosome a gene lies on"
    )
    return {
        "name": "go-human-genes" if variant is DEFAULT else "go-human-genes-full",
        "description": (
            "Human genes and the Gene Ontology as a knowledge graph. Genes (named by their official symbol, "
            "e.g. TP53; the document gives the full name, the chromosome and cytogenetic band and other "
            "symbols) are linked to the GO terms they are annotated with: x involved_in a biological process, "
            "x enables a molecular function, x located_in a cellular component; and to the chromosome they "
            "lie on (on_chromosome). GO terms (named by their GO name; the document is GO's definition and "
            "synonyms) are linked to their parents: is_a (a kind of), part_of, and for processes regulates, "
            "positively_regulates and negatively_regulates (x is a regulation of y)."
        ),
        "node_types": node_types,
        "edge_types": edge_types(graph.nodes, graph.edges, edge_counts, EDGE_DESCRIPTIONS),
        "candidate_types": list(node_types),
        "source": {
            "builder": "autofocus.bench.go_build.build_go_skb",
            "data": "Bioconductor annotation packages GO.db and org.Hs.eg.db (Debian packages r-bioc-go.db and "
            "r-bioc-org.hs.eg.db), Artistic-2.0; built from the Gene Ontology (go-basic.obo, CC BY 4.0) and "
            "NCBI Entrez Gene",
            "data_sha256": {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files},
            "variant": variant.name,
            "selection": selection,
            "annotations_to_unknown_terms": graph.unknown_annotations,
        },
    }
