"""Run a program over a QA split: concurrent, streamed to ``traces.jsonl``, resumable.

A run directory holds ``manifest.json`` (what was run: system, config, split, SKB fingerprint,
versions, LMs) and ``traces.jsonl`` (one line per finished question). Rerunning into the same
directory skips finished questions and retries failed and degraded ones; a different system, config,
split, SKB or program file is refused unless the caller starts a new run (``resume=False``), which
moves the old files into ``previous-<time>/``.

A line's ``status`` is ``ok``, ``degraded`` (it has a ranking, but an LM call gave no answer and the
program fell back: ``degraded`` names the steps and errors, see ``autofocus.trace.Degradation``) or
``error`` (the program raised). Error texts are redacted (``autofocus.redact``).
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import platform
import queue
import shutil
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from autofocus import paths
from autofocus.config import flat_settings
from autofocus.evaluation.traces import (
    RECORD_VERSION,
    TRACES_FILE,
    TraceWriter,
    latest_by_id,
    read_traces,
    to_jsonable,
)
from autofocus.metrics import DEFAULT_KS, Candidates, as_candidates, compute_metrics, prepare
from autofocus.progress import Reporter, reporter_or_log
from autofocus.redact import redact
from autofocus.trace import Trace

if TYPE_CHECKING:
    from autofocus.config import AutofocusConfig
    from autofocus.skb.model import SKB

MANIFEST_FILE = "manifest.json"
RANKED_KEPT = 100
METRIC_KS = (*DEFAULT_KS, 50, 100)


class QuestionLike(Protocol):
    id: int
    query: str
    answer_ids: list[int]


class RunMismatchError(RuntimeError):
    """The run directory cannot be resumed: it holds a different run (the message lists the
    differences) or its files are damaged (the message names the file and line)."""


RESTART_HINT = "Use another --out directory, or --force-new to move the old run aside and start again."
LOCK_FILE = ".lock"  # held by the one process that writes the run (``_sole_writer``)


class RunBusyError(RunMismatchError):
    """Another process is writing the run directory (its lock is held): running the same questions
    twice, or moving the directory away under it (``--force-new``), would mix or lose results."""


@contextmanager
def _sole_writer(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir``'s lock for the whole run, or raise ``RunBusyError`` at once."""
    try:
        with paths.locked(out_dir / LOCK_FILE, wait=False):
            yield
    except paths.Busy as exc:
        raise RunBusyError(
            f"{out_dir} is being written by {exc.holder} (another `autofocus eval` or run on the same --out); "
            "wait for it to finish, or use another --out directory"
        ) from None


