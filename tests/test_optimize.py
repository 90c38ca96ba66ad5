"""``autofocus optimize``: prompt optimisation of chosen LLM steps on the tiny SKB with scripted LMs.

The scripted Cypher LM writes a grounding query only where the prompt helps it (demos in the
conversation, or an instruction naming the entity), so an optimiser that improves the prompt
improves the grounded strand, and a saved program that loads its prompt gets the same answers.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine
from dspy.lm15 import Message, Response, TextPart, Usage
from dspy.utils.dummies import DummyLM
from typer.testing import CliRunner

from autofocus.config import AutofocusConfig
from autofocus.kb import KnowledgeBase
from autofocus.optimize.feedback import explain, feedback_metric
from autofocus.optimize.prompts import examples, llm_steps, optimise, step_problems
from autofocus.optimize.scoring import default_metric, grounded_strand, objective, question_scores
from autofocus.options import PromptOptOptions
from autofocus.program.saved import (
    ProgramFileError,
    load_program_state,
    program_state,
    read_program_config,
    save_program,
)
from autofocus.program.systems.registry import PAPER, build_program
from autofocus.skb.model import SKB
from autofocus.skb.qa import load_qa
from autofocus.skb.skbdir import load_skb_dir
from autofocus.skb.writer import write_skb_dir
from autofocus.trace import Trace
from autofocus.usage import install_usage_callback
from tests.conftest import TINY_QA
from tests.test_systems_common import field_value, make_kb, scripted_config

Messages = list[dict[str, Any]]

# a query that grounds each question's gold answers in the tiny SKB (conftest.TINY_QA)
GOOD = {
    "Ada Lovelace": "MATCH (a:author {name: 'Ada Lovelace'})-[:author_writes_paper]->(p:paper) RETURN p.title",
    "cite Graph": "MATCH (p:paper)-[:paper_cites_paper]->(q:paper {name: 'Graph Retrieval at Scale'}) RETURN p",
    "Natural Language": "MATCH (p:paper)-[:paper_cites_paper]->(q:paper {name: 'Cypher Queries from Text'}) RETURN p",
    "Grace Hopper": "MATCH (a:author {name: 'Grace Hopper'})-[:author_writes_paper]->(p:paper) RETURN p.title",
    "extends": "MATCH (p:paper)-[:paper_extends_paper]->(q:paper {name: 'Cypher Queries from Text'}) RETURN p",
    "ACL": "MATCH (p:paper)-[:paper_published_in_venue]->(v:venue {name: 'ACL'}) RETURN p.title",
}
BAD = "MATCH (p:paper) RETURN p.title"  # no triplet: nothing to ground
EASY = ("Ada Lovelace", "cite Graph")  # written well zero-shot (train questions 0 and 1)
MAGIC = "Name the entity the question mentions."


class _Engine(DummyEngine):
    def _complete_messages(self, messages: Messages) -> Response:
        owner: PromptLM = self.owner
        outputs = messages[0]["content"].split("Your output fields are:")[1].split("All interactions")[0]
        field = next((f for f in owner.handlers if f"`{f}`" in outputs), None)
        if field is None:
            raise AssertionError(f"no scripted answer for outputs: {outputs.strip()}")
        answer = owner.handlers[field](messages)
        with owner.lock:
            owner.calls.append((field, messages))
        return Response(id=None, model="scripted", message=Message.assistant([TextPart(owner._format_answer_fields(answer))]),
                        finish_reason="stop", usage=Usage(input_tokens=0, output_tokens=0, total_tokens=0))


class PromptLM(DummyLM):
    """Answers by the signature asked: ``handlers[first output field](all messages)``."""

    def __init__(self, handlers: dict[str, Callable[[Messages], dict[str, Any]]], adapter: Any = None) -> None:
        super().__init__([], adapter=adapter)
        self.handlers = handlers
        self.calls: list[tuple[str, Messages]] = []
        self.lock = threading.Lock()
        self._engine_spec = _Engine(self)
        self._async_engine_spec = AsyncDummyEngine(self._engine_spec)

    def copy(self, **kwargs: Any) -> PromptLM:
        return self  # optimisers copy LMs to vary sampling; a script answers the same

    def prompts(self, field: str) -> list[Messages]:
        return [m for f, m in self.calls if f == field]


def has_demos(messages: Messages) -> bool:
    return len(messages) > 2  # system, (user, assistant) per demo, user


def cypher_answer(helped: Callable[[Messages], bool]) -> Callable[[Messages], dict[str, str]]:
    def answer(messages: Messages) -> dict[str, str]:
        question = field_value(messages[-1]["content"], "question")
        key = next((k for k in GOOD if k in question), None)
        ok = key is not None and (key in EASY or helped(messages))
        return {"cypher": GOOD[key] if ok else BAD}

    return answer


def task_lm(helped: Callable[[Messages], bool] = has_demos) -> PromptLM:
    return PromptLM({"cypher": cypher_answer(helped), "target_type": lambda m: {"target_type": "paper"}})


@pytest.fixture(scope="module")
def kb(tiny_skb: SKB, tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    return make_kb(tiny_skb, tmp_path_factory.mktemp("kb"))


@pytest.fixture
def two_type_kb(tiny_skb_data: dict[str, Any], tmp_path: Path) -> KnowledgeBase:
    """The tiny SKB with papers and authors as candidates, so step 1 asks the LLM."""
    d = tiny_skb_data
    d["schema"]["candidate_types"] = ["paper", "author"]
    write_skb_dir(tmp_path / "skb", d["schema"], d["nodes"], d["edges"], d["qa"], d["splits"])
    return make_kb(load_skb_dir(tmp_path / "skb", progress=False), tmp_path / "kb")


def splits(skb_dir: Path) -> tuple[list[dspy.Example], list[dspy.Example], list[dspy.Example]]:
    return tuple(examples(load_qa(skb_dir, s)) for s in ("train", "val", "test"))  # type: ignore[return-value]


def config(**overrides: Any) -> AutofocusConfig:
    """The paper's strand (``afr-paper``): the tiny SKB's questions are written so that its zero-shot
    queries leave something for the optimisers to win."""
    return scripted_config(**{"k": 4, **PAPER, **overrides})


# --- bootstrap ------------------------------------------------------------------------------------


def test_bootstrap_demos_are_saved_loaded_and_used(kb: KnowledgeBase, tiny_skb_dir: Path, tmp_path: Path) -> None:
    train, val, test = splits(tiny_skb_dir)
    install_usage_callback()
    lm = task_lm()
    with dspy.context(lm=lm):
        result = optimise(kb, config(), train, val, PromptOptOptions(system="afr", optimizer="bootstrap", steps=["cypher"]), with_lms=False)
        held_out = result.compare(test, "test")
    # the two training questions the zero-shot LM gets right become demos; the third has none to give
    demos = result.program.cypher.demos
    assert [d["question"] for d in demos] == [ex.question for ex in train[:2]]
    assert all(d["cypher"] == GOOD[k] for d, k in zip(demos, EASY, strict=True))
    assert all("kb_description" not in d and "node_labels" not in d and d["target_type"] for d in demos)
    assert result.metric == "grounded_recall@20" and result.metadata["demos"] == {"cypher": 2}
    v = {k: s.mean() for k, s in result.val.items()}
    assert (v["zero_shot"]["grounded_recall@20"], v["optimised"]["grounded_recall@20"]) == (0.0, 1.0)
    t = {k: s.mean() for k, s in held_out.items()}
    assert (t["zero_shot"]["grounded_hit@20"], t["optimised"]["grounded_hit@20"]) == (0.0, 1.0)
    assert held_out["optimised"].n == 2 and result.metadata["test"]["optimised"]["questions"] == 2
    assert result.metadata["program_lm_calls"] == 3  # one Cypher call per training question
    # the reranker is not optimised and the objective ignores it: it never ran
    assert not lm.prompts("ranking")

    path = save_program(result.program, result.system, result.config, tmp_path / "cypher.json", result.metadata)
    doc = json.loads(path.read_text())
    assert doc["system"] == "afr" and doc["config"]["merge"]["k"] == 4 and doc["optimizer"]["optimizer"] == "bootstrap"
    assert [d["question"] for d in doc["state"]["cypher"]["demos"]] == [ex.question for ex in train[:2]]
    assert all(s["lm"] is None for s in doc["state"].values())
    # the steps not chosen are saved exactly as a freshly built program has them
    fresh = program_state(build_program("afr", kb, result.config, with_lms=False))
    assert set(fresh) == {"cypher", "query_graph", "reranker.rank"}
    assert all(doc["state"][n] == fresh[n] for n in fresh if n != "cypher")

    system, cfg = read_program_config(path)
    loaded = load_program_state(build_program(system, kb, cfg.updated({"reranker": "none"}),
                                              with_lms=False), path)
    lm2 = task_lm()
    with dspy.context(lm=lm2):
        pred = loaded(question=val[0].question)
    sent = lm2.prompts("cypher")[0]
    assert has_demos(sent) and "Ada Lovelace" in sent[1]["content"]
    assert grounded_strand(pred)[0] == 3  # the demos' Cypher grounds the gold answer first
    assert pred.trace.data["cypher"] == GOOD["Grace Hopper"]


def test_step1_scored_by_probabilities_is_bootstrapped(two_type_kb: KnowledgeBase, tiny_skb_dir: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 1 scored by the LM's probabilities makes no predictor call, yet its answers become demos."""
    from autofocus.program.systems import afr

    monkeypatch.setattr(afr, "choice_probabilities", lambda lm, messages, choices, **kw: [
        0.9 if c == "paper" else 0.1 for c in choices])
    train, val, _ = splits(tiny_skb_dir)
    with dspy.context(lm=task_lm()):
        result = optimise(two_type_kb, config(target_type_scoring="auto"), train, val, PromptOptOptions(system="afr", optimizer="bootstrap", steps=["target_type"]), with_lms=False)
    demos = result.program.target_type.demos
    # the questions whose run grounds a gold answer (the third one's query grounds nothing zero-shot)
    assert [d["question"] for d in demos] == [ex.question for ex in train[:2]]
    assert all(d["target_type"] == "paper" for d in demos)


