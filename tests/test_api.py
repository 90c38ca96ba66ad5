"""The public Python API: ``autofocus.open`` and what DSPy's conventions promise of its programs (copies,
save/load, async), ``autofocus.evaluate``, and the layout rules behind them (one assembly place, no
import cycles, commands without orchestration)."""

from __future__ import annotations

import ast
import asyncio
import copy
import importlib
import json
import re
from pathlib import Path
from typing import Any

import dspy
import pytest

import autofocus
from autofocus import runtime
from autofocus.kb import KnowledgeBase
from autofocus.program.systems.afr import AutofocusRetriever
from autofocus.program.systems.base import RetrievalProgram
from autofocus.skb.model import SKB
from scripts.import_layers import cycles, module_imports, package_graph, upward
from tests.test_systems_common import ScriptedLM, field_value, make_kb

SRC = Path(autofocus.__file__).parent
CYPHER = {
    "Which papers cite Graph Retrieval at Scale?":
        "MATCH (p:paper)-[:paper_cites_paper]->(g:paper {title: 'Graph Retrieval at Scale'}) RETURN p",
}  # fmt: skip


def question_of(user: str) -> str:
    return field_value(user, "question").split("\n\nRespond with")[0].strip()


def scripted_lm() -> ScriptedLM:
    return ScriptedLM({"cypher": lambda u: {"cypher": CYPHER.get(question_of(u), "MATCH (p:paper) RETURN p")}})


