"""Per-question nearest demos for steps 1-2 (``program.steps.nearest_demos``, ``optimize --optimizer knn``).

The scripted LM copies its last demo (what the small offline LM does with demos it is shown): the
Cypher step writes the last demo's query and step 1 the last demo's type, or a query that grounds
nothing and the wrong type without demos. So the answers are right only where each question got its
own nearest pool questions, and wrong where it got another question's.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dspy
import numpy as np
import pytest

from autofocus.kb import KnowledgeBase
from autofocus.optimize.prompts import optimise
from autofocus.optimize.scoring import grounded_strand
from autofocus.options import PromptOptOptions
from autofocus.program.saved import ProgramFileError, load_program_state, save_program
from autofocus.program.steps.nearest_demos import NearestDemos, PoolQuestion, pool_from_dict
from autofocus.program.systems.registry import build_program
from autofocus.skb.skbdir import load_skb_dir
from autofocus.skb.writer import write_skb_dir
from autofocus.usage import install_usage_callback
from tests.test_optimize import PromptLM
from tests.test_systems_common import field_value, make_kb, scripted_config

Messages = list[dict[str, Any]]

ADA = "MATCH (a:author {name: 'Ada Lovelace'})-[:author_writes_paper]->(p:paper) RETURN p"
CITES = "MATCH (p:paper)-[:paper_cites_paper]->(q:paper {name: 'Graph Retrieval at Scale'}) RETURN p"
ACL = "MATCH (p:paper)-[:paper_published_in_venue]->(v:venue {name: 'ACL'}) RETURN p"
WROTE = "MATCH (a:author)-[:author_writes_paper]->(p:paper {name: 'Dense Passage Ranking'}) RETURN a"
BAD = "MATCH (p:paper) RETURN p"

# the pool: two synthetic questions per topic, each with its pattern's gold type and Cypher
POOL = [
    PoolQuestion("Which papers did Ada Lovelace write?", "paper", ADA),
    PoolQuestion("Which papers cite the paper Graph Retrieval at Scale?", "paper", CITES),
    PoolQuestion("Which papers were published at the venue ACL?", "paper", ACL),
    PoolQuestion("Who wrote the paper Dense Passage Ranking?", "author", WROTE),
    PoolQuestion("What has Ada Lovelace written?", "paper", ADA),
    PoolQuestion("What cites Graph Retrieval at Scale?", "paper", CITES),
    PoolQuestion("Which papers are at ACL?", "paper", ACL),
    PoolQuestion("Which author wrote Dense Passage Ranking?", "author", WROTE),
]
# asked questions (not in the pool) -> the pool positions of their topic, and their answers
ASKED = {
    "Papers written by Ada Lovelace?": ({0, 4}, [0, 1, 11]),
    "Papers citing Graph Retrieval at Scale?": ({1, 5}, [1, 2, 11]),
    "Papers at ACL?": ({2, 6}, [1, 3]),
    "Authors of Dense Passage Ranking?": ({3, 7}, [5]),
}


def asked_question(messages: Messages) -> str:
    return field_value(messages[-1]["content"], "question").split("\n\n")[0]


def _demos(messages: Messages) -> list[dict[str, str]]:
    """The demos of a call: the ``examples`` field of its last user turn (after the schema), one block
    of ``field: value`` lines per demo; none where the prompt has no such field."""
    content = messages[-1]["content"]
    if "[[ ## examples ## ]]" not in content:
        return []
    blocks = field_value(content, "examples").split("\n\n")
    return [dict(line.split(": ", 1) for line in block.splitlines()) for block in blocks if block.strip()]


def demo_questions(messages: Messages) -> list[str]:
    """Per-question demos (the ``examples`` field), else the predictor's own (user turns between the
    system turn and the last)."""
    return [d["question"] for d in _demos(messages)] or [
        field_value(m["content"], "question") for m in messages[1:-1] if m["role"] == "user"]


def last_demo_answer(messages: Messages, field: str, fallback: str) -> str:
    demos = _demos(messages)
    if demos:
        return demos[-1][field]
    turns = [m["content"] for m in messages[1:-1] if m["role"] == "assistant"]
    return field_value(turns[-1] + "[[ ## ", field) if turns else fallback


def copying_lm() -> PromptLM:
    return PromptLM({
        "cypher": lambda m: {"cypher": last_demo_answer(m, "cypher", BAD)},
        "target_type": lambda m: {"target_type": last_demo_answer(m, "target_type", "author")},
    })


@pytest.fixture(scope="module")
def kb(tiny_skb_data_module: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    """The tiny SKB with papers and authors as candidates, so step 1 asks the LLM."""
    d = tiny_skb_data_module
    d["schema"]["candidate_types"] = ["paper", "author"]
    root = tmp_path_factory.mktemp("knn")
    write_skb_dir(root / "skb", d["schema"], d["nodes"], d["edges"], d["qa"], d["splits"])
    return make_kb(load_skb_dir(root / "skb", progress=False), root / "kb")


@pytest.fixture(scope="module")
def tiny_skb_data_module() -> dict[str, Any]:
    import copy

    from tests.conftest import TINY_EDGES, TINY_NODES, TINY_QA, TINY_SCHEMA, TINY_SPLITS

    return copy.deepcopy({"schema": TINY_SCHEMA, "nodes": TINY_NODES, "edges": TINY_EDGES, "qa": TINY_QA,
                          "splits": TINY_SPLITS})


def config(**overrides: Any) -> Any:
    return scripted_config(**{"k": 4, "reranker": "none", "steps": "1-7", **overrides})


# --- the retrieval --------------------------------------------------------------------------------


def test_nearest_are_the_k_most_similar_nearest_last_never_the_question_itself() -> None:
    pool = [PoolQuestion(f"q{i}", "paper", "MATCH (p:paper) RETURN p") for i in range(5)]
    vectors = np.array([[1, 0], [0.8, 0.6], [0, 1], [0.6, 0.8], [1, 0]], np.float32) * 3  # norms do not matter
    near = NearestDemos(pool, vectors, k=3)
    assert near.nearest("asked", np.array([1.0, 0.1])) == [1, 4, 0]  # tie 0/4: the earlier is nearer (last)
    assert near.nearest("asked", np.array([0.0, 2.0])) == [1, 3, 2]
    # the pool's own question (case and spacing aside) is never its own demo
    assert near.nearest("  Q0 ", np.array([1.0, 0.1])) == [3, 1, 4]
    assert NearestDemos(pool, vectors, k=9).nearest("q2", np.array([0.0, 1.0])) == [4, 0, 1, 3]


def test_bad_pools_are_refused_clearly() -> None:
    pool = [PoolQuestion("q", "paper", "MATCH (p:paper) RETURN p")]
    with pytest.raises(ValueError, match="k must be at least 1"):
        NearestDemos(pool, np.ones((1, 2)), k=0)
    with pytest.raises(ValueError, match="2 vectors for 1 questions"):
        NearestDemos(pool, np.ones((2, 2)), k=1)
    with pytest.raises(ValueError, match="no gold output for step reranker"):
        NearestDemos(pool, np.ones((1, 2)), k=1, steps=["reranker"])
    with pytest.raises(ValueError, match=r"pool\[1\]' needs non-empty question"):
        pool_from_dict({"k": 2, "pool": [pool[0].as_dict(), {"question": "q", "target_type": "", "cypher": "x"}]}, "f")
    with pytest.raises(ValueError, match="positive integer"):
        pool_from_dict({"k": "3", "pool": [pool[0].as_dict()]}, "f")


# --- in the program -------------------------------------------------------------------------------


def test_each_question_gets_its_own_nearest_demos_in_steps_1_and_2_across_threads(kb: KnowledgeBase) -> None:
    install_usage_callback()
    program = build_program("afr", kb, config(), with_lms=False)
    program.nearest_demos = NearestDemos.build(kb, POOL, k=2)
    lm = copying_lm()
    questions = list(ASKED) * 4  # each asked four times, all at once from four threads

    def ask(question: str) -> dspy.Prediction:
        with dspy.context(lm=lm):
            return program(question=question)

    with ThreadPoolExecutor(max_workers=4) as pool:
        preds = list(pool.map(ask, questions))
    assert len(lm.calls) == 2 * len(questions)  # step 1 and step 2 once per question
    for field, messages in lm.calls:
        asked = asked_question(messages)
        topic, _ = ASKED[asked]
        shown = demo_questions(messages)
        assert {POOL.index(next(p for p in POOL if p.question == q)) for q in shown} == topic, (field, asked, shown)
    # the demos come after the schema: every call of a step shares its prompt up to the examples
    for field in ("cypher", "target_type"):
        prompts = [m[0]["content"] + m[-1]["content"] for f, m in lm.calls if f == field]
        assert len(prompts) == len(questions) and all(len(m) == 2 for f, m in lm.calls)  # no demo turns
        starts = {p[: p.index("[[ ## examples ## ]]")] for p in prompts}
        assert len(starts) == 1 and "[[ ## question ## ]]" not in starts.pop()
    for question, pred in zip(questions, preds, strict=True):
        topic, answers = ASKED[question]
        gold = POOL[min(topic)]
        assert pred.trace.data["target_type"] == gold.target_type
        assert pred.trace.data["cypher"] == gold.cypher
        assert set(grounded_strand(pred)) == set(answers)
        assert set(pred.trace.data["nearest_demos"]) == {POOL[i].question for i in topic}
    # the shared predictors were never changed
    assert program.target_type.demos == [] and program.cypher.demos == []


def test_step1_scored_by_probabilities_sees_the_questions_demos(kb: KnowledgeBase,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The offline LM's step 1 scores each type as the answer to the formatted prompt: the demos must be in it."""
    from autofocus.program.systems import afr

    seen: list[Messages] = []

    def probabilities(lm: Any, messages: Messages, choices: list[str], **kw: Any) -> list[float]:
        seen.append(messages)
        last = last_demo_answer(messages, "target_type", "paper")
        return [0.9 if c == last else 0.1 for c in choices]

    monkeypatch.setattr(afr, "choice_probabilities", probabilities)
    program = build_program("afr", kb, config(target_type_scoring="auto", target_type_inputs=["spelled"]), with_lms=False)
    program.nearest_demos = NearestDemos.build(kb, POOL, k=2)
    with dspy.context(lm=copying_lm()):
        pred = program(question="Authors of Dense Passage Ranking?")
    assert set(demo_questions(seen[0])) == {POOL[3].question, POOL[7].question}
    assert pred.trace.data["target_type"] == "author"


