"""The offline demo SKB (Python standard library) and its QA set: valid format, typed edges,
gold answers that an independent recomputation on the loaded graph agrees with, stable splits,
reproducible builds."""

from __future__ import annotations

import csv
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from autofocus.cli import app
from autofocus.demo.build import DemoBuild, build_demo_skb
from autofocus.demo.heldout import write_heldout
from autofocus.demo.node_text import clean_doc
from autofocus.demo.questions import (
    TEMPLATES,
    in_scope,
    leaks_answer,
    load_written_questions,
)
from autofocus.demo.stdlib_schema import EDGE_TYPES, SMALL_MODULES
from autofocus.demo.stdlib_skb import collect_stdlib
from autofocus.skb.io import load_skb
from autofocus.skb.model import SKB
from autofocus.skb.qa import load_qa
from autofocus.skb.skbdir import load_skb_dir

EPOCH = "1767225600"  # 2026-01-01, so that builds are byte-identical
FILES = ("schema.json", "nodes.jsonl", "edges.csv", "qa.csv", "splits/train.index", "splits/val.index",
         "splits/test.index")  # fmt: skip


@pytest.fixture(scope="module")
def fixed_date() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOURCE_DATE_EPOCH", EPOCH)
        yield


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, fixed_date: None) -> DemoBuild:
    return build_demo_skb(tmp_path_factory.mktemp("demo-small"), small=True)


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory, fixed_date: None) -> DemoBuild:
    return build_demo_skb(tmp_path_factory.mktemp("demo-full"), warn=False)