def test_a_bootstrapped_demo_is_a_trace_with_full_marks(kb: KnowledgeBase, tiny_skb_dir: Path) -> None:
    """A query that grounds the answer among others scores a graded metric above 0; it is no demo."""
    train, val, _ = splits(tiny_skb_dir)
    loose = GOOD["ACL"]  # the ACL papers: some of Ada Lovelace's among others

    def answer(messages: Messages) -> dict[str, str]:
        question = field_value(messages[-1]["content"], "question")
        key = next((k for k in GOOD if k in question), None)
        return {"cypher": loose if key == "Ada Lovelace" else GOOD[key] if key else BAD}

    lm = PromptLM({"cypher": answer, "target_type": lambda m: {"target_type": "paper"}})
    with dspy.context(lm=lm):
        result = optimise(kb, config(), train, val, PromptOptOptions(system="afr", optimizer="bootstrap", steps=["cypher"], metric="grounded_f1"), with_lms=False)
        first = kb_program_scores(kb, train[0], lm)
    assert 0.0 < first < 1.0  # partly right: what DSPy alone would keep as a demo
    assert [d["question"] for d in result.program.cypher.demos] == [train[1].question]


def kb_program_scores(kb: KnowledgeBase, example: dspy.Example, lm: PromptLM) -> float:
    program = build_program("afr", kb, config(reranker="none"), with_lms=False)
    with dspy.context(lm=lm):
        return objective("grounded_f1")(example, program(question=example.question))


