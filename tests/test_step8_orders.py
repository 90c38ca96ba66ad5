"""``autofocus report fusion``: step 8's fusions and depths recomputed from a run's traces rank exactly as a
program run with those settings does, and the command prints them paired against the reranker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autofocus.cli import app
from autofocus.evaluation.report import load_run
from autofocus.evaluation.step8_orders import analyse_step8, step8_orders
from autofocus.evaluation.traces import to_jsonable
from autofocus.kb import KnowledgeBase
from autofocus.metrics import compute_metrics
from tests.test_afr_e2e import QUESTION, candidate_ids, config4, kb, scripted  # noqa: F401  (kb: its fixture)
from tests.test_systems_common import run

POINTWISE = "afr:reranker=pointwise"
GOLD = [2]
LATE = {5: 0.9, 4: 0.6}  # a judge that prefers what steps 1-7 ranked last, so the fusions disagree with it


def late_judge() -> Any:
    return scripted(score=lambda u: {"score": LATE.get(candidate_ids(u, "candidate")[0], 0.1)})


def record(pred: Any, qid: int = 1, gold: list[int] = GOLD) -> dict[str, Any]:
    """The traces.jsonl line ``autofocus eval`` writes for one prediction (the fields step 8's analysis reads)."""
    return {"id": qid, "status": "ok", "gold": gold, "ranked": pred.ranked_ids,
            "metrics": compute_metrics(pred.ranked_ids, gold, ks=(1, 5, 20)),
            "trace": to_jsonable(pred.trace.model_dump(mode="python"))}  # fmt: skip


def write_run(path: Path, records: list[dict[str, Any]]) -> Path:
    path.mkdir(parents=True)
    (path / "traces.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_recomputed_orders_are_what_a_run_with_each_setting_ranks(kb: KnowledgeBase) -> None:  # noqa: F811
    base = run(POINTWISE, kb, late_judge(), QUESTION, config4())
    orders = step8_orders(record(base), rrf_ks=(2, 60), depths=(2, 3), weights=(0.0, 0.5, 3.0))
    assert orders is not None
    assert orders["steps 1-7"] == base.trace.data["pre_rerank"] and orders["reranker"] == base.ranked_ids
    for name, spec in [("rrf k=2", "rerank_fusion=rrf,rerank_fusion_k=2"), ("rrf k=60", "rerank_fusion=rrf"),
                       ("prior w=0", "rerank_fusion=prior,rerank_prior_weight=0"),
                       ("prior w=0.5", "rerank_fusion=prior,rerank_prior_weight=0.5"),
                       ("prior w=3", "rerank_fusion=prior,rerank_prior_weight=3"),
                       ("reranker, depth 2", "rerank_depth=2"), ("reranker, depth 3", "rerank_depth=3")]:  # fmt: skip
        actual = run(f"{POINTWISE},{spec}", kb, late_judge(), QUESTION, config4())
        assert orders[name] == actual.ranked_ids, name
    assert base.trace.data["pre_rerank"][-1] == 5 and base.ranked_ids[:2] == [5, 4]
    assert orders["prior w=0"] == base.ranked_ids != orders["prior w=3"]  # the weights tell the orders apart
    assert step8_orders({"trace": {"data": {}}}) is None  # step 8 did not run


def two_questions(kb: KnowledgeBase, path: Path) -> tuple[Any, Path]:  # noqa: F811
    """A run of one question asked twice, answered once by the judge's first and once by steps 1-7's first
    candidate (so the judge neither always wins nor always loses: the fit has an optimum), and a failure."""
    pred = run(POINTWISE, kb, scripted(), QUESTION, config4())
    first = pred.trace.data["pre_rerank"][0]
    lines = [record(pred, 1, [pred.ranked_ids[0]]), record(pred, 2, [first]),
             {"id": 3, "status": "error", "gold": GOLD, "trace": None}]  # fmt: skip
    return pred, write_run(path, lines)


def test_the_analysis_pairs_every_order_with_the_reranker_on_the_same_questions(
    kb: KnowledgeBase,  # noqa: F811
    tmp_path: Path,
) -> None:
    pred, path = two_questions(kb, tmp_path / "r")
    first = pred.trace.data["pre_rerank"][0]
    analysis = analyse_step8(load_run(path), weights=(100.0,), fit=True, bootstrap=5)
    rows = {r.name: r for r in analysis.rows}
    assert analysis.questions == 2 and rows["reranker"].vs_reranker == {}
    assert rows["reranker"].means["hit@1"] == (1.0 if first == pred.ranked_ids[0] else 0.5)
    assert rows["steps 1-7"].means["hit@1"] == (1.0 if first == pred.ranked_ids[0] else 0.5)
    assert rows["prior w=100"].means["hit@1"] == rows["steps 1-7"].means["hit@1"]  # a heavy prior keeps steps 1-7
    assert rows["steps 1-7"].vs_reranker["hit@1"]["n"] == 2
    assert analysis.fit is not None and analysis.fit.n == 2
    assert set(analysis.as_dict()["orders"]) == set(rows)


def test_report_fusion_prints_the_orders_and_report_still_compares_runs(
    kb: KnowledgeBase,  # noqa: F811
    tmp_path: Path,
) -> None:
    pred, path = two_questions(kb, tmp_path / "afr")
    out = tmp_path / "fusion.json"
    cli = CliRunner()
    res = cli.invoke(app, ["report", "fusion", str(path), "--weights", "0.25,1", "--depths", "2", "--fit",
                           "--bootstrap", "5", "--out", str(out)], env={"COLUMNS": "200"})  # fmt: skip
    assert res.exit_code == 0, res.output
    orders = {"steps 1-7", "reranker", "rrf k=60", "prior w=0.25", "prior w=1", "reranker, depth 2"}
    assert set(json.loads(out.read_text())[str(path)]["orders"]) >= orders
    for name in ("steps 1-7", "2 questions with step 8", "likelihood fit"):  # a table cell may wrap: the file has them all
        assert name in " ".join(res.output.split()), name
    bad = cli.invoke(app, ["report", "fusion", str(path), "--weights", "a,b"])
    assert bad.exit_code == 2 and "expected numbers" in bad.output
    no_step8 = write_run(tmp_path / "vss", [{**record(pred), "trace": {"data": {}}}])
    res = cli.invoke(app, ["report", "fusion", str(no_step8)])
    assert res.exit_code == 1 and "no finished question ran step 8" in " ".join(res.output.split())
    (path / "manifest.json").write_text(json.dumps({"system": "afr"}))
    for args in ([str(path)], ["--comparisons", "2", str(path), str(path)], ["runs", str(path)]):
        res = cli.invoke(app, ["report", *args], env={"COLUMNS": "200"})  # the runs' summaries, as before
        assert res.exit_code == 0, (args, res.output)


@pytest.mark.parametrize("args", [["report", "--help"], ["report", "fusion", "--help"]])
def test_report_help_names_both_forms(args: list[str]) -> None:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0 and "fusion" in res.output