@pytest.fixture(scope="module", params=["small", pytest.param("full", marks=pytest.mark.slow)])
def built(request: pytest.FixtureRequest) -> tuple[DemoBuild, SKB, list[dict[str, str]]]:
    result = (
        request.getfixturevalue("small") if request.param == "small" else request.getfixturevalue("full")
    )
    skb = load_skb(
        result.path, cache=False, progress=False
    )  # strict validation: raises on any format problem
    with (result.path / "qa.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return result, skb, rows


def test_small_variant_has_a_few_hundred_nodes_of_every_type(small: DemoBuild) -> None:
    result = small
    assert 300 <= sum(result.node_counts.values()) <= 1000
    assert set(result.node_counts) == {"module", "class", "exception", "function", "method"}
    assert sum(n for per in result.qa_counts.values() for n in per.values()) >= 60


@pytest.mark.slow
def test_full_variant_is_demo_sized(full: DemoBuild) -> None:
    assert 2000 <= sum(full.node_counts.values()) <= 3000  # embeds both variants in < 3 min on 2 cores
    per_kind = {k: sum(v.values()) for k, v in full.qa_counts.items()}
    assert sum(per_kind.values()) >= 120 and min(per_kind.values()) >= 30
    assert all(n >= 8 for per in full.qa_counts.values() for n in per.values())


def test_schema_matches_files(built: tuple[DemoBuild, SKB, list[dict[str, str]]]) -> None:
    result, skb, _ = built
    schema = json.loads((result.path / "schema.json").read_text())
    ids = [json.loads(line)["id"] for line in (result.path / "nodes.jsonl").read_text().splitlines()]
    assert ids == list(range(len(ids)))
    assert skb.counts_by_type() == {t: info["count"] for t, info in schema["node_types"].items()}
    assert {e: skb.graph.num_edges(e) for e in skb.graph.edge_types} == {
        e: info["count"] for e, info in schema["edge_types"].items()
    }
    assert set(schema["candidate_types"]) == set(schema["node_types"])
    assert schema["source"]["python_version"].startswith(f"{sys.version_info[0]}.{sys.version_info[1]}")
    assert all(v for v in schema["source"]["sha256"].values())


def test_every_edge_joins_its_declared_types(built: tuple[DemoBuild, SKB, list[dict[str, str]]]) -> None:
    _, skb, _ = built
    for name in skb.graph.edge_types:
        info = skb.schema.edge_types[name]
        csr = skb.graph.forward[name]
        src = np.repeat(np.arange(skb.num_nodes), np.diff(csr.indptr))
        assert (skb.node_type[src] == skb.type_code(info.src_type)).all(), name
        assert (skb.node_type[csr.indices] == skb.type_code(info.dst_type)).all(), name
        assert (src != csr.indices).all(), f"{name} has a self loop"


def test_names_are_unique_and_documents_short(built: tuple[DemoBuild, SKB, list[dict[str, str]]]) -> None:
    _, skb, _ = built
    names = [skb.name(i) for i in range(skb.num_nodes)]
    assert len(set(names)) == len(names)
    assert max(len(skb.doc(i)) for i in range(skb.num_nodes)) < 700


def test_answers_resolve_by_name_and_are_candidates(
    built: tuple[DemoBuild, SKB, list[dict[str, str]]],
) -> None:
    result, skb, rows = built
    items = load_qa(result.path)
    assert [i.id for i in items] == list(range(len(rows)))
    candidates = set(skb.schema.answer_types)
    for item, row in zip(items, rows, strict=True):
        assert 1 <= len(item.answer_ids) <= 20
        assert sorted(skb.name(a) for a in item.answer_ids) == sorted(json.loads(row["answer_names"]))
        assert {skb.type_of(a) for a in item.answer_ids} <= candidates
        assert leaks_answer(item.query, json.loads(row["answer_names"])) is None, item.query
    assert {r["kind"] for r in rows} == {"relational", "textual", "hybrid"}
    assert len({r["key"] for r in rows}) == len(rows)


def test_splits_are_disjoint_cover_and_stratified(built: tuple[DemoBuild, SKB, list[dict[str, str]]]) -> None:
    result, _, rows = built
    splits = {s: [i.id for i in load_qa(result.path, split=s)] for s in ("train", "val", "test")}
    flat = [i for ids in splits.values() for i in ids]
    assert len(flat) == len(set(flat)) == len(rows)
    for kind in ("relational", "textual", "hybrid"):
        per = {s: sum(rows[i]["kind"] == kind for i in ids) for s, ids in splits.items()}
        assert per["test"] >= per["train"] >= 1 and per["val"] >= 1, (kind, per)


def _ids(skb: SKB, name: str) -> np.ndarray:
    matches = [i for i in range(skb.num_nodes) if skb.name(i) == name]
    assert len(matches) == 1, name
    return np.asarray(matches)


def _recompute(skb: SKB) -> dict[str, Callable[[dict[str, Any]], set[int]]]:
    """Each template's gold, recomputed with CSR set algebra on the loaded SKB (not the builder's code)."""

    def into(edge: str, rows: np.ndarray) -> np.ndarray:
        return skb.graph.neighbours(rows, [edge], "in") if edge in skb.graph.edge_types else np.zeros(0, int)

    def out(edge: str, rows: np.ndarray) -> np.ndarray:
        return skb.graph.neighbours(rows, [edge], "out") if edge in skb.graph.edge_types else np.zeros(0, int)

    def both(a: np.ndarray, b: np.ndarray) -> set[int]:
        return set(np.intersect1d(a, b).tolist())

    def n(name: str) -> np.ndarray:
        return _ids(skb, name)

    exc_sub = ["exception_subclass_of_exception", "exception_subclass_of_class"]

    def subclasses_of_exception(e: np.ndarray) -> np.ndarray:
        return np.union1d(*(into(k, e) for k in exc_sub))

    arity = skb.columns["num_params"]
    return {
        "exceptions_in_module_subclassing": lambda p: both(
            into("exception_defined_in_module", n(p["module"])), subclasses_of_exception(n(p["base"]))
        ),
        "module_functions_raising": lambda p: both(
            into("function_defined_in_module", n(p["module"])),
            into("function_raises_exception", n(p["exception"])),
        ),
        "module_functions_raising_subclass": lambda p: both(
            into("function_defined_in_module", n(p["module"])),
            into("function_raises_exception", subclasses_of_exception(n(p["base"]))),
        ),
        "class_methods_raising": lambda p: both(
            into("method_defined_in_class", n(p["cls"])), into("method_raises_exception", n(p["exception"]))
        ),
        "exceptions_raised_by_module": lambda p: set(
            out("function_raises_exception", into("function_defined_in_module", n(p["module"]))).tolist()
        ),
        "modules_defining_subclass": lambda p: set(
            out("exception_defined_in_module", subclasses_of_exception(n(p["base"]))).tolist()
        ),
        "classes_extending_module": lambda p: both(
            into("class_defined_in_module", n(p["module"])),
            into("class_subclass_of_class", into("class_defined_in_module", n(p["other"]))),
        ),
        "modules_importing_both": lambda p: both(
            into("module_imports_module", n(p["first"])), into("module_imports_module", n(p["second"]))
        ),
        "exceptions_from_builtin": lambda p: both(
            into("exception_defined_in_module", n(p["module"])),
            subclasses_of_exception(into("exception_defined_in_module", n("builtins"))),
        ),
        "functions_with_many_params": lambda p: {
            int(f)
            for f in into("function_defined_in_module", n(p["module"]))
            if arity.present[f] and arity.values[f] >= p["n"]
        },
        "classes_with_method_raising": lambda p: both(
            into("class_defined_in_module", n(p["module"])),
            out("method_defined_in_class", into("method_raises_exception", n(p["exception"]))),
        ),
        "direct_subclasses": lambda p: set(into("class_subclass_of_class", n(p["cls"])).tolist()),
        "module_methods_raising": lambda p: both(
            into("method_defined_in_class", into("class_defined_in_module", n(p["module"]))),
            into("method_raises_exception", n(p["exception"])),
        ),
    }


def test_relational_gold_matches_an_independent_recomputation(
    built: tuple[DemoBuild, SKB, list[dict[str, str]]],
) -> None:
    result, skb, rows = built
    recompute = _recompute(skb)
    assert set(recompute) == {t.name for t in TEMPLATES}
    relational = [r for r in rows if r["kind"] == "relational"]
    assert len({r["template"] for r in relational}) >= (
        6 if result.path.name.startswith("demo-small") else 12
    )
    for row in relational:
        gold = set(json.loads(row["answer_ids"]))
        assert recompute[row["template"]](json.loads(row["params"])) == gold, row["query"]


@pytest.mark.slow
def test_heldout_questions_are_new_right_and_a_split_of_their_own(full: DemoBuild, tmp_path: Path) -> None:
    result = full
    skb = load_skb(result.path, cache=False, progress=False)
    rows = list(csv.DictReader((result.path / "qa.csv").open(encoding="utf-8", newline="")))
    path, counts = write_heldout(result.path, per_template=4, out=tmp_path)
    held = list(csv.DictReader(path.open(encoding="utf-8", newline="")))
    assert held and sum(counts.values()) == len(held) and max(counts.values()) <= 4
    assert not {r["key"] for r in held} & {r["key"] for r in rows}
    assert not {r["query"] for r in held} & {r["query"] for r in rows}
    recompute = _recompute(skb)
    for row in held:
        gold = set(json.loads(row["answer_ids"]))
        assert gold and recompute[row["template"]](json.loads(row["params"])) == gold, row["query"]
        assert leaks_answer(row["query"], json.loads(row["answer_names"])) is None
    items = load_qa(result.path, "heldout", num_nodes=skb.num_nodes, qa_dir=tmp_path)
    assert [i.query for i in items] == [r["query"] for r in held]
    assert len(load_qa(result.path, "test")) == sum(1 for r in rows if int(r["id"]) in set(
        int(x) for x in (result.path / "splits" / "test.index").read_text().split()))  # test untouched


@pytest.mark.slow
def test_heldout_takes_the_next_questions_in_the_builds_order(full: DemoBuild, tmp_path: Path) -> None:
    fewer, _ = write_heldout(full.path, per_template=1, out=tmp_path / "one")
    more, _ = write_heldout(full.path, per_template=3, out=tmp_path / "three")
    keys = lambda f: [r["key"] for r in csv.DictReader(f.open(encoding="utf-8", newline=""))]  # noqa: E731
    assert set(keys(fewer)) < set(keys(more))


def test_heldout_of_the_small_variant_is_empty_and_says_why(small: DemoBuild, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "heldout", str(small.path), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "asks every instance" in result.output
    assert (tmp_path / "qa_heldout.csv").read_text().splitlines() == ["id,query,answer_ids"]


def test_heldout_refuses_an_skb_the_demo_did_not_build(tmp_path: Path) -> None:
    (tmp_path / "schema.json").write_text(json.dumps({"name": "x", "source": {"builder": "someone"}}))
    with pytest.raises(ValueError, match="not a demo SKB"):
        write_heldout(tmp_path, per_template=2)
    result = CliRunner().invoke(app, ["demo", "heldout", str(tmp_path)])
    assert result.exit_code == 1 and "not a demo SKB" in result.output


def test_hybrid_relations_hold_in_the_loaded_graph(
    built: tuple[DemoBuild, SKB, list[dict[str, str]]],
) -> None:
    _, skb, rows = built
    written = {q["key"]: q for q in load_written_questions()}
    hybrid = [r for r in rows if r["kind"] == "hybrid"]
    assert hybrid
    for row in hybrid:
        for path, target in written[row["key"]]["relations"]:
            reached = np.asarray(json.loads(row["answer_ids"]))
            for edge in path:
                assert skb.schema.edge_types[edge].src_type in {skb.type_of(int(i)) for i in reached}
                reached = skb.graph.neighbours(reached, [edge], "out")
            assert int(_ids(skb, target)[0]) in reached.tolist(), (row["key"], path, target)


def test_written_questions_are_well_formed() -> None:
    items = load_written_questions()
    assert len({q["key"] for q in items}) == len(items)
    assert (
        sum(q["kind"] == "textual" for q in items) >= 40 and sum(q["kind"] == "hybrid" for q in items) >= 40
    )
    for q in items:
        assert q["kind"] in ("textual", "hybrid")
        assert bool(q.get("relations")) == (q["kind"] == "hybrid"), q["key"]
        assert set(q["evidence"]) == set(q["answers"]), q["key"]
        for path, _ in q.get("relations", []):
            assert set(path) <= set(EDGE_TYPES), q["key"]


@pytest.mark.slow
def test_written_questions_survive_this_interpreter(full: DemoBuild) -> None:
    total = len(load_written_questions())
    kept = sum(full.qa_counts[k][s] for k in ("textual", "hybrid") for s in ("train", "val", "test"))
    assert kept + len(full.dropped) == total
    assert len(full.dropped) <= total // 10, full.dropped


@pytest.mark.slow
@pytest.mark.skipif(
    sys.version_info[:2] != (3, 11), reason="the evidence was read in CPython 3.11 docstrings"
)
def test_written_questions_all_hold_on_the_python_they_were_written_for(full: DemoBuild) -> None:
    assert full.dropped == []
    assert full.evidence_missing == []


def test_builds_are_byte_identical_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    code = (
        "import sys; from autofocus.demo.build import build_demo_skb; build_demo_skb(sys.argv[1], small=True)"
    )
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "SOURCE_DATE_EPOCH": EPOCH}
        subprocess.run([sys.executable, "-c", code, str(tmp_path / seed)], check=True, env=env, timeout=120)
    for name in FILES:
        assert (tmp_path / "1" / name).read_bytes() == (tmp_path / "2" / name).read_bytes(), name


@pytest.mark.slow
def test_build_in_process_matches_a_fresh_process(full: DemoBuild, tmp_path: Path) -> None:
    """Test runners replace hooks and stdout and import other modules first; the files must not notice."""
    code = "import sys; from autofocus.demo.build import build_demo_skb; build_demo_skb(sys.argv[1])"
    env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH}
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=env, timeout=300)
    for name in FILES:
        assert (tmp_path / name).read_bytes() == (full.path / name).read_bytes(), name