@pytest.mark.parametrize(("chosen", "frozen"), [("cypher", "target_type"), ("target_type", "cypher")])
def test_only_the_chosen_step_gets_demos(chosen: str, frozen: str, two_type_kb: KnowledgeBase,
                                         tiny_skb_dir: Path) -> None:
    """Both steps run on every training question; bootstrapping would give both demos if it saw both."""
    train, val, _ = splits(tiny_skb_dir)
    install_usage_callback()
    fresh = program_state(build_program("afr", two_type_kb, config(), with_lms=False))
    with dspy.context(lm=task_lm()):
        result = optimise(two_type_kb, config(), train, val, PromptOptOptions(system="afr", steps=[chosen]), with_lms=False)
    state = program_state(result.program)
    assert len(state[chosen]["demos"]) == 2 and result.metadata["predictors"] == [chosen]
    assert state[frozen] == fresh[frozen] and not state[frozen]["demos"]


def test_hybgrag_router_is_optimised_over_the_examples_the_system_collects(
    tiny_skb: SKB, tiny_skb_dir: Path, tmp_path: Path
) -> None:
    """HybGRAG collects critic examples from the training split on first use: they stay in the
    steps not chosen, and the router's bootstrapped demos are not overwritten by the collection."""
    kb = make_kb(tiny_skb, tmp_path / "kb", source=tiny_skb_dir)  # its QA splits: where HybGRAG collects from

    def router(messages: Messages) -> dict[str, Any]:
        question = field_value(messages[-1]["content"], "question")
        name = next((n for n in ("Ada Lovelace", "Grace Hopper") if n in question), None)
        entities = [{"name": name, "type": "author"}] if name else []
        return {"topic_entities": entities, "useful_relations": ["author_writes_paper"],
                "source": "knowledge graph" if name else "text documents"}

    lm = PromptLM({"topic_entities": router, "aligned": lambda m: {"aligned": True},
                   "error_type": lambda m: {"error_type": "missing entity", "wrong_item": ""}})
    train, val, _ = splits(tiny_skb_dir)
    install_usage_callback()
    with dspy.context(lm=lm):
        result = optimise(kb, config(), train, val, PromptOptOptions(system="hybgrag", steps=["router"]), with_lms=False)
    assert result.metric == "mrr"
    state = program_state(result.program)
    assert state["validator"]["demos"], "the system's own examples were not collected"
    assert state["router"]["demos"] and all(d.get("augmented") for d in state["router"]["demos"])
    collected = build_program("hybgrag", kb, result.config, with_lms=False)
    with dspy.context(lm=lm):
        collected.ensure_examples(Trace())
    fresh = program_state(collected)
    assert state["validator"] == fresh["validator"] and state["commenter"] == fresh["commenter"]
    assert state["router"] != fresh["router"]


