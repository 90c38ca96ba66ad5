"""Summaries, paired comparisons and plots from hand-made traces files (numbers worked out by hand)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import matplotlib.image
import numpy as np
import pytest
from rich.console import Console

from autofocus.console import print_comparison, print_summary
from autofocus.evaluation.plots import plot_funnel, plot_metric_curves, plot_step_latency, save_run_plots
from autofocus.evaluation.report import comparison_rows, load_run, summarize
from autofocus.evaluation.report_tables import (
    comparison_csv,
    comparison_markdown,
    summary_markdown,
    write_summary,
)
from autofocus.evaluation.statistics import detectable_difference, holm, mean_ci, paired_test

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def step(seconds: float, calls: int = 0, tin: int = 0, tout: int = 0) -> dict[str, Any]:
    return {"seconds": seconds, "lm_calls": calls, "input_tokens": tin, "output_tokens": tout}


def metrics(h1: float, h5: float, h20: float, r20: float, mrr: float) -> dict[str, float]:
    return {"hit@1": h1, "hit@5": h5, "hit@20": h20, "recall@20": r20, "mrr": mrr}


RECORDS: list[dict[str, Any]] = [
    # an early failure of question 1, superseded by its later success
    {"id": 1, "status": "error", "error": "TimeoutError: slow", "seconds": 9.0},
    {
        "id": 1, "status": "ok", "gold": [5, 6], "seconds": 3.5, "metrics": metrics(1, 1, 1, 0.5, 1.0),
        "derived": {"grounded_size": 10, "gold_in_grounded": True, "grounded_recall": 0.5,
                    "grounded_precision": 0.1, "target_type_correct": True},
        "trace": {
            "steps": {"1_target_type": step(1.0, 1, 100, 10), "2_query": step(2.0, 1, 200, 20)},
            "flags": {"valid_cypher": True, "has_triplet": True, "has_constant": True, "grounded_nonempty": True},
            "events": [{"step": "2_query", "kind": "malformed"}],
            "data": {"strand": {"5": "grounded", "9": "vss"}},
        },
    },
    {
        "id": 2, "status": "ok", "gold": [7], "seconds": 7.5, "metrics": metrics(0, 1, 1, 1.0, 0.25),
        "derived": {"grounded_size": 0, "gold_in_grounded": False, "grounded_recall": 0.0,
                    "target_type_correct": False},
        "trace": {
            "steps": {"1_target_type": step(3.0, 1, 100, 10), "2_query": step(4.0, 2, 400, 40)},
            "flags": {"valid_cypher": True, "has_triplet": True, "has_constant": False, "grounded_nonempty": False},
            "events": [{"step": "2_query", "kind": "malformed"}, {"step": "2_query", "kind": "malformed"}],
            "data": {"strand": {"7": "vss"}},
        },
    },
    {
        "id": 3, "status": "ok", "gold": [8], "seconds": 2.5, "metrics": metrics(0, 0, 0, 0.0, 0.0),
        "derived": {},
        "trace": {"steps": {"1_target_type": step(2.0, 1, 100, 10)},
                  "flags": {"valid_cypher": False, "has_triplet": False}, "events": [], "data": {}},
    },
    {"id": 4, "status": "error", "error": "RuntimeError: boom", "traceback": "...", "seconds": 0.5},
]


def write_run(path: Path, records: list[dict[str, Any]], system: str = "afr") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "traces.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (path / "manifest.json").write_text(json.dumps({"system": system, "split": "val"}))
    return path


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def test_summary_numbers(tmp_path: Path) -> None:
    run = load_run(write_run(tmp_path / "run", RECORDS))
    assert [r["id"] for r in run.records] == [1, 2, 3, 4] and run.records[0]["status"] == "ok"
    s = summarize(run.records, run.manifest)
    assert (s["n"], s["n_ok"], s["n_errors"]) == (4, 3, 1)
    assert s["errors"] == {"RuntimeError": 1}
    m = s["metrics"]
    assert list(m)[:5] == ["hit@1", "hit@5", "hit@20", "recall@20", "mrr"]
    assert m["hit@1"]["mean"] == 0.25 and m["hit@5"]["mean"] == 0.5 and m["hit@20"]["mean"] == 0.5
    assert m["recall@20"]["mean"] == pytest.approx(0.375) and m["mrr"]["mean"] == pytest.approx(0.3125)
    assert m["hit@1"]["ci"] == "wilson"
    assert (m["hit@1"]["low"], m["hit@1"]["high"]) == pytest.approx(wilson(1, 4))
    assert m["mrr"]["ci"] == "bootstrap" and 0.0 <= m["mrr"]["low"] < 0.3125 < m["mrr"]["high"] <= 1.0

    lat = s["latency"]
    assert list(lat) == ["1_target_type", "2_query", "total"]
    assert lat["1_target_type"] == {"n": 3, "median": 2.0, "mean": 2.0, "max": 3.0}
    assert lat["2_query"] == {"n": 2, "median": 3.0, "mean": 3.0, "max": 4.0}
    assert lat["total"] == {"n": 4, "median": 3.0, "mean": 3.5, "max": 7.5}

    usage = s["usage"]
    assert usage["per_question"] == {"lm_calls": 2.0, "input_tokens": 300.0, "output_tokens": 30.0, "cached_tokens": 0.0}
    assert usage["max_per_question"] == {"lm_calls": 3.0, "input_tokens": 500.0, "output_tokens": 50.0, "cached_tokens": 0.0}
    assert usage["per_step"]["2_query"] == {"lm_calls": 1.0, "input_tokens": 200.0, "output_tokens": 20.0, "cached_tokens": 0.0}

    ep = s["error_propagation"]
    assert [(st["name"], st["count"]) for st in ep["stages"]] == [
        ("questions", 4), ("valid Cypher", 2), ("has a triplet", 2), ("triplet and constant", 1),
        ("non-empty grounding", 1), ("gold in grounded set", 1), ("gold from grounded strand in top k", 1),
        ("gold from VSS strand in top k", 1), ("hit@20 (final)", 2),
    ]
    assert ep["stages"][3]["fraction"] == 0.25
    assert ep["grounding"] == {
        "questions": 1, "mean_recall": 0.5, "mean_precision": 0.1, "median_size": 10.0, "partial": 0,
    }
    assert ep["target_type"] == {"known": 2, "correct": 1, "lost": 0}  # the wrong type still found gold

    assert s["events"] == {"2_query:malformed": {"events": 3, "questions": 2}}
    json.dumps(s)  # the summary is plain JSON


def test_funnel_lists_only_stages_some_question_reached(tmp_path: Path) -> None:
    vss_only = [{"id": i, "status": "ok", "gold": [i], "metrics": metrics(0, 0, i % 2, 0, 0), "trace": None}
                for i in range(4)]
    ep = summarize(vss_only)["error_propagation"]
    assert [(st["name"], st["count"]) for st in ep["stages"]] == [("questions", 4), ("hit@20 (final)", 2)]


def test_summary_tables_and_files(tmp_path: Path) -> None:
    path = write_run(tmp_path / "run", RECORDS)
    s = summarize(load_run(path).records)
    console = Console(record=True, width=140)
    print_summary(s, console, title="afr")
    text = console.export_text()
    assert "afr: 4 questions, 1 raised (scored 0)" in text
    assert "25.0" in text and "Latency per step" in text and "2_query:malformed" in text
    md = summary_markdown(s, "afr")
    assert "| hit@1 | 25.0 |" in md and "| triplet and constant | 1 | 25.0 |" in md
    jpath, mpath = write_summary(path, s)
    assert json.loads(jpath.read_text())["n"] == 4 and mpath.read_text().startswith("# run")


def test_degraded_questions_keep_their_metrics_and_their_share_is_shown(tmp_path: Path) -> None:
    lost = {"step": "1_target_type", "error": "LMTransportError: connection refused"}
    records = [
        {**RECORDS[1], "status": "degraded", "degraded": [lost, {**lost, "step": "2_query"}]},
        {**RECORDS[2], "status": "degraded", "degraded": [lost]},
        RECORDS[3],
        RECORDS[4],
    ]
    s = summarize(records)
    assert s["degraded"] == {
        "questions": 2, "share": 0.5,
        "causes": {"1_target_type: LMTransportError": 2, "2_query: LMTransportError": 1},
    }
    assert s["metrics"]["hit@1"]["mean"] == 0.25 and s["n_errors"] == 1  # the fallback's hit counts
    console = Console(record=True, width=160)
    print_summary(s, console, title="afr")
    text = console.export_text()
    assert "afr: 4 questions, 2 degraded (50.0%: LM outages or work bounds, fallback results), 1 raised (scored 0)" in text
    assert "Degraded questions" in text and "1_target_type: LMTransportError" in text
    rows = comparison_rows([load_run(write_run(tmp_path / "a", records))])
    assert rows[0]["degraded"] == 2


def test_text_from_traces_is_printed_as_text_not_markup() -> None:
    records = [{"id": 1, "status": "error", "error": "[/]nodes.jsonl:100: closes nothing"}]
    console = Console(record=True, width=160)
    print_summary(summarize(records), console, title="run [bold]x")
    text = console.export_text()
    assert "[/]nodes.jsonl" in text and "run [bold]x" in text


def test_mean_ci_edge_cases() -> None:
    assert mean_ci(np.array([]))["mean"] is None
    flat = mean_ci(np.array([0.5, 0.5, 0.5]))
    assert flat["low"] == flat["high"] == 0.5
    ones = mean_ci(np.ones(10))
    assert ones["mean"] == 1.0 and ones["high"] == pytest.approx(1.0) and ones["low"] == pytest.approx(wilson(10, 10)[0])


def test_paired_test_mcnemar_and_sign_flip() -> None:
    a = np.array([1, 1, 0, 0, 0, 0, 0, 0, 0, 0], dtype=float)
    b = np.array([1, 1, 1, 1, 1, 1, 1, 1, 0, 0], dtype=float)
    t = paired_test(a, b)
    # 6 discordant pairs, all favouring b: exact two-sided binomial p = 2 * 0.5**6
    assert t["test"] == "mcnemar-exact" and t["discordant"] == [0, 6]
    assert t["diff"] == pytest.approx(0.6) and t["p"] == pytest.approx(2 * 0.5**6) and t["significant"]
    assert 0 < t["low"] <= 0.6 <= t["high"] <= 1
    # MRR-like values: every question improves by 0.25; exact sign-flip p = 2 / 2**10
    t = paired_test(np.full(10, 0.5), np.full(10, 0.75))
    assert t["test"] == "sign-flip permutation" and t["p"] == pytest.approx(2 / 2**10)
    assert t["low"] == t["high"] == pytest.approx(0.25)
    # no difference at all
    t = paired_test(np.array([0.2, 0.4]), np.array([0.2, 0.4]))
    assert t["p"] == 1.0 and not t["significant"]
    # one discordant pair is not evidence
    t = paired_test(np.array([0.0, 1.0]), np.array([1.0, 1.0]))
    assert t["p"] == 1.0


def test_holm_adjusts_step_down_and_counts_comparisons_made_elsewhere() -> None:
    # sorted 0.01, 0.02, 0.04 -> 3*0.01, 2*0.02, 1*0.04, then monotone: 0.03, 0.04, 0.04
    assert holm([0.04, 0.01, None, 0.02]) == pytest.approx([0.04, 0.03, None, 0.04], nan_ok=True)
    assert holm([0.5, 0.9]) == [1.0, 1.0]  # capped at 1
    # two reported of ten made on the split: multipliers 10 and 9
    assert holm([0.004, 0.01], comparisons=10) == pytest.approx([0.04, 0.09])
    assert holm([0.03]) == [0.03] and holm([None]) == [None]


def test_detectable_difference_is_the_80_percent_power_effect() -> None:
    d = np.array([0.0, 1.0] * 50)  # sd 0.5025, n = 100
    z = 1.959964 + 0.841621
    assert detectable_difference(d) == pytest.approx(z * np.std(d, ddof=1) / 10, rel=1e-5)
    assert detectable_difference(np.array([0.3])) is None and detectable_difference(np.zeros(9)) is None
    # a simulated effect of that size is found about 80% of the time (with McNemar, a little less)
    rng = np.random.default_rng(0)
    found = 0
    for _ in range(400):
        a = (rng.random(100) < 0.5).astype(float)
        b = (rng.random(100) < 0.5 + 0.2).astype(float)
        mde = detectable_difference(b - a)
        found += paired_test(a, b)["p"] < 0.05
        assert 0.15 < mde < 0.25
    assert 0.6 < found / 400 < 0.95


def _run_records(hit1: list[int], mrr: list[float], start: int = 0) -> list[dict[str, Any]]:
    return [
        {"id": start + i, "status": "ok", "seconds": 1.0 + i, "metrics": metrics(h, h, h, h, r),
         "trace": {"steps": {"2_query": step(0.5, 2, 100, 10)}}}
        for i, (h, r) in enumerate(zip(hit1, mrr, strict=True))
    ]


def test_comparison_rows_pair_on_common_questions(tmp_path: Path) -> None:
    base = write_run(tmp_path / "a", _run_records([1, 1, 0, 0, 0, 0, 0, 0, 0, 0], [1, 1] + [0.5] * 8), "afr")
    better = _run_records([1, 1, 1, 1, 1, 1, 1, 1, 0, 0], [1] * 8 + [0.5, 0.5])
    better.append({"id": 99, "status": "ok", "seconds": 1.0, "metrics": metrics(0, 0, 0, 0, 0)})  # only here
    other = write_run(tmp_path / "b", better, "afr:steps=1-7")
    rows = comparison_rows([load_run(base), load_run(other)])
    assert [r["system"] for r in rows] == ["afr", "afr:steps=1-7"]
    assert rows[0]["hit@1"] == 0.2 and "d_hit@1" not in rows[0]
    assert rows[1]["n"] == 11 and rows[1]["n_common"] == 10
    assert rows[1]["d_hit@1"] == pytest.approx(0.6) and rows[1]["p_hit@1"] == pytest.approx(2 * 0.5**6)
    assert rows[1]["d_mrr"] == pytest.approx(0.9 - 0.6)
    assert rows[0]["lm_calls"] == 2.0 and rows[0]["input_tokens"] == 100.0 and rows[0]["seconds_median"] == 5.5
    parsed = list(csv.DictReader(io.StringIO(comparison_csv(rows))))
    assert parsed[1]["system"] == "afr:steps=1-7" and float(parsed[1]["d_hit@1"]) == pytest.approx(0.6)
    md = comparison_markdown(rows)
    assert "| afr:steps=1-7 | 11 | 72.7 |" in md
    assert "| afr:steps=1-7 | hit@1 | 10 | +60.0 | [" in md and "| 0.031 | 0.031 | yes |" in md
    assert rows[1]["p_hit@1_holm"] == rows[1]["p_hit@1"]  # one comparison: nothing to adjust
    assert rows[1]["mde_hit@1"] == pytest.approx(detectable_difference(np.array([0, 0] + [1] * 6 + [0, 0.0])))
    console = Console(record=True, width=80)
    print_comparison(rows, console)
    text = console.export_text()
    assert "Paired differences from afr" in text and "+60.0" in text and "0.031" in text


def test_comparison_rows_adjust_p_over_the_runs_compared(tmp_path: Path) -> None:
    base = load_run(write_run(tmp_path / "a", _run_records([0] * 10, [0.5] * 10)))
    runs = [base] + [load_run(write_run(tmp_path / f"r{k}", _run_records([1] * k + [0] * (10 - k), [0.5] * 10)))
                     for k in (6, 8)]  # fmt: skip
    rows = comparison_rows(runs)
    raw = [rows[1]["p_hit@1"], rows[2]["p_hit@1"]]
    assert raw == pytest.approx([2 * 0.5**6, 2 * 0.5**8])
    assert [rows[1]["p_hit@1_holm"], rows[2]["p_hit@1_holm"]] == pytest.approx([2 * 0.5**6, 2 * 2 * 0.5**8])
    wider = comparison_rows(runs, comparisons=12)
    assert wider[2]["p_hit@1_holm"] == pytest.approx(12 * 2 * 0.5**8)
    assert wider[1]["p_hit@1_holm"] == pytest.approx(11 * 2 * 0.5**6)
    assert "p Holm" in comparison_markdown(wider)


def test_comparison_without_common_questions_is_an_error(tmp_path: Path) -> None:
    a = load_run(write_run(tmp_path / "a", _run_records([1], [1.0])))
    b = load_run(write_run(tmp_path / "b", _run_records([1], [1.0], start=5)))
    with pytest.raises(ValueError, match="no question in common"):
        comparison_rows([a, b])


def test_load_run_needs_a_traces_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        load_run(tmp_path)


def _read_png(path: Path) -> np.ndarray:
    assert path.read_bytes()[:8] == PNG_MAGIC
    return matplotlib.image.imread(path)


def test_plots_are_valid_pngs(tmp_path: Path) -> None:
    path = write_run(tmp_path / "run", RECORDS)
    run = load_run(path)
    s = summarize(run.records)
    funnel, latency = save_run_plots(path, s, run.records)
    assert funnel.name == "funnel.png" and latency.name == "latency.png"
    for p in (funnel, latency):
        img = _read_png(p)
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
        assert img.std() > 0  # something was drawn
    empty = plot_step_latency([], tmp_path / "empty.png")
    assert _read_png(empty).shape[0] > 50
    assert _read_png(plot_funnel(summarize([]), tmp_path / "nothing.png")).shape[0] > 50


def test_metric_curves(tmp_path: Path) -> None:
    x = [0.4, 0.55, 0.7, 0.85]
    out = plot_metric_curves(
        x, {"hit@20": [0.6, 0.64, 0.66, 0.65], "recall@20": [0.4, 0.42, 0.43, 0.43]}, tmp_path / "sub" / "alpha.png",
        xlabel="alpha", ylabel="score", title="alpha curve",
        bands={"hit@20": ([0.55, 0.6, 0.62, 0.6], [0.65, 0.7, 0.7, 0.7])}, mark_best=True,
    )
    assert _read_png(out).shape[1] > 100
    assert _read_png(plot_metric_curves([3, 10, 100], {"hit@1": [0.1, 0.2, 0.3]}, tmp_path / "l.png",
                                        xlabel="l_max", ylabel="hit@1", xscale="log")).shape[0] > 50
    with pytest.raises(ValueError, match="has 2 values for 4 x values"):
        plot_metric_curves(x, {"mrr": [0.1, 0.2]}, tmp_path / "bad.png", xlabel="a", ylabel="b")


def test_questions_lost_to_the_types_step7_searched() -> None:
    def rec(qid: int, searched_right: bool, hit: float) -> dict:
        return {"id": qid, "status": "ok", "metrics": {"hit@20": hit, "mrr": hit},
                "derived": {"target_type_correct": False, "step7_type_correct": searched_right}}

    ep = summarize([rec(1, False, 0.0), rec(2, False, 1.0), rec(3, True, 0.0)])["error_propagation"]
    assert ep["target_type"]["lost"] == 1


def test_runs_break_down_by_a_column_of_the_qa_file(tmp_path) -> None:
    from autofocus.evaluation.groups import grouped_rows
    from autofocus.evaluation.report import Run

    (tmp_path / "qa.csv").write_text("id,query,answer_ids,kind\n1,a,[1],relational\n2,b,[2],textual\n3,c,[3],textual\n")
    manifest = {"system": "afr", "skb": {"path": str(tmp_path)}}

    def rec(qid: int, hit: float, grounded: bool | None) -> dict:
        flags = {} if grounded is None else {"grounded_nonempty": grounded}
        return {"id": qid, "status": "ok", "metrics": {"hit@1": hit, "hit@20": hit, "mrr": hit},
                "trace": {"flags": flags}, "derived": {"target_type_correct": hit > 0}}

    run = Run(tmp_path, manifest, [rec(1, 1.0, True), rec(2, 0.0, None), rec(3, 1.0, True)])
    rows = grouped_rows([run], "kind")
    assert [(r["group"], r["n"], r["hit@1"], r["nonempty"], r["type_correct"]) for r in rows] == [
        ("relational", 1, 1.0, 1.0, 1.0), ("textual", 2, 0.5, 0.5, 0.5)]  # a question grounding did not reach counts as empty
    with pytest.raises(ValueError, match="no QA file has a column 'template'"):
        grouped_rows([run], "template")
