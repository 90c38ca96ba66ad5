"""Summaries of runs and paired comparisons of runs, from their ``traces.jsonl``.

Users compare systems on a few dozen questions, so every mean comes with a 95% interval (Wilson
for 0/1 metrics, percentile bootstrap otherwise) and every comparison is paired on the same
questions (exact McNemar for 0/1 metrics, a sign-flip permutation test otherwise). Research
users test many variants on one split, so with several comparisons each p-value also comes
Holm-adjusted, and each difference with the smallest one the split could detect (80 % power): a
"within noise" then says whether the split was ever big enough to tell. A question
whose program raised scores 0 on every metric: a failure is a miss, and the error count is shown.
A degraded question (an LM call gave no answer and the program fell back) keeps the metrics of its
fallback ranking; the degraded share is shown beside every result, since a run with a dead LM
server otherwise looks like a run of a bad method.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from autofocus.evaluation.traces import TRACES_FILE, latest_by_id, read_traces

MAIN_METRICS: tuple[str, ...] = ("hit@1", "hit@5", "hit@20", "recall@20", "mrr")
COMPARE_METRICS: tuple[str, ...] = ("hit@1", "mrr")
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
N_RESAMPLES = 2000
ALPHA = 0.05
POWER = 0.8


@dataclass
class Run:
    """A run directory read back: its manifest and one record per question (latest attempt)."""

    path: Path
    manifest: dict[str, Any]
    records: list[dict[str, Any]]

    @property
    def name(self) -> str:
        return str(self.manifest.get("system") or self.path.name)


def load_run(path: Path | str) -> Run:
    path = Path(path)
    tpath = path / TRACES_FILE
    if not tpath.exists():
        raise FileNotFoundError(f"{path} is not a run directory: {TRACES_FILE} not found")
    records, _ = read_traces(tpath, repair=False)
    mpath = path / "manifest.json"
    manifest = json.loads(mpath.read_text()) if mpath.exists() else {}
    return Run(path, manifest, by_id(latest_by_id(records).values()))


def by_id(records: Iterable[Mapping[str, Any]]) -> list[Any]:
    """Records in question-id order: the intervals resample them with a fixed seed, so two runs with
    the same results give the same intervals whatever order their questions finished in."""
    return sorted(records, key=lambda r: int(r["id"]))


def expected_questions(manifest: Mapping[str, Any]) -> int | None:
    """How many questions the run's last session set out to answer (None: a manifest that does not say)."""
    sessions = manifest.get("sessions") or []
    last = sessions[-1] if sessions and isinstance(sessions[-1], Mapping) else {}
    if "questions" in last:
        return int(last["questions"])
    if "todo" in last and "skipped" in last:  # runs from before sessions recorded it
        return int(last["todo"]) + int(last["skipped"])
    return None


