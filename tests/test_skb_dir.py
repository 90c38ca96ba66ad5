"""The SKB directory loader: contents, typed columns, and every validation error with file and line."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autofocus.skb.errors import SKBFormatError
from autofocus.skb.skbdir import infer_kind, load_skb_dir, parse_dates, parse_numbers
from autofocus.skb.writer import write_skb_dir


def _write(path: Path, data: dict[str, Any]) -> Path:
    write_skb_dir(path, data["schema"], data["nodes"], data["edges"], data["qa"], data["splits"])
    return path


def _issues(path: Path) -> list[tuple[str, int | None, str]]:
    with pytest.raises(SKBFormatError) as info:
        load_skb_dir(path, progress=False)
    return [tuple(i) for i in info.value.issues]


def _has(issues: list[tuple[str, int | None, str]], file: str, line: int | None, *words: str) -> bool:
    return any(f == file and ln == line and all(w in reason for w in words) for f, ln, reason in issues)


# --- contents -------------------------------------------------------------------------------------


def test_tiny_skb_contents(tiny_skb):
    assert tiny_skb.num_nodes == 12
    assert tiny_skb.num_edges == 25
    assert tiny_skb.counts_by_type() == {"paper": 5, "author": 3, "venue": 2, "field": 2}
    assert (
        tiny_skb.name(0) == "Graph Retrieval at Scale"
    )  # from name_field "title", despite reversed file order
    assert tiny_skb.name(4) == "Ada Lovelace"
    assert tiny_skb.doc(3) == ""
    assert tiny_skb.candidate_ids.tolist() == [0, 1, 2, 3, 11]
    assert "title" not in tiny_skb.columns  # the name field is the name, not an attribute
    assert tiny_skb.schema.node_types["paper"].attributes[:3] == ["year", "published", "keywords"]


def test_directed_edges_and_parallel_types(tiny_skb):
    g = tiny_skb.graph
    assert g.neighbours(np.array([11]), ["paper_cites_paper"], "out").tolist() == [0, 1]
    assert g.neighbours(np.array([11]), ["paper_extends_paper"], "out").tolist() == [1]
    assert g.neighbours(np.array([1]), ["paper_cites_paper"], "out").tolist() == [0]
    assert g.neighbours(np.array([1]), ["paper_cites_paper"], "in").tolist() == [11]
    assert g.neighbours(np.array([0]), ["paper_cites_paper"], "out").tolist() == []


def test_column_kinds_and_values(tiny_skb):
    cols = tiny_skb.columns
    assert {k: c.kind for k, c in cols.items()} == {
        "year": "number", "published": "date", "keywords": "json", "h_index": "number", "born": "date",
        "country": "string",
    }  # fmt: skip
    assert cols["year"].values[11] == 2022.0
    assert np.isnan(cols["year"].values[4]) and not cols["year"].present[4]
    assert cols["published"].values[0] == (np.datetime64("2019-05-14") - np.datetime64("1970-01-01")).astype(
        int
    )
    assert cols["published"].display(1) == "2021-03-01"  # YYYY-MM -> first of the month
    assert cols["published"].display(2) == "2020-11-02"  # timestamp -> its date
    assert cols["born"].values[4] < 0  # before 1970
    assert not cols["born"].present[6]
    assert cols["country"].get(7) == "US" and cols["country"].get(8) is None  # null is missing
    assert json.loads(cols["keywords"].get(0)) == ["graphs", "retrieval"]


def test_inferred_kinds_bool_mixed_and_declared_string(tmp_path, tiny_skb_data):
    nodes = tiny_skb_data["nodes"]
    nodes[4]["flag"] = True
    nodes[5]["flag"] = False
    nodes[4]["mixed"] = 3
    nodes[5]["mixed"] = "three"
    nodes[4]["code"] = 7
    tiny_skb_data["schema"]["node_types"]["author"]["attribute_types"] = {"code": "string"}
    skb = load_skb_dir(_write(tmp_path, tiny_skb_data), progress=False)
    assert skb.columns["flag"].kind == "number" and skb.columns["flag"].values[4] == 1.0
    assert skb.columns["mixed"].kind == "string" and skb.columns["mixed"].get(4) == "3"
    assert skb.columns["code"].kind == "string" and skb.columns["code"].get(4) == "7"


def test_parse_helpers():
    values, ok = parse_numbers(["12", 3, "$15.99", "n/a"], lenient=True)
    assert values[:3].tolist() == [12.0, 3.0, 15.99] and ok.tolist() == [True, True, True, False]
    _, ok = parse_numbers(["$15.99"], lenient=False)
    assert not ok[0]
    days, ok = parse_dates(["1970-01-02", "2020-13-01", "soon", "1969-12"])
    assert ok.tolist() == [True, False, False, True]
    assert days[0] == 1 and days[3] == -31
    objects = [datetime.date(1970, 1, 3), datetime.datetime(1970, 1, 4, 23, 59), np.datetime64("1969-12-31")]
    assert infer_kind(objects) == "date"
    assert parse_dates(objects)[0].tolist() == [2, 3, -1]  # date objects, e.g. pandas Timestamps from pickles


# --- validation: one test per kind of error -------------------------------------------------------


def _dir_with_nodes_lines(tmp_path: Path, data: dict[str, Any], lines: list[str]) -> Path:
    path = _write(tmp_path, data)
    (path / "nodes.jsonl").write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('{"id": 0, "type": "paper", "title": "x"', ["bad JSON"]),
        ("[1, 2]", ["expected a JSON object"]),
        ('{"type": "paper", "title": "x"}', ["missing `id`"]),
        ('{"id": "zero", "type": "paper"}', ["non-negative integer"]),
        ('{"id": 0, "title": "x"}', ["missing `type`"]),
        ('{"id": 0, "type": "poster"}', ["poster", "not a node type"]),
        ('{"id": 0, "type": "paper", "text": 5}', ["`text` must be a string"]),
    ],
)
def test_bad_node_lines(tmp_path, tiny_skb_data, line, words):
    lines = [json.dumps(n) for n in tiny_skb_data["nodes"]]
    lines[0] = line  # node 0 is on line 1
    assert _has(_issues(_dir_with_nodes_lines(tmp_path, tiny_skb_data, lines)), "nodes.jsonl", 1, *words)


def test_duplicate_and_non_dense_ids(tmp_path, tiny_skb_data):
    lines = [json.dumps(n) for n in tiny_skb_data["nodes"]]
    lines[5] = json.dumps({**tiny_skb_data["nodes"][5], "id": 4})  # line 6 repeats id 4 (line 5)
    issues = _issues(_dir_with_nodes_lines(tmp_path / "dup", tiny_skb_data, lines))
    assert _has(issues, "nodes.jsonl", 6, "duplicate id 4", "line 5")

    lines = [json.dumps(n) for n in tiny_skb_data["nodes"]]
    lines[11] = json.dumps({**tiny_skb_data["nodes"][11], "id": 40})
    issues = _issues(_dir_with_nodes_lines(tmp_path / "sparse", tiny_skb_data, lines))
    assert _has(issues, "nodes.jsonl", 12, "id 40", "dense")
    assert _has(issues, "nodes.jsonl", None, "not dense", "11")


def test_bad_declared_attribute_values(tmp_path, tiny_skb_data):
    tiny_skb_data["nodes"][1]["published"] = "someday"
    tiny_skb_data["schema"]["node_types"]["paper"]["attribute_types"]["year"] = "number"
    tiny_skb_data["nodes"][2]["year"] = "twenty"
    issues = _issues(_write(tmp_path, tiny_skb_data))
    assert _has(issues, "nodes.jsonl", 2, "published", "not a date")
    assert _has(issues, "nodes.jsonl", 3, "year", "not a number")


def _edges_issues(tmp_path: Path, data: dict[str, Any], text: str) -> list[tuple[str, int | None, str]]:
    path = _write(tmp_path, data)
    (path / "edges.csv").write_text(text)
    return _issues(path)


def test_edge_errors(tmp_path, tiny_skb_data):
    text = (
        "src,type,dst\n"
        "4,author_writes_paper,0\n"  # line 2 ok
        "4,author_writes_paper,99\n"  # line 3 unknown dst
        "4,author_reviews_paper,0\n"  # line 4 type not in schema
        "0,author_writes_paper,4\n"  # line 5 wrong endpoint types
        "x,author_writes_paper,0\n"  # line 6 src not an int
        "4,,0\n"  # line 7 missing type
        "\n"  # a blank line is ignored
        "1,paper_cites_paper,0\n"  # line 9 ok
    )
    issues = _edges_issues(tmp_path, tiny_skb_data, text)
    assert _has(issues, "edges.csv", 3, "dst 99", "not a node id")
    assert _has(issues, "edges.csv", 4, "author_reviews_paper", "not in schema.json")
    assert _has(issues, "edges.csv", 5, "needs src_type 'author'", "node 0 is 'paper'")
    assert _has(issues, "edges.csv", 5, "needs dst_type 'paper'", "node 4 is 'author'")
    assert _has(issues, "edges.csv", 6, "src is not an integer")
    assert _has(issues, "edges.csv", 7, "missing edge type")
    assert not any(f == "edges.csv" and ln in (2, 8, 9) for f, ln, _ in issues)


def test_edges_header(tmp_path, tiny_skb_data):
    assert _has(_edges_issues(tmp_path, tiny_skb_data, "source,target\n1,2\n"), "edges.csv", 1, "header")


def test_schema_errors(tmp_path, tiny_skb_data):
    path = _write(tmp_path / "json", tiny_skb_data)
    (path / "schema.json").write_text('{"name": "x",\n "node_types": {\n')
    assert _issues(path)[0][:2] == ("schema.json", 3)

    data = json.loads(json.dumps(tiny_skb_data))
    del data["schema"]["node_types"]
    assert _has(
        _issues(_write(tmp_path / "missing", data)), "schema.json", None, "node_types", "Field required"
    )

    data = json.loads(json.dumps(tiny_skb_data))
    data["schema"]["candidate_types"] = ["poster"]
    data["schema"]["edge_types"]["paper_cites_paper"]["dst_type"] = "book"
    data["schema"]["node_types"]["author"]["attribute_types"] = {"published": "string"}
    issues = _issues(_write(tmp_path / "semantic", data))
    reasons = " | ".join(r for _, _, r in issues)
    assert "candidate type 'poster'" in reasons
    assert "dst_type 'book'" in reasons
    assert "attribute 'published' is declared 'date' for 'paper' and 'string' for 'author'" in reasons
    assert all(f == "schema.json" and ln is not None for f, ln, _ in issues)


def test_schema_counts_checked(tmp_path, tiny_skb_data):
    tiny_skb_data["schema"]["node_types"]["venue"]["count"] = 3
    tiny_skb_data["schema"]["edge_types"]["paper_cites_paper"]["count"] = 5  # right
    tiny_skb_data["schema"]["edge_types"]["paper_extends_paper"]["count"] = 2  # wrong
    issues = _issues(_write(tmp_path, tiny_skb_data))
    assert any("'venue': count 3, nodes.jsonl has 2" in r for _, _, r in issues)
    assert any("'paper_extends_paper': count 2, edges.csv has 1" in r for _, _, r in issues)
    assert not any("paper_cites_paper" in r for _, _, r in issues)


def test_missing_files(tmp_path, tiny_skb_data):
    path = _write(tmp_path, tiny_skb_data)
    (path / "edges.csv").unlink()
    assert _has(_issues(path), "edges.csv", None, "missing required file")


def test_qa_errors(tmp_path, tiny_skb_data):
    path = _write(tmp_path, tiny_skb_data)
    (path / "qa.csv").write_text(
        "id,query,answer_ids\n"
        '0,"ok",[0]\n'  # line 2
        "one,bad id,[1]\n"  # line 3
        '0,"again",[1]\n'  # line 4 duplicate
        "2,,[1]\n"  # line 5 empty query
        '3,"not a list","{1: 2}"\n'  # line 6
        '4,"words","[one]"\n'  # line 7
        '5,"python syntax","[1, 11]"\n'  # line 8 ok
        '6,"bad node","[500]"\n'  # line 9 answer is not a node
        "7,too few\n"  # line 10
        "8,Which books, by whom?,[1]\n"  # line 11: an unquoted comma
    )
    (path / "splits" / "val.index").write_text("5\n77\nx\n")
    issues = _issues(path)
    assert _has(issues, "qa.csv", 3, "id is not an integer")
    assert _has(issues, "qa.csv", 4, "duplicate question id 0")
    assert _has(issues, "qa.csv", 5, "empty query")
    assert _has(issues, "qa.csv", 6, "must be a list")
    assert _has(issues, "qa.csv", 7, "not a JSON or Python list")
    assert _has(issues, "qa.csv", 9, "answer id 500")  # the line, not only the file
    assert _has(issues, "qa.csv", 10, "2 field(s), the header has 3")
    assert _has(issues, "qa.csv", 11, "4 field(s), the header has 3")
    assert _has(issues, "splits/val.index", 2, "77", "not in qa.csv")
    assert _has(issues, "splits/val.index", 3, "not a question id")
    assert _has(issues, "splits/train.index", 2, "question id 1", "not in qa.csv")


def test_errors_are_collected_and_capped(tmp_path, tiny_skb_data):
    lines = [json.dumps({"id": i, "type": "poster"}) for i in range(300)]
    path = _dir_with_nodes_lines(tmp_path, tiny_skb_data, lines)
    with pytest.raises(SKBFormatError) as info:
        load_skb_dir(path, progress=False, max_issues=50)
    assert len(info.value.issues) == 50 and info.value.truncated
    assert [i.line for i in info.value.issues[:3]] == [1, 2, 3]
    assert "nodes.jsonl:1:" in str(info.value)
