"""Step 3 parser: golden cases (reference_impl.md 3.9, paper Tables 23-25) and syntax coverage."""

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