def test_without_a_pool_the_steps_keep_their_own_demos(kb: KnowledgeBase) -> None:
    program = build_program("afr", kb, config(), with_lms=False)
    program.cypher.demos = [dspy.Example(question=POOL[2].question, target_type="paper", cypher=ACL)]
    lm = copying_lm()
    with dspy.context(lm=lm):
        pred = program(question="Papers written by Ada Lovelace?")
    assert pred.trace.data["cypher"] == ACL and "nearest_demos" not in pred.trace.data
    step1 = next(m for f, m in lm.calls if f == "target_type")
    assert demo_questions(step1) == []


# --- optimize --optimizer knn ---------------------------------------------------------------------


def pool_examples() -> list[dspy.Example]:
    answers = {ADA: [0, 1, 11], CITES: [1, 2, 11], ACL: [1, 3], WROTE: [5]}
    return [dspy.Example(question=p.question, answer_ids=answers[p.cypher], target_type=p.target_type,
                         cypher=p.cypher, shape="1", qid=i).with_inputs("question") for i, p in enumerate(POOL)]


def test_knn_program_is_saved_with_its_pool_and_reloaded_offline(kb: KnowledgeBase, tmp_path: Path) -> None:
    """Scored on its own pool (each question its own demo never), knn beats zero-shot; the saved file
    holds the pool, and a fresh program loaded from it shows every question its nearest demos."""
    install_usage_callback()
    train = pool_examples()
    with dspy.context(lm=copying_lm()):
        result = optimise(kb, config(), train, train,
                          PromptOptOptions(optimizer="knn", steps=("target_type", "cypher"), max_demos=2), with_lms=False)
    v = {k: s.mean() for k, s in result.val.items()}
    assert v["zero_shot"]["grounded_recall@20"] < 0.5 and v["optimised"]["grounded_recall@20"] == 1.0
    assert result.metadata["nearest_demos"] == {"k": 2, "pool": 8, "steps": ["target_type", "cypher"]}
    assert result.metadata["program_lm_calls"] == 0 and result.predictors == ["cypher", "target_type"]

    path = save_program(result.program, result.system, result.config, tmp_path / "knn.json", result.metadata)
    doc = json.loads(path.read_text())
    assert doc["nearest_demos"]["k"] == 2 and [p["question"] for p in doc["nearest_demos"]["pool"]] == [
        p.question for p in POOL]
    assert doc["state"]["cypher"]["demos"] == []  # no fixed demos: they are chosen per question

    loaded = load_program_state(build_program("afr", kb, result.config, with_lms=False), path)
    lm = copying_lm()
    with dspy.context(lm=lm):
        pred = loaded(question="Papers at ACL?")
    assert pred.trace.data["cypher"] == ACL and set(grounded_strand(pred)) == {1, 3}
    assert all(set(demo_questions(m)) == {POOL[2].question, POOL[6].question} for _, m in lm.calls)


