"""Step 4 (``program.symbols``): batched constant embedding, the type-only search path, the exact-name index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autofocus.cypher import parse_cypher
from autofocus.program.steps.symbols import constraint_mask, retrieve_symbol_candidates
from autofocus.query_graph import Constraint
from autofocus.skb.names import exact_name_ids
from autofocus.skb.text import TextArray
from tests.skb_factory import make_skb
from tests.test_systems_common import make_kb

NAMES = ["Ærø Institute", "Ann Lee", "ann lee ", "Bob", "Paper on graphs", "Paper on trees", "ANN LEE",
         "Paper on graphs", "Ærø institute", ""]  # fmt: skip
TYPES = [0, 1, 1, 1, 2, 2, 1, 2, 1, 2]  # institution, author, paper


@pytest.fixture
def skb() -> Any:
    edges = [(1, "writes", 4), (2, "writes", 5), (3, "writes", 7), (6, "writes", 4), (1, "member_of", 0)]
    return make_skb(
        ["institution", "author", "paper"], TYPES, edges,
        {"writes": ("author", "paper"), "member_of": ("author", "institution")},
        names=NAMES, numbers={"year": [np.nan] * 4 + [2001, 2002, np.nan, 2001, np.nan, 2003]},
        candidate_types=["paper"],
    )  # fmt: skip


class CountingKB:
    """A knowledge base that records how it was asked to embed; ``batch=False`` hides ``embed_queries``."""

    def __init__(self, kb: Any, batch: bool = True) -> None:
        self.kb, self.skb = kb, kb.skb
        self.single: list[str] = []
        self.batches: list[list[str]] = []
        if batch:
            self.embed_queries = self._embed_queries

    def index(self, variant: str = "text") -> Any:
        return self.kb.index(variant)

    def embed_query(self, text: str) -> np.ndarray:
        self.single.append(text)
        return self.kb.embed_query(text)

    def _embed_queries(self, texts: list[str]) -> np.ndarray:
        self.batches.append(list(texts))
        return self.kb.embed_queries(texts)


QUERY = (
    'MATCH (a:author {name: "ann lee"})-[:writes]->(y:paper), (a)-[:member_of]->(i:institution {name: "ærø INSTITUTE"}) '
    "WHERE y.year = 2001 RETURN y"
)


def test_constants_are_embedded_in_one_batch_with_the_same_result(skb: Any, tmp_path: Path) -> None:
    kb = make_kb(skb, tmp_path)
    qg = parse_cypher(QUERY, skb.schema)
    batched, single = CountingKB(kb), CountingKB(kb, batch=False)
    a = retrieve_symbol_candidates(batched, qg, l_max=5)
    b = retrieve_symbol_candidates(single, qg, l_max=5)
    assert batched.batches == [["ann lee", "ærø INSTITUTE"]] and batched.single == []
    assert single.single == ["ann lee", "ærø INSTITUTE"]
    assert a.constants.keys() == b.constants.keys() == {"a", "i"}
    for var in a.constants:
        np.testing.assert_array_equal(a.constants[var], b.constants[var])
    np.testing.assert_array_equal(a.variables["y"], [4, 7])  # the year filter on a variable


def test_exact_names_first_case_insensitive_within_the_type(skb: Any, tmp_path: Path) -> None:
    sc = retrieve_symbol_candidates(make_kb(skb, tmp_path), parse_cypher(QUERY, skb.schema), l_max=5)
    assert sc.constants["a"][:3].tolist() == [1, 2, 6]  # "Ann Lee", "ann lee ", "ANN LEE"; author 3 ranks after
    assert sorted(sc.constants["a"].tolist()) == [1, 2, 3, 6, 8]  # only authors (type mask), l_max of them
    assert sc.constants["i"].tolist() == [0]  # the author named "Ærø institute" is not an institution


def test_a_constant_its_exact_name_settles_is_neither_embedded_nor_searched(skb: Any, tmp_path: Path) -> None:
    """With ``exact_name_only`` only constants without an exact name match cost an embedding and a scan."""
    kb = CountingKB(make_kb(skb, tmp_path))
    qg = parse_cypher('MATCH (a:author {name: "Bob"})-[:writes]->(y:paper), (a)-[:member_of]->(i:institution '
                      '{name: "Aero Inst"}) RETURN y', skb.schema)
    sc = retrieve_symbol_candidates(kb, qg, l_max=5, exact_name_only=True)
    assert kb.batches == [["Aero Inst"]] and kb.single == []
    assert sc.constants["a"].tolist() == [3]  # Bob, by name alone
    assert sc.constants["i"].tolist() == [0]  # no exact name: the vector search over institutions


def test_type_only_search_ranks_as_the_type_mask_did(skb: Any, tmp_path: Path) -> None:
    """Without attribute filters a constant searches its type's index; the old path (candidates = the
    type's ids) must give the same ranking."""
    kb = make_kb(skb, tmp_path)
    qg = parse_cypher('MATCH (a:author)-[:writes]->(p:paper {title: "Paper on graphs"}) RETURN a', skb.schema)
    sc = retrieve_symbol_candidates(kb, qg, l_max=3, exact_name_first=False)
    qvec = kb.embed_query("Paper on graphs")
    old, _ = kb.index("text").search(qvec, candidates=np.flatnonzero(skb.node_type == 2), k=3)
    np.testing.assert_array_equal(sc.constants["p"], old)


