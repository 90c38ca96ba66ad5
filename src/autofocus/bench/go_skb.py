"""The GO benchmark's graph: which genes and GO terms become nodes, their documents and their edges.

Selection rule (stated in the schema and in docs/benchmarks.md). ``DEFAULT``: every protein-coding
gene with at least one GO annotation; every GO term annotated to one of them, and every ancestor of
those terms over the kept links (is_a, part_of, regulates and its two signed forms); every chromosome
one of those genes lies on. ``FULL``: every gene and every GO term of the two databases. Edges: the
kept links between selected terms; a gene's GO annotations (one edge per gene and term, whatever the
evidence codes), typed by the term's namespace; a gene's chromosome. Node ids follow (label, Entrez
Gene id or GO id or chromosome order), so a build is the same on every machine. Tables are joined
with pandas and numpy, never edge by edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from autofocus.bench.go_source import GoSourceError, GoTables, OrgTables

GENE = "gene"
CHROMOSOME = "chromosome"
NAMESPACE_LABELS = {"BP": "biological_process", "MF": "molecular_function", "CC": "cellular_component"}
LABEL_ORDER = (GENE, *NAMESPACE_LABELS.values(), CHROMOSOME)

LABEL_DESCRIPTIONS = {
    GENE: "a human gene (NCBI Entrez Gene): its name is the official symbol, its document the full name, "
    "gene type, chromosome and cytogenetic band, and other symbols it is known by",
    "biological_process": "a Gene Ontology biological process: a series of molecular events with a defined "
    "outcome (cell division, apoptotic process, regulation of transcription, ...)",
    "molecular_function": "a Gene Ontology molecular function: an activity a gene product performs at the "
    "molecular level (kinase activity, DNA binding, ion channel activity, ...)",
    "cellular_component": "a Gene Ontology cellular component: a place in or around a cell where a gene product "
    "acts (nucleus, mitochondrial inner membrane, a protein complex, ...)",
    CHROMOSOME: "a human chromosome (1-22, X, Y) or the mitochondrial genome (MT)",
}

# GO.db's relationship_type -> edge type; each runs from the child term to its parent.
TERM_LINKS = {
    "isa": "is_a",
    "part of": "part_of",
    "regulates": "regulates",
    "positively regulates": "positively_regulates",
    "negatively regulates": "negatively_regulates",
}
ANNOTATION_EDGES = {"BP": "involved_in", "MF": "enables", "CC": "located_in"}
ON_CHROMOSOME = "on_chromosome"

EDGE_DESCRIPTIONS = {
    "is_a": "(x)-[:is_a]->(y): the GO term x is a kind of y, e.g. 'apoptotic process' is_a 'programmed cell death'",
    "part_of": "(x)-[:part_of]->(y): the GO term x is a part of y, e.g. 'mitochondrial inner membrane' part_of "
    "'mitochondrial envelope'",
    "regulates": "(x)-[:regulates]->(y): the process x regulates the process y, e.g. 'regulation of apoptotic "
    "process' regulates 'apoptotic process'",
    "positively_regulates": "(x)-[:positively_regulates]->(y): the process x activates or increases y",
    "negatively_regulates": "(x)-[:negatively_regulates]->(y): the process x stops, prevents or reduces y",
    "involved_in": "(g)-[:involved_in]->(p): the gene g takes part in the biological process p (a GO annotation)",
    "enables": "(g)-[:enables]->(f): the gene's product has the molecular function f (a GO annotation)",
    "located_in": "(g)-[:located_in]->(c): the gene's product is found in or acts in the cellular component c "
    "(a GO annotation)",
    ON_CHROMOSOME: "(g)-[:on_chromosome]->(c): the gene lies on the chromosome c",
}
EDGE_ORDER = tuple(EDGE_DESCRIPTIONS)

GENE_TYPE_WORDS = {
    "protein-coding": "protein-coding gene",
    "ncRNA": "non-coding RNA gene",
    "pseudo": "pseudogene",
    "snoRNA": "small nucleolar RNA gene",
    "snRNA": "small nuclear RNA gene",
    "rRNA": "ribosomal RNA gene",
    "tRNA": "transfer RNA gene",
    "scRNA": "small cytoplasmic RNA gene",
    "biological-region": "biological region",
}
CHROMOSOME_ORDER = (*(str(i) for i in range(1, 23)), "X", "Y", "MT")
_LENGTH_NAMES = {"MT": "M"}  # chrlengths names the mitochondrial genome M, the other tables MT


@dataclass(frozen=True)
class Variant:
    """Which genes and terms the graph keeps: genes of ``gene_types`` (``None``: all) and, when
    ``annotated_only``, only genes with a GO annotation and the terms annotated to them with their
    ancestors."""

    name: str
    gene_types: tuple[str, ...] | None
    annotated_only: bool


DEFAULT = Variant("default", ("protein-coding",), annotated_only=True)
FULL = Variant("full", None, annotated_only=False)


@dataclass
class GoGraph:
    """Nodes (SKB rows, id = position) and edges ``(src, type, dst)``, sorted by type, src, dst."""

    nodes: list[dict[str, Any]]
    edges: list[tuple[int, str, int]]
    unknown_annotations: int = 0  # annotations naming a GO id GO.sqlite lacks (left out)


def select_genes(org: OrgTables, variant: Variant) -> pd.DataFrame:
    """The genes the variant keeps, ordered by Entrez Gene id."""
    genes = org.genes
    if variant.gene_types is not None:
        genes = genes[genes["gene_type"].isin(variant.gene_types)]
    if variant.annotated_only:
        genes = genes[genes["_id"].isin(org.annotations["_id"])]
    return genes.assign(_order=pd.to_numeric(genes["gene_id"], errors="coerce")).sort_values(["_order", "gene_id"])


def select_terms(go: GoTables, annotated: pd.Series, variant: Variant) -> pd.DataFrame:
    """The terms the variant keeps (``annotated``: GO ids annotated to a kept gene), with their ancestors."""
    terms = go.terms
    if not variant.annotated_only:
        return terms
    keep = np.zeros(int(max(terms["_id"].max(), go.parents[["_id", "_parent_id"]].to_numpy().max(initial=0))) + 1,
                    dtype=bool)  # fmt: skip
    keep[terms.loc[terms["go_id"].isin(annotated), "_id"].to_numpy()] = True
    child = go.parents["_id"].to_numpy()
    parent = go.parents["_parent_id"].to_numpy()
    while True:  # one level of ancestors per pass: GO is ~15 levels deep
        new = np.unique(parent[keep[child] & ~keep[parent]])
        if not len(new):
            break
        keep[new] = True
    return terms[keep[terms["_id"].to_numpy()]]


def _joined(values: pd.DataFrame, ids: pd.Series, sep: str) -> pd.Series:
    """Per id of ``ids``, its ``values`` rows' ``value`` joined by ``sep`` ("" where it has none)."""
    grouped = values[values["_id"].isin(ids)].groupby("_id")["value"].agg(sep.join)
    return ids.map(grouped).fillna("")