def test_a_listwise_reranker_learns_from_demos(kb: KnowledgeBase, tiny_skb_dir: Path) -> None:
    """Step 8 of a baseline: the final ranking (MRR) is the objective, the reranker runs."""
    gold = {q["query"]: q["answer_ids"] for q in TINY_QA}

    def rank(messages: Messages) -> dict[str, list[int]]:
        user = messages[-1]["content"]
        ids = sorted((int(i) for i in re.findall(r"^\[(\d+)\]", field_value(user, "candidates"), re.M)),
                     reverse=True)
        first = [i for i in ids if i in gold[field_value(user, "question")]] if has_demos(messages) else []
        return {"ranking": first + [i for i in ids if i not in first]}

    train, val, _ = splits(tiny_skb_dir)
    install_usage_callback()
    lm = PromptLM({"ranking": rank})
    with dspy.context(lm=lm):
        options = PromptOptOptions(system="vss-rerank:reranker=listwise", steps=["reranker"], max_demos=1)
        result = optimise(kb, config(k=5), train, val, options, with_lms=False)
    assert result.metric == "mrr" and result.predictors == ["reranker.rank"]
    assert result.metadata["demos"] == {"reranker.rank": 1}
    v = {k: s.mean() for k, s in result.val.items()}
    assert (v["zero_shot"]["mrr"], v["optimised"]["mrr"]) == (0.5, 1.0)  # [11, 3, ...] zero-shot, then 3 first


