"""Step 3 parser, property-based: it never raises (nor fails internally), and rendering round-trips."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autofocus.cypher import parse_cypher, to_cypher
from autofocus.query_graph import Constraint, QueryGraph, Symbol, Triplet
from autofocus.skb.schema import Schema

GOLDEN = Path(__file__).parent / "golden"
SCHEMAS = [
    Schema.model_validate(v) for v in json.loads((GOLDEN / "cypher_schemas.json").read_text()).values()
]
QUERIES = [c["cypher"] for c in json.loads((GOLDEN / "cypher_cases.json").read_text())["cases"]]
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_clean(text: str) -> QueryGraph:
    """Parse with and without a schema, in both modes; an internal error is a bug even though it is caught."""
    qg = parse_cypher(text)
    for schema in SCHEMAS[:2]:
        for mode in ("strict", "lenient"):
            out = parse_cypher(text, schema, mode=mode, target_type="drug")  # type: ignore[arg-type]
            assert not [d for d in out.dropped if "internal parser error" in d.reason], out.dropped
            assert out.target is None or out.target in out.symbols
            assert all(t.head in out.symbols and t.tail in out.symbols for t in out.triplets)
    assert not [d for d in qg.dropped if "internal parser error" in d.reason], qg.dropped
    return qg


@FAST
@given(st.text(max_size=300))
def test_random_text_never_fails(text: str) -> None:
    assert_clean(text)


SOUP = [
    "MATCH", "OPTIONAL MATCH", "WHERE", "RETURN", "WITH", "AND", "OR", "XOR", "NOT", "IN", "IS", "NULL",
    "CONTAINS", "STARTS WITH", "ENDS WITH", "AS", "DISTINCT", "ORDER BY", "LIMIT", "SKIP", "UNION", "count",
    "collect", "toLower", "all", "exists", "CASE", "(", ")", "[", "]", "{", "}", "-", "->", "<-", "--", "<", ">",
    "<=", ">=", "<>", "=", "=~", ":", ",", ".", "|", "*", "..", ";", "'", '"', "`", "“", "”", "$p", "```",
    "a", "b", "x", "p", "name", "title", "year", "gene/protein", "drug", "author___writes___paper",
    "'asthma'", '"it\'s"', "2015", "-3.5", "1e3", "true", "2020-01-01", "&gt;", "→", "\n",
]  # fmt: skip


@FAST
@given(st.lists(st.sampled_from(SOUP), max_size=60), st.lists(st.sampled_from(["", " ", "\n"]), min_size=60))
def test_token_soup_never_fails(words: list[str], gaps: list[str]) -> None:
    assert_clean("".join(w + g for w, g in zip(words, gaps, strict=False)))


@FAST
@given(st.sampled_from(QUERIES), st.integers(0, 2**32 - 1), st.integers(1, 8))
def test_mutated_queries_never_fail(query: str, seed: int, n_edits: int) -> None:
    rng = random.Random(seed)
    chars = list(query)
    alphabet = "()[]{}-<>:,.'\"`|*= \n" + "abcMATCHWHERE"
    for _ in range(n_edits):
        op = rng.choice(("delete", "insert", "swap"))
        i = rng.randrange(len(chars)) if chars else 0
        if op == "delete" and chars:
            del chars[i]
        elif op == "insert":
            chars.insert(i, rng.choice(alphabet))
        elif len(chars) > 1:
            j = rng.randrange(len(chars))
            chars[i], chars[j] = chars[j], chars[i]
    assert_clean("".join(chars))


# ---- round trip: graphs the parser can produce, rendered and parsed back -----------------------------

names = st.one_of(
    st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True),
    st.sampled_from(
        ["match", "return", "where", "count", "all", "contains", "order", "true", "_n1", "my var"]
    ),
)
labels = st.one_of(
    st.sampled_from(["drug", "gene/protein", "effect/phenotype", "field_of_study", "Paper", "off-label use"]),
    # any text but line breaks: backticked names cannot escape them, and fences are found line by line
    st.text(
        st.characters(blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
        min_size=1,
        max_size=12,
    ),
)
scalars = st.one_of(
    st.text(max_size=20),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.booleans(),
)


@st.composite
def constraints(draw: st.DrawFn) -> Constraint:
    op = draw(st.sampled_from(["=", "<", "<=", ">", ">=", "CONTAINS", "STARTS WITH", "ENDS WITH", "IN"]))
    value = draw(st.lists(scalars, min_size=2, max_size=4)) if op == "IN" else draw(scalars)
    return Constraint(key=draw(names), op=op, value=value)  # type: ignore[arg-type]


@st.composite
def graphs(draw: st.DrawFn) -> QueryGraph:
    vars_ = draw(st.lists(names, min_size=1, max_size=6, unique=True))
    symbols = {}
    for v in vars_:
        label = draw(st.none() | labels)
        symbols[v] = Symbol(
            var=v, type=label, label=label, constraints=draw(st.lists(constraints(), max_size=3))
        )
    triplets = []
    for _ in range(draw(st.integers(0, 5))):
        rels = draw(st.lists(labels, max_size=3, unique=True))
        triplets.append(
            Triplet(
                head=draw(st.sampled_from(vars_)),
                tail=draw(st.sampled_from(vars_)),
                rel=rels[0] if rels else None,
                rel_alternatives=rels[1:],
                rel_label="|".join(rels) if rels else None,
                directed=draw(st.booleans()),
            )
        )
    target = draw(st.sampled_from(vars_))
    return QueryGraph(target=target, target_type=symbols[target].type, symbols=symbols, triplets=triplets)


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_render_round_trip(qg: QueryGraph) -> None:
    text = to_cypher(qg)
    back = parse_cypher(text)
    assert back.dropped == [], (text, back.dropped)
    assert back.model_dump() == qg.model_dump(), text


CASES = json.loads((GOLDEN / "cypher_cases.json").read_text())["cases"]
SCHEMA_BY_NAME = {
    k: Schema.model_validate(v) for k, v in json.loads((GOLDEN / "cypher_schemas.json").read_text()).items()
}


def _shape(qg: QueryGraph) -> tuple[object, ...]:
    return (
        qg.target,
        qg.target_type,
        {v: (s.type, [c.model_dump() for c in s.constraints]) for v, s in qg.symbols.items()},
        [(t.head, t.edge_types, t.tail, t.directed) for t in qg.triplets],
    )


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_parse_render_parse_is_stable_with_a_schema(case: dict[str, Any]) -> None:
    schema, mode = SCHEMA_BY_NAME[case["schema"]], case["mode"]
    first = parse_cypher(case["cypher"], schema, mode=mode)
    again = parse_cypher(to_cypher(first), schema, mode=mode)
    assert _shape(again) == _shape(first)
    assert not [d for d in again.dropped if "direction reversed" in d.reason]
