"""The GO benchmark: reader, graph, questions and their checks, on tiny databases made here.

The fixture writes two SQLite files with the tables and columns of Bioconductor's ``GO.sqlite`` and
``org.Hs.eg.sqlite`` that the build reads (a few terms and genes), so nothing here needs the network
or the Debian packages. Gold answers are compared with an independent execution of each constraint
(tests/cypher_oracle.py); the slow tests do the same for the real build in ``data/go`` when it is there.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autofocus.bench import go_source
from autofocus.bench.go_build import build_go_skb
from autofocus.bench.go_questions import (
    MAX_ANSWERS,
    SPLIT_FRACTIONS,
    GoQuestionSpec,
    check_question,
    load_question_specs,
    resolve_questions,
)
from autofocus.bench.go_source import GoSourceError, locate_databases, read_go, read_org
from autofocus.cli import app
from autofocus.skb.skbdir import load_skb_dir
from tests.cypher_oracle import independent_answers, independent_gold, independent_graph, nodes_of, rows

REPO_BUILD = Path(__file__).parents[1] / "data" / "go"
runner = CliRunner()

GO_SCHEMA = """
CREATE TABLE go_ontology (ontology VARCHAR(9) PRIMARY KEY, term_type VARCHAR(18) NOT NULL UNIQUE);
CREATE TABLE go_term (_id INTEGER PRIMARY KEY, go_id CHAR(10) NOT NULL UNIQUE, term VARCHAR(255) NOT NULL,
  ontology VARCHAR(9) NOT NULL, definition TEXT NULL);
CREATE TABLE go_synonym (_id INTEGER NOT NULL, synonym VARCHAR(255) NOT NULL, secondary CHAR(10) NULL,
  like_go_id SMALLINT);