def test_hooks_replaced_at_run_time_are_read_as_the_interpreter_set_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "excepthook", print)
    names = {n["name"]: n for n in collect_stdlib(["sys"]).nodes}
    assert "sys.excepthook" in names and "print" not in names
    assert "exception" in names["sys.excepthook"]["text"].lower()


def test_functions_a_library_replaced_are_read_from_a_pristine_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """dspy and torch replace ``inspect.getfile`` on import; the node must still describe the stdlib's."""

    def getfile(obj: object) -> str:
        return "patched"

    monkeypatch.setattr(inspect, "getfile", getfile)
    graph = collect_stdlib(["builtins", "inspect"])
    node = next(n for n in graph.nodes if n["name"] == "inspect.getfile")
    assert node["text"] == "getfile(object)\nWork out which source or compiled file an object was defined in."
    assert node["source_lines"] > 10 and node["aliases"] == []
    ids = graph.id_of()
    assert (node["id"], "function_raises_exception", ids["TypeError"]) in graph.edges
    assert inspect.getfile is getfile  # the host's replacement is left in place


def test_the_interpreter_path_is_not_written_into_signatures() -> None:
    node = next(n for n in collect_stdlib(["platform"]).nodes if n["name"] == "platform.architecture")
    assert node["signature"].startswith("(executable=sys.executable,") and sys.executable not in node["text"]