def gene_documents(genes: pd.DataFrame) -> pd.Series:
    """A gene's text: its full name, what kind of gene it is, where it lies, its other symbols."""
    kind = genes["gene_type"].map(GENE_TYPE_WORDS).fillna(genes["gene_type"] + " gene")
    place = np.where(genes["chromosome"] != "", " on chromosome " + genes["chromosome"], "")
    band = np.where(genes["map_location"] != "", ", cytogenetic band " + genes["map_location"], "")
    also = np.where(genes["alias_text"] != "", " Also known as: " + genes["alias_text"] + ".", "")
    return genes["gene_name"].str.rstrip(".") + ". Human " + kind + place + band + "." + also


def term_documents(terms: pd.DataFrame, synonyms: pd.DataFrame) -> pd.Series:
    """A term's text: its definition and the other names GO gives it."""
    names = synonyms.rename(columns={"synonym": "value"})
    syn = _joined(names, terms["_id"], "; ")
    definition = terms["definition"].str.strip()
    also = np.where(syn != "", " Also called: " + syn + ".", "")
    return (definition + also).str.strip()


def build_graph(go: GoTables, org: OrgTables, variant: Variant = DEFAULT) -> GoGraph:
    """The benchmark graph of ``variant`` from the two databases' tables."""
    unknown_links = sorted(set(go.parents["relationship_type"]) - set(TERM_LINKS))
    if unknown_links:
        raise GoSourceError(f"GO.sqlite: parent links of unknown relationship types {unknown_links} "
                            f"(known: {sorted(TERM_LINKS)})")  # fmt: skip
    genes = select_genes(org, variant).copy()
    annotations = org.annotations[org.annotations["_id"].isin(genes["_id"])]
    terms = select_terms(go, annotations["go_id"], variant)
    terms = terms.assign(label=terms["ontology"].map(NAMESPACE_LABELS))
    terms = terms.assign(order=terms["label"].map(LABEL_ORDER.index)).sort_values(["order", "go_id"])

    genes["chromosome"] = _joined(org.chromosomes[org.chromosomes["value"].isin(CHROMOSOME_ORDER)], genes["_id"], ", ")
    genes["map_location"] = _joined(org.bands, genes["_id"], ", ")
    aliases = org.aliases.merge(genes[["_id", "symbol"]], on="_id")
    aliases = aliases[aliases["value"] != aliases["symbol"]][["_id", "value"]]
    genes["alias_list"] = genes["_id"].map(aliases.groupby("_id")["value"].agg(list))
    genes["alias_list"] = genes["alias_list"].apply(lambda v: v if isinstance(v, list) else [])
    genes["alias_text"] = genes["alias_list"].str.join(", ")
    genes["text"] = gene_documents(genes)

    on = org.chromosomes[org.chromosomes["_id"].isin(genes["_id"])]
    present = set(on["value"])
    chromosomes = [c for c in CHROMOSOME_ORDER if c in present]
    lengths = dict(zip(org.lengths["chromosome"], org.lengths["length"], strict=True))

    n_genes, n_terms = len(genes), len(terms)
    gene_node = pd.Series(np.arange(n_genes), index=genes["_id"].to_numpy())
    term_node = pd.Series(np.arange(n_genes, n_genes + n_terms), index=terms["_id"].to_numpy())
    go_node = pd.Series(term_node.to_numpy(), index=terms["go_id"].to_numpy())
    chrom_node = pd.Series(np.arange(n_genes + n_terms, n_genes + n_terms + len(chromosomes)), index=chromosomes)

    nodes = _gene_nodes(genes) + _term_nodes(terms, go.synonyms, n_genes)
    nodes += [_chromosome_node(n_genes + n_terms + i, c, lengths.get(_LENGTH_NAMES.get(c, c))) for i, c in enumerate(chromosomes)]

    parts = []
    links = go.parents[go.parents["_id"].isin(term_node.index) & go.parents["_parent_id"].isin(term_node.index)]
    parts.append(pd.DataFrame({"src": term_node[links["_id"]].to_numpy(),
                               "type": links["relationship_type"].map(TERM_LINKS).to_numpy(),
                               "dst": term_node[links["_parent_id"]].to_numpy()}))  # fmt: skip
    known = annotations["go_id"].isin(go_node.index)
    kept = annotations[known]
    kept = kept[kept["go_id"].isin(terms["go_id"])]
    ontology = terms.set_index("go_id")["ontology"]
    parts.append(pd.DataFrame({"src": gene_node[kept["_id"]].to_numpy(),
                               "type": ontology[kept["go_id"]].map(ANNOTATION_EDGES).to_numpy(),
                               "dst": go_node[kept["go_id"]].to_numpy()}))  # fmt: skip
    on = on[on["value"].isin(chrom_node.index)]
    parts.append(pd.DataFrame({"src": gene_node[on["_id"]].to_numpy(), "type": ON_CHROMOSOME,
                               "dst": chrom_node[on["value"]].to_numpy()}))  # fmt: skip
    edges = pd.concat(parts, ignore_index=True).drop_duplicates()
    edges = edges[edges["src"] != edges["dst"]]
    edges["order"] = edges["type"].map(EDGE_ORDER.index)
    edges = edges.sort_values(["order", "src", "dst"])
    triples = list(zip(edges["src"].tolist(), edges["type"].tolist(), edges["dst"].tolist(), strict=True))
    return GoGraph(nodes, triples, int((~known).sum()))


