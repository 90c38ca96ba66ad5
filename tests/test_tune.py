"""``autofocus tune`` and the AF-Retriever split it relies on (steps 1-2 once, steps 3-7 per config).

The planted SKB: question A's answer is the 2nd grounded item by similarity (found only when the
grounded strand gets >= 2 of the k = 4 slots), question B's answer is the 2nd item of the vector
strand (found only when the grounded strand gets <= 2 slots). Both are found only with exactly 2
grounded slots, i.e. alpha in [0.375, 0.625); the default alpha (2/3) gives 3 and finds only A.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dspy
import numpy as np
import optuna
import pytest
from typer.testing import CliRunner

from autofocus import cli_app, runtime
from autofocus.cli import app
from autofocus.config import AutofocusConfig, LMConfig
from autofocus.cypher import parse_cypher
from autofocus.evaluation.runner import evaluate_one
from autofocus.index.cache import EmbeddingCache
from autofocus.index.embedders import l2_normalise
from autofocus.kb import KnowledgeBase
from autofocus.metrics import as_candidates
from autofocus.optimize import llm_outputs, tune, tune_space
from autofocus.program.saved import save_program
from autofocus.program.steps.grounded_strand import parse_mode
from autofocus.program.systems import registry
from autofocus.program.systems.afr import AutofocusRetriever
from autofocus.program.systems.registry import PAPER
from autofocus.runtime import load_config
from autofocus.skb.qa import load_qa
from autofocus.skb.skbdir import load_skb_dir
from autofocus.skb.writer import write_skb_dir
from autofocus.trace import Trace
from autofocus.usage import install_usage_callback
from tests.skb_factory import make_skb
from tests.test_systems_common import HashEmbedder, ScriptedLM, field_value, make_kb

KEYWORDS = ("walrus", "seal", "penguin", "cactus", "zebra", "lion")


class KeywordEmbedder:
    """One dimension per keyword, so similarities are known, plus a small angle from the node number
    in ``i<n>`` that orders (and so never ties) nodes with equal keywords; the index breaks ties at
    a cut-off in ways these tests should not depend on."""

    name = "test:keywords"
    dim = len(KEYWORDS) + 2
    spread = 0.15  # length of the tie-breaking part: far below the gaps between keyword matches

    def embed(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            words = re.findall(r"[a-z]+", text.lower())
            for col, kw in enumerate(KEYWORDS):
                out[row, col] = words.count(kw)
            number = re.search(r"\bi(\d+)\b", text)
            angle = 0.07 * int(number.group(1)) if number else 0.0
            out[row, -2:] = self.spread * np.cos(angle), self.spread * np.sin(angle)
        return l2_normalise(out)


SCHEMA = {
    "name": "planted",
    "description": "Items with one colour tag each.",
    "node_types": {"item": {"name_field": "name"}, "tag": {"name_field": "name"}},
    "edge_types": {"item_has_tag": {"src_type": "item", "dst_type": "tag"}},
    "candidate_types": ["item"],
}
DOCS = {2: "walrus", 3: "walrus seal", 4: "penguin", 13: "penguin", 5: "cactus", 6: "cactus", 7: "cactus",
        8: "cactus", 9: "zebra", 10: "zebra lion", 11: "penguin", 12: "cactus"}  # fmt: skip
TAGS = {0: "red", 1: "blue"}
EDGES = [(i, "item_has_tag", 0) for i in (2, 3, 4, 13)] + [(i, "item_has_tag", 1) for i in (5, 6, 7, 8)]
QA = [
    {"id": 0, "query": "red walrus", "answer_ids": [3]},
    {"id": 1, "query": "zebra", "answer_ids": [10]},
]
CYPHER = {
    "red walrus": "MATCH (i:item)-[:item_has_tag]->(t:tag {name: 'red'}) RETURN i",
    "zebra": "MATCH (i:item)-[:item_has_tag]->(t:tag {name: 'blue'}) RETURN i",
}



def paper_config(**overrides: Any) -> AutofocusConfig:
    """The planted SKB is built around the paper's strand (scope expansion past exact names, fixed alpha):
    the tuner's tests run it with autofocus's additions switched off, as ``--system afr-paper`` does."""
    return AutofocusConfig(**{**PAPER, **overrides})

def question_of(user: str) -> str:
    return field_value(user, "question").split("\n\nRespond with")[0].strip()


def scripted_lm() -> ScriptedLM:
    """Step 2 from a table; the listwise reranker keeps the order it is given."""
    return ScriptedLM({
        "cypher": lambda u: {"cypher": CYPHER[question_of(u)]},
        "ranking": lambda u: {"ranking": [int(x) for x in re.findall(r"\[(\d+)\]", field_value(u, "candidates"))]},
    })  # fmt: skip


@pytest.fixture(scope="module")
def planted_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("planted")
    nodes = [{"id": i, "type": "tag", "name": n} for i, n in TAGS.items()]
    nodes += [{"id": i, "type": "item", "name": f"i{i}", "text": d} for i, d in DOCS.items()]
    write_skb_dir(
        path, SCHEMA, sorted(nodes, key=lambda n: n["id"]), EDGES, QA, {"val": [0, 1], "test": [1, 0]}
    )
    return path


@pytest.fixture(scope="module")
def planted_kb(planted_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    skb = load_skb_dir(planted_dir, progress=False)
    root = tmp_path_factory.mktemp("planted_index")
    return KnowledgeBase(
        skb, KeywordEmbedder(), root, build_missing=True, progress=False, cache=EmbeddingCache(None)
    )


@pytest.fixture
def base_config(tmp_path: Path) -> Path:
    path = tmp_path / "base.json"
    paper_config(k=4, reranker="listwise", lm=LMConfig(default="test/scripted"), concurrency=2).save(path)
    return path


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, planted_kb: KnowledgeBase) -> CliRunner:
    monkeypatch.setattr(runtime, "open_kb", lambda path, embedder, *_: planted_kb)
    monkeypatch.setattr(
        registry, "apply_lms", lambda program, config: None
    )  # the scripted LM comes from context
    install_usage_callback()
    return CliRunner()


def invoke(cli: CliRunner, lm: ScriptedLM, *args: Any) -> Any:
    with dspy.context(lm=lm):
        return cli.invoke(app, ["tune", *map(str, args)], terminal_width=200)


# --- the command ------------------------------------------------------------------------------------------


def test_study_finds_the_planted_alpha_asks_the_llm_once_and_resumes(
    cli: CliRunner, planted_dir: Path, base_config: Path, tmp_path: Path
) -> None:
    out = tmp_path / "study"
    lm = scripted_lm()
    args = ("--skb", planted_dir, "--split", "val", "--study", "planted", "--out", out, "--config", base_config,
            "--metric", "hit@4", "--params", "alpha", "--seed", "3", "--no-progress")  # fmt: skip
    res = invoke(cli, lm, *args, "--trials", "12", "--no-confirm")
    assert res.exit_code == 0, res.output
    assert lm.fields() == ["cypher", "cypher"]  # steps 1-2 once per question, whatever the trial count
    best = load_config(out / "best_config.json")  # what `ask`/`eval --config` read
    assert 0.375 <= best.merge.alpha < 0.625 and best.merge.k == 4 and best.rerank.reranker == "listwise"
    summary = json.loads((out / "summary.json").read_text())
    assert (
        summary["pre_rerank"]["defaults"]["hit@4"] == 0.5 and summary["pre_rerank"]["tuned"]["hit@4"] == 1.0
    )
    assert summary["complete_trials"] == 12 and summary["trials_this_run"] == 12
    for name in ("alpha.png", "l_max.png", "history.png", "alpha.csv", "alpha.md", "l_max.csv", "summary.md"):
        assert (out / name).is_file(), name
    alpha_rows = (out / "alpha.csv").read_text().splitlines()
    assert alpha_rows[0].startswith("alpha,hit@1") and len(alpha_rows) == 1 + len(tune.ALPHA_GRID)
    study = optuna.load_study(study_name="planted", storage=tune.default_storage(out))
    assert study.trials[0].params == {"alpha": pytest.approx(2 / 3)}  # the defaults are trial 0

    # rerun: tops up to 15 complete trials (not 12 + 15), no LLM call for the study, then confirms
    lm2 = scripted_lm()
    res = invoke(cli, lm2, *args, "--trials", "15", "--test-split", "test")
    assert res.exit_code == 0, res.output
    assert "2 cached, 0 asked now" in res.output and "3 trial(s)" in res.output
    assert len(optuna.load_study(study_name="planted", storage=tune.default_storage(out)).trials) == 15
    assert "Confirmation runs" in res.output
    summary = json.loads((out / "summary.json").read_text())
    tuned_val = summary["confirmation"]["tuned on val"]
    assert tuned_val["hit@1"] is not None and tuned_val["hit@5"] == 1.0  # the reranker kept both answers
    confirm_dirs = sorted(p.name for p in out.glob("confirm-*"))
    assert len(confirm_dirs) == 2 and all((out / d / "traces.jsonl").is_file() for d in confirm_dirs)
    assert (out / "alpha_test.csv").is_file()
    # the confirmation runs the whole program (step 8 too); the test split's questions were cached already
    assert (
        lm2.fields().count("ranking") == 4
        and len((out / llm_outputs.LLM_OUTPUTS_FILE).read_text().splitlines()) == 2
    )


def test_a_study_refuses_another_objective_and_seeds_reproduce(
    cli: CliRunner, planted_dir: Path, base_config: Path, tmp_path: Path
) -> None:
    common = ("--skb", planted_dir, "--config", base_config, "--params", "alpha,l_max,type_mode,doc_variant_step7",
              "--metric", "recall@4", "--trials", "8", "--no-confirm", "--no-progress")  # fmt: skip
    for name in ("a", "b"):
        res = invoke(cli, scripted_lm(), *common, "--out", tmp_path / name, "--study", "s", "--seed", "7")
        assert res.exit_code == 0, res.output
    params = [
        [
            t.params
            for t in optuna.load_study(study_name="s", storage=tune.default_storage(tmp_path / n)).trials
        ]
        for n in ("a", "b")
    ]
    assert params[0] == params[1] and len({json.dumps(p, sort_keys=True) for p in params[0]}) > 1

    res = invoke(
        cli, scripted_lm(), *common, "--out", tmp_path / "a", "--study", "s", "--seed", "7", "--limit", "1"
    )
    assert res.exit_code == cli_app.EXIT_MISMATCH
    assert "tunes something else" in res.output and "identity.questions" in res.output


def test_an_optimised_program_brings_its_prompts_and_preset_and_keeps_tuned_values(
    cli: CliRunner, planted_dir: Path, planted_kb: KnowledgeBase, tmp_path: Path
) -> None:
    """``--program``: steps 1-2 are asked with the saved demos, the saved preset's defaults do not undo
    tuned values, and the confirmation run loads the program too."""
    cfg = paper_config(k=4, reranker="listwise", lm=LMConfig(default="test/scripted"), concurrency=1)
    _, preset_cfg = registry.resolve_config("afr-code", cfg)
    program = registry.build_program("afr-code", planted_kb, preset_cfg, with_lms=False)
    program.cypher.demos = [dspy.Example(question="DEMO-MARKER penguins", cypher="MATCH (i:item) RETURN i")]
    path = save_program(
        program, "afr-code", preset_cfg, tmp_path / "program.json", {"predictors": ["cypher"]}
    )
    out = tmp_path / "study"
    lm = scripted_lm()
    res = invoke(cli, lm, "--skb", planted_dir, "--out", out, "--program", path, "--params", "alpha,l_max",
                 "--trials", "6", "--metric", "hit@4", "--no-progress")  # fmt: skip
    assert res.exit_code == 0, res.output
    steps12 = [c for c in lm.calls if c[0] == "cypher"]
    assert steps12 and all("DEMO-MARKER" in json.dumps(c[2]) for c in steps12)
    best = load_config(out / "best_config.json")
    assert (best.grounding.expansion, best.merge.step6_order, best.merge.k) == (
        "code",
        "round",
        4,
    )  # the program's preset and config
    manifest = json.loads(next(out.glob("confirm-val-*/manifest.json")).read_text())
    assert manifest["system"].startswith("afr-code") and manifest["program"]["path"] == str(path)
    assert manifest["config"]["merge"]["alpha"] == best.merge.alpha and manifest["config"]["grounding"]["l_max"] == best.grounding.l_max
    other = tune_space.config_with(best, {"alpha": 0.123, "l_max": 77})
    assert registry.resolve_config("afr-code", other)[1].merge.alpha == 0.65  # what building by name would do
    assert registry.resolve_config(tune_space.system_spec("afr-code", other), other)[1] == other


def test_rerank_trials_tune_k_against_llm_calls(
    cli: CliRunner, planted_dir: Path, base_config: Path, tmp_path: Path
) -> None:
    out = tmp_path / "study"
    lm = scripted_lm()
    res = invoke(cli, lm, "--skb", planted_dir, "--out", out, "--config", base_config, "--rerank-trials",
                 "--params", "alpha,k", "--second", "lm_calls", "--metric", "hit@1", "--trials", "5",
                 "--no-confirm", "--no-progress")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "Pareto front: hit@1 vs lm_calls" in res.output
    study = optuna.load_study(study_name="afr-tune", storage=tune.default_storage(out))
    trials = tune.complete_trials(study)
    assert len(trials) == 5 and {t.values[1] for t in trials} == {
        2.0
    }  # step 2 (cached) + one listwise prompt
    assert all(5 <= t.params["k"] <= 50 and t.params["k"] % 5 == 0 for t in trials)
    # every trial and the baseline, best and sweeps reranked each question once; step 2 ran once per question
    assert lm.fields().count("cypher") == 2 and lm.fields().count("ranking") >= 2 * (5 + 2)


def test_bad_options_fail_clearly(cli: CliRunner, planted_dir: Path, tmp_path: Path) -> None:
    base = ("--skb", planted_dir, "--out", tmp_path / "x", "--no-progress")
    res = invoke(cli, scripted_lm(), *base, "--params", "alpha,k")
    assert res.exit_code == 1 and "--rerank-trials" in res.output
    res = invoke(cli, scripted_lm(), *base, "--second", "lm_calls")
    assert res.exit_code == 1 and "same LLM calls" in res.output
    res = invoke(cli, scripted_lm(), *base, "--metric", "precision")
    assert res.exit_code == 1 and "unknown metric" in res.output
    res = invoke(cli, scripted_lm(), *base, "--system", "vss")
    assert res.exit_code == 1 and "AF-Retriever presets" in res.output


def test_user_text_in_a_study_name_or_a_split_prints_as_text(
    cli: CliRunner, planted_dir: Path, base_config: Path, tmp_path: Path
) -> None:
    res = invoke(cli, scripted_lm(), "--skb", planted_dir, "--split", "val", "--study", "[/]odd", "--out", tmp_path / "s",
                 "--config", base_config, "--params", "alpha", "--trials", "2", "--no-confirm", "--progress")  # fmt: skip
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())  # however the console wrapped it
    assert "study [/]odd ━" in text and "study '[/]odd' holds 2 complete trials" in text  # the bar and the note


def test_a_folder_that_is_no_skb_or_a_damaged_one_is_named_without_a_traceback(tiny_skb_dir: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(tiny_skb_dir, damaged)
    with (damaged / "edges.csv").open("a") as fh:
        fh.write("4,[/],0\n")
    (tmp_path / "empty").mkdir()
    for skb, message in ((tmp_path / "empty", "is not an SKB"), (damaged, "[/]")):
        res = CliRunner().invoke(app, ["tune", "--skb", str(skb), "--out", str(tmp_path / "t"), "--no-progress"],
                                 terminal_width=200)
        assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
        assert message in " ".join(res.output.split())  # however the console wrapped it


# --- the library ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def items(planted_dir: Path) -> list[Any]:
    return load_qa(planted_dir, "val")


@pytest.fixture
def planted_program(planted_kb: KnowledgeBase) -> AutofocusRetriever:
    return registry.build_program("afr", planted_kb, paper_config(k=4, reranker="none"), with_lms=False)


def evaluator(kb: KnowledgeBase, program: AutofocusRetriever, items: list[Any]) -> tune.ConfigEvaluator:
    """Step 1-2 outputs as the scripted LM gives them (one LM call each)."""
    outputs = {q.id: llm_outputs.LLMOutput(q.id, q.query, "item", CYPHER[q.query], lm_calls=1) for q in items}
    return tune.ConfigEvaluator(program, items, outputs, as_candidates(kb.skb.candidate_ids), (1, 4, 20))


def test_two_objectives_give_a_pareto_front_and_the_best_metric_wins(
    planted_kb: KnowledgeBase, planted_program: AutofocusRetriever, items: list[Any], tmp_path: Path
) -> None:
    spec = tune.StudySpec(metric="hit@4", second="latency", params=["alpha", "expansion"], seed=1)
    study = tune.open_study("mo", tune.default_storage(tmp_path), spec)
    base = paper_config(k=4, reranker="none")
    ran = tune.run_study(study, spec, evaluator(planted_kb, planted_program, items), base, n_trials=10)
    assert ran == 10 and study.metric_names == ["hit@4", "latency"]
    front = tune.pareto_front(study)
    best = tune.best_trial(study)
    assert best in front and best.values[0] == max(t.values[0] for t in tune.complete_trials(study))
    assert all(t.user_attrs["eval"]["seconds"] >= 0 for t in front)
    assert tune.run_study(study, spec, evaluator(planted_kb, planted_program, items), base, n_trials=10) == 0


def test_evaluation_matches_forward_and_sweeps_cover_the_grids(
    planted_kb: KnowledgeBase, planted_program: AutofocusRetriever, items: list[Any]
) -> None:
    ev = evaluator(planted_kb, planted_program, items)
    cfg = paper_config(k=4, reranker="none", alpha=0.5)
    res = ev(cfg)
    assert res.metrics["hit@4"] == 1.0 and res.n == 2 and res.lm_calls == 1.0
    # both questions are grounded (4 items each); A's answer is among its grounded items, B's is not
    assert res.grounding == {"processed": 1.0, "precision": 0.125, "specificity": 0.5, "nonempty": 1.0}
    lm = scripted_lm()
    program = registry.build_program("afr", planted_kb, cfg, with_lms=False)
    with dspy.context(lm=lm):
        pred = program(question="zebra")
    assert pred.ranked_ids == program.retrieve("zebra", "item", CYPHER["zebra"]).ids
    assert lm.fields() == ["cypher"]
    rows = tune.sweep_alpha(ev, cfg)
    assert [r["alpha"] for r in rows] == list(tune.ALPHA_GRID)
    assert [r["hit@4"] for r in rows if 0.375 <= r["alpha"] < 0.625] == [1.0] * 5
    assert {r["hit@4"] for r in rows if not 0.375 <= r["alpha"] < 0.625} == {0.5}
    table = tune.sweep_l_max(ev, cfg)
    assert [r["l_max"] for r in table] == list(tune.L_MAX_GRID)
    assert (
        table[0]["processed"] == 0.0 and table[0]["steps1-7"]["hit@4"] == 1.0
    )  # l_max 0: VSS over all items
    assert table[-1]["steps1-6"]["hit@4"] == 0.5  # the grounded strand alone finds A only


def test_retrieve_is_stateless_across_threads(
    planted_kb: KnowledgeBase, planted_program: AutofocusRetriever
) -> None:
    configs = [paper_config(k=4, alpha=a, l_max=lm, expansion=e)
               for a in (0.0, 0.5, 1.0) for lm in (1, 3, 50) for e in ("paper", "code")]  # fmt: skip
    expected = [planted_program.retrieve(q, "item", CYPHER[q], c).ids for c in configs for q in CYPHER]
    got: list[list[int]] = [[] for _ in expected]

    def work(offset: int) -> None:
        for j in range(len(expected)):
            i = (j + offset) % len(expected)
            c, q = configs[i // len(CYPHER)], list(CYPHER)[i % len(CYPHER)]
            got[i] = planted_program.retrieve(q, "item", CYPHER[q], c, Trace()).ids

    threads = [threading.Thread(target=work, args=(k * 5,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expected and len({tuple(x) for x in expected}) > 1


def test_llm_output_cache_keeps_identities_apart_and_skips_transient_failures(
    planted_program: AutofocusRetriever, items: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_usage_callback()  # LM calls are counted by it (other tests may not have installed it yet)
    path = tmp_path / llm_outputs.LLM_OUTPUTS_FILE
    cache = llm_outputs.LLMOutputCache(path, "one")
    lm = scripted_lm()
    with dspy.context(lm=lm):
        got, asked = llm_outputs.fill_llm_outputs(planted_program, items[:1], cache, concurrency=1)
    assert asked == 1 and lm.fields() == ["cypher"]
    assert got[0].cypher == CYPHER["red walrus"] and got[0].target_type == "item" and got[0].lm_calls == 1

    real_ask = llm_outputs.ask_llm
    down = llm_outputs.LLMOutput(
        1, "zebra", "item", None, events=["degraded: 2_query: LMTransportError: connection refused"]
    )
    monkeypatch.setattr(llm_outputs, "ask_llm", lambda program, item: down)
    got, asked = llm_outputs.fill_llm_outputs(planted_program, items, cache, concurrency=2)
    assert asked == 1 and got[1] is down and llm_outputs.transient(down)  # used now, not saved
    monkeypatch.setattr(llm_outputs, "ask_llm", real_ask)
    with dspy.context(lm=lm):
        got, asked = llm_outputs.fill_llm_outputs(planted_program, items, cache, concurrency=2)
    assert asked == 1 and got[1].cypher == CYPHER["zebra"]  # asked again
    assert llm_outputs.fill_llm_outputs(planted_program, items, cache)[1] == 0
    malformed = llm_outputs.LLMOutput(1, "zebra", "item", None, events=["llm_error: AdapterParseError: no fields"])
    assert not llm_outputs.transient(malformed)  # the same prompt would get the same answer: kept

    def down(u: str) -> dict[str, Any]:
        raise dspy.utils.exceptions.LMAuthError("401 invalid key")  # not retried with backoff

    with dspy.context(lm=ScriptedLM({"cypher": down})):
        asked_now = llm_outputs.ask_llm(planted_program, items[0])
    assert llm_outputs.transient(asked_now) and asked_now.cypher is None  # the outage as the program saw it

    other = llm_outputs.LLMOutputCache(path, "two")
    assert other.load() == {} and other.other_identities == 2
    cfg = AutofocusConfig()
    typed = cfg.updated({"query_format": "typed"})
    assert llm_outputs.llm_identity("afr", cfg, "f") != llm_outputs.llm_identity("afr", typed, "f")
    assert llm_outputs.llm_identity("afr", cfg, "f") == llm_outputs.llm_identity(
        "afr", cfg.updated({"alpha": 0.1}), "f"
    )


def test_params_and_ranges_are_validated() -> None:
    assert tune_space.parse_params(None, rerank=False) == list(tune_space.DEFAULT_PARAMS)
    assert tune_space.parse_params(None, rerank=True)[-1] == "k"
    with pytest.raises(ValueError, match="unknown tunable"):
        tune_space.parse_params("alpha,beta", rerank=False)
    assert tune_space.parse_range("2:50") == (2, 50)
    for bad in ("50", "0:3", "5:2", "a:b"):
        with pytest.raises(ValueError, match="LOW:HIGH"):
            tune_space.parse_range(bad)
    base = AutofocusConfig(l_max=1_500_000, k=20)
    assert tune_space.in_space(base, ["alpha", "l_max", "k", "doc_variant_step7"], (1, 300)) == {
        "alpha": pytest.approx(2 / 3),
        "k": 20,
        "doc_variant_step7": "text+rel",
    }


# --- fixes in AutofocusRetriever ------------------------------------------------------------------------------


def test_parsing_is_strict_when_either_mode_is(tiny_skb: Any, tmp_path: Path) -> None:
    """A relationship whose endpoint types contradict it: strict parsing drops it (any edge then
    grounds), lenient parsing keeps it as a hint, which strict step 5 would turn into a hard filter."""
    assert parse_mode(AutofocusConfig(type_mode="lenient", edge_mode="strict").grounding) == "strict"
    assert parse_mode(AutofocusConfig(type_mode="strict", edge_mode="lenient").grounding) == "strict"
    assert parse_mode(AutofocusConfig(type_mode="lenient", edge_mode="lenient").grounding) == "lenient"
    kb = make_kb(tiny_skb, tmp_path)
    cypher = "MATCH (p:paper)-[:paper_published_in_venue]->(f:field {name: 'Information Retrieval'}) RETURN p"
    assert parse_cypher(cypher, tiny_skb.schema, mode="lenient").triplets[0].rel == "paper_published_in_venue"
    cfg = paper_config(type_mode="lenient", edge_mode="strict", k=4, reranker="none")
    program = registry.build_program("afr", kb, cfg, with_lms=False)
    trace = Trace()
    found = program.retrieve("Information Retrieval papers", "paper", cypher, cfg, trace)
    assert trace.data["query_graph"]["triplets"][0]["rel"] is None  # dropped as in strict parsing
    assert sorted(found.grounded.tolist()) == [0, 2, 3, 11]  # the papers with that field


def test_grounding_metrics_use_the_whole_grounded_set(tmp_path: Path) -> None:
    n_items = 1500
    skb = make_skb(
        ["item", "tag"], [0] * n_items + [1], [(i, "has", n_items) for i in range(n_items)],
        {"has": ("item", "tag")}, names=[f"item {i}" for i in range(n_items)] + ["red"], candidate_types=["item"],
    )  # fmt: skip
    kb = KnowledgeBase(
        skb, HashEmbedder(), tmp_path, build_missing=True, progress=False, cache=EmbeddingCache(None)
    )
    cfg = paper_config(k=5, reranker="none")
    program = registry.build_program("afr", kb, cfg, with_lms=False)
    lm = ScriptedLM({
        "target_type": lambda u: {"target_type": "item"},
        "cypher": lambda u: {"cypher": "MATCH (i:item)-[:has]->(t:tag {name: 'red'}) RETURN i"},
    })  # fmt: skip

    class Item:
        id, query, answer_ids = 0, "red items", [1400]

    install_usage_callback()
    with dspy.context(lm=lm):
        record = evaluate_one(program, Item(), skb.candidate_ids, skb)
    derived = record["derived"]
    assert derived["grounded_size"] == n_items and derived["gold_in_grounded"] is True
    assert derived["grounded_recall"] == 1.0 and "grounded_ids_partial" not in derived
    kept = record["trace"]["data"]["grounded_ids"]  # the trace line still keeps 1000 ids
    assert kept["n"] == n_items and len(kept["head"]) == 1000


def reranking_evaluator(
    kb: KnowledgeBase, program: AutofocusRetriever, items: list[Any]
) -> tuple[tune.ConfigEvaluator, Any]:
    """An evaluator that can rerank (a program per config) over the planted questions, and its program maker."""

    def make_program(c: AutofocusConfig) -> AutofocusRetriever:
        return registry.build_program("afr", kb, c, with_lms=False)

    outputs = evaluator(kb, program, items).outputs
    ev = tune.ConfigEvaluator(program, items, outputs, as_candidates(kb.skb.candidate_ids), (1, 4), make_program)
    return ev, make_program


def test_reranking_trials_send_the_programs_prompts_and_tune_the_fusion(
    planted_kb: KnowledgeBase, planted_program: AutofocusRetriever, items: list[Any]
) -> None:
    """A step-8 setting is tuned on what the program sends: the grounded candidates' evidence lines included."""
    from autofocus.program.steps.rerank import EVIDENCE_LEAD

    cfg = paper_config(k=4, reranker="listwise", alpha=0.5, rerank_evidence=True, lm=LMConfig(default="test/scripted"))

    ev, make_program = reranking_evaluator(planted_kb, planted_program, items)
    lm = scripted_lm()
    with dspy.context(lm=lm):
        tuned = ev(cfg, rerank=True)
    trial_prompts = sorted(user for field, user, _ in lm.calls if field == "ranking")
    lm = scripted_lm()
    with dspy.context(lm=lm):
        for q in items:
            make_program(cfg)(question=q.query)
    program_prompts = sorted(user for field, user, _ in lm.calls if field == "ranking")
    assert tuned.n == 2 and len(trial_prompts) == 2 and trial_prompts == program_prompts
    assert all(EVIDENCE_LEAD in p for p in trial_prompts)  # both questions ground some of their candidates
    # the fusion settings are tunable only where trials rerank
    assert tune_space.parse_params("rerank_fusion,rerank_prior_weight", rerank=True) == ["rerank_fusion", "rerank_prior_weight"]
    with pytest.raises(ValueError, match="--rerank-trials"):
        tune_space.parse_params("rerank_prior_weight", rerank=False)