def test_knn_refuses_questions_without_gold_outputs_and_other_steps(kb: KnowledgeBase, tmp_path: Path) -> None:
    labelled = [dspy.Example(question="Which papers cite Graph Retrieval at Scale?", answer_ids=[1], qid=0)
                .with_inputs("question")]
    with dspy.context(lm=copying_lm()), pytest.raises(ValueError, match="1 of 1 training questions carry no gold"):
        optimise(kb, config(), labelled, labelled, PromptOptOptions(optimizer="knn", steps=("cypher",)), with_lms=False)
    with dspy.context(lm=copying_lm()), pytest.raises(ValueError, match="reranker: knn shows gold outputs"):
        optimise(kb, config(reranker="listwise", steps="1-8"), pool_examples(), pool_examples(),
                 PromptOptOptions(optimizer="knn", steps=("reranker",)), with_lms=False)
    with dspy.context(lm=copying_lm()), pytest.raises(ValueError, match="takes no per-question demos"):
        optimise(kb, None, pool_examples(), pool_examples(),
                 PromptOptOptions(system="focusedretriever", optimizer="knn", steps=("target_type",)), with_lms=False)


def test_a_pool_for_another_schema_is_refused_on_load(kb: KnowledgeBase, tmp_path: Path) -> None:
    program = build_program("afr", kb, config(), with_lms=False)
    program.nearest_demos = NearestDemos.build(kb, [PoolQuestion("Which genes?", "gene", "MATCH (g:gene) RETURN g")], 1)
    path = save_program(program, "afr", program.config, tmp_path / "other.json")
    with pytest.raises(ProgramFileError, match="target types gene are no candidate type"):
        load_program_state(build_program("afr", kb, config(), with_lms=False), path)
    doc = json.loads(path.read_text())
    doc["nearest_demos"]["k"] = 0
    path.write_text(json.dumps(doc))
    with pytest.raises(ProgramFileError, match="positive integer"):
        load_program_state(build_program("afr", kb, config(), with_lms=False), path)