def test_in_scope_decides_which_written_questions_a_variant_asks() -> None:
    assert in_scope("os.path.join", SMALL_MODULES)
    assert in_scope("ValueError", SMALL_MODULES) and in_scope("str.join", SMALL_MODULES)
    assert not in_scope("random.randint", SMALL_MODULES)
    assert not in_scope("gzip", SMALL_MODULES)  # a module name, not a built-in
    assert not in_scope("len", ["json"])


def test_clean_doc_keeps_leading_paragraphs_and_drops_markup() -> None:
    doc = """Summary line with :mod:`json` and ``code``.

    Second paragraph, object at 0x7f3a2b1c0d90 here.

    Example::

        >>> x = 1
    """
    assert clean_doc(doc) == "Summary line with json and code.\nSecond paragraph, object here."
    assert clean_doc(None) == "" and clean_doc("   ") == ""
    long = clean_doc("word " * 200, limit=50)
    assert len(long) <= 52 and long.endswith("…")


def test_cli_builds_the_small_variant(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "build", str(tmp_path / "skb"), "--small"])
    assert result.exit_code == 0, result.output
    assert "method_defined_in_class" in result.output and "relational" in result.output
    assert load_skb_dir(tmp_path / "skb", progress=False).num_nodes > 300


def test_collection_ignores_what_other_libraries_attach_to_the_standard_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Imports and test runners change the stdlib at run time (``transformers`` adds methods to
    ``logging.Logger``, pytest sets ``sys.last_type``); the demo must come out as a fresh process builds it."""
    import functools
    import json as json_module
    import logging
    import platform

    modules = ("json", "logging", "platform", "sys")
    clean = collect_stdlib(modules)

    def warning_once(self: Any, msg: str) -> None:
        """A method some library adds."""

    def decode(self: Any, s: str) -> Any:
        """A replacement some library installs."""

    monkeypatch.setattr(logging.Logger, "warning_once", warning_once, raising=False)
    monkeypatch.setattr(logging.Logger, "info_once", functools.lru_cache(None)(warning_once), raising=False)
    monkeypatch.setattr(json_module.JSONDecoder, "extra", warning_once, raising=False)
    monkeypatch.setattr(json_module.JSONDecoder, "decode", decode)
    monkeypatch.setattr(platform, "added_function", decode, raising=False)  # a module without __all__
    monkeypatch.setattr(sys, "last_type", ValueError, raising=False)
    assert collect_stdlib(modules) == clean