def test_the_prior_weight_sweep_runs_from_the_judges_order_to_steps_1_to_7s(
    planted_kb: KnowledgeBase, planted_program: AutofocusRetriever, items: list[Any],
    cli: CliRunner, planted_dir: Path, base_config: Path, tmp_path: Path,
) -> None:
    cfg = paper_config(k=4, reranker="listwise", alpha=0.5, lm=LMConfig(default="test/scripted"))

    ev, _ = reranking_evaluator(planted_kb, planted_program, items)
    reversing = ScriptedLM({
        "cypher": lambda u: {"cypher": CYPHER[question_of(u)]},
        "ranking": lambda u: {"ranking": [int(x) for x in re.findall(r"\[(\d+)\]", field_value(u, "candidates"))][::-1]},
    })  # fmt: skip: a judge that reverses steps 1-7's order
    with dspy.context(lm=reversing):
        rows = tune.sweep_prior_weight(ev, cfg)
        judge = ev(tune_space.config_with(cfg, {"rerank_fusion": "none"}), rerank=True)
    before = ev(cfg)  # steps 1-7
    assert [r["rerank_prior_weight"] for r in rows] == list(tune.PRIOR_WEIGHT_GRID)
    # w = 0 is the judge's own order; at w = 10 a rank step outweighs any judge difference among 4 candidates
    assert (rows[0]["hit@1"], rows[0]["mrr"]) == (judge.metrics["hit@1"], judge.metrics["mrr"])
    assert (rows[-1]["hit@1"], rows[-1]["mrr"]) == (before.metrics["hit@1"], before.metrics["mrr"])
    assert judge.metrics["mrr"] != before.metrics["mrr"]  # the scripted judge reorders: the ends differ

    out = tmp_path / "study"
    res = invoke(cli, scripted_lm(), "--skb", planted_dir, "--out", out, "--config", base_config, "--rerank-trials",
                 "--params", "rerank_fusion,rerank_prior_weight", "--metric", "mrr", "--trials", "3",
                 "--no-confirm", "--no-progress")  # fmt: skip
    assert res.exit_code == 0, res.output
    table = (out / "prior_weight.csv").read_text().splitlines()
    assert table[0].startswith("rerank_prior_weight,hit@1") and len(table) == 1 + len(tune.PRIOR_WEIGHT_GRID)
    assert (out / "prior_weight.png").stat().st_size > 0 and "prior_weight.png" in (out / "summary.md").read_text()
    # the tuned settings' gain over the defaults, paired on the tuning split, in both summaries and the output
    summary = json.loads((out / "summary.json").read_text())
    gain, means = summary["tuned_vs_defaults"], summary["reranked"]
    assert gain["metric"] == "mrr" and gain["n"] == means["tuned"]["n"] == 2
    assert gain["diff"] == pytest.approx(means["tuned"]["mrr"] - means["defaults"]["mrr"])
    assert "Tuned vs defaults on the tuning split (mrr, paired, 2 questions)" in (out / "summary.md").read_text()
    assert "Tuned vs defaults on the tuning split" in " ".join(res.output.split())


