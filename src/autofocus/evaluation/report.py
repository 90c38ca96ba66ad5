"""Summaries of runs and paired comparisons of runs, from their ``traces.jsonl``.

A summary holds every metric with its 95% interval (``evaluation.statistics``), LM usage, latency,
the error-propagation funnel, events and the degraded share; a comparison pairs each run with the
first on the questions both answered. A question whose program raised scores 0 on every metric: a
failure is a miss, and the error count is shown. A degraded question (an LM call gave no answer and
the program fell back) keeps the metrics of its fallback ranking; the degraded share is shown beside
every result, since a run with a dead LM server otherwise looks like a run of a bad method. Their
text forms are ``evaluation.report_tables``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autofocus.evaluation.statistics import holm, mean_ci, paired_test
from autofocus.evaluation.traces import TRACES_FILE, latest_by_id, read_traces

MAIN_METRICS: tuple[str, ...] = ("hit@1", "hit@5", "hit@20", "recall@20", "mrr")
COMPARE_METRICS: tuple[str, ...] = ("hit@1", "mrr")


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