CREATE TABLE go_bp_parents (_id INTEGER NOT NULL, _parent_id INTEGER NOT NULL, relationship_type VARCHAR(7) NOT NULL);
CREATE TABLE go_mf_parents (_id INTEGER NOT NULL, _parent_id INTEGER NOT NULL, relationship_type VARCHAR(7) NOT NULL);
CREATE TABLE go_cc_parents (_id INTEGER NOT NULL, _parent_id INTEGER NOT NULL, relationship_type VARCHAR(7) NOT NULL);
"""
ORG_SCHEMA = """
CREATE TABLE genes (_id INTEGER PRIMARY KEY, gene_id VARCHAR(10) NOT NULL UNIQUE);
CREATE TABLE gene_info (_id INTEGER NOT NULL UNIQUE, gene_name VARCHAR(255) NOT NULL, symbol VARCHAR(80) NOT NULL);
CREATE TABLE genetype (_id INTEGER NOT NULL, gene_type VARCHAR(20) NOT NULL);
CREATE TABLE chromosomes (_id INTEGER NOT NULL, chromosome VARCHAR(2) NOT NULL);
CREATE TABLE cytogenetic_locations (_id INTEGER NOT NULL, cytogenetic_location VARCHAR(20) NOT NULL);
CREATE TABLE alias (_id INTEGER NOT NULL, alias_symbol VARCHAR(80) NOT NULL);
CREATE TABLE chrlengths (chromosome VARCHAR(2) PRIMARY KEY, length INTEGER NOT NULL);
CREATE TABLE go_bp (_id INTEGER NOT NULL, go_id CHAR(10) NOT NULL, evidence CHAR(3) NOT NULL);
CREATE TABLE go_mf (_id INTEGER NOT NULL, go_id CHAR(10) NOT NULL, evidence CHAR(3) NOT NULL);
CREATE TABLE go_cc (_id INTEGER NOT NULL, go_id CHAR(10) NOT NULL, evidence CHAR(3) NOT NULL);
"""

# _id, GO id, name, namespace, definition
TERMS = [
    (1, "GO:0008150", "biological_process", "BP", "A biological process."),
    (2, "GO:0012501", "programmed cell death", "BP", "A process which begins when a cell receives a signal and ends in its death."),
    (3, "GO:0006915", "apoptotic process", "BP", "A programmed cell death process marked by cell shrinkage and blebbing."),
    (4, "GO:0043067", "regulation of programmed cell death", "BP", "Any process that modulates programmed cell death."),
    (5, "GO:0043069", "negative regulation of programmed cell death", "BP", "Any process that stops or reduces programmed cell death."),
    (6, "GO:0043068", "positive regulation of programmed cell death", "BP", "Any process that activates programmed cell death."),
    (7, "GO:0099999", "orphan process", "BP", "A process no gene is annotated with."),
    (8, "GO:0003674", "molecular_function", "MF", "A molecular activity."),
    (9, "GO:0004672", "protein kinase activity", "MF", "Catalysis of the phosphorylation of an amino acid residue in a protein."),
    (10, "GO:0005575", "cellular_component", "CC", "A location in or around a cell."),
    (11, "GO:0005739", "mitochondrion", "CC", "A semiautonomous, self replicating organelle."),
    (12, "GO:0005743", "mitochondrial inner membrane", "CC", "The inner of the two membranes of a mitochondrion."),
    (13, "all", "all", "universal", None),
]  # fmt: skip
PARENTS = {
    "bp": [(2, 1, "isa"), (3, 2, "isa"), (4, 1, "isa"), (5, 4, "isa"), (6, 4, "isa"), (7, 1, "isa"),
           (4, 2, "regulates"), (5, 2, "negatively regulates"), (6, 2, "positively regulates")],
    "mf": [(9, 8, "isa")],
    "cc": [(11, 10, "isa"), (12, 11, "part of")],
}  # fmt: skip
SYNONYMS = [(3, "apoptosis", None, 0), (3, "GO:0006917", "GO:0006917", 1), (11, "mitochondria", None, 0)]

# _id, Entrez id, symbol, full name, gene type, chromosomes, bands, aliases
GENES = [
    (1, "7157", "TP53", "tumor protein p53", "protein-coding", ["17"], ["17p13.1"], ["P53", "LFS1", "TP53"]),
    (2, "596", "BCL2", "BCL2 apoptosis regulator", "protein-coding", ["18"], ["18q21.33"], ["Bcl-2"]),
    (3, "5594", "MAPK1", "mitogen-activated protein kinase 1", "protein-coding", ["22"], ["22q11.22"], []),
    (4, "100", "MIR21", "microRNA 21", "ncRNA", ["17"], ["17q23.1"], []),
    (5, "200", "ORF1", "open reading frame 1", "protein-coding", ["17"], [], []),
    (6, "6473", "SHOX", "short stature homeobox", "protein-coding", ["X", "Y"], ["Xp22.33", "Yp11.2"], ["PHOG"]),
    (7, "4508", "ATP6", "ATP synthase F0 subunit 6", "protein-coding", ["MT"], [], ["MTATP6"]),
]  # fmt: skip
ANNOTATIONS = {
    "bp": [(1, "GO:0006915", "IDA"), (1, "GO:0006915", "IEA"), (2, "GO:0043069", "IMP"), (4, "GO:0006915", "IEA"),
           (6, "GO:0043068", "ISS")],
    "mf": [(3, "GO:0004672", "IDA"), (1, "GO:0004672", "IEA")],
    "cc": [(1, "GO:0005739", "IDA"), (2, "GO:0005743", "IDA"), (7, "GO:0005743", "IEA")],
}  # fmt: skip
LENGTHS = [("17", 83257441), ("18", 80373285), ("22", 50818468), ("X", 156040895), ("Y", 57227415), ("M", 16569)]


def write_fixture(folder: Path, drop: str | None = None) -> Path:
    """``GO.sqlite`` and ``org.Hs.eg.sqlite`` in ``folder``; ``drop`` names a table to leave out."""
    folder.mkdir(parents=True, exist_ok=True)
    go = sqlite3.connect(folder / "GO.sqlite")
    go.executescript(GO_SCHEMA)
    go.executemany("INSERT INTO go_ontology VALUES (?, ?)", [("universal", "universal"), ("BP", "biological_process"),
                                                            ("MF", "molecular_function"), ("CC", "cellular_component")])  # fmt: skip
    go.executemany("INSERT INTO go_term VALUES (?, ?, ?, ?, ?)", TERMS)
    go.executemany("INSERT INTO go_synonym VALUES (?, ?, ?, ?)", SYNONYMS)
    for ns, links in PARENTS.items():
        go.executemany(f"INSERT INTO go_{ns}_parents VALUES (?, ?, ?)", links)
    org = sqlite3.connect(folder / "org.Hs.eg.sqlite")
    org.executescript(ORG_SCHEMA)
    for _id, entrez, symbol, name, kind, chroms, bands, aliases in GENES:
        org.execute("INSERT INTO genes VALUES (?, ?)", (_id, entrez))
        org.execute("INSERT INTO gene_info VALUES (?, ?, ?)", (_id, name, symbol))
        org.execute("INSERT INTO genetype VALUES (?, ?)", (_id, kind))
        org.executemany("INSERT INTO chromosomes VALUES (?, ?)", [(_id, c) for c in chroms])
        org.executemany("INSERT INTO cytogenetic_locations VALUES (?, ?)", [(_id, b) for b in bands])
        org.executemany("INSERT INTO alias VALUES (?, ?)", [(_id, a) for a in aliases])
    org.executemany("INSERT INTO chrlengths VALUES (?, ?)", LENGTHS)
    for ns, rows_ in ANNOTATIONS.items():
        org.executemany(f"INSERT INTO go_{ns} VALUES (?, ?, ?)", rows_)
    for con in (go, org):
        if drop:
            con.execute(f"DROP TABLE IF EXISTS {drop}")
        con.commit()
        con.close()
    return folder


def spec(key: str, kind: str, query: str, cypher: str, answers: list[str], text: Any = ()) -> GoQuestionSpec:
    item = {"key": key, "kind": kind, "query": query, "cypher": cypher, "answers": answers}
    if text:
        item["text"] = text
    return GoQuestionSpec.from_json(item)


FIXTURE_QUESTIONS = [
    spec("rel-apoptosis-17", "relational", "Which genes on chromosome 17 take part in apoptosis?",
         "MATCH (y:gene)-[:involved_in]->(t:biological_process {name: 'apoptotic process'}), "
         "(y)-[:on_chromosome]->(c:chromosome {name: 'chromosome 17'}) RETURN y", ["TP53"]),
    spec("rel-inner-membrane", "relational", "Which organelle is the inner membrane with the cristae part of?",
         "MATCH (x:cellular_component {name: 'mitochondrial inner membrane'})-[:part_of]->(y:cellular_component) "
         "RETURN y", ["mitochondrion"]),
    spec("rel-slowing", "relational", "Which process holds back programmed cell death?",
         "MATCH (y:biological_process)-[:negatively_regulates]->(x:biological_process {name: 'programmed cell death'}) "
         "RETURN y", ["negative regulation of programmed cell death"]),
    spec("hyb-kinase", "hybrid", "Which MAP kinases phosphorylate proteins?",
         "MATCH (y:gene)-[:enables]->(f:molecular_function {name: 'protein kinase activity'}) RETURN y",
         ["MAPK1"], [["mitogen-activated"]]),
    spec("txt-shrinkage", "textual", "Which cell death shows shrinking cells that bleb?",
         "MATCH (y:biological_process) RETURN y", ["apoptotic process"], [["shrinkage"]]),
    spec("txt-pseudoautosomal", "textual", "Which gene lies on both sex chromosomes?",
         "MATCH (y:gene) RETURN y", ["SHOX"], [["chromosome X, Y"]]),
]  # fmt: skip


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fixture(tmp_path_factory.mktemp("bioc"))


@pytest.fixture(scope="module")
def built(fixture_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("go") / "go"
    build_go_skb(out, bioc_dir=fixture_dir, specs=FIXTURE_QUESTIONS)
    return out


def by_name(skb: Path) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in nodes_of(skb)}


# --- the source -----------------------------------------------------------------------------------


def test_readers_keep_the_three_namespaces_and_drop_go_id_synonyms(fixture_dir: Path) -> None:
    go = read_go(fixture_dir / "GO.sqlite")
    assert "all" not in set(go.terms["go_id"]) and len(go.terms) == 12
    assert set(go.synonyms["synonym"]) == {"apoptosis", "mitochondria"}
    org = read_org(fixture_dir / "org.Hs.eg.sqlite")
    assert len(org.genes) == len(GENES)
    assert len(org.annotations) == 9  # the same gene and term with two evidence codes count once


def test_locate_names_the_missing_database(tmp_path: Path, fixture_dir: Path) -> None:
    assert locate_databases(fixture_dir) == (fixture_dir / "GO.sqlite", fixture_dir / "org.Hs.eg.sqlite")
    with pytest.raises(GoSourceError, match=r"no GO\.sqlite and no org\.Hs\.eg\.sqlite here"):
        locate_databases(tmp_path)


def test_locate_prefers_the_installed_package_then_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             fixture_dir: Path) -> None:  # fmt: skip
    monkeypatch.setattr(go_source, "SITE_LIBRARY", tmp_path / "site")
    cache = tmp_path / "cache"
    for package, name in ((go_source.GO_PACKAGE, "GO.sqlite"), (go_source.ORG_PACKAGE, "org.Hs.eg.sqlite")):
        target = cache / "root" / "usr/lib/R/site-library" / package.inside
        target.parent.mkdir(parents=True)
        target.write_bytes((fixture_dir / name).read_bytes())
    go_file, org_file = locate_databases(cache=cache)
    assert go_file.is_relative_to(cache) and org_file.is_relative_to(cache)
    installed = tmp_path / "site" / go_source.GO_PACKAGE.inside
    installed.parent.mkdir(parents=True)
    installed.write_bytes((fixture_dir / "GO.sqlite").read_bytes())
    assert locate_databases(cache=cache)[0] == installed


def test_without_the_packages_or_apt_the_error_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(go_source, "SITE_LIBRARY", tmp_path / "site")
    monkeypatch.setattr(go_source.debian.shutil, "which", lambda tool: None)
    with pytest.raises(GoSourceError, match=r"install the Debian package r-bioc-go\.db"):
        locate_databases(cache=tmp_path / "cache")


@pytest.mark.parametrize(
    ("drop", "file", "reason"),
    [
        ("go_synonym", "GO.sqlite", "no table go_synonym"),
        ("genetype", "org.Hs.eg.sqlite", "no table genetype"),
        ("go_mf", "org.Hs.eg.sqlite", "no table go_mf"),
    ],
)
def test_a_missing_table_is_named_with_its_file(tmp_path: Path, drop: str, file: str, reason: str) -> None:
    folder = write_fixture(tmp_path / "bad", drop=drop)
    with pytest.raises(GoSourceError, match=rf"{file}: {reason}"):
        build_go_skb(tmp_path / "out", bioc_dir=folder, specs=[])
    assert not (tmp_path / "out").exists()


def test_a_missing_column_or_a_file_that_is_no_database_is_reported(tmp_path: Path) -> None:
    folder = write_fixture(tmp_path / "bad")
    con = sqlite3.connect(folder / "GO.sqlite")
    con.executescript("ALTER TABLE go_term RENAME COLUMN definition TO note;")
    con.close()
    with pytest.raises(GoSourceError, match=r"GO\.sqlite: table go_term has no column definition"):
        read_go(folder / "GO.sqlite")
    (folder / "org.Hs.eg.sqlite").write_bytes(b"not a database at all, just text" * 100)
    with pytest.raises(GoSourceError, match=r"org\.Hs\.eg\.sqlite: not a readable SQLite database"):
        read_org(folder / "org.Hs.eg.sqlite")


def test_an_unknown_link_type_is_an_error(tmp_path: Path) -> None:
    folder = write_fixture(tmp_path / "bad")
    con = sqlite3.connect(folder / "GO.sqlite")
    con.execute("INSERT INTO go_bp_parents VALUES (3, 1, 'occurs in')")
    con.commit()
    con.close()
    with pytest.raises(GoSourceError, match=r"unknown relationship types \['occurs in'\]"):
        build_go_skb(tmp_path / "out", bioc_dir=folder, specs=[])


# --- the graph ------------------------------------------------------------------------------------


def test_default_keeps_annotated_protein_coding_genes_and_the_ancestors_of_their_terms(built: Path) -> None:
    nodes = by_name(built)
    genes = {n for n, v in nodes.items() if v["type"] == "gene"}
    assert genes == {"TP53", "BCL2", "MAPK1", "SHOX", "ATP6"}  # MIR21 is ncRNA, ORF1 has no annotation
    assert "orphan process" not in nodes and "all" not in nodes
    assert {"programmed cell death", "regulation of programmed cell death", "biological_process"} <= set(nodes)
    assert nodes["apoptotic process"]["type"] == "biological_process"
    assert nodes["mitochondrion"]["type"] == "cellular_component"
    assert {n for n, v in nodes.items() if v["type"] == "chromosome"} == {
        "chromosome 17", "chromosome 18", "chromosome 22", "chromosome X", "chromosome Y", "mitochondrial genome"}
    schema = json.loads((built / "schema.json").read_text())
    assert schema["source"]["variant"] == "default" and "protein-coding" in schema["source"]["selection"]


def test_documents_and_attributes(built: Path) -> None:
    nodes = by_name(built)
    tp53 = nodes["TP53"]
    assert tp53["text"] == ("tumor protein p53. Human protein-coding gene on chromosome 17, cytogenetic band 17p13.1. "
                            "Also known as: LFS1, P53.")  # fmt: skip
    assert tp53["aliases"] == ["LFS1", "P53"] and tp53["entrez_id"] == "7157" and tp53["full_name"] == "tumor protein p53"
    assert nodes["SHOX"]["chromosome"] == "X, Y"
    apoptosis = nodes["apoptotic process"]
    assert apoptosis["go_id"] == "GO:0006915" and apoptosis["synonyms"] == ["apoptosis"]
    assert apoptosis["text"].endswith("Also called: apoptosis.")
    assert nodes["mitochondrial genome"]["length"] == 16569


def test_edges_link_terms_genes_and_chromosomes_once_each(built: Path) -> None:
    nodes = nodes_of(built)
    name = [n["name"] for n in nodes]
    edges = [(name[int(s)], t, name[int(d)]) for s, t, d in
             (line.split(",") for line in (built / "edges.csv").read_text().splitlines()[1:])]  # fmt: skip
    assert len(edges) == len(set(edges))
    assert ("apoptotic process", "is_a", "programmed cell death") in edges
    assert ("mitochondrial inner membrane", "part_of", "mitochondrion") in edges
    assert ("regulation of programmed cell death", "regulates", "programmed cell death") in edges
    assert ("negative regulation of programmed cell death", "negatively_regulates", "programmed cell death") in edges
    assert ("positive regulation of programmed cell death", "positively_regulates", "programmed cell death") in edges
    assert ("TP53", "involved_in", "apoptotic process") in edges  # two evidence codes, one edge
    assert ("TP53", "enables", "protein kinase activity") in edges and ("TP53", "located_in", "mitochondrion") in edges
    assert {e for e in edges if e[0] == "SHOX" and e[1] == "on_chromosome"} == {
        ("SHOX", "on_chromosome", "chromosome X"), ("SHOX", "on_chromosome", "chromosome Y")}
    schema = json.loads((built / "schema.json").read_text())
    assert schema["edge_types"]["involved_in"]["dst_type"] == "biological_process"
    assert schema["edge_types"]["on_chromosome"] == {**schema["edge_types"]["on_chromosome"], "src_type": "gene",
                                                     "dst_type": "chromosome"}  # fmt: skip


def test_full_keeps_every_gene_and_term(fixture_dir: Path, tmp_path: Path) -> None:
    build_go_skb(tmp_path / "full", full=True, bioc_dir=fixture_dir, specs=[])
    nodes = by_name(tmp_path / "full")
    assert {"MIR21", "ORF1", "orphan process"} <= set(nodes)
    assert nodes["MIR21"]["text"].startswith("microRNA 21. Human non-coding RNA gene on chromosome 17")


def test_skb_validate_passes_and_builds_are_identical(built: Path, fixture_dir: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["skb", "validate", str(built)])
    assert result.exit_code == 0, result.output
    again = tmp_path / "again"
    build_go_skb(again, bioc_dir=fixture_dir, specs=FIXTURE_QUESTIONS)
    for name in ("schema.json", "nodes.jsonl", "edges.csv", "qa.csv", "splits/train.index", "splits/test.index"):
        assert (again / name).read_bytes() == (built / name).read_bytes(), name


# --- the questions --------------------------------------------------------------------------------


def test_fixture_questions_resolve_and_equal_the_independent_execution(built: Path) -> None:
    qa = rows(built)
    assert {r["key"] for r in qa} == {q.key for q in FIXTURE_QUESTIONS}
    gold = independent_gold(built)
    for r in qa:
        assert set(json.loads(r["answer_ids"])) == gold[r["key"]], r["key"]
    summary = json.loads((built / "qa_summary.json").read_text())
    assert summary["dropped"] == []


def test_the_checker_catches_a_wrong_answer_an_empty_set_and_a_leak(built: Path) -> None:
    skb = load_skb_dir(built, progress=False)
    good = FIXTURE_QUESTIONS[0]
    assert check_question(skb, good)[1] is None
    wrong = spec("w", "relational", good.query, good.cypher, ["BCL2"])
    assert "gold differs from the answers it was read against (missing ['BCL2'], extra ['TP53'])" in check_question(skb, wrong)[1]
    empty = spec("e", "relational", "Which genes on chromosome 18 take part in apoptosis?",
                 good.cypher.replace("chromosome 17", "chromosome 18"), ["TP53"])  # fmt: skip
    assert check_question(skb, empty)[1] == "0 answers in this build (1..20 kept)"
    leak = spec("l", "textual", "Is SHOX on both sex chromosomes?", "MATCH (y:gene) RETURN y", ["SHOX"],
                [["chromosome X, Y"]])  # fmt: skip
    assert check_question(skb, leak)[1] == "the question names its answer SHOX"
    unknown = spec("u", "relational", "?", "MATCH (y:gene)-[:encodes]->(x:protein) RETURN y", ["TP53"])
    assert "constraint" in (check_question(skb, unknown)[1] or "")
    kept, dropped = resolve_questions([good, wrong, empty, leak], skb)
    assert [q.key for q in kept] == [good.key] and [d.key for d in dropped] == ["w", "e", "l"]


def test_cli_builds_and_reports_a_missing_source(fixture_dir: Path, tmp_path: Path) -> None:
    ok = runner.invoke(app, ["bench", "build", "go", str(tmp_path / "go"), "--bioc-dir", str(fixture_dir)],
                       env={"COLUMNS": "200"})  # fmt: skip
    assert ok.exit_code == 0, ok.output
    assert "on_chromosome" in ok.output and "not answerable in this build" in ok.output
    bad = runner.invoke(app, ["bench", "build", "go", str(tmp_path / "x"), "--bioc-dir", str(tmp_path)])
    assert bad.exit_code == 1 and "no GO.sqlite" in bad.output
    mixed = runner.invoke(app, ["bench", "build", "go", str(tmp_path / "y"), "--small"])
    assert mixed.exit_code == 2 and "--small does not apply to the go benchmark" in mixed.output


def test_the_question_file_is_well_formed() -> None:
    specs = load_question_specs()
    assert len({q.key for q in specs}) == len(specs) >= 150
    kinds = {k: sum(q.kind == k for q in specs) for k in ("relational", "hybrid", "textual")}
    assert min(kinds.values()) >= 40, kinds
    for q in specs:
        assert 1 <= len(q.answers) <= MAX_ANSWERS, q.key
        assert q.key.startswith({"relational": "rel-", "hybrid": "hyb-", "textual": "txt-"}[q.kind]), q.key


@pytest.mark.slow
@pytest.mark.skipif(not (REPO_BUILD / "qa.csv").is_file(), reason="the GO benchmark is not built in data/go")
def test_every_question_of_the_real_build_is_kept_and_equals_the_independent_execution() -> None:
    qa = rows(REPO_BUILD)
    assert len(qa) == len(load_question_specs())
    graph, docs = independent_graph(REPO_BUILD)
    for r in qa:
        found = independent_answers(graph, docs, r["cypher"], json.loads(r["text_condition"] or "[]"))
        assert set(json.loads(r["answer_ids"])) == found, r["key"]
    sizes = {name: len((REPO_BUILD / "splits" / f"{name}.index").read_text().split()) for name in SPLIT_FRACTIONS}
    assert sizes["test"] >= 60 and sizes["train"] + sizes["val"] + sizes["test"] == len(qa)