def test_a_step_that_changes_nothing_fails_clearly(kb: KnowledgeBase, tiny_skb_dir: Path) -> None:
    train, val, _ = splits(tiny_skb_dir)
    with dspy.context(lm=task_lm()), pytest.raises(ValueError, match="target_type: the SKB has one candidate type"):
        optimise(kb, config(), train, val, PromptOptOptions(system="afr", steps=["target_type"]), with_lms=False)
    with dspy.context(lm=task_lm()), pytest.raises(ValueError, match="no such LLM step"):
        optimise(kb, config(), train, val, PromptOptOptions(system="afr", steps=["router"]), with_lms=False)
    with pytest.raises(ValueError, match="unknown optimizer"):
        optimise(kb, config(), train, val, PromptOptOptions(system="afr", optimizer="sgd"), with_lms=False)


def test_step_problems_name_what_no_prompt_can_change(kb: KnowledgeBase) -> None:
    local_pointwise = AutofocusConfig(reranker="pointwise")  # lm "local": P(yes) scoring
    afr = build_program("afr", kb, local_pointwise, with_lms=False)
    assert "P(yes)" in step_problems(afr, local_pointwise, ["reranker"])[0]
    assert not step_problems(afr, local_pointwise, ["reranker"], "gold")  # yes/no demos reach the scorer
    typed = config(query_format="typed")
    assert "uses the query_graph step" in step_problems(build_program("afr", kb, typed, with_lms=False), typed,
                                                        ["cypher"])[0]
    ablation = config(steps="1-7")
    assert "never reaches step 8" in step_problems(build_program("afr", kb, ablation, with_lms=False), ablation,
                                                   ["reranker"])[0]
    steps = {spec: set(llm_steps(build_program(spec, kb, config(), with_lms=False)))
             for spec in ("afr", "4stepfocus", "focusedretriever", "hybgrag", "vss-rerank")}
    assert steps == {
        "afr": {"cypher", "query_graph", "reranker"},
        "4stepfocus": {"triplets", "reranker"},
        "focusedretriever": {"cypher", "reranker"},
        "hybgrag": {"router", "validator", "commenter"},
        "vss-rerank": {"reranker"},
    }


# --- GEPA -----------------------------------------------------------------------------------------


def reflection_lm() -> PromptLM:
    """Proposes an instruction that names the entity (what the scripted Cypher LM needs)."""
    def propose(messages: Messages) -> dict[str, str]:
        return {"new_instruction": f"Write one Cypher query. {MAGIC}"}

    return PromptLM({"new_instruction": propose}, adapter=dspy.JSONAdapter())


def test_gepa_rewrites_the_instruction_from_feedback_and_leaves_step_1_alone(
    two_type_kb: KnowledgeBase, tiny_skb_dir: Path, tmp_path: Path
) -> None:
    train, val, _ = splits(tiny_skb_dir)
    install_usage_callback()
    lm = task_lm(helped=lambda messages: MAGIC in messages[0]["content"])
    reflect = reflection_lm()
    before = program_state(build_program("afr", two_type_kb, config(), with_lms=False))
    with dspy.context(lm=lm):
        result = optimise(two_type_kb, config(), train, val, PromptOptOptions(system="afr", optimizer="gepa", steps=["cypher"], budget=12, reflection_lm=reflect, threads=1), with_lms=False)
    assert reflect.prompts("new_instruction"), "GEPA never asked the reflection LM"
    sent = "\n".join(p[-1]["content"] for p in reflect.prompts("new_instruction"))
    assert "The query has no usable relationship pattern" in sent  # autofocus's feedback reached it
    after = program_state(result.program)
    assert MAGIC in after["cypher"]["signature"]["instructions"]
    assert result.metadata["instructions_changed"] == ["cypher"] and result.metadata["reflection_lm_calls"] >= 1
    assert after["target_type"] == before["target_type"] and lm.prompts("target_type")  # called, never changed
    v = {k: s.mean()["grounded_recall@20"] for k, s in result.val.items()}
    assert v == {"zero_shot": 0.0, "optimised": 1.0}
    path = save_program(result.program, "afr", result.config, tmp_path / "gepa.json", result.metadata)
    loaded = load_program_state(build_program("afr", two_type_kb, config(), with_lms=False), path)
    assert MAGIC in loaded.cypher.signature.instructions