def natural_key(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def has_ranking(record: Mapping[str, Any]) -> bool:
    """Whether the question finished with a ranking (``ok`` or ``degraded``), not with an error."""
    return record.get("status") in ("ok", "degraded")


def metric_values(records: Sequence[Mapping[str, Any]], name: str) -> np.ndarray:
    """Per-question values of one metric, 0 for questions that raised."""
    return np.array(
        [float(r["metrics"].get(name, 0.0)) if has_ranking(r) else 0.0 for r in records],
        dtype=np.float64,
    )


def _is_binary(x: np.ndarray) -> bool:
    return bool(np.all((x == 0) | (x == 1)))


def mean_ci(x: np.ndarray, seed: int = 0) -> dict[str, Any]:
    """Mean with a 95% interval: Wilson for 0/1 values, percentile bootstrap otherwise."""
    n = int(x.size)
    if n == 0:
        return {"mean": None, "low": None, "high": None, "ci": None}
    mean = float(x.mean())
    if _is_binary(x):
        ci = stats.binomtest(int(x.sum()), n).proportion_ci(confidence_level=0.95, method="wilson")
        return {"mean": mean, "low": float(ci.low), "high": float(ci.high), "ci": "wilson"}
    low, high = bootstrap_ci(x, seed)
    return {"mean": mean, "low": low, "high": high, "ci": "bootstrap"}


def bootstrap_ci(x: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of the mean (the mean itself when every value is the same)."""
    if x.size < 2 or np.all(x == x[0]):
        mean = float(x.mean())
        return mean, mean
    ci = stats.bootstrap(
        (x,), np.mean, n_resamples=N_RESAMPLES, method="percentile", vectorized=True, rng=np.random.default_rng(seed)
    ).confidence_interval
    return float(ci.low), float(ci.high)


def _describe(values: Iterable[float]) -> dict[str, Any]:
    x = np.asarray(list(values), dtype=np.float64)
    if x.size == 0:
        return {"n": 0, "median": None, "mean": None, "max": None}
    return {"n": int(x.size), "median": float(np.median(x)), "mean": float(x.mean()), "max": float(x.max())}


def step_seconds(records: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Seconds of each step over the successful questions where it ran, steps in pipeline order."""
    per_step: dict[str, list[float]] = {}
    for r in records:
        if not has_ranking(r):
            continue
        for step, rec in ((r.get("trace") or {}).get("steps") or {}).items():
            per_step.setdefault(step, []).append(float(rec.get("seconds", 0.0)))
    return {step: per_step[step] for step in sorted(per_step, key=natural_key)}


def _latency(ok: Sequence[Mapping[str, Any]], all_records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-step seconds over the questions where the step ran (the paper's Table 8), plus the total."""
    out = {step: _describe(v) for step, v in step_seconds(ok).items()}
    out["total"] = _describe(float(r.get("seconds", 0.0)) for r in all_records)
    return out


def _usage(ok: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """LLM calls and tokens per question (the paper's Table 7), in total and per step; ``cached_tokens``
    are the input tokens a server reused from its prompt cache instead of evaluating them."""
    keys = ("lm_calls", "input_tokens", "output_tokens", "cached_tokens")
    steps: dict[str, np.ndarray] = {}
    totals = np.zeros((len(ok), len(keys)))
    for row, r in enumerate(ok):
        for step, rec in ((r.get("trace") or {}).get("steps") or {}).items():
            vals = np.array([float(rec.get(k, 0)) for k in keys])
            steps.setdefault(step, np.zeros((len(ok), len(keys))))[row] += vals
            totals[row] += vals
    n = max(len(ok), 1)
    per_step = {
        s: {k: float(steps[s][:, j].sum() / n) for j, k in enumerate(keys)}
        for s in sorted(steps, key=natural_key)
        if steps[s][:, 0].any() or steps[s][:, 1:].any()
    }
    return {
        "per_question": {k: float(totals[:, j].sum() / n) for j, k in enumerate(keys)},
        "max_per_question": {k: float(totals[:, j].max()) if len(ok) else 0.0 for j, k in enumerate(keys)},
        "per_step": per_step,
    }


def _flag(r: Mapping[str, Any], name: str) -> bool | None:
    return ((r.get("trace") or {}).get("flags") or {}).get(name)


def _error_propagation(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The paper's Figure 3 funnel: how many questions survive each stage, out of all of them.

    A stage is listed only when some question reached the step that sets it, so baselines
    without a graph strand show just the final hit rate.
    """
    n = len(records)
    ok = [r for r in records if has_ranking(r)]

    def derived(r: Mapping[str, Any]) -> Mapping[str, Any]:
        return r.get("derived") or {}

    def nonempty(r: Mapping[str, Any]) -> bool | None:
        flag = _flag(r, "grounded_nonempty")
        if flag is not None:
            return flag
        size = derived(r).get("grounded_size")
        return None if size is None else size > 0

    candidates: list[tuple[str, list[bool | None]]] = [
        ("valid Cypher", [_flag(r, "valid_cypher") for r in ok]),
        ("has a triplet", [_flag(r, "has_triplet") for r in ok]),
        (
            "triplet and constant",
            [
                None
                if _flag(r, "has_triplet") is None
                else bool(_flag(r, "has_triplet") and _flag(r, "has_constant"))
                for r in ok
            ],
        ),
        ("non-empty grounding", [nonempty(r) for r in ok]),
        ("gold in grounded set", [derived(r).get("gold_in_grounded") for r in ok]),
        ("gold from grounded strand in top k", [_strand_hit(r, ("grounded", "both")) for r in ok]),
        ("gold from VSS strand in top k", [_strand_hit(r, ("vss", "both")) for r in ok]),
    ]
    stages = [{"name": "questions", "count": n, "fraction": 1.0 if n else None}]
    for name, values in candidates:
        if any(v is not None for v in values):
            count = sum(1 for v in values if v)
            stages.append({"name": name, "count": count, "fraction": count / n if n else None})
    hit20 = int(metric_values(records, "hit@20").sum())
    stages.append({"name": "hit@20 (final)", "count": hit20, "fraction": hit20 / n if n else None})

    grounded = [derived(r) for r in ok if (derived(r).get("grounded_size") or 0) > 0]
    recalls = [d["grounded_recall"] for d in grounded if d.get("grounded_recall") is not None]
    precisions = [d["grounded_precision"] for d in grounded if d.get("grounded_precision") is not None]
    sizes = [d["grounded_size"] for d in grounded]
    tt = [derived(r).get("target_type_correct") for r in ok]
    in_top = dict(zip((id(r) for r in records), metric_values(records, "hit@20"), strict=True))
    searched = [derived(r).get("step7_type_correct", derived(r).get("target_type_correct")) for r in ok]  # older runs
    lost = [s is False and not in_top[id(r)] for s, r in zip(searched, ok, strict=True)]
    return {
        "stages": stages,
        "grounding": {
            "questions": len(grounded),
            "mean_recall": float(np.mean(recalls)) if recalls else None,
            "mean_precision": float(np.mean(precisions)) if precisions else None,
            "median_size": float(np.median(sizes)) if sizes else None,
            "partial": sum(1 for d in grounded if d.get("grounded_ids_partial")),
        },
        "target_type": {"known": sum(v is not None for v in tt), "correct": sum(1 for v in tt if v),
                        "lost": sum(lost)},
    }


def _strand_hit(r: Mapping[str, Any], strands: tuple[str, ...]) -> bool | None:
    """Whether a gold answer in the ranking came from the given strand(s) (``trace.data["strand"]``)."""
    strand = ((r.get("trace") or {}).get("data") or {}).get("strand")
    if not isinstance(strand, Mapping):
        return None
    gold = {str(g) for g in r.get("gold", [])}
    return any(s in strands for i, s in strand.items() if i in gold)


def _events(ok: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    events: Counter[str] = Counter()
    questions: Counter[str] = Counter()
    for r in ok:
        kinds = [
            f"{e.get('step', '?')}:{e.get('kind', '?')}" for e in (r.get("trace") or {}).get("events") or []
        ]
        events.update(kinds)
        questions.update(set(kinds))
    return {k: {"events": events[k], "questions": questions[k]} for k in sorted(events, key=natural_key)}


def _degraded(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How many questions ran on a fallback after an LM outage, and where and why."""
    hit = [r for r in records if r.get("status") == "degraded"]
    causes: Counter[str] = Counter()
    for r in hit:
        causes.update({f"{d.get('step', '?')}: {str(d.get('error', '')).split(':')[0]}" for d in r.get("degraded") or []})
    return {
        "questions": len(hit),
        "share": len(hit) / len(records) if records else 0.0,
        "causes": dict(sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def summarize(
    records: Sequence[Mapping[str, Any]],
    manifest: Mapping[str, Any] | None = None,
    metrics: Sequence[str] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Everything the summary tables show, as plain JSON values. ``n_ok`` counts the questions answered
    by the method itself (not degraded, not raised); ``expected`` is how many the run set out to
    answer, and ``complete`` whether every one has a line (a killed or still running run has not)."""
    records = by_id(records)
    ok = [r for r in records if has_ranking(r)]
    names = list(metrics) if metrics is not None else _metric_names(ok)
    manifest = manifest or {}
    expected = expected_questions(manifest)
    return {
        "run": {
            "system": manifest.get("system"),
            "split": manifest.get("split"),
            "limit": manifest.get("limit"),
            "skb": (manifest.get("skb") or {}).get("path"),
            "ranked_by": ranked_by(manifest, ok),
        },
        "n": len(records),
        "expected": expected,
        "complete": expected is None or len(records) >= expected,
        "n_ok": sum(1 for r in ok if r.get("status") == "ok"),
        "n_degraded": sum(1 for r in ok if r.get("status") == "degraded"),
        "n_errors": len(records) - len(ok),
        "errors": Counter(str(r.get("error", "")).split(":")[0] for r in records if not has_ranking(r)),
        "degraded": _degraded(records),
        "metrics": {m: mean_ci(metric_values(records, m), seed) for m in names},
        "latency": _latency(ok, records),
        "usage": _usage(ok),
        "error_propagation": _error_propagation(records),
        "events": _events(ok),
    }


def ranked_by(manifest: Mapping[str, Any], ok: Sequence[Mapping[str, Any]]) -> str | None:
    """Step 8's method as the run's traces record it, with the trained model's folder and size where a
    program made by ``autofocus adapt`` ranked it; None where no question was reranked."""
    methods = Counter(((r.get("trace") or {}).get("data") or {}).get("rerank", {}).get("method") for r in ok)
    methods.pop(None, None)
    if not methods:
        return None
    method = methods.most_common(1)[0][0]
    trained = (manifest.get("trained") or {}).get("reranker") or {}
    if method in ("cross-encoder", "bi-encoder") and trained:
        folder = (manifest.get("trained") or {}).get("folder")
        return f"{method} {folder} ({trained.get('pairs')} pairs, {trained.get('epochs')} epochs)"
    return str(method)


def _metric_names(ok: Sequence[Mapping[str, Any]]) -> list[str]:
    present = {k for r in ok for k in r.get("metrics", {})}
    main = [m for m in MAIN_METRICS if m in present or not ok]
    rest = sorted(present - set(main), key=lambda k: (k.split("@")[0], natural_key(k)))
    return main + rest


# --- paired comparison --------------------------------------------------------------------------------


def paired_test(a: np.ndarray, b: np.ndarray, seed: int = 0) -> dict[str, Any]:
    """Mean of ``b - a`` with a paired bootstrap 95% interval and a two-sided p-value.

    0/1 metrics use the exact McNemar test (a binomial test on the discordant pairs); others a
    sign-flip permutation test on the mean difference (exact when 2^n <= 9999).
    """
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    n = int(d.size)
    binary = _is_binary(a) and _is_binary(b)
    out: dict[str, Any] = {"n": n, "test": "mcnemar-exact" if binary else "sign-flip permutation"}
    if n == 0:
        return {
            **out,
            "mde": None,
            "a": None,
            "b": None,
            "diff": None,
            "low": None,
            "high": None,
            "p": None,
            "significant": False,
        }
    low, high = bootstrap_ci(d, seed)
    out.update(a=float(np.mean(a)), b=float(np.mean(b)), diff=float(d.mean()), low=low, high=high,
               mde=detectable_difference(d))  # fmt: skip
    if binary:
        b_only, a_only = int(((a == 0) & (b == 1)).sum()), int(((a == 1) & (b == 0)).sum())
        out["discordant"] = [a_only, b_only]
        out["p"] = float(stats.binomtest(b_only, a_only + b_only).pvalue) if a_only + b_only else 1.0
    elif n < 2 or not d.any():
        out["p"] = 1.0
    else:
        res = stats.permutation_test(
            (d,),
            np.mean,
            permutation_type="samples",
            vectorized=True,
            n_resamples=9999,
            rng=np.random.default_rng(seed),
        )
        out["p"] = float(res.pvalue)
    out["significant"] = out["p"] < ALPHA
    return out


def detectable_difference(d: np.ndarray) -> float | None:
    """The mean paired difference a two-sided test at ``ALPHA`` finds with probability ``POWER`` on
    ``len(d)`` questions, from these differences' own spread (normal approximation): the size of
    effect this split can resolve, to read beside a "within noise"."""
    if d.size < 2 or not d.any():  # no spread to estimate it from
        return None
    z = stats.norm.ppf(1 - ALPHA / 2) + stats.norm.ppf(POWER)
    return float(z * np.std(d, ddof=1) / np.sqrt(d.size))


def holm(pvalues: Sequence[float | None], comparisons: int | None = None) -> list[float | None]:
    """Holm's step-down adjustment of ``pvalues`` (None stays None) as if ``comparisons`` tests
    were made in all (default: these). Tests made elsewhere on the same split are assumed to have
    larger p-values, which can only make the adjustment stricter than Holm's own."""
    known = [(p, i) for i, p in enumerate(pvalues) if p is not None]
    m = max(comparisons or 0, len(known))
    out: list[float | None] = [None] * len(pvalues)
    if not known:
        return out
    order = sorted(known)
    scaled = np.array([(m - rank) * p for rank, (p, _) in enumerate(order)])
    adjusted = np.minimum(np.maximum.accumulate(scaled), 1.0)
    for (_, i), q in zip(order, adjusted, strict=True):
        out[i] = float(q)
    return out


def compare_runs(
    base: Run, other: Run, metrics: Sequence[str] = COMPARE_METRICS, seed: int = 0
) -> dict[str, Any]:
    """``other`` minus ``base`` on the questions both answered (errors count as 0)."""
    a = {int(r["id"]): r for r in base.records}
    b = {int(r["id"]): r for r in other.records}
    common = sorted(i for i in a if i in b)  # id order: the bootstrap's resamples do not depend on line order
    if not common:
        raise ValueError(f"{base.path} and {other.path} have no question in common")
    ra, rb = [a[i] for i in common], [b[i] for i in common]
    return {
        "n_common": len(common),
        "metrics": {m: paired_test(metric_values(ra, m), metric_values(rb, m), seed) for m in metrics},
    }


def comparison_rows(
    runs: Sequence[Run], names: Sequence[str] | None = None, seed: int = 0, comparisons: int | None = None
) -> list[dict[str, Any]]:
    """One row per run: main metrics, LLM usage, latency, and the paired test against the first run
    (p Holm-adjusted over the runs compared, or over ``comparisons`` tests on this split in all)."""
    names = list(names) if names is not None else [r.name for r in runs]
    rows: list[dict[str, Any]] = []
    for idx, (name, run) in enumerate(zip(names, runs, strict=True)):
        s = summarize(run.records, run.manifest, MAIN_METRICS, seed)
        row: dict[str, Any] = {
            "system": name, "n": s["n"], "errors": s["n_errors"], "degraded": s["degraded"]["questions"],
        }
        row.update({m: s["metrics"][m]["mean"] for m in MAIN_METRICS})
        usage = s["usage"]["per_question"]
        row.update(
            lm_calls=usage["lm_calls"],
            input_tokens=usage["input_tokens"],
            evaluated_tokens=usage["input_tokens"] - usage.get("cached_tokens", 0.0),
            output_tokens=usage["output_tokens"],
            seconds_median=s["latency"]["total"]["median"],
        )
        if idx:
            cmp = compare_runs(runs[0], run, COMPARE_METRICS, seed)
            row["n_common"] = cmp["n_common"]
            for m, t in cmp["metrics"].items():
                row[f"d_{m}"] = t["diff"]
                row[f"d_{m}_low"] = t["low"]
                row[f"d_{m}_high"] = t["high"]
                row[f"p_{m}"] = t["p"]
                row[f"mde_{m}"] = t["mde"]
        rows.append(row)
    for m in COMPARE_METRICS:
        for row, q in zip(rows[1:], holm([r[f"p_{m}"] for r in rows[1:]], comparisons), strict=True):
            row[f"p_{m}_holm"] = q
    return rows


# --- rendering -----------------------------------------------------------------------------------------


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
