"""Reports as text: a run's summary and a comparison of runs as tables (rows the terminal and Markdown
views share), Markdown and CSV, and the ``summary.json``/``summary.md`` files of a run."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autofocus.evaluation.report import COMPARE_METRICS, MAIN_METRICS
from autofocus.evaluation.statistics import ALPHA

SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def summary_tables(summary: Mapping[str, Any], title: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of every summary table, shared by the terminal and Markdown views."""
    tables: list[tuple[str, list[str], list[list[str]]]] = []
    n, errors, degraded = summary["n"], summary["n_errors"], summary["degraded"]["questions"]
    expected = summary.get("expected")
    count = (f"{n} questions" if summary.get("complete", True) else
             f"{n} of {expected} questions; run incomplete (killed or still running: the same eval command "
             "finishes it)")  # fmt: skip
    step8 = summary.get("run", {}).get("ranked_by")
    tables.append(
        (
            f"{title}: {count}"
            + (f"; step 8: {step8}" if step8 else "")
            + (f", {degraded} degraded ({_pct(degraded / n)}%: LM outages or work bounds, fallback results)" if degraded else "")
            + (f", {errors} raised (scored 0)" if errors else ""),
            ["metric", "%", "95% CI"],
            [
                [m, _pct(v["mean"]), f"{_pct(v['low'])}-{_pct(v['high'])}" if v["low"] is not None else "-"]
                for m, v in summary["metrics"].items()
                if m in MAIN_METRICS
            ],
        )
    )
    lat = summary["latency"]
    tables.append(
        (
            "Latency per step, seconds (over questions where the step ran)",
            ["step", "n", "median", "mean", "max"],
            [[s, str(v["n"]), _num(v["median"]), _num(v["mean"]), _num(v["max"])] for s, v in lat.items()],
        )
    )
    usage = summary["usage"]

    def usage_row(name: str, v: Mapping[str, float]) -> list[str]:
        cached = v.get("cached_tokens", 0.0)
        return [name, _num(v["lm_calls"]), _num(v["input_tokens"], 0), _num(cached, 0),
                _num(v["input_tokens"] - cached, 0), _num(v["output_tokens"], 0)]

    rows = [usage_row(s, v) for s, v in usage["per_step"].items()]
    rows.append(usage_row("total", usage["per_question"]))
    tables.append(("LLM usage per question (mean); cached: input tokens the server took from its prompt cache",
                   ["step", "calls", "input tokens", "cached", "evaluated", "output tokens"], rows))
    ep = summary["error_propagation"]
    rows = [[st["name"], str(st["count"]), _pct(st["fraction"])] for st in ep["stages"]]
    g, tt = ep["grounding"], ep["target_type"]
    if g["questions"]:
        rows.append(["grounded set: mean recall", str(g["questions"]), _pct(g["mean_recall"])])
        rows.append(["grounded set: mean precision", str(g["questions"]), _pct(g["mean_precision"])])
        rows.append(["grounded set: median size", str(g["questions"]), _num(g["median_size"], 0)])
        if g["partial"]:
            rows.append(["grounded set only partly traced (recall: lower bound)", str(g["partial"]), ""])
    if tt["known"]:
        rows.append(["target type correct", str(tt["correct"]), _pct(tt["correct"] / tt["known"])])
        lost = tt.get("lost", 0)
        rows.append(["no gold in top k, step 7 searched another type", str(lost), _pct(lost / n if n else None)])
    tables.append(("Error propagation (% of all questions)", ["stage", "questions", "%"], rows))
    if summary["events"]:
        tables.append(
            (
                "Events (degraded, not failed)",
                ["step:kind", "events", "questions"],
                [[k, str(v["events"]), str(v["questions"])] for k, v in summary["events"].items()],
            )
        )
    if degraded:
        tables.append(
            (
                "Degraded questions (an LM call gave no answer, or a work bound cut a step; retried when the run is resumed)",
                ["step: error", "questions"],
                [[k, str(v)] for k, v in summary["degraded"]["causes"].items()],
            )
        )
    if summary["errors"]:
        tables.append(
            (
                "Questions that raised",
                ["error", "questions"],
                [[k, str(v)] for k, v in summary["errors"].items()],
            )
        )
    return tables