# --- random search and MIPROv2 --------------------------------------------------------------------


def proposer_lm() -> PromptLM:
    """MIPROv2's prompt model: describes data and program, proposes the instruction that helps."""
    def answer(field: str) -> Callable[[Messages], dict[str, str]]:
        return lambda messages: {field: MAGIC if field == "proposed_instruction" else "A description."}

    fields = ("observations", "summary", "program_description", "module_description", "proposed_instruction")
    return PromptLM({f: answer(f) for f in fields})


@pytest.mark.parametrize("optimizer", ["bootstrap-rs", "mipro"])
def test_random_search_and_mipro_select_a_prompt_that_helps(
    optimizer: str, kb: KnowledgeBase, tiny_skb_dir: Path
) -> None:
    train, val, _ = splits(tiny_skb_dir)
    install_usage_callback()
    by_magic = optimizer == "mipro"  # MIPROv2 can win by its instruction, random search only by demos
    lm = task_lm(helped=(lambda m: MAGIC in m[0]["content"]) if by_magic else has_demos)
    proposer = proposer_lm()
    with dspy.context(lm=lm):
        result = optimise(kb, config(), train, val, PromptOptOptions(system="afr", optimizer=optimizer, steps=["cypher"], trials=4, max_demos=1, reflection_lm=proposer, threads=1), with_lms=False)
    v = {k: s.mean()["grounded_recall@20"] for k, s in result.val.items()}
    assert v == {"zero_shot": 0.0, "optimised": 1.0}
    if by_magic:
        assert result.metadata["instructions_changed"] == ["cypher"] and proposer.prompts("proposed_instruction")
    else:
        assert result.metadata["demos"] == {"cypher": 1} and not proposer.calls
    fresh = program_state(build_program("afr", kb, result.config, with_lms=False))
    saved = program_state(result.program)
    assert saved["query_graph"] == fresh["query_graph"] and saved["reranker.rank"] == fresh["reranker.rank"]


# --- scores and feedback --------------------------------------------------------------------------


def prediction(ranked: list[int], **data: Any) -> dspy.Prediction:
    flags = data.pop("flags", {})
    events = data.pop("events", [])
    trace = Trace(data=data, flags=flags)
    for step, kind, detail in events:
        trace.event(step, kind, detail)
    return dspy.Prediction(ranked_ids=ranked, trace=trace)


def test_scores_of_the_grounded_strand_and_the_final_ranking() -> None:
    pred = prediction([2, 3, 0, 1], pre_rerank=[0, 1, 2, 3],
                      strand={"0": "grounded", "1": "both", "2": "vss", "3": "vss"})
    assert grounded_strand(pred) == [0, 1]
    s = question_scores([1, 2], pred)
    assert (s["hit@1"], s["mrr"], s["grounded_hit@20"], s["grounded_recall@20"]) == (1.0, 1.0, 1.0, 0.5)
    assert question_scores([3], pred)["grounded_recall@20"] == 0.0
    assert objective("grounded_recall@20")(dspy.Example(answer_ids=[0, 1]), pred) == 1.0
    assert objective("MRR")(dspy.Example(answer_ids=[0]), pred, None, "cypher", None) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="unknown metric"):
        objective("precision@3")
    assert default_metric("afr", ["cypher"]) == "grounded_recall@20"
    assert default_metric("afr", ["target_type", "reranker"]) == "mrr"
    assert default_metric("focusedretriever", ["target_type"]) == "recall@20"
    assert default_metric("hybgrag", ["router"]) == "mrr"


