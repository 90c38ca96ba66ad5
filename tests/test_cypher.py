"""Step 3 parser: golden cases (the paper's Tables 23-25) and syntax coverage."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from autofocus.cypher import parse_cypher
from autofocus.query_graph import QueryGraph
from autofocus.skb.schema import Schema

GOLDEN = Path(__file__).parent / "golden"
SCHEMAS = {
    k: Schema.model_validate(v) for k, v in json.loads((GOLDEN / "cypher_schemas.json").read_text()).items()
}
CASES = json.loads((GOLDEN / "cypher_cases.json").read_text())["cases"]
_TRIPLET = re.compile(r"^(\S+) -\[(.*?)\]-(>?) (\S+)$")


def triplet_strings(qg: QueryGraph) -> list[str]:
    out = []
    for t in qg.triplets:
        rel = "|".join(t.edge_types) if t.edge_types else "*"
        out.append(f"{t.head} -[{rel}]-{'>' if t.directed else ''} {t.tail}")
    return out


def constraints_of(qg: QueryGraph) -> dict[str, list[list[Any]]]:
    return {
        v: [[c.key, c.op, c.value] for c in s.constraints] for v, s in qg.symbols.items() if s.constraints
    }


def assert_dropped(qg: QueryGraph, expected: list[str]) -> None:
    reasons = [d.reason for d in qg.dropped]
    assert len(reasons) == len(expected), reasons
    remaining = list(reasons)
    for part in expected:
        hit = next((r for r in remaining if part in r), None)
        assert hit is not None, (part, reasons)
        remaining.remove(hit)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_golden(case: dict[str, Any]) -> None:
    qg = parse_cypher(
        case["cypher"], SCHEMAS[case["schema"]], mode=case["mode"], target_type=case.get("given_target_type")
    )
    assert qg.target == case["target"]
    assert qg.target_type == case.get("target_type", case["symbols"].get(case["target"]))
    assert {v: s.type for v, s in qg.symbols.items()} == case["symbols"]
    assert triplet_strings(qg) == case["triplets"]
    assert constraints_of(qg) == case["constraints"]
    for var, label in case.get("labels", {}).items():
        assert qg.symbols[var].label == label
    assert_dropped(qg, case["dropped"])
    assert qg.usable == bool(case["triplets"] and any(s.is_constant for s in qg.symbols.values()))


def test_golden_format() -> None:
    for case in CASES:
        for t in case["triplets"]:
            assert _TRIPLET.match(t), t


# ---- syntax coverage (no schema: labels pass through) ---------------------------------------------


def parse(text: str, **kw: Any) -> QueryGraph:
    return parse_cypher(text, **kw)


def reasons(qg: QueryGraph) -> list[str]:
    return [d.reason for d in qg.dropped]


def test_inline_properties_of_every_literal_kind() -> None:
    qg = parse(
        "MATCH (p:paper {title: 'x', year: 2015, score: -1.5, ok: true, bad: FALSE, big: 1e3, rate: .5}) RETURN p"
    )
    assert constraints_of(qg) == {
        "p": [
            ["title", "=", "x"], ["year", "=", 2015], ["score", "=", -1.5], ["ok", "=", True],
            ["bad", "=", False], ["big", "=", 1000.0], ["rate", "=", 0.5],
        ]
    }  # fmt: skip
    assert qg.dropped == []


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("'single'", "single"),
        ('"double"', "double"),
        (r"'it\'s'", "it's"),
        (r'"say \"hi\""', 'say "hi"'),
        (r"'back\\slash'", "back\\slash"),
        (r"'line\nbreak'", "line\nbreak"),
        (r"'caf\u00e9'", "café"),
        (r'"\ud83d\ude00 json"', "\U0001f600 json"),
        ("'Alzheimer's disease'", "Alzheimer's disease"),  # LLMs leave apostrophes unescaped
        ('"Alzheimer\'s disease"', "Alzheimer's disease"),
        ("“curly”", "curly"),
        ("‘curly single’", "curly single"),
        ("'(?i).*x'", "(?i).*x"),
        ("'a (b) {c}'", "a (b) {c}"),
    ],
)
def test_string_literals(literal: str, value: str) -> None:
    qg = parse(f"MATCH (x:t {{name: {literal}}}) RETURN x")
    assert constraints_of(qg) == {"x": [["name", "=", value]]}
    assert qg.dropped == []


def test_apostrophe_heuristic_does_not_swallow_a_following_keyword() -> None:
    qg = parse("MATCH (x) WHERE x.name='Bob'AND x.age = 3 RETURN x")
    assert constraints_of(qg) == {"x": [["name", "=", "Bob"], ["age", "=", 3]]}


def test_labels_glued_braces_slashes_backticks_and_several_labels() -> None:
    qg = parse(
        "MATCH (a:gene/protein{name:'IGF1'})-[:r]->(b:`effect phenotype`)-[:s]->(c:drug:disease) RETURN a"
    )
    assert {v: s.type for v, s in qg.symbols.items()} == {
        "a": "gene/protein",
        "b": "effect phenotype",
        "c": "drug",
    }
    assert qg.symbols["c"].label == "drug:disease"
    assert constraints_of(qg) == {"a": [["name", "=", "IGF1"]]}
    assert_dropped(qg, ["already a drug"])


def test_anonymous_nodes_get_fresh_variables_that_never_collide() -> None:
    qg = parse("MATCH (_n1:a)-[:r]->(:b {name: 'x'})<-[:r]-()-[:s]->(:b {name: 'y'}) RETURN _n1")
    assert list(qg.symbols) == ["_n1", "_n2", "_n3", "_n4"]
    assert triplet_strings(qg) == ["_n1 -[r]-> _n2", "_n3 -[r]-> _n2", "_n3 -[s]-> _n4"]
    assert constraints_of(qg) == {"_n2": [["name", "=", "x"]], "_n4": [["name", "=", "y"]]}


@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        ("-[:r]->", "a -[r]-> b"),
        ("<-[:r]-", "b -[r]-> a"),
        ("-->", "a -[*]-> b"),
        ("<--", "b -[*]-> a"),
        ("-[]->", "a -[*]-> b"),
        ("-[r]->", "a -[*]-> b"),
        ("--", "a -[*]- b"),
        ("-[:r]-", "a -[r]- b"),
        ("<-[:r]->", "a -[r]- b"),
        ("<-->", "a -[*]- b"),
        ("-[x:r1|r2]->", "a -[r1|r2]-> b"),
        ("-[:r1|:r2]->", "a -[r1|r2]-> b"),
        ("- [:r]- >", "a -[r]-> b"),  # spaces from PDF extraction
        ("-[:r]>", "a -[r]-> b"),
        ("→", "a -[*]-> b"),
        ("-[:`off-label use`]->", "a -[off-label use]-> b"),
        ("-[:off-label use]->", "a -[off-label use]-> b"),
    ],
)
def test_relationship_forms(rel: str, expected: str) -> None:
    qg = parse(f"MATCH (a:x){rel}(b:y) RETURN a")
    assert triplet_strings(qg) == [expected]
    assert qg.dropped == []


def test_parenthesised_relationship_types_written_by_small_lms() -> None:
    qg = parse("MATCH (a:x)-[r:(r1|r2)]->(b:y) RETURN a")
    assert triplet_strings(qg) == ["a -[r1|r2]-> b"]
    assert qg.dropped == []


def test_relationship_bracket_closed_after_the_node_is_repaired_and_recorded() -> None:
    qg = parse("MATCH (a:x)-[r:(r1)->(b:y)]-[:r2]->(c:z) RETURN c")
    assert triplet_strings(qg) == ["a -[r1]-> b", "b -[r2]-> c"]
    assert any("missing ']'" in r for r in reasons(qg))


def test_chains_several_matches_commas_and_bare_references() -> None:
    qg = parse(
        "MATCH (a:x)-[:r]->(b:y)<-[:s]-(c:z)-[:t]->(d:w), (e:v)-[:u]->(a) MATCH (d)-[:q]->(f:v) RETURN f"
    )
    assert triplet_strings(qg) == ["a -[r]-> b", "c -[s]-> b", "c -[t]-> d", "e -[u]-> a", "d -[q]-> f"]
    assert qg.symbols["d"].type == "w"
    assert qg.target == "f"


@pytest.mark.parametrize(
    ("condition", "constraint"),
    [
        ("p.year = 2015", ["year", "=", 2015]),
        ("p.year < 2015", ["year", "<", 2015]),
        ("p.year <= 2015", ["year", "<=", 2015]),
        ("p.year > 2015", ["year", ">", 2015]),
        ("p.year >= 2015", ["year", ">=", 2015]),
        ("p.year ≥ 2015", ["year", ">=", 2015]),
        ("2015 <= p.year", ["year", ">=", 2015]),
        ("2015 > p.year", ["year", "<", 2015]),
        ("'x' = p.title", ["title", "=", "x"]),
        ("p.title CONTAINS 'deep'", ["title", "CONTAINS", "deep"]),
        ("p.title contains 'deep'", ["title", "CONTAINS", "deep"]),
        ("p.title STARTS WITH 'Deep'", ["title", "STARTS WITH", "Deep"]),
        ("p.title ends with 'nets'", ["title", "ENDS WITH", "nets"]),
        ("p.year IN [2019, 2020]", ["year", "IN", [2019, 2020]]),
        ("p.year IN [2019]", ["year", "=", 2019]),
        ("p.title =~ '(?i).*deep.*'", ["title", "CONTAINS", "deep"]),
        ("p.title =~ 'Deep.*'", ["title", "STARTS WITH", "Deep"]),
        ("p.title =~ '.*nets$'", ["title", "ENDS WITH", "nets"]),
        ("p.title =~ 'Deep nets'", ["title", "=", "Deep nets"]),
        ("p.weight <= 300.5", ["weight", "<=", 300.5]),
        ("p.delta > -3", ["delta", ">", -3]),
        ("p.open = true", ["open", "=", True]),
        ("p.date >= '2018-01-01'", ["date", ">=", "2018-01-01"]),
        ("p.date >= 2018-01-01", ["date", ">=", "2018-01-01"]),
        ("p.date >= date('2018-01-01')", ["date", ">=", "2018-01-01"]),
        ("p.`publication year` = 2015", ["publication year", "=", 2015]),
        ("(p.year = 2015)", ["year", "=", 2015]),
    ],
)
def test_where_comparisons(condition: str, constraint: list[Any]) -> None:
    qg = parse(f"MATCH (p:paper) WHERE {condition} RETURN p")
    assert constraints_of(qg) == {"p": [constraint]}
    assert qg.dropped == []


def test_and_parentheses_and_mixed_case_keywords() -> None:
    qg = parse(
        "Match (p:paper) Where (p.a = 1 And (p.b = 2 and p.c = 3)) AND p.d = 4 Return Distinct p.title"
    )
    assert constraints_of(qg) == {"p": [["a", "=", 1], ["b", "=", 2], ["c", "=", 3], ["d", "=", 4]]}
    assert qg.target == "p"


@pytest.mark.parametrize(
    ("condition", "reason"),
    [
        ("NOT p.a = 1", "NOT"),
        ("p.a = 1 OR p.b = 2", "OR: the whole disjunction"),
        ("p.a = 1 XOR p.b = 2", "XOR"),
        ("p.a <> 1", "<> is a negation"),
        ("p.a != 1", "<> is a negation"),
        ("p.a IS NULL", "IS [NOT] NULL"),
        ("p.a IS NOT NULL", "IS [NOT] NULL"),
        ("all(x IN p.tags WHERE x = 'a')", "quantifier"),
        ("any(x IN p.tags WHERE x = 'a')", "quantifier"),
        ("exists(p.a)", "not a comparison"),
        ("p.a = q.b", "join"),
        ("'abc' CONTAINS p.a", "cannot be turned round"),
        ("p.a = null", "null"),
        ("p.a = $param", "not a literal"),
        ("p.a = 1 + 2", "not a literal"),
        ("p.a = [1, 2]", "use IN"),
        ("p.a IN []", "empty list"),
        ("p.a =~ 'a|b'", "regular expression"),
        ("p.a.b = 1", "nested property"),
        ("p.tags[0] = 'a'", "indexing"),
        ("p.a = CASE WHEN 1 THEN 2 END", "CASE"),
        ("EXISTS { MATCH (p)-->() }", "subqueries"),
        ("p.a = = 1", "could not parse the condition"),
    ],
)
def test_dropped_conditions(condition: str, reason: str) -> None:
    qg = parse(f"MATCH (p:paper) WHERE ({condition}) AND p.kept = 1 RETURN p")
    assert constraints_of(qg) == {"p": [["kept", "=", 1]]}
    assert_dropped(qg, [reason])


def test_or_drops_the_whole_disjunction_not_one_side() -> None:
    qg = parse("MATCH (p:paper)-[:r]->(a:author) WHERE (p.year = 2019 OR a.name = 'X') AND a.h > 3 RETURN p")
    assert constraints_of(qg) == {"a": [["h", ">", 3]]}
    assert_dropped(qg, ["OR"])
    whole = parse("MATCH (p:paper) WHERE p.year = 2019 AND p.x = 1 OR p.y = 2 RETURN p")
    assert constraints_of(whole) == {}  # OR binds loosest: the whole WHERE is the disjunction
    assert_dropped(whole, ["OR"])


def test_unparseable_where_with_top_level_or_is_dropped_whole() -> None:
    qg = parse("MATCH (p:paper) WHERE p.a = 1 OR p.b = = 2 AND p.c = 3 RETURN p")
    assert constraints_of(qg) == {}
    assert_dropped(qg, ["top-level OR"])


def test_property_functions_are_stripped_and_recorded() -> None:
    qg = parse(
        "MATCH (p:paper) WHERE toLower(p.title) CONTAINS toLower('Deep') AND trim(p.venue) = 'ICML' RETURN p"
    )
    assert constraints_of(qg) == {"p": [["title", "CONTAINS", "Deep"], ["venue", "=", "ICML"]]}
    assert_dropped(qg, ["toLower() around a property", "trim() around a property"])


def test_pattern_predicates_in_where_are_kept_negated_ones_dropped() -> None:
    qg = parse(
        "MATCH (d:drug) WHERE d.name = 'a' AND (d)-[:indication]->(:disease {name: 'b'}) "
        "AND NOT (d)-[:side_effect]->(:effect {name: 'c'}) RETURN d"
    )
    assert triplet_strings(qg) == ["d -[indication]-> _n1"]
    assert constraints_of(qg) == {"d": [["name", "=", "a"]], "_n1": [["name", "=", "b"]]}
    assert_dropped(qg, ["NOT"])


def test_optional_match_is_dropped_with_its_where() -> None:
    qg = parse(
        "MATCH (a:author)-[:writes]->(p:paper) OPTIONAL MATCH (p)-[:cites]->(q:paper) WHERE q.year > 2000 RETURN p"
    )
    assert triplet_strings(qg) == ["a -[writes]-> p"]
    assert set(qg.symbols) == {"a", "p"}
    assert_dropped(qg, ["OPTIONAL MATCH"])


@pytest.mark.parametrize(
    ("ret", "target"),
    [
        ("RETURN p", "p"),
        ("RETURN p.title", "p"),
        ("RETURN DISTINCT p.title", "p"),
        ("return p.title AS t", "p"),
        ("RETURN collect(DISTINCT p.title)", "p"),
        ("RETURN count(p)", "p"),
        ("RETURN p.title, a.name", "p"),
        ("RETURN a.name, p.title", "a"),
        ("WITH p AS paper RETURN paper.title", "p"),
        ("WITH a, count(p) AS count RETURN a", "a"),
    ],
)
def test_target_is_the_variable_of_the_first_return_item(ret: str, target: str) -> None:
    qg = parse(f"MATCH (a:author)-[:writes]->(p:paper) {ret}")
    assert qg.target == target
    assert qg.target_type == {"a": "author", "p": "paper"}[target]
    assert qg.dropped == []


def test_return_tail_and_with_aggregates_are_recorded() -> None:
    qg = parse(
        "MATCH (a:author)-[:writes]->(p:paper) WITH a, count(p) AS n WHERE n > 3 AND a.h > 1 "
        "RETURN a.name ORDER BY a.name DESC SKIP 2 LIMIT 10"
    )
    assert constraints_of(qg) == {"a": [["h", ">", 1]]}
    assert_dropped(qg, ["aggregate", "ORDER BY/SKIP/LIMIT"])


@pytest.mark.parametrize(
    ("ret", "reason"),
    [
        ("RETURN count(*)", "names no node variable"),
        ("RETURN 1", "names no node variable"),
        ("", "no RETURN"),
        ("-[r:t]->(q) RETURN r", "names no node variable"),
    ],
)
def test_no_target(ret: str, reason: str) -> None:
    qg = parse(f"MATCH (p:paper {{title: 'x'}}) {ret}")
    assert qg.target is None
    assert qg.target_type is None
    assert_dropped(qg, [reason])


def test_unbound_target_is_created_and_takes_the_given_target_type() -> None:
    qg = parse("MATCH (a:author {name: 'X'})-[:writes]->(p) RETURN y.title", target_type="paper")
    assert qg.target == "y"
    assert qg.target_type == "paper"
    assert_dropped(qg, ["not bound by MATCH"])
    labelled = parse("MATCH (y:author) RETURN y", target_type="paper")
    assert labelled.target_type == "author"  # the query's own label wins over step 1's type


@pytest.mark.parametrize(
    ("length", "expected", "reason"),
    [
        ("*1", ["a -[r]-> b"], []),
        ("*2", ["a -[r]-> _n1", "_n1 -[r]-> b"], []),
        ("*1..3", ["a -[r]-> b"], ["read as one hop"]),
        ("*", ["a -[r]-> b"], ["read as one hop"]),
        ("*..2", ["a -[r]-> b"], ["read as one hop"]),
        ("*2..3", [], ["cannot be one hop"]),
        ("*0", [], ["cannot be one hop"]),
    ],
)
def test_variable_length_paths(length: str, expected: list[str], reason: list[str]) -> None:
    qg = parse(f"MATCH (a:x)-[:r{length}]->(b:y) RETURN a")
    assert triplet_strings(qg) == expected
    assert_dropped(qg, reason)


@pytest.mark.parametrize(
    "answer",
    [
        "```cypher\nMATCH (a:x {name: 'n'})-[:r]->(b:y)\nRETURN b\n```",
        "Here is the query:\n```cypher\nMATCH (a:x {name: 'n'})-[:r]->(b:y)\nRETURN b;\n```\nIt finds b.",
        "Sure! The Cypher query is: MATCH (a:x {name: 'n'})-[:r]->(b:y) RETURN b\n\nThis returns b's.",
        "`MATCH (a:x {name: 'n'})-[:r]->(b:y) RETURN b`",
        "```MATCH (a:x {name: 'n'})-[:r]->(b:y) RETURN b```",
        "[FINAL ANSWER:] MATCH (a:x {name: 'n'})-[:r]->(b:y) RETURN b",
        "MATCH (a:x {name: 'n'})-[:r]->(b:y) RETURN b; MATCH (c) RETURN c",
    ],
)
def test_fences_and_prose_around_the_query(answer: str) -> None:
    qg = parse(answer)
    assert triplet_strings(qg) == ["a -[r]-> b"]
    assert constraints_of(qg) == {"a": [["name", "=", "n"]]}
    assert qg.target == "b"
    assert all(
        d.reason in ("text around the query", "a further statement after ';' is ignored") for d in qg.dropped
    )


@pytest.mark.parametrize("answer", ["", "   ", "I cannot answer that.", None])
def test_no_query_at_all(answer: str | None) -> None:
    qg = parse(answer)  # type: ignore[arg-type]
    assert qg == QueryGraph(dropped=qg.dropped)
    assert any("no Cypher query" in r for r in reasons(qg))


def test_union_is_a_disjunction() -> None:
    qg = parse("MATCH (a:x)-[:r]->(b:y) RETURN b UNION MATCH (c:y) RETURN c")
    assert qg.symbols == {} and qg.target is None
    assert_dropped(qg, ["UNION"])


def test_unsupported_clauses_are_dropped() -> None:
    qg = parse("UNWIND [1, 2] AS k MATCH (a:x {id: 1}) SET a.v = 2 RETURN a")
    assert constraints_of(qg) == {"a": [["id", "=", 1]]}
    assert_dropped(qg, ["UNWIND", "SET"])


def test_recovery_keeps_what_parses() -> None:
    qg = parse(
        "MATCH (a:x {name: 'ok', broken: }), (q:z {name: 'q'})-[:r]->(b:y {n: 1)-[:s]->(c:w ??? ), (d:v) "
        "WHERE a.k = 1 AND a.j = = 2 AND b.m = 3 RETURN b"
    )
    assert triplet_strings(qg) == ["q -[r]-> b"]
    assert set(qg.symbols) == {"a", "q", "b", "d"}
    assert constraints_of(qg) == {
        "a": [["name", "=", "ok"], ["k", "=", 1]], "q": [["name", "=", "q"]], "b": [["n", "=", 1], ["m", "=", 3]]
    }  # fmt: skip
    assert_dropped(
        qg,
        [
            "could not parse the property",
            "missing '}'",
            "rest of the pattern",
            "could not parse the condition",
        ],
    )


def test_unterminated_string_does_not_hide_return() -> None:
    qg = parse("MATCH (a:x {name: 'oops) RETURN a")
    assert qg.target == "a"
    assert qg.target_type == "x"


def test_conditions_on_relationships_and_unbound_variables() -> None:
    qg = parse("MATCH (a:x)-[r:t]->(b:y) WHERE r.since > 2000 AND z.name = 'q' RETURN a")
    assert constraints_of(qg) == {"z": [["name", "=", "q"]]}
    assert_dropped(qg, ["relationships", "not bound by MATCH"])


def test_relationship_properties_are_dropped() -> None:
    qg = parse("MATCH (a:x)-[:t {since: 2000}]->(b:y) RETURN a")
    assert triplet_strings(qg) == ["a -[t]-> b"]
    assert_dropped(qg, ["properties of relationships"])


NESTED = {
    "parentheses": lambda n: "(" * n + "p.year = 2019" + ")" * n,
    "lists": lambda n: "p.year IN " + "[" * n + "2019" + "]" * n,
    "calls": lambda n: "toInteger(" * n + "p.year" + ")" * n + " = 2019",
    "negations": lambda n: "NOT " * (10 * n) + "p.year = 2019",
}


@pytest.mark.parametrize("shape", sorted(NESTED))
def test_absurd_nesting_in_where_drops_only_that_condition(shape: str) -> None:
    query = ("MATCH (a:author {name: 'Ann Lee'})-[:author___writes___paper]->(p:paper) "
             f"WHERE p.title CONTAINS 'graph' AND {NESTED[shape](200)} RETURN p")
    qg = parse_cypher(query, SCHEMAS["mag"])
    assert triplet_strings(qg) == ["a -[author___writes___paper]-> p"]  # the MATCH part survives
    assert ["title", "CONTAINS", "graph"] in constraints_of(qg)["p"]  # and so does the other condition
    assert all("RecursionError" not in d.reason for d in qg.dropped)
    if shape == "negations":  # an even run of NOTs cancels out and the condition is kept
        assert ["year", "=", 2019] in constraints_of(qg)["p"] and qg.dropped == []
    else:
        assert any("nested more than" in d.reason for d in qg.dropped), qg.dropped


def test_an_odd_run_of_negations_drops_the_negated_condition_only() -> None:
    qg = parse_cypher("MATCH (a:author {name: 'Ann Lee'})-[:author___writes___paper]->(p:paper) "
                      f"WHERE p.title CONTAINS 'graph' AND {'NOT ' * 1001}p.year = 2019 RETURN p", SCHEMAS["mag"])
    assert constraints_of(qg)["p"] == [["title", "CONTAINS", "graph"]]
    assert [d.reason for d in qg.dropped] == ["NOT: negations are dropped"]


def test_deep_nesting_is_bounded_even_close_to_the_recursion_limit() -> None:
    import sys

    def at_depth(frames: int) -> QueryGraph:  # parse the way a deep call stack (DSPy, threads) would
        if frames > 0:
            return at_depth(frames - 1)
        return parse_cypher(f"MATCH (p:paper) WHERE {NESTED['parentheses'](61)} RETURN p", SCHEMAS["mag"])

    qg = at_depth(sys.getrecursionlimit() - 500)
    assert list(qg.symbols) == ["p"] and any("nested more than" in d.reason for d in qg.dropped)
