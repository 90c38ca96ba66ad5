"""The WordNet benchmark: reader, graph, questions and their gold answers, on a fixture of real synsets.

The fixture (``tests/fixtures/wordnet/data.noun``, 45 WordNet 3.0 noun synsets) stands in for the
Debian package, so nothing here needs the network or WordNet installed. Gold answers are checked
against an independent execution of every stored constraint: a small reader of the benchmark's
Cypher subset (regular expressions) matched by backtracking over a networkx graph of ``edges.csv``,
sharing no code with the build's parser and grounding.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autofocus.bench import debian, wordnet_build, wordnet_source
from autofocus.bench.bench_dir import SUMMARY_FILE
from autofocus.bench.constraint_questions import QuestionSpec, execute_constraint
from autofocus.bench.wordnet_build import build_wordnet_skb
from autofocus.bench.wordnet_questions import (
    MAX_ANSWERS,
    SEALED_FILE,
    SEALED_SPLIT,
    SPLIT_FRACTIONS,
    load_question_specs,
    resolve_questions,
    resolve_sealed,
)
from autofocus.bench.wordnet_skb import EDGE_DESCRIPTIONS, LABEL_ORDER, Variant, build_graph, label_of
from autofocus.bench.wordnet_source import (
    Pointer,
    Synset,
    WordNetError,
    locate_wordnet,
    parse_line,
    read_synsets,
)
from autofocus.cli import app
from autofocus.skb.skbdir import load_skb_dir
from tests.cypher_oracle import independent_answers, independent_gold, independent_graph, nodes_of, rows

FIXTURE = Path(__file__).parent / "fixtures" / "wordnet"
REPO_BUILD = Path(__file__).parents[1] / "data" / "wordnet"
runner = CliRunner()

DOG = (
    "02084071 05 n 03 dog 0 domestic_dog 0 Canis_familiaris 0 003 @ 02083346 n 0000 #m 02083863 n 0000 "
    "+ 01182709 v 0201 | a member of the genus Canis; \"the dog barked all night\"; \"a dog's life\"  \n"
)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wn-small")
    build_wordnet_skb(out, small=True, wordnet_dir=FIXTURE)
    return out


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wn-full")
    build_wordnet_skb(out, wordnet_dir=FIXTURE)
    return out


def named(skb: Path, name: str) -> dict[str, Any]:
    (node,) = [n for n in nodes_of(skb) if n["name"] == name]
    return node


# --- the reader ------------------------------------------------------------------------------------


def test_parse_line_reads_words_pointers_definition_and_examples() -> None:
    s = parse_line(DOG)
    assert s.key == "02084071-n" and s.lexname == "noun.animal"
    assert s.lemmas == ("dog", "domestic_dog", "Canis_familiaris")
    assert s.pointers == (
        Pointer("@", "02083346-n", False),
        Pointer("#m", "02083863-n", False),
        Pointer("+", "01182709-v", True),
    )
    assert s.definition == "a member of the genus Canis"
    assert s.examples == ("the dog barked all night", "a dog's life")


def test_a_malformed_line_is_reported_with_file_and_line(tmp_path: Path) -> None:
    data = tmp_path / "data.noun"
    data.write_text("  1 licence line\n" + DOG + DOG.replace(" 003 @", " 004 @"), encoding="utf-8")
    with pytest.raises(WordNetError, match=r"data.noun:3: not a wndb\(5\) synset line"):
        read_synsets(data)


def test_locate_prefers_an_explicit_folder_then_the_installed_package_then_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert locate_wordnet(FIXTURE) == FIXTURE
    with pytest.raises(WordNetError, match=r"no data\.noun here"):
        locate_wordnet(tmp_path)
    installed = tmp_path / "installed"
    monkeypatch.setattr(wordnet_source, "INSTALLED", installed)
    unpacked = tmp_path / "cache" / "root" / "usr" / "share" / "wordnet"
    unpacked.mkdir(parents=True)
    (unpacked / "data.noun").write_text(DOG, encoding="utf-8")
    assert locate_wordnet(cache=tmp_path / "cache") == unpacked
    installed.mkdir()
    (installed / "data.noun").write_text(DOG, encoding="utf-8")
    assert locate_wordnet(cache=tmp_path / "cache") == installed


def test_without_wordnet_or_apt_the_error_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wordnet_source, "INSTALLED", tmp_path / "none")
    monkeypatch.setattr(debian.shutil, "which", lambda tool: None)
    with pytest.raises(WordNetError, match="install the Debian package wordnet-base"):
        locate_wordnet(cache=tmp_path / "cache")


def test_a_failed_download_names_the_command_and_the_remedy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wordnet_source, "INSTALLED", tmp_path / "none")
    monkeypatch.setattr(debian.shutil, "which", lambda tool: f"/bin/{tool}")
    monkeypatch.setattr(debian.os, "geteuid", lambda: 1000)

    def fail(cmd: list[str], **_: Any) -> Any:
        class Done:
            returncode, stdout, stderr = 100, "", "E: Unable to locate package wordnet-base"

        return Done()

    monkeypatch.setattr(debian.subprocess, "run", fail)
    with pytest.raises(WordNetError, match=r"`apt-get download wordnet-base` failed \(exit 100\): E: Unable"):
        locate_wordnet(cache=tmp_path / "cache")


# --- the graph -------------------------------------------------------------------------------------


def test_small_variant_keeps_its_core_files_and_their_one_hop_neighbours(small: Path) -> None:
    nodes = nodes_of(small)
    core = [n for n in nodes if n["lexical_file"] in ("noun.body", "noun.object")]
    assert {n["type"] for n in core} == {"body_part", "natural_object"}
    assert len(core) == 19 and len(nodes) == len(core)  # the fixture's body and object synsets link only to each other
    assert not [n for n in nodes if n["type"] == "person"]
    schema = json.loads((small / "schema.json").read_text())
    assert schema["name"] == "wordnet-nouns-small" and schema["source"]["core_nodes"] == 19


def test_full_variant_labels_edges_and_documents(full: Path) -> None:
    nodes = nodes_of(full)
    types = {n["type"] for n in nodes}
    assert {"body_part", "natural_object", "animal", "person", "location", "food", "substance", "group"} <= types
    assert [n["id"] for n in nodes] == list(range(len(nodes)))
    dog = named(full, "dog")
    assert dog["synonyms"] == ["domestic dog", "Canis familiaris"]
    assert dog["text"].startswith("a member of the genus Canis") and "Also called: domestic dog" in dog["text"]
    with (full / "edges.csv").open(newline="") as fh:
        edges = {(int(r["src"]), r["type"], int(r["dst"])) for r in csv.DictReader(fh)}
    ids = {n["name"]: n["id"] for n in nodes}
    assert (ids["dog"], "member_of", ids["Canis"]) in edges
    assert (ids["dog"], "is_a", ids["canine"]) in edges
    assert (ids["Einstein"], "instance_of", ids["physicist"]) in edges
    assert (ids["finger"], "part_of", ids["hand"]) in edges
    assert (ids["manhattan"], "made_of", ids["whiskey"]) in edges
    assert (ids["Poseidon"], "has_topic", ids["Greek mythology"]) in edges
    assert (ids["taco"], "in_region", ids["Mexico"]) in edges
    antonyms = [e for e in edges if e[1] == "antonym_of"]
    assert antonyms == [(min(ids["seawater"], ids["fresh water"]), "antonym_of", max(ids["seawater"], ids["fresh water"]))]
    schema = json.loads((full / "schema.json").read_text())
    assert set(schema["edge_types"]) <= set(EDGE_DESCRIPTIONS) and list(schema["node_types"]) == [
        t for t in LABEL_ORDER if t in types
    ]
    assert schema["edge_types"]["made_of"]["src_type"] == "food"  # one type pair: stated in the schema


def test_a_tops_synset_takes_the_label_most_of_its_hyponyms_have() -> None:
    def synset(key: str, lexname: str, hyponyms: tuple[str, ...] = ()) -> Synset:
        return Synset(key, lexname, (key,), tuple(Pointer("~", h, False) for h in hyponyms), "", ())

    kids = [synset("1-n", "noun.animal"), synset("2-n", "noun.animal"), synset("3-n", "noun.plant")]
    top = synset("0-n", "noun.Tops", ("1-n", "2-n", "3-n"))
    by_key = {s.key: s for s in [top, *kids]}
    assert label_of(top, by_key) == "animal"
    assert label_of(synset("9-n", "noun.Tops"), by_key) == "abstract_concept"
    graph = build_graph([top, *kids], Variant("t", ("noun.plant",), named_people=False))
    assert [n["name"] for n in graph.nodes] == ["3-n"]  # no kept pointer leaves the plant: one node


def test_skb_validate_passes_on_both_variants(small: Path, full: Path) -> None:
    for skb in (small, full):
        result = runner.invoke(app, ["skb", "validate", str(skb)])
        assert result.exit_code == 0, result.output


def test_builds_are_identical_byte_for_byte(full: Path, tmp_path: Path) -> None:
    build_wordnet_skb(tmp_path, wordnet_dir=FIXTURE)
    names = ["schema.json", "nodes.jsonl", "edges.csv", "qa.csv", SUMMARY_FILE,
             *(f"splits/{s}.index" for s in [*SPLIT_FRACTIONS, SEALED_SPLIT])]  # fmt: skip
    for name in names:
        assert (tmp_path / name).read_bytes() == (full / name).read_bytes(), name
    graph_files = {n: (tmp_path / n).stat().st_mtime_ns for n in ("schema.json", "nodes.jsonl", "edges.csv")}
    (tmp_path / "splits" / "old.index").write_text("1\n")
    build_wordnet_skb(tmp_path, wordnet_dir=FIXTURE)  # unchanged files stay untouched: the SKB cache keeps
    assert {n: (tmp_path / n).stat().st_mtime_ns for n in graph_files} == graph_files
    assert sorted(p.name for p in (tmp_path / "splits").iterdir()) == [
        "sealed.index", "test.index", "train.index", "val.index"]  # fmt: skip
    assert not [p for p in tmp_path.parent.iterdir() if p.name.startswith(f".{tmp_path.name}-")]  # no scratch left


# --- questions -------------------------------------------------------------------------------------


def test_question_file_is_well_formed() -> None:
    specs = load_question_specs()
    assert len(specs) >= 150 and len({s.key for s in specs}) == len(specs)
    kinds = {k: sum(s.kind == k for s in specs) for k in ("relational", "hybrid", "textual")}
    assert kinds["relational"] >= 50 and kinds["hybrid"] >= 75 and kinds["textual"] >= 25
    for s in specs:
        labels = re.findall(r"\(\w+:(\w+)", s.cypher)
        rels = re.findall(r"\[:(\w+)\]", s.cypher)
        assert labels and set(labels) <= set(LABEL_ORDER), s.key
        assert set(rels) <= set(EDGE_DESCRIPTIONS), s.key
        assert (s.kind == "relational") == (not s.text), s.key
        assert s.query.endswith(("?", ".")), s.key
    asked = {re.search(r"\(y:(\w+)", s.cypher).group(1) for s in specs}  # type: ignore[union-attr]
    assert {"body_part", "natural_object"} <= asked  # multi-word labels are asked for
    assert any(s.query.startswith("Who ") for s in specs) and any(s.query.startswith("Where ") for s in specs)


def test_both_variants_ask_all_three_kinds_with_stored_constraints(small: Path, full: Path) -> None:
    for skb, least in ((small, 1), (full, 3)):
        qa = rows(skb)
        assert {k: sum(r["kind"] == k for r in qa) >= least for k in ("relational", "hybrid", "textual")} == {
            "relational": True, "hybrid": True, "textual": True}  # fmt: skip
        for r in qa:
            assert r["cypher"].startswith("MATCH ") and r["key"]
            assert (r["kind"] == "relational") == (r["text_condition"] == "")
            assert 1 <= len(json.loads(r["answer_ids"])) <= 12


def test_splits_partition_the_questions_per_kind(full: Path) -> None:
    qa = rows(full)
    names = [*SPLIT_FRACTIONS, SEALED_SPLIT]
    splits = {s: [int(x) for x in (full / "splits" / f"{s}.index").read_text().split()] for s in names}
    every = [i for ids in splits.values() for i in ids]
    assert sorted(every) == sorted(int(r["id"]) for r in qa)
    kind = {int(r["id"]): r["kind"] for r in qa if int(r["id"]) not in splits[SEALED_SPLIT]}
    for k in ("relational", "hybrid", "textual"):
        n = sum(v == k for v in kind.values())
        got = {s: sum(kind[i] == k for i in splits[s]) for s in SPLIT_FRACTIONS}
        assert abs(got["train"] - 0.3 * n) <= 0.5 and abs(got["val"] - 0.3 * n) <= 1, (k, got)


def constraint(spec: QuestionSpec) -> tuple[str, frozenset[frozenset[str]]]:
    return " ".join(spec.cypher.split()), frozenset(frozenset(p.lower() for p in g) for g in spec.text)


def test_sealed_question_file_is_well_formed_and_new() -> None:
    development, sealed = load_question_specs(), load_question_specs(SEALED_FILE)
    assert len(sealed) >= 110 and len({s.key for s in sealed}) == len(sealed)
    assert not {s.key for s in sealed} & {s.key for s in development}
    assert not {constraint(s) for s in sealed} & {constraint(s) for s in development}  # new questions
    kinds = {k: sum(s.kind == k for s in sealed) for k in ("relational", "hybrid", "textual")}
    assert kinds["relational"] >= 30 and kinds["hybrid"] >= 45 and kinds["textual"] >= 15, kinds
    for s in sealed:
        labels = re.findall(r"\(\w+:(\w+)", s.cypher)
        assert labels and set(labels) <= set(LABEL_ORDER), s.key
        assert set(re.findall(r"\[:(\w+)\]", s.cypher)) <= set(EDGE_DESCRIPTIONS), s.key
        assert (s.kind == "relational") == (not s.text) and s.query.endswith(("?", ".")), s.key
    asked = {re.search(r"\(y:(\w+)", s.cypher).group(1) for s in sealed}  # type: ignore[union-attr]
    assert len(asked) >= 10  # broadly: not only the labels the development questions ask most
    assert {r for s in sealed for r in re.findall(r"\[:(\w+)\]", s.cypher)} == set(EDGE_DESCRIPTIONS)


def build_with_sealed(out: Path, sealed: list[QuestionSpec], monkeypatch: pytest.MonkeyPatch) -> wordnet_build.BenchBuild:
    """A fixture build whose sealed file holds ``sealed`` (the development file as shipped)."""
    real = wordnet_build.load_question_specs
    monkeypatch.setattr(wordnet_build, "load_question_specs", lambda file=None: sealed if file == SEALED_FILE else real())
    return build_wordnet_skb(out, wordnet_dir=FIXTURE)


def test_sealed_questions_get_their_own_split_and_change_no_development_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def spec(key: str, kind: str, cypher: str, *text: str) -> QuestionSpec:
        return QuestionSpec.from_json({"key": key, "kind": kind, "query": "Which?", "cypher": cypher, "text": list(text)})

    canis = "MATCH (y:animal)-[:member_of]->(x:animal {name: 'Canis'}) RETURN y"  # a development question
    dog_genus = "MATCH (x:animal {name: 'dog'})-[:member_of]->(y:animal) RETURN y"
    sealed = [
        spec("s-new", "relational", dog_genus),
        spec("s-same-constraint", "relational", canis.replace(" RETURN", "   RETURN")),
        spec("s-same-answers", "relational", "MATCH (y:animal)-[:is_a]->(x:animal {name: 'canine'}) RETURN y"),
        spec("s-repeats-a-sealed-one", "hybrid", dog_genus, "genus"),
        spec("s-unanswerable", "relational", "MATCH (y:animal)-[:member_of]->(x:animal {name: 'Felis'}) RETURN y"),
    ]
    before, after = tmp_path / "before", tmp_path / "after"
    build_with_sealed(before, [], monkeypatch)
    built = build_with_sealed(after, sealed, monkeypatch)
    for name in SPLIT_FRACTIONS:
        assert (after / "splits" / f"{name}.index").read_bytes() == (before / "splits" / f"{name}.index").read_bytes()
    assert (after / "qa.csv").read_bytes().startswith((before / "qa.csv").read_bytes())
    development = len(rows(before))
    assert (after / "splits" / f"{SEALED_SPLIT}.index").read_text() == f"{development}\n"
    assert [r["key"] for r in rows(after)[development:]] == ["s-new"]
    reasons = {d.key: d.reason for d in built.dropped}
    assert "rel-canis" in reasons["s-same-constraint"] and "rel-canis" in reasons["s-same-answers"]
    assert "s-new" in reasons["s-repeats-a-sealed-one"] and "0 answers" in reasons["s-unanswerable"]
    assert built.qa_counts["relational"][SEALED_SPLIT] == 1
    with pytest.raises(ValueError, match="sealed question keys also used by development questions: rel-canis"):
        build_with_sealed(tmp_path / "clash", [spec("rel-canis", "relational", canis)], monkeypatch)


def test_a_constraint_the_schema_cannot_read_is_dropped_not_remapped(full: Path) -> None:
    skb = load_skb_dir(full, progress=False)
    with pytest.raises(ValueError, match=r"not fully read|lacks"):
        execute_constraint(skb, "MATCH (y:animals)-[:member_of]->(x:animal {name: 'Canis'}) RETURN y")
    with pytest.raises(ValueError, match=r"not fully read|lacks"):
        execute_constraint(skb, "MATCH (y:animal)-[:member]->(x:animal {name: 'Canis'}) RETURN y")
    spec = QuestionSpec.from_json({"key": "k", "kind": "hybrid", "query": "q?", "cypher": "MATCH (y:animal) RETURN y",
                                   "text": [["wolf", "jackal"], "canine"]})  # fmt: skip
    assert spec.text == (("wolf", "jackal"), ("canine",))
    with pytest.raises(ValueError, match="needs a text condition"):
        QuestionSpec.from_json({"key": "k", "kind": "hybrid", "query": "q?", "cypher": "MATCH (y:animal) RETURN y"})


def test_cli_builds_and_reports_a_missing_wordnet(tmp_path: Path) -> None:
    ok = runner.invoke(app, ["bench", "build", "wordnet", str(tmp_path / "wn"), "--small", "--wordnet-dir",
                             str(FIXTURE)], env={"COLUMNS": "200"})  # fmt: skip
    assert ok.exit_code == 0, ok.output
    assert "body_part" in ok.output and "relational" in ok.output
    bad = runner.invoke(app, ["bench", "build", "wordnet", str(tmp_path / "x"), "--wordnet-dir", str(tmp_path)])
    assert bad.exit_code == 1 and "no data.noun here" in bad.output


# --- gold answers, by an independent execution of each stored constraint ----------------------------

def test_gold_answers_equal_an_independent_execution_of_each_constraint(small: Path, full: Path) -> None:
    for skb in (small, full):
        gold = independent_gold(skb)
        for r in rows(skb):
            assert set(json.loads(r["answer_ids"])) == gold[r["key"]], r["key"]


def test_answer_names_and_wordnet_ids_match_the_nodes(full: Path) -> None:
    nodes = nodes_of(full)
    for r in rows(full):
        ids = json.loads(r["answer_ids"])
        assert json.loads(r["answer_names"]) == [nodes[i]["name"] for i in ids]
        assert json.loads(r["answer_wordnet_ids"]) == [nodes[i]["wordnet_id"] for i in ids]


@pytest.mark.slow
@pytest.mark.skipif(not (REPO_BUILD / "qa.csv").is_file(), reason="the full benchmark is not built in data/wordnet")
def test_gold_of_the_full_benchmark_equals_the_independent_execution() -> None:
    gold = independent_gold(REPO_BUILD)
    qa = rows(REPO_BUILD)
    assert len(qa) >= 150
    for r in qa:
        assert set(json.loads(r["answer_ids"])) == gold[r["key"]], r["key"]


@pytest.mark.slow
@pytest.mark.skipif(not (REPO_BUILD / "nodes.jsonl").is_file(), reason="the full benchmark is not built in data/wordnet")
def test_every_sealed_question_resolves_in_the_full_benchmark() -> None:
    """On the full graph every sealed question keeps 1..MAX_ANSWERS answers, repeats no development
    question, and its gold equals the independent execution (the graph files alone are read, so a
    build made before the sealed file existed serves too)."""
    skb = load_skb_dir(REPO_BUILD, progress=False)
    development_specs = load_question_specs()
    development, _ = resolve_questions(development_specs, skb)
    specs = load_question_specs(SEALED_FILE)
    sealed, dropped = resolve_sealed(specs, skb, development_specs, development)
    assert dropped == [] and len(sealed) == len(specs) >= 100
    graph, docs = independent_graph(REPO_BUILD)
    for q in sealed:
        assert 1 <= len(q.answers) <= MAX_ANSWERS, q.key
        assert set(q.answers) == independent_answers(graph, docs, q.spec.cypher, [list(g) for g in q.spec.text]), q.key


# Digests of the development splits and rows as built before the sealed split existed (2026-11-28):
# adding sealed questions must leave them byte for byte.
DEVELOPMENT_DIGESTS = {
    "train": "95c32c75c54c3391be0969287c4b99e44ba1f25c7946f5516836fd796a05eca0",
    "val": "ec7bf3ea36f04f6aa484b75c7996275d8acd6b688c5060a7f0df2f751bc5028e",
    "test": "bc90ef7ea8589c468d67bc376f45a3e75313a1f1c8a84b4527ad84699898ee06",
    "rows": "ddab5e9871506564ec673105a6cf1bb3f49be22a34a525d5814ee5a8973f38ff",  # the 210 rows, JSON, sorted keys
}


@pytest.mark.slow
@pytest.mark.skipif(not (REPO_BUILD / "qa.csv").is_file(), reason="the full benchmark is not built in data/wordnet")
def test_the_development_splits_of_the_full_benchmark_are_unchanged() -> None:
    for name in SPLIT_FRACTIONS:
        digest = hashlib.sha256((REPO_BUILD / "splits" / f"{name}.index").read_bytes()).hexdigest()
        assert digest == DEVELOPMENT_DIGESTS[name], name
    qa = rows(REPO_BUILD)
    assert hashlib.sha256(json.dumps(qa[:210], sort_keys=True).encode()).hexdigest() == DEVELOPMENT_DIGESTS["rows"]
    sealed_file = REPO_BUILD / "splits" / f"{SEALED_SPLIT}.index"
    if sealed_file.is_file():  # built with the sealed questions: they are the rows after the development ones
        sealed_keys = {s.key for s in load_question_specs(SEALED_FILE)}
        assert [int(i) for i in sealed_file.read_text().split()] == [int(r["id"]) for r in qa if r["key"] in sealed_keys]
        assert all(r["key"] in sealed_keys for r in qa[210:])