def test_feedback_tells_what_went_wrong(tiny_skb: SKB) -> None:
    wrong_type = prediction([4], target_type="author", flags={"valid_cypher": True})
    assert "Wrong target type 'author'" in explain(tiny_skb, [3], wrong_type, "target_type")
    no_triplet = prediction([2], flags={"valid_cypher": True, "has_triplet": False, "has_constant": False,
                                        "grounded_nonempty": False},
                            events=[("3_parse", "dropped", "x.year > 2020: unknown attribute")])
    text = explain(tiny_skb, [3], no_triplet, "cypher")
    assert "no usable relationship pattern" in text and "x.year > 2020" in text
    assert "Grace Hopper" not in text and "'Knowledge Base Question Answering Survey' (paper)" in text
    missed = prediction([0, 3], grounded_ids=[0, 1, 11], num_grounded=3,
                        flags={"valid_cypher": True, "has_triplet": True, "has_constant": True,
                               "grounded_nonempty": True})
    assert "None of the correct answers satisfies the query (3 nodes matched)" in explain(tiny_skb, [3], missed, "cypher")
    empty = prediction([], flags={"valid_cypher": True, "has_triplet": True, "has_constant": True,
                                  "grounded_nonempty": False})
    assert "No node satisfies the query" in explain(tiny_skb, [3], empty, "cypher")
    ranked = explain(tiny_skb, [3], missed, "reranker.rank")
    assert "ranked 2 of 2" in ranked and "'Graph Retrieval at Scale' (paper)" in ranked and "nodes matched" not in ranked
    fb = feedback_metric("mrr", tiny_skb)(dspy.Example(answer_ids=[3]), missed, None, None, None)
    assert fb.score == 0.5 and "ranked 2 of 2" in fb.feedback and "None of the correct answers" in fb.feedback


# --- saved program files --------------------------------------------------------------------------


def test_loading_refuses_other_systems_and_missing_optimised_predictors(kb: KnowledgeBase, tmp_path: Path) -> None:
    afr = build_program("afr", kb, config(reranker="listwise"), with_lms=False)
    afr.cypher.demos = [dspy.Example(question="q", cypher="MATCH (p:paper) RETURN p")]
    afr.reranker.rank.demos = [dspy.Example(question="q", ranking=[1])]
    path = save_program(afr, "afr", config(), tmp_path / "p.json", {"predictors": ["cypher", "reranker.rank"]})
    other = build_program("focusedretriever", kb, config(), with_lms=False)
    with pytest.raises(ProgramFileError, match="saved from system 'afr', cannot load into 'focusedretriever'"):
        load_program_state(other, path)
    pointwise = build_program("afr", kb, config(reranker="pointwise"), with_lms=False)
    with pytest.raises(ProgramFileError, match=r"has no predictor reranker\.rank \(it has cypher, query_graph, "
                                               r"reranker\.score\)"):
        load_program_state(pointwise, path)
    assert not pointwise.cypher.demos  # untouched
    # a reranker left zero-shot may be swapped or dropped: the optimised Cypher step still loads
    save_program(afr, "afr", config(), tmp_path / "c.json", {"predictors": ["cypher"]})
    no_reranker = load_program_state(build_program("afr", kb, config(reranker="none"), with_lms=False),
                                     tmp_path / "c.json")
    assert no_reranker.cypher.demos[0]["cypher"] == "MATCH (p:paper) RETURN p"
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ProgramFileError, match=r"bad\.json:1:2: not a program file \(bad JSON") as bad:
        read_program_config(tmp_path / "bad.json")
    assert (bad.value.path, bad.value.line) == (tmp_path / "bad.json", 1)
    (tmp_path / "old.json").write_text(json.dumps({"system": "afr", "config": {}, "state": {}}))
    with pytest.raises(ProgramFileError, match="not a program file \\(format 'autofocus-program/1' expected, found None\\)"):
        read_program_config(tmp_path / "old.json")


# --- the command, end to end ----------------------------------------------------------------------