@dataclass
class EvalResult:
    out_dir: Path
    total: int  # questions in this run (after ``limit``)
    skipped: int  # already finished before this call
    finished: int  # finished in this call, degraded ones included
    errors: int  # raised in this call (retried on the next resume)
    interrupted: bool
    degraded: int = 0  # finished in this call on a fallback after an LM outage (retried on the next resume)

    @property
    def complete(self) -> bool:
        return (
            not self.interrupted
            and self.errors == self.degraded == 0
            and self.skipped + self.finished == self.total
        )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_manifest(
    *,
    system: str,
    config: AutofocusConfig | Mapping[str, Any] | None,
    split: str | None,
    limit: int | None = None,
    skb_path: Path | str | None = None,
    skb_fingerprint: str | None = None,
    index_checksums: Mapping[str, str] | None = None,
    lms: Mapping[str, Any] | None = None,
    program_file: Path | str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything needed to reproduce or refuse to mix runs; LMs default to the config's ``lm``."""
    import dspy

    from autofocus._version import __version__

    cfg = (
        config.model_dump(mode="json")
        if hasattr(config, "model_dump")
        else (dict(config) if config else None)
    )
    manifest: dict[str, Any] = {
        "system": system,
        "split": split,
        "limit": limit,
        "config": cfg,
        "skb": {"path": str(skb_path) if skb_path else None, "fingerprint": skb_fingerprint},
        "index_checksums": dict(index_checksums or {}),
        "lms": dict(lms) if lms is not None else flat_settings(cfg or {}).get("lm"),
        "program": {"path": str(program_file), "sha256": file_sha256(Path(program_file))}
        if program_file
        else None,
        "versions": {
            "autofocus": __version__,
            "dspy": dspy.__version__,
            "numpy": np.__version__,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        "created": _now(),
    }
    if extra:
        manifest["extra"] = to_jsonable(dict(extra))
    return manifest


# settings (flat names) that change how fast a run goes, or how long it waits for an LM, not its results
EXECUTION_ONLY = frozenset({"concurrency", "lm_concurrency", "question_deadline_s", "scan_ahead", "scan_shards"})
WAITS = ("question_deadline_s", "max_question_chars", "lm.timeout_s", "lm.num_retries")


def without_waits(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config dump (grouped or flat), flat (``flat_settings``) and without how long to wait for an
    LM or how long a question it takes (``WAITS``): that changes which questions end degraded or
    refused, which are retried, never what an answered question scores. Flat, a run or study made before the settings were grouped still
    matches its config."""
    out = {k: v for k, v in flat_settings(config).items() if k not in WAITS}
    if isinstance(out.get("lm"), Mapping):
        out["lm"] = {k: v for k, v in out["lm"].items() if f"lm.{k}" not in WAITS}
    return out


def _identity(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The fields that must match for a resume to mix old and new lines in one run."""
    config = manifest.get("config")
    if isinstance(config, Mapping):
        config = {k: v for k, v in without_waits(config).items() if k not in EXECUTION_ONLY}
    return {
        "system": manifest.get("system"),
        "split": manifest.get("split"),
        "config": config,
        "skb.fingerprint": (manifest.get("skb") or {}).get("fingerprint"),
        "program.sha256": (manifest.get("program") or {}).get("sha256"),
    }


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def manifest_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``key: old -> new`` lines for the identity fields that differ."""
    a, b = _flatten(_identity(old)), _flatten(_identity(new))
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    paths.replace_atomically(path, json.dumps(to_jsonable(data), indent=2, ensure_ascii=False) + "\n")


def _archive(out_dir: Path) -> Path | None:
    """Move a previous run's files aside instead of deleting them."""
    names = [p for p in out_dir.iterdir() if not p.name.startswith("previous-") and p.name != LOCK_FILE]
    if not names:
        return None
    dest = out_dir / f"previous-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%f')}"
    dest.mkdir()
    for p in names:
        shutil.move(str(p), dest / p.name)
    return dest


def _derived(
    trace: Trace | None, gold: list[int], candidates: Candidates | None, skb: SKB | None
) -> dict[str, Any]:
    """Error-propagation numbers that need the gold answers: grounding recall, target type correct."""
    out: dict[str, Any] = {}
    data = trace.data if trace is not None else {}
    grounded = data.get("grounded_ids")
    if grounded is not None:
        g_ids, gold_c = prepare(np.asarray(grounded, dtype=np.int64).ravel(), gold, candidates)
        hits = int(np.isin(gold_c, g_ids).sum())
        # a program may list only part of a huge grounded set and give its size in ``num_grounded``:
        # then the recall below is a lower bound, flagged as such
        size = max(int(data.get("num_grounded") or 0), int(g_ids.size))
        out["grounded_size"] = size
        if size > g_ids.size:
            out["grounded_ids_partial"] = True
        out["gold_in_grounded"] = hits > 0
        out["grounded_recall"] = hits / gold_c.size if gold_c.size else None
        out["grounded_precision"] = hits / size if size else None
    predicted = data.get("target_type")
    if skb is not None and predicted is not None and gold:
        g = np.asarray(gold, dtype=np.int64)
        g = g[(g >= 0) & (g < skb.num_nodes)]
        gold_types = sorted({skb.node_type_names[c] for c in np.unique(skb.node_type[g])})
        pred = {predicted} if isinstance(predicted, str) else set(predicted)
        out["gold_types"] = gold_types
        out["target_type_correct"] = bool(pred & set(gold_types)) if gold_types else None
        searched = data.get("step7_types")  # the types step 7 searched (step 1's, in runs that predate it)
        searched = pred if searched is None else set(searched)
        out["step7_type_correct"] = bool(searched & set(gold_types)) if gold_types else None
    return out


def evaluate_one(
    program: Callable[..., Any],
    item: QuestionLike,
    candidates: Candidates | None = None,
    skb: SKB | None = None,
    deadline_s: float | None = None,
) -> dict[str, Any]:
    """Run one question and build its trace line; an exception becomes an error line, an LM outage a
    degraded one. After ``deadline_s`` seconds the question makes no further LM calls (it finishes on
    its fallbacks, degraded)."""
    from autofocus.usage import question_deadline

    start = time.perf_counter()
    base = {
        "v": RECORD_VERSION,
        "id": int(item.id),
        "query": item.query,
        "gold": [int(a) for a in item.answer_ids],
    }
    try:
        with question_deadline(deadline_s):
            pred = program(question=item.query)
        ranked_raw = getattr(pred, "ranked_ids", None)
        if ranked_raw is None:
            raise TypeError(f"the program returned {type(pred).__name__} without `ranked_ids`")
        ranked = np.asarray(ranked_raw, dtype=np.int64).ravel()
        trace = getattr(pred, "trace", None)
        if isinstance(trace, Mapping):
            trace = Trace.model_validate(trace)
        if trace is not None and not isinstance(trace, Trace):
            raise TypeError(f"`trace` must be an autofocus.trace.Trace, got {type(trace).__name__}")
        metrics = compute_metrics(ranked, item.answer_ids, candidates, ks=METRIC_KS)
        degraded = [d.model_dump() for d in trace.degraded] if trace is not None else []
        record = {
            **base,
            "status": "degraded" if degraded else "ok",
            "ranked": ranked[:RANKED_KEPT].tolist(),
            "n_ranked": int(ranked.size),
            "metrics": metrics,
            "derived": _derived(trace, base["gold"], candidates, skb),
            "trace": to_jsonable(trace.model_dump(mode="python")) if trace is not None else None,
        }
        if degraded:
            record["degraded"] = degraded
    except Exception as exc:
        record = {
            **base,
            "status": "error",
            "error": redact(f"{type(exc).__name__}: {exc}"[:4000])[:2000],
            "traceback": redact(traceback.format_exc()[-8000:]),
        }
    record["seconds"] = time.perf_counter() - start
    record["finished_at"] = _now()
    return record


def _prepare_dir(
    out_dir: Path, manifest: Mapping[str, Any], resume: bool, reporter: Reporter
) -> dict[str, Any]:
    """Open or start the run in ``out_dir``; returns the manifest to keep updating."""
    out_dir.mkdir(parents=True, exist_ok=True)
    mpath, tpath = out_dir / MANIFEST_FILE, out_dir / TRACES_FILE
    if not resume:
        moved = _archive(out_dir)
        if moved is not None:
            reporter.note(f"Starting a new run; the previous files are in {moved}", "warning")
    elif mpath.exists():
        try:
            old = json.loads(mpath.read_text())
            if not isinstance(old, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as exc:
            raise RunMismatchError(f"{mpath} cannot be read ({exc}). {RESTART_HINT}") from None
        diff = manifest_diff(old, manifest)
        if diff:
            raise RunMismatchError(
                f"{out_dir} holds a different run; refusing to mix results:\n  "
                + "\n  ".join(diff)
                + f"\n{RESTART_HINT}"
            )
        changed = [k for k in ("versions", "index_checksums", "lms") if old.get(k) != manifest.get(k)]
        if changed:
            reporter.note(f"Resuming {out_dir}; note that {', '.join(changed)} changed since it started.", "warning")
        old.setdefault("sessions", [])
        return old
    elif tpath.exists() and tpath.stat().st_size:
        raise RunMismatchError(
            f"{tpath} exists without {MANIFEST_FILE}, so it cannot be checked against this run; "
            "use another --out directory or --force-new."
        )
    return {**manifest, "sessions": []}


def run_eval(
    program_factory: Callable[[], Callable[..., Any]],
    items: Sequence[QuestionLike],
    out_dir: Path | str,
    *,
    manifest: Mapping[str, Any] | None = None,
    concurrency: int = 1,
    deadline_s: float | None = None,
    limit: int | None = None,
    resume: bool = True,
    skb: SKB | None = None,
    reporter: Reporter | None = None,
) -> EvalResult:
    """Evaluate a program on ``items[:limit]``, streaming one trace line per finished question.

    Args:
        program_factory: builds the program; called once per worker thread, so that programs
            with per-call state never share it between threads.
        items: questions (``id``, ``query``, ``answer_ids``), e.g. from ``autofocus.skb.qa.load_qa``.
        out_dir: the run directory (created; resumed when it holds the same run).
        manifest: from ``build_manifest``; checked against the directory's on resume.
        concurrency: worker threads (each copies the caller's context: DSPy settings, usage scopes).
        deadline_s: per question: after this many seconds it makes no further LM calls and is
            recorded as degraded (``evaluate_one``).
        limit: only the first ``limit`` questions.
        resume: False moves a previous run aside and starts again (``--force-new``).
        skb: gives candidate ids (STaRK metric semantics) and node types (target type correct).
        reporter: told the progress (task: the run folder's name; stats: the running hit@1) and
            what the user should know (a resumed or restarted run, questions that raised or degraded);
            None: warnings to the ``autofocus`` logger.

    Returns an ``EvalResult``; a Ctrl-C (or a ``KeyboardInterrupt`` raised by the program)
    stops the run, keeps the finished lines and returns with ``interrupted=True``. Questions
    still running then are dropped and run again on resume. A run directory has one writer: while
    another run (another process) writes to ``out_dir``, this raises ``RunBusyError`` and touches nothing.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    reporter = reporter_or_log(reporter)
    out_dir = Path(out_dir)
    selected = list(items[:limit] if limit is not None else items)
    ids = [int(it.id) for it in selected]
    if len(set(ids)) != len(ids):
        dup = sorted(i for i, c in Counter(ids).items() if c > 1)[:10]
        raise ValueError(f"question ids must be unique; repeated: {dup}")

    out_dir.mkdir(parents=True, exist_ok=True)
    with _sole_writer(out_dir):
        return _run_locked(program_factory, selected, out_dir, manifest or {}, concurrency=concurrency,
                           deadline_s=deadline_s, limit=limit, resume=resume, skb=skb,
                           reporter=reporter)


def _run_locked(
    program_factory: Callable[[], Callable[..., Any]], selected: list[QuestionLike], out_dir: Path, manifest: Mapping[str, Any], *, concurrency: int, deadline_s: float | None, limit: int | None,
    resume: bool, skb: SKB | None, reporter: Reporter,
) -> EvalResult:
    """``run_eval`` with the run directory's lock held (``_sole_writer``)."""
    from autofocus.usage import cancel_pending, install_usage_callback

    ids = [int(it.id) for it in selected]
    cand = as_candidates(skb.candidate_ids if skb is not None else None)
    run_manifest = _prepare_dir(out_dir, manifest, resume, reporter)
    try:
        records, dropped = read_traces(out_dir / TRACES_FILE)
    except ValueError as exc:  # a damaged line before the last one: not what a crash leaves
        raise RunMismatchError(f"{exc}. {RESTART_HINT}") from None
    if dropped:
        reporter.note(f"Removed a truncated last line ({dropped} bytes) from {out_dir / TRACES_FILE}", "warning")
    latest = latest_by_id(records)
    wanted = set(ids)
    done_before = {i: r for i, r in latest.items() if i in wanted and r["status"] == "ok"}
    todo = [it for it in selected if int(it.id) not in done_before]

    session: dict[str, Any] = {
        "started": _now(),
        "limit": limit,
        "questions": len(selected),  # what a complete run has (``report`` says when lines are missing)
        "todo": len(todo),
        "skipped": len(done_before),
    }
    run_manifest["sessions"].append(session)
    _write_json(out_dir / MANIFEST_FILE, run_manifest)
    install_usage_callback()
    cancel_pending(False)

    hits = sum(r["metrics"]["hit@1"] for r in done_before.values())
    scored = len(done_before)
    finished = errors = degraded = 0
    interrupted = False
    failure: BaseException | None = None

    work: queue.Queue[QuestionLike] = queue.Queue()
    for it in todo:
        work.put(it)
    results: queue.Queue[tuple[str, Any]] = queue.Queue()
    stop = threading.Event()
    gate = threading.Lock()
    base_ctx = contextvars.copy_context()
    writer = TraceWriter(out_dir / TRACES_FILE)

    def worker() -> None:
        program: Callable[..., Any] | None = None
        while not stop.is_set():
            try:
                item = work.get_nowait()
            except queue.Empty:
                return
            try:
                if program is None:
                    program = base_ctx.copy().run(program_factory)
                record = base_ctx.copy().run(evaluate_one, program, item, cand, skb, deadline_s)
            # KeyboardInterrupt/SystemExit from the program, or a factory failure: stop the run
            except BaseException as exc:
                with gate:
                    stop.set()
                    results.put(("abort", exc))
                return
            with gate:  # once ``stop`` is set under ``gate``, nothing more is written or reported
                if stop.is_set():
                    return
                try:
                    writer.append(record)
                except OSError as exc:  # a full disk, a folder gone read-only: the run cannot go on
                    stop.set()
                    results.put(("abort", OSError(exc.errno, exc.strerror, str(writer.path))))
                    return
                results.put(("done", record))

    threads = [
        threading.Thread(target=worker, name=f"autofocus-eval-{i}", daemon=True)
        for i in range(min(concurrency, len(todo)))
    ]

    def count(record: dict[str, Any]) -> None:
        nonlocal scored, finished, errors, degraded, hits
        scored += 1
        if record["status"] == "error":
            errors += 1
            return
        finished += 1
        degraded += record["status"] == "degraded"
        hits += record["metrics"]["hit@1"]

    def stats() -> str:
        parts = [f"hit@1 {hits / scored:.3f}" if scored else "hit@1 -"]
        parts += [f"{name} {n}" for name, n in (("degraded", degraded), ("errors", errors)) if n]
        return "  ".join(parts)

    task = out_dir.name or "eval"
    try:
        reporter.advance(task, len(done_before), len(selected), stats())
        for t in threads:
            t.start()
        while finished + errors < len(todo):
            try:
                kind, payload = results.get(timeout=0.2)
            except queue.Empty:
                if not any(t.is_alive() for t in threads) and results.empty():
                    break
                continue
            if kind == "abort":
                if isinstance(payload, KeyboardInterrupt):
                    interrupted = True
                else:
                    failure = payload
                break
            count(payload)
            reporter.advance(task, scored, len(selected), stats())
    except KeyboardInterrupt:
        interrupted = True
    finally:
        with gate:
            stop.set()
        if interrupted or failure is not None:
            cancel_pending()  # the dropped questions' queued LM calls must not hold up the exit
        if failure is not None:  # questions in flight end first: a process that exits under a thread still in
            for t in (t for t in threads if t.is_alive()):  # native code (ONNX Runtime, FAISS) can abort
                t.join(timeout=30)
        writer.close()
        while not results.empty():  # lines written before ``stop`` that were not counted yet
            kind, payload = results.get_nowait()
            if kind == "done":
                count(payload)
        session.update(ended=_now(), finished=finished, degraded=degraded, errors=errors, interrupted=interrupted)
        _write_json(out_dir / MANIFEST_FILE, run_manifest)
    if failure is not None:
        raise failure
    if errors:
        reporter.note(f"{errors} question(s) raised; their tracebacks are in {out_dir / TRACES_FILE} "
                      "and they are retried when the run is resumed.", "warning")
    if degraded:
        reporter.note(f"{degraded} question(s) degraded: an LM call gave no answer and they fell back "
                      f"(the steps and errors are in {out_dir / TRACES_FILE}); they are retried when the run "
                      "is resumed.", "warning")
    return EvalResult(out_dir, len(selected), len(done_before), finished, errors, interrupted, degraded)