def test_optimize_knn_command_then_eval_loads_the_pool(kb: KnowledgeBase, tiny_skb_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """From a synthetic QA file (`autofocus synth --out DIR`) to a program file that `eval --program` runs
    with per-question demos, no QA file needed once saved."""
    import csv

    from typer.testing import CliRunner

    from autofocus.cli import app

    qa_dir = tmp_path / "synth"
    qa_dir.mkdir()
    with (qa_dir / "qa_synthetic.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "query", "answer_ids", "target_type", "shape", "cypher"])
        for ex in pool_examples():
            writer.writerow([ex.qid, ex.question, json.dumps(ex.answer_ids), ex.target_type, "1", ex.cypher])
    lm = copying_lm()
    monkeypatch.setattr(KnowledgeBase, "open", classmethod(lambda cls, path, embedder=None, **kw: kb))
    monkeypatch.setattr("autofocus.lm.get_lm", lambda spec, **kw: lm)
    cfg_file = tmp_path / "cfg.json"
    config().save(cfg_file)
    prog = tmp_path / "knn.json"
    runner = CliRunner()
    res = runner.invoke(app, ["optimize", "--skb", str(tiny_skb_dir), "--qa-dir", str(qa_dir), "--out", str(prog),
                              "--optimizer", "knn", "--steps", "target_type,cypher", "--train", "synthetic",
                              "--val", "synthetic[:4]", "--max-demos", "3", "--config", str(cfg_file),
                              "--no-progress"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert json.loads(prog.read_text())["nearest_demos"]["k"] == 3
    (qa_dir / "qa_synthetic.csv").unlink()  # the program file holds the pool

    lm.calls.clear()
    out = tmp_path / "run"
    res = runner.invoke(app, ["eval", "--skb", str(tiny_skb_dir), "--split", "test", "--out", str(out),
                              "--program", str(prog), "--concurrency", "2", "--no-progress"], terminal_width=200)
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(len(r["trace"]["data"]["nearest_demos"]) == 3 for r in records)
    assert lm.calls and all(len(demo_questions(m)) == 3 for _, m in lm.calls)