def test_optimize_command_then_ask_and_eval_load_the_program(
    kb: KnowledgeBase, tiny_skb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autofocus.cli import app

    lm = task_lm()
    monkeypatch.setattr(KnowledgeBase, "open", classmethod(lambda cls, path, embedder=None, **kw: kb))
    monkeypatch.setattr("autofocus.lm.get_lm", lambda spec, **kw: lm)
    cfg_file = tmp_path / "cfg.json"
    config().save(cfg_file)
    prog = tmp_path / "programs" / "cypher.json"
    runner = CliRunner()
    res = runner.invoke(app, ["optimize", "--skb", str(tiny_skb_dir), "--out", str(prog), "--steps", "cypher",
                              "--config", str(cfg_file), "--test", "test", "--no-progress"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "grounded_recall@20 *" in res.output and "on val: 1 questions, same LM" in res.output
    assert "on test (held out): 2 questions" in res.output and "cypher: 2 demos" in res.output
    doc = json.loads(prog.read_text())
    assert len(doc["state"]["cypher"]["demos"]) == 2 and doc["optimizer"]["test"]["optimised"]["grounded_hit@20"] == 1
    assert doc["config"]["merge"]["k"] == 4 and doc["config"]["rerank"]["reranker"] == "auto"  # the config as given, reranker kept

    lm.calls.clear()
    res = runner.invoke(app, ["ask", "Which paper by Grace Hopper is a survey?", "--skb", str(tiny_skb_dir),
                              "--program", str(prog), "--reranker", "none"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert has_demos(lm.prompts("cypher")[0]) and "grounded" in res.output
    assert len([line for line in res.output.splitlines() if line.startswith("│")]) == 4  # k = 4 from the program

    out = tmp_path / "run"
    res = runner.invoke(app, ["eval", "--skb", str(tiny_skb_dir), "--split", "val", "--out", str(out),
                              "--program", str(prog), "--reranker", "none", "--no-progress"], terminal_width=200)
    assert res.exit_code == 0, res.output
    rec = json.loads((out / "traces.jsonl").read_text().splitlines()[0])
    assert rec["trace"]["data"]["cypher"] == GOOD["Grace Hopper"]

    res = runner.invoke(app, ["optimize", "--skb", str(tiny_skb_dir), "--out", str(tmp_path / "x.json"),
                              "--steps", "router", "--config", str(cfg_file), "--no-progress"])
    assert res.exit_code == 1 and "no such LLM step" in res.output


def test_gold_yes_no_demos_pair_an_answer_with_its_hardest_non_answer(kb: KnowledgeBase, tiny_skb_dir: Path) -> None:
    """`gold` for step 8 needs no LM: each training question's answer (Yes) and the non-answer of its type
    that step 7's index ranks first for it (No), in pairs whose order alternates."""
    train, val, _ = splits(tiny_skb_dir)
    lm = PromptLM({**task_lm().handlers, "score": lambda m: {"score": 0.5}})
    with dspy.context(lm=lm):
        result = optimise(kb, config(reranker="pointwise"), train, val[:1], PromptOptOptions(system="afr", optimizer="gold", steps=["reranker"], max_demos=4), with_lms=False)
    demos = result.program.reranker.score.demos
    skb = kb.skb
    assert [d["score"] for d in demos] == [1.0, 0.0, 0.0, 1.0]
    for (yes, no), ex in zip([(demos[0], demos[1]), (demos[3], demos[2])], train, strict=False):
        assert yes["question"] == no["question"] == ex.question
        answer = ex.answer_ids[0]
        assert yes["candidate"].startswith(skb.name(answer)) and yes["node_type"] == skb.type_of(answer)
        assert no["node_type"] == yes["node_type"] and not any(no["candidate"].startswith(skb.name(a)) for a in ex.answer_ids)
    assert result.metadata["program_lm_calls"] == 0 and result.metadata["demos"] == {"reranker.score": 4}
    # the signature path shows them to the LM as demos
    assert any(has_demos(m) for m in lm.prompts("score"))
    with pytest.raises(ValueError, match="use the pointwise reranker"):
        optimise(kb, config(reranker="listwise"), train, val, PromptOptOptions(system="afr", optimizer="gold", steps=["reranker"]), with_lms=False)
