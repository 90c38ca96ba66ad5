"""The documentation in ``docs/``: the SKB format's worked example validates and loads as described,
the validation table quotes the validator's real messages, and no document points outside the repo."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from autofocus.cli import app
from autofocus.skb.qa import load_qa, splits_available
from autofocus.skb.skbdir import load_skb_dir

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SPEC = DOCS / "skb-format.md"
VALIDATOR = [ROOT / "src" / "autofocus" / "skb" / name for name in ("skbdir.py", "qa.py", "errors.py")]
FILE_BLOCK = re.compile(r"<!-- file: (\S+) -->\n```[a-z]*\n(.*?)```", re.S)


def write_example(target: Path) -> list[str]:
    """Write the files of the worked example of ``docs/skb-format.md`` into ``target``."""
    names = []
    for name, body in FILE_BLOCK.findall(SPEC.read_text()):
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        names.append(name)
    return names


def test_the_worked_example_validates_and_loads_as_the_spec_says(tmp_path: Path) -> None:
    kb = tmp_path / "tiny-library"
    names = write_example(kb)
    assert sorted(names) == sorted(["schema.json", "nodes.jsonl", "edges.csv", "qa.csv", "splits/train.index",
                                    "splits/val.index", "splits/test.index"])  # fmt: skip
    res = CliRunner().invoke(app, ["skb", "validate", str(kb)])
    assert res.exit_code == 0, res.output

    skb = load_skb_dir(kb, progress=False)
    assert (skb.num_nodes, skb.num_edges) == (8, 9)
    assert skb.node_type_names == ["book", "author", "publisher"] and skb.schema.answer_types == ["book", "author"]
    kinds = {k: c.kind for k, c in skb.columns.items()}
    assert kinds == {"year": "number", "released": "date", "genres": "json", "language": "string",
                     "born": "date", "country": "string"}  # fmt: skip
    released = skb.columns["released"]
    assert released.values[1] == np.datetime64("2014-11-01", "D").astype(np.int64) and not released.present[3]
    assert not skb.columns["born"].present[5] and skb.name(0) == "The Quiet Orchard" and skb.doc(6) == ""
    assert splits_available(kb) == {"test": 1, "train": 2, "val": 1}
    assert [q.answer_ids for q in load_qa(kb, "train")] == [[0, 1], [1]]


def test_the_validation_table_quotes_real_messages() -> None:
    source = "\n".join(p.read_text() for p in VALIDATOR)
    table = SPEC.read_text().split("## Validation", 1)[1]
    spans = re.compile(r"(`+) ?(.+?) ?\1(?!`)")  # markdown code spans, ``with `backticks` inside``
    quoted = [m.group(2) for row in table.splitlines() if row.startswith("| ") for m in spans.finditer(row.split(" | ")[-1])]
    assert len(quoted) > 30
    generic = {"<key path>: <reason>", "node_types.book.count: Input should be a valid integer"}  # pydantic's
    for message in quoted:
        if message in generic:
            continue
        for part in (p.strip() for p in message.split("...")):
            assert part in source, message


@pytest.mark.parametrize("doc", [*sorted(p.name for p in DOCS.glob("*.md")), "../README.md"])
def test_documents_point_only_inside_the_repository(doc: str) -> None:
    text = (DOCS / doc).read_text()
    assert "/shared" not in text and "../shared" not in text and "/work/" not in text
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http://", "https://")):
            assert ((DOCS / doc).parent / target).exists(), f"{doc} links to {target}, which is not in the repo"


def test_the_module_map_names_every_module() -> None:
    """``docs/modules.md`` stays current: every module of the package has its row."""
    package = ROOT / "src" / "autofocus"
    text = (DOCS / "modules.md").read_text()
    missing = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        name = ".".join(path.relative_to(package).with_suffix("").parts)
        if f"`{name}`" not in text:
            missing.append(name)
    assert missing == []


MOVIES = {  # written from the rules of docs/skb-format.md alone, using the freedoms the worked example does not
    "schema.json": json.dumps({
        "name": "tiny-movies",
        "node_types": {"film": {"name_field": "title", "attribute_types": {"budget": "number"}}, "person": {},
                       "studio": {}},
        "edge_types": {"person_directed_film": {"src_type": "person", "dst_type": "film", "count": 2},
                       "remake_of": {}},
        "candidate_types": ["film"],
    }),
    "nodes.jsonl": '{"id": 2, "type": "person", "name": "Ana Ruiz", "oscar": true}\n'  # any order, blank lines
                   '{"id": 0, "type": "film", "title": "Salt Road", "premiere": "1999-09-10", "budget": 2500000}\n\n'
                   '{"id": 1, "type": "film", "title": "Salt Road (2020)", "premiere": "2020-02", "budget": null, '
                   '"tags": []}\n'
                   '{"id": 3, "type": "studio", "name": "Blue Gate", "meta": {"city": "Oslo"}}\n',
    "edges.csv": "dst,src,type,note\n0, 2, person_directed_film,first\n1,2,person_directed_film,\n\n"
                 "0,1,remake_of,\n0,1,remake_of,repeated\n",  # columns in any order, a repeated edge
    "qa.csv": 'id,query,answer_ids\n10,Which films did Ana Ruiz direct?,"[0, 1]"\n11,Which film remakes Salt Road?,[1]\n'
              "12,Which film premiered in 1999?,[0]\n",
    "qa_human.csv": 'id,query,answer_ids\n1,films by Ana Ruiz,"[0,1]"\n',
    "splits/train.index": "10\n\n11\n", "splits/val.index": "12\n", "splits/test.index": "12\n",
}


def test_a_kb_written_from_the_rules_alone_validates_and_loads_as_the_spec_says(tmp_path: Path) -> None:
    kb = tmp_path / "movies"
    for name, body in MOVIES.items():
        (kb / name).parent.mkdir(parents=True, exist_ok=True)
        (kb / name).write_text(body)
    res = CliRunner().invoke(app, ["skb", "validate", str(kb)])
    assert res.exit_code == 0, res.output
    skb = load_skb_dir(kb, progress=False)
    assert (skb.num_nodes, skb.num_edges) == (4, 3) and skb.name(2) == "Ana Ruiz" and skb.name(0) == "Salt Road"
    kinds = {k: c.kind for k, c in skb.columns.items()}
    assert kinds == {"oscar": "number", "premiere": "date", "budget": "number", "meta": "json"}  # tags: all missing
    assert skb.columns["oscar"].values[2] == 1 and not skb.columns["budget"].present[1]
    assert skb.columns["premiere"].values[1] == np.datetime64("2020-02-01", "D").astype(np.int64)
    assert skb.schema.edge_types["remake_of"].src_type is None and skb.graph.num_edges("remake_of") == 1
    assert splits_available(kb) == {"test": 1, "train": 2, "val": 1, "human": 1}
    assert [q.answer_ids for q in load_qa(kb, "human")] == [[0, 1]]


def test_the_readme_is_a_guide_of_at_most_300_lines_that_starts_with_the_two_commands() -> None:
    """The README is what a newcomer reads first: short, with ``make demo`` and ``make test`` on top (the
    Makefile and ``.ci/run`` use them); measurements belong in ``docs/results.md``."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300
    assert lines[2] == "```bash" and lines[3].startswith("make demo ") and lines[4].startswith("make test ")
    text = "\n".join(lines)
    assert "arXiv:2505.09246" in text and "(CITATION.cff)" in text and "(LICENSE)" in text
    assert "MIT" in (ROOT / "LICENSE").read_text() and "2505.09246" in (ROOT / "CITATION.cff").read_text()


def test_results_are_dated_entries_newest_first_each_with_a_commit() -> None:
    """``docs/results.md``: one ``## YYYY-MM-DD, commit abc1234: title`` entry per measurement, newest first,
    each with a command that reproduces it or the commit to check out."""
    text = (DOCS / "results.md").read_text()
    headings = re.findall(r"^## (.*)$", text, re.M)
    entries = [re.fullmatch(r"(\d{4}-\d{2}-\d{2}), commits? ([0-9a-f]{7,40})(?:[ ,/a-z0-9]*)?: .+", h) for h in headings]
    assert len(entries) >= 10 and all(entries), [h for h, m in zip(headings, entries, strict=True) if not m]
    dates = [m.group(1) for m in entries if m]
    assert dates == sorted(dates, reverse=True)
    for body in re.split(r"^## .*$", text, flags=re.M)[1:]:
        assert "autofocus " in body or "benchmarks/" in body or "check out" in body, body[:200]