def test_the_gain_line_says_whether_tuning_beat_the_defaults_beyond_noise() -> None:
    from autofocus.evaluation.statistics import paired_test
    from autofocus.optimize.tune_run import gain_line

    same = {"metric": "hit@1", **paired_test(np.zeros(40), np.r_[np.ones(2), np.zeros(38)])}
    better = {"metric": "hit@1", **paired_test(np.zeros(40), np.r_[np.ones(20), np.zeros(20)])}
    assert "+5.0 points" in gain_line(same) and "within noise: the defaults are as good" in gain_line(same)
    assert "+50.0 points" in gain_line(better) and "beyond noise" in gain_line(better)
    assert gain_line({"metric": "mrr", **paired_test(np.zeros(0), np.zeros(0))}).endswith("no questions to compare.")


def test_fit_prior_weight_sets_step_8s_fusion_from_the_judges_scores(
    cli: CliRunner, planted_dir: Path, tmp_path: Path
) -> None:
    """``--fit-prior-weight``: the weight in best_config.json is the likelihood fit of the judge's
    scores on the split, reported in both summaries, with the sweep; the search cannot also set it."""
    base = tmp_path / "pointwise.json"
    paper_config(k=4, alpha=0.5, reranker="pointwise", rerank_depth=None, lm=LMConfig(default="test/scripted")).save(base)
    # steps 1-7 give [2, 3, 5, 6] (answer 3) and [5, 6, 9, 10] (answer 10): in the first the judge prefers two
    # candidates below the answer (a prior helps), in the second it rightly lifts the last one (a prior hurts)
    judged = {"red walrus": {2: 0.05, 3: 0.5, 5: 0.7, 6: 0.6}, "zebra": {5: 0.3, 6: 0.1, 9: 0.2, 10: 0.8}}

    def score(user: str) -> dict[str, float]:
        node = int(re.search(r"\[(\d+)\]", field_value(user, "candidate")).group(1))
        return {"score": judged[question_of(user)][node]}

    lm = ScriptedLM({"cypher": lambda u: {"cypher": CYPHER[question_of(u)]}, "score": score})
    out = tmp_path / "fit"
    res = invoke(cli, lm, "--skb", planted_dir, "--out", out, "--config", base, "--rerank-trials", "--fit-prior-weight",
                 "--params", "rerank_fusion_k", "--metric", "mrr", "--trials", "2", "--no-confirm", "--no-progress")  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    fit, best = summary["prior_weight_fit"], AutofocusConfig.load(out / "best_config.json")
    assert fit["used"] and fit["n"] == 2 and best.rerank.rerank_fusion == "prior"
    assert best.rerank.rerank_prior_weight == pytest.approx(fit["weight"], abs=1e-3) and fit["low"] <= fit["weight"] <= fit["high"]
    assert 0.3 < fit["weight"] < 2  # the two questions pull it both ways
    assert "prior weight fitted by likelihood" in (out / "summary.md").read_text()
    assert "likelihood fit: rerank_prior_weight" in " ".join(res.output.split())
    assert (out / "prior_weight.png").stat().st_size > 0 and len((out / "prior_weight.csv").read_text().splitlines()) > 2
    for clash in (("--params", "rerank_prior_weight"), ()):
        args = ("--skb", planted_dir, "--out", tmp_path / "x", "--config", base, "--fit-prior-weight", "--no-progress")
        res = invoke(cli, lm, *args, *clash, *(("--rerank-trials",) if clash else ()))
        assert res.exit_code == 1 and "--fit-prior-weight needs --rerank-trials" in " ".join(res.output.split())