def _markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def summary_markdown(summary: Mapping[str, Any], title: str = "Run") -> str:
    parts = [f"# {title}\n"]
    run = summary["run"]
    parts.append(", ".join(f"{k}: `{v}`" for k, v in run.items() if v is not None) + "\n")
    for name, header, rows in summary_tables(summary, title):
        parts.append(f"## {name}\n\n{_markdown_table(header, rows)}\n")
    return "\n".join(parts)


def write_summary(
    run_dir: Path | str, summary: Mapping[str, Any], title: str | None = None
) -> tuple[Path, Path]:
    run_dir = Path(run_dir)
    jpath, mpath = run_dir / SUMMARY_JSON, run_dir / SUMMARY_MD
    jpath.write_text(json.dumps(summary, indent=2) + "\n")
    mpath.write_text(summary_markdown(summary, title or run_dir.name))
    return jpath, mpath


_QUALITY: tuple[tuple[str, str], ...] = (("system", "system"), ("n", "n"), *((m, m) for m in MAIN_METRICS))
_COST: tuple[tuple[str, str], ...] = (
    ("degraded", "degraded"),
    ("errors", "errors"),
    ("lm_calls", "LLM calls/q"),
    ("input_tokens", "tok in/q"),
    ("evaluated_tokens", "tok evaluated/q"),
    ("output_tokens", "tok out/q"),
    ("seconds_median", "s/q mdn"),
)


def comparison_tables(
    rows: Sequence[Mapping[str, Any]], wide: bool
) -> list[tuple[str, list[str], list[list[str]]]]:
    """The runs side by side (one wide table, or quality and cost apart for a terminal), then the tests."""
    quality = [[str(r["system"]), str(r["n"]), *(_pct(r[m]) for m in MAIN_METRICS)] for r in rows]
    cost = [
        [
            str(r["degraded"]),
            str(r["errors"]),
            _num(r["lm_calls"], 1),
            _num(r["input_tokens"], 0),
            _num(r["evaluated_tokens"], 0),
            _num(r["output_tokens"], 0),
            _num(r["seconds_median"]),
        ]
        for r in rows
    ]
    tests = []
    for row in rows[1:]:
        for m in COMPARE_METRICS:
            p, mde = row[f"p_{m}_holm"], row[f"mde_{m}"]
            tests.append(
                [
                    str(row["system"]),
                    m,
                    str(row["n_common"]),
                    f"{100 * row[f'd_{m}']:+.1f}",
                    f"[{100 * row[f'd_{m}_low']:+.1f}, {100 * row[f'd_{m}_high']:+.1f}]",
                    "-" if mde is None else f"{100 * mde:.1f}",
                    _num(row[f"p_{m}"], 3),
                    _num(p, 3),
                    "yes" if p is not None and p < ALPHA else "no",
                ]
            )
    q_head, c_head = [h for _, h in _QUALITY], [h for _, h in _COST]
    if wide:
        runs = [
            (
                "Comparison (metrics in %)",
                q_head + c_head,
                [q + c for q, c in zip(quality, cost, strict=True)],
            )
        ]
    else:
        runs = [
            ("Comparison (metrics in %)", q_head, quality),
            (
                "Cost per question",
                ["system", *c_head],
                [[q[0], *c] for q, c in zip(quality, cost, strict=True)],
            ),
        ]
    paired = (
        f"Paired differences from {rows[0]['system']} (percentage points)",
        ["system", "metric", "questions", "Δ", "95% CI", "detectable", "p", "p Holm", "p Holm < 0.05"],
        tests,
    )
    return [*runs, paired] if tests else runs


COMPARISON_NOTE = (
    "Δ: difference from the first system on the questions both ran; 95% CI: paired bootstrap; "
    "detectable: the difference these questions detect with 80% power (normal approximation, this pair's spread); "
    "p: exact McNemar for 0/1 metrics (hit@k), sign-flip permutation test otherwise (MRR); "
    "p Holm: adjusted for the comparisons made (per metric)."
)


def comparison_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    tables = comparison_tables(rows, wide=True)
    parts = [f"## {name}\n\n{_markdown_table(header, body)}\n" for name, header, body in tables]
    return "# Comparison\n\n" + "\n".join(parts) + f"\n{COMPARISON_NOTE}\n"


def comparison_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """All numbers unrounded, one row per system."""
    fields = list(dict.fromkeys(k for row in rows for k in row))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