@pytest.fixture(scope="module")
def kb(tiny_skb: SKB, tiny_skb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    return make_kb(tiny_skb, tmp_path_factory.mktemp("kb"), source=tiny_skb_dir)


@pytest.fixture
def no_lm(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every LM built by name, and fails the test if one is used (no network, no local server)."""
    built: list[str] = []

    def get_lm(spec: str, **_: Any) -> Any:
        built.append(spec)
        return ScriptedLM({})  # answers nothing: a call would fail the test

    monkeypatch.setattr("autofocus.lm.get_lm", get_lm)
    return built


def test_open_vss_by_path_ranks_without_any_lm(
    kb: KnowledgeBase, tiny_skb_dir: Path, monkeypatch: pytest.MonkeyPatch, no_lm: list[str]
) -> None:
    opened: list[tuple[Any, ...]] = []
    monkeypatch.setattr(runtime, "open_kb", lambda *args: opened.append(args) or kb)
    program = autofocus.open(tiny_skb_dir, "vss", config={"k": 3})
    pred = program(question="Which papers cite Graph Retrieval at Scale?")
    assert isinstance(program, dspy.Module) and isinstance(program, RetrievalProgram)
    assert len(pred.ranked_ids) == 3 and isinstance(pred.trace, autofocus.Trace)
    assert program.kb is kb and all(program.kb.skb.type_of(i) == "paper" for i in pred.ranked_ids)
    assert program.kb.skb.name(pred.ranked_ids[0]) and program.config.merge.k == 3
    assert opened == [(tiny_skb_dir, "local:all-MiniLM-L6-v2", "flat", None)] and no_lm == []


def test_afr_attaches_named_lms_on_the_first_call_only(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    """``lm="local"`` (the default) must not start the offline LM server when the program is opened."""
    built: list[str] = []
    lm = scripted_lm()
    monkeypatch.setattr("autofocus.lm.get_lm", lambda spec, **_: built.append(spec) or lm)
    program = autofocus.open(kb, "afr", config={"reranker": "none", "k": 4})
    assert built == [] and isinstance(program, AutofocusRetriever)
    assert program.config.runtime.lm.default == "local" and program.cypher.lm is None
    pred = program(question="Which papers cite Graph Retrieval at Scale?")
    assert built and set(built) == {"local"} and program.cypher.lm is lm
    assert {1, 2, 11} <= set(pred.ranked_ids) and pred.trace.data["cypher"].startswith("MATCH (p:paper)")
    calls = len(built)
    program(question="Which papers cite Graph Retrieval at Scale?")
    assert len(built) == calls  # attached once


def test_an_lm_object_answers_every_step_sync_and_async(kb: KnowledgeBase, no_lm: list[str]) -> None:
    lm = scripted_lm()
    program = autofocus.open(kb, "afr", lm=lm, config={"reranker": "none", "k": 4})
    assert program.cypher.lm is lm and program.config.runtime.lm.default == lm.model
    question = "Which papers cite Graph Retrieval at Scale?"
    sync = program(question=question)

    async def both() -> list[dspy.Prediction]:
        return await asyncio.gather(program.acall(question=question), program.acall(question="Which papers?"))

    first, other = asyncio.run(both())
    assert first.ranked_ids == sync.ranked_ids and first.trace.data["cypher"] == sync.trace.data["cypher"]
    assert len(other.ranked_ids) == 4 and lm.fields() == ["cypher"] * 3 and no_lm == []


def test_copies_share_the_knowledge_base_and_lms_not_the_prompts(kb: KnowledgeBase) -> None:
    lm = scripted_lm()
    program = autofocus.open(kb, "afr", lm=lm, config={"reranker": "none"})
    for twin in (program.deepcopy(), copy.deepcopy(program)):
        assert type(twin) is AutofocusRetriever and twin.kb is kb and twin.cypher.lm is lm
        assert twin.cypher is not program.cypher and twin.config == program.config
        twin.cypher.demos = [dspy.Example(question="q", cypher="MATCH (p:paper) RETURN p")]
        assert program.cypher.demos == []
    blank = program.reset_copy()  # DSPy's reset: no demos, no LM
    assert blank.kb is kb and blank.cypher.lm is None and program.cypher.lm is lm
    assert copy.deepcopy(kb) is kb


def test_save_then_open_or_load_brings_the_prompts_back(kb: KnowledgeBase, tmp_path: Path) -> None:
    lm = scripted_lm()
    program = autofocus.open(kb, "afr:k=5", lm=lm, config={"reranker": "none"})
    program.cypher.demos = [dspy.Example(question="DEMO question", cypher="MATCH (p:paper) RETURN p")]
    program.cypher.signature = program.cypher.signature.with_instructions("Write careful Cypher.")
    path = tmp_path / "afr.json"
    program.save(path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "autofocus-program/1" and doc["system"] == "afr:k=5" and doc["config"]["merge"]["k"] == 5

    reopened = autofocus.open(kb, program=path, lm=lm)
    assert reopened.system == "afr:k=5" and reopened.config.merge.k == 5 and reopened.program_file == path
    assert len(reopened.cypher.demos) == 1 and reopened.cypher.signature.instructions == "Write careful Cypher."
    assert reopened.cypher.lm is lm  # the LM as opened, not a saved one

    fresh = autofocus.open(kb, "afr", lm=lm, config={"reranker": "none"})
    assert fresh.load(path) is fresh and len(fresh.cypher.demos) == 1 and fresh.config.merge.k == 20
    with dspy.context(lm=lm):
        pred = fresh(question="Which papers cite Graph Retrieval at Scale?")
    assert "DEMO question" in json.dumps(lm.calls[-1][2])
    assert pred.ranked_ids

    plain = autofocus.open(kb, "afr", config={"reranker": "none"})  # no LM attached yet
    plain.cypher.demos = program.cypher.demos
    dspy_state = tmp_path / "dspy_state.json"
    dspy.Module.save(plain, dspy_state)  # DSPy's own state format still loads
    other = autofocus.open(kb, "afr", config={"reranker": "none"})
    other.load(dspy_state)
    assert len(other.cypher.demos) == 1 and other.program_file is None


def test_evaluate_is_the_resumable_runner_and_autofocus_evaluate_stays_a_function(
    kb: KnowledgeBase, tmp_path: Path, no_lm: list[str]
) -> None:
    program = autofocus.open(kb, "vss", config={"k": 4, "concurrency": 2})
    out = tmp_path / "vss-train"
    done = autofocus.evaluate(program, split="train", out=out)
    assert done.result.finished == 3 and not done.interrupted and done.summary["n"] == 3
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["system"] == "vss" and manifest["split"] == "train" and manifest["skb"]["path"] == str(kb.source)
    for name in ("traces.jsonl", "summary.json", "summary.md"):
        assert (out / name).is_file()

    importlib.import_module("autofocus.evaluation.runner")  # the package has its own name: nothing rebinds the function
    assert autofocus.evaluate is autofocus.api.evaluate
    again = autofocus.evaluate(program, split="train", out=out)
    assert again.result.skipped == 3 and again.result.finished == 0
    assert again.summary["metrics"] == done.summary["metrics"]
    from autofocus.evaluation import RunMismatchError

    with pytest.raises(RunMismatchError, match=r"config\.k"):
        autofocus.evaluate(autofocus.open(kb, "vss", config={"k": 2}), split="train", out=out)


def test_evaluate_names_a_bad_split_and_reads_whole_file_splits_of_a_qa_dir(kb: KnowledgeBase, tmp_path: Path) -> None:
    from autofocus.evaluation.program_runs import SplitError

    with pytest.raises(SplitError, match="nope"):
        autofocus.evaluate(autofocus.open(kb, "bm25"), split="nope", out=tmp_path / "x")
    (tmp_path / "qa").mkdir()
    (tmp_path / "qa" / "qa_extra.csv").write_text("id,query,answer_ids\n0,Which papers cite Graph Retrieval at Scale?,[1]\n")
    done = autofocus.evaluate(autofocus.open(kb, "bm25"), split="extra", out=tmp_path / "y", qa_dir=tmp_path / "qa")
    assert done.summary["n"] == 1 and [r["query"] for r in done.run.records] == ["Which papers cite Graph Retrieval at Scale?"]


def test_every_entry_point_refuses_a_gold_answer_that_is_no_node(tiny_skb_dir: Path, tmp_path: Path) -> None:
    """It would score 0 silently: compare, tune and optimize_prompts check it too, before any LM call."""
    import shutil

    from autofocus.evaluation.program_runs import SplitError
    from autofocus.skb.io import load_skb

    skb = tmp_path / "skb"
    shutil.copytree(tiny_skb_dir, skb)
    load_skb(skb, progress=False)  # cached: QA files are not part of the cache, so it stays valid
    (skb / "qa.csv").write_text((tiny_skb_dir / "qa.csv").read_text().replace("[1, 2, 11]", "[1, 2, 999]"))
    message = r"qa\.csv:3: question 1: answer id 999 is not a node id"
    with pytest.raises(SplitError, match=message):
        autofocus.compare(skb, ["vss", "bm25"], split="train", out=tmp_path / "cmp")
    with pytest.raises(SplitError, match=message):
        autofocus.tune(skb, split="train", trials=1, out=tmp_path / "tune")
    with pytest.raises(SplitError, match=message):
        autofocus.optimize_prompts(skb, train="train", val="val")


def test_systems_and_exports() -> None:
    assert {"afr", "vss", "bm25", "hybgrag"} <= set(autofocus.systems())
    for name in autofocus.__all__:
        assert getattr(autofocus, name) is not None, name
    assert autofocus.KnowledgeBase is KnowledgeBase and autofocus.RetrievalProgram is RetrievalProgram


# --- the layout --------------------------------------------------------------------------------------------


def test_no_import_cycles_even_through_function_level_imports() -> None:
    graph = module_imports()
    assert "autofocus.index.store" in graph["autofocus.kb"]  # the graph is read
    assert cycles(graph) == []


# the offline LM's server layer still starts the command layer's resident worker
KNOWN_UPWARD = {("autofocus.local_lm.served", "autofocus.resident")}


def test_layers_point_down_and_packages_import_no_cycle() -> None:
    graph = module_imports()
    assert set(upward(graph)) <= KNOWN_UPWARD
    for importer, imported in KNOWN_UPWARD:
        graph[importer].discard(imported)
    assert cycles(package_graph(graph)) == []
    assert upward({"autofocus.skb.io": {"autofocus.cypher.render"}}) == [("autofocus.skb.io", "autofocus.cypher.render")]


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_one_place_assembles_programs_and_commands_only_handle_arguments() -> None:
    builders = sorted(
        str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
        if re.search(r"\bbuild_program\(", p.read_text()) and p.name != "registry.py"
    )  # fmt: skip
    assert builders == ["runtime.py"]
    autofocus.systems()  # imports every built-in system
    classes, todo = set(), [RetrievalProgram]
    while todo:
        for sub in todo.pop().__subclasses__():
            classes.add(sub.__name__)
            todo.append(sub)
    assert {"AutofocusRetriever", "VSSRetriever", "HybGRAG"} <= classes
    constructed = sorted(
        f"{p.relative_to(SRC)}: {node.func.id}" for p in SRC.rglob("*.py") if p.name != "registry.py"
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in classes
    )  # fmt: skip
    assert constructed == []  # a system is built by the registry, for runtime.assemble
    graph = module_imports()
    for name, imported in graph.items():
        if name.startswith("autofocus.commands."):
            reached = {m for m in imported if m.startswith(("autofocus.program", "autofocus.evaluation.runner"))}
            assert reached <= {"autofocus.evaluation.runner"}, (name, reached)  # RunMismatchError only
            assert not any(m.startswith("autofocus.commands.") for m in imported), name
    assert len((SRC / "commands" / "tune.py").read_text().splitlines()) < 200