def test_exact_name_index_lookups(skb: Any) -> None:
    assert exact_name_ids(skb, " ANN lee").tolist() == [1, 2, 6]
    assert exact_name_ids(skb, "paper on graphs").tolist() == [4, 7]
    assert exact_name_ids(skb, "ærø INSTITUTE").tolist() == [0, 8]
    assert exact_name_ids(skb, "nobody").tolist() == []
    assert exact_name_ids(skb, "").tolist() == [9]


@pytest.mark.parametrize("strings", [["a", "", "Ærø", "x y"], [], ["nul\0inside", "b"], [""]])
def test_all_strings_decodes_every_string(strings: list[str]) -> None:
    assert TextArray.from_strings(strings).strings() == strings


# --- attribute filters: every operator on numbers, dates and strings (the tiny SKB of conftest.py) ---

FILTERS = [
    # numbers: papers' year (0: 2019, 1: 2021, 2: 2020, 3: 2018, 11: 2022); other nodes have none
    ("year", "=", 2019, [0]), ("year", "=", "2019", [0]), ("year", "<>", 2019, [1, 2, 3, 11]),
    ("year", "<", 2020, [0, 3]), ("year", "<=", 2020, [0, 2, 3]), ("year", ">", 2020, [1, 11]),
    ("year", ">=", "2,020", [1, 2, 11]), ("year", "IN", [2018, "2022"], [3, 11]), ("year", "IN", [], []),
    ("h_index", ">", 40.5, [4, 5]),
    # dates: a year or a month is the whole period, as a string or as a number
    ("published", "=", "2019", [0]), ("published", "=", 2019, [0]), ("published", "=", "2021-03", [1]),
    ("published", "=", "2019-05-14", [0]), ("published", "=", "2020-11-02T08:00:00Z", [2]),
    ("published", "<>", 2019, [1, 2, 3, 11]), ("published", "<", 2020, [0, 3]),
    ("published", "<=", 2020, [0, 2, 3]), ("published", ">", "2020", [1, 11]),
    ("published", ">=", "2020-11", [1, 2, 11]), ("published", "<", "2019-05-15", [0, 3]),
    ("published", "<=", "2019-05-14", [0, 3]), ("published", ">", "2019-05-14", [1, 2, 11]),
    ("published", "IN", [2018, "2021-03"], [1, 3]), ("published", "STARTS WITH", "2021-03", [1]),
    ("published", "CONTAINS", "-07-", [11]), ("published", "ENDS WITH", "-20", [3]),
    ("born", "<", 1900, [4]), ("born", "=", "1912-06", [5]), ("born", "<>", 1815, [5]),
    # strings: case-insensitive; a node without the attribute never matches, not even "<>"
    ("country", "=", "us", [7]), ("country", "<>", "UK", [7]), ("country", "<", "V", [7]),
    ("country", ">=", "v", []), ("country", "IN", ["UK", "us"], [7]), ("country", "CONTAINS", "S", [7]),
    ("country", "STARTS WITH", "u", [7]), ("country", "ENDS WITH", "s", [7]),
    ("keywords", "CONTAINS", "cypher", [1]),
]
UNUSABLE = [
    ("year", "CONTAINS", "20"), ("year", "=", "recent"), ("year", "=", [2019]), ("published", "=", "2019-13"),
    ("published", "=", True), ("published", ">", "last year"), ("country", "=", ["US"]), ("nope", "=", 1),
]


@pytest.mark.parametrize(("key", "op", "value", "expected"), FILTERS)
def test_attribute_filters(tiny_skb: Any, key: str, op: str, value: Any, expected: list[int]) -> None:
    mask = constraint_mask(tiny_skb, Constraint(key=key, op=op, value=value))
    assert mask is not None and np.flatnonzero(mask).tolist() == expected


@pytest.mark.parametrize(("key", "op", "value"), UNUSABLE)
def test_filters_that_cannot_apply_are_none_not_empty(tiny_skb: Any, key: str, op: str, value: Any) -> None:
    assert constraint_mask(tiny_skb, Constraint(key=key, op=op, value=value)) is None