def _gene_nodes(genes: pd.DataFrame) -> list[dict[str, Any]]:
    columns = {"symbol": "name", "gene_name": "full_name", "gene_id": "entrez_id", "gene_type": "gene_type",
               "chromosome": "chromosome", "map_location": "map_location", "alias_list": "aliases", "text": "text"}
    table = genes[list(columns)].rename(columns=columns)
    table.insert(0, "type", GENE)
    table.insert(0, "id", np.arange(len(table)))
    return table.to_dict("records")


def _term_nodes(terms: pd.DataFrame, synonyms: pd.DataFrame, first_id: int) -> list[dict[str, Any]]:
    syn = terms["_id"].map(synonyms.groupby("_id")["synonym"].agg(list))
    table = pd.DataFrame({
        "id": np.arange(first_id, first_id + len(terms)),
        "type": terms["label"].to_numpy(),
        "name": terms["term"].to_numpy(),
        "go_id": terms["go_id"].to_numpy(),
        "synonyms": [v if isinstance(v, list) else [] for v in syn],
        "text": term_documents(terms, synonyms).to_numpy(),
    })  # fmt: skip
    return table.to_dict("records")


def _chromosome_node(node_id: int, chromosome: str, length: int | None) -> dict[str, Any]:
    name = "mitochondrial genome" if chromosome == "MT" else f"chromosome {chromosome}"
    what = ("The human mitochondrial genome (chromosome MT), a small circular DNA molecule of the mitochondria"
            if chromosome == "MT" else f"Human chromosome {chromosome}")  # fmt: skip
    kind = {"X": ", a sex chromosome", "Y": ", the male sex chromosome"}.get(chromosome, "")
    size = f", {int(length):,} base pairs long" if length else ""
    return {"id": node_id, "type": CHROMOSOME, "name": name, "chromosome": chromosome,
            "length": int(length) if length else None, "text": f"{what}{kind}{size}."}  # fmt: skip
