"""The append-only ``traces.jsonl`` of a run: durable appends, crash repair, and JSON for any trace value.

One line per finished question. A line is written with a single ``os.write`` on an ``O_APPEND``
descriptor and fsynced, so a crash can at worst leave a truncated *last* line, which
``read_traces`` cuts off (the question is then simply run again on resume). Lines stay small
(long lists and strings are cut, and say so) and hold no credentials (``autofocus.redact``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from autofocus.redact import redact

TRACES_FILE = "traces.jsonl"
RECORD_VERSION = 1
MAX_LIST_ITEMS = 1000
MAX_STRING_CHARS = 10_000  # an LM's raw answer can be megabytes


def cut_string(text: str, limit: int = MAX_STRING_CHARS) -> str:
    """``text``, or its first ``limit`` characters and a note saying how many were cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} …[cut: {len(text) - limit:,} more characters]"


def to_jsonable(value: Any, max_items: int = MAX_LIST_ITEMS) -> Any:
    """Plain JSON values for whatever a program put in its trace (numpy, pydantic, dataclasses, sets).

    Lists longer than ``max_items`` (grounded sets can hold 10^5 ids on MAG) are kept as
    ``{"n": len, "head": first max_items}`` and strings longer than ``MAX_STRING_CHARS`` are cut
    (``cut_string``), so that one line stays small; unknown objects become their ``str``.
    Non-finite floats become None (JSON has no NaN).
    """
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        return cut_string(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, np.generic):
        return to_jsonable(value.item(), max_items)
    if isinstance(value, BaseModel):
        return to_jsonable(value.model_dump(mode="python"), max_items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable({f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, max_items)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v, max_items) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        try:
            value = sorted(value)
        except TypeError:
            value = list(value)
    if isinstance(value, np.ndarray):
        if value.size > max_items:
            return {"n": int(value.size), "head": value.ravel()[:max_items].tolist()}
        value = value.tolist()
    if isinstance(value, list | tuple):
        if len(value) > max_items:
            return {"n": len(value), "head": [to_jsonable(v, max_items) for v in value[:max_items]]}
        return [to_jsonable(v, max_items) for v in value]
    return cut_string(str(value))


class TraceWriter:
    """Appends one JSON line per call, durably, from any thread; credentials are redacted."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.lock = threading.Lock()

    def append(self, record: Mapping[str, Any]) -> None:
        data = (redact(json.dumps(record, ensure_ascii=False, allow_nan=False)) + "\n").encode("utf-8")
        with self.lock:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            os.fsync(self._fd)

    def close(self) -> None:
        with self.lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_traces(path: Path, repair: bool = True) -> tuple[list[dict[str, Any]], int]:
    """All records of a traces file and how many bytes of a truncated last line were dropped.

    A last line without its newline, or that is not valid JSON, is what a crash mid-write
    leaves; with ``repair`` the file is truncated to the last complete line. A bad line
    anywhere else is corruption and raises ``ValueError`` naming the file and line.
    """
    path = Path(path)
    if not path.exists():
        return [], 0
    raw = path.read_bytes()
    end = raw.rfind(b"\n") + 1  # bytes up to and including the last newline
    tail = raw[end:]
    lines = raw[:end].split(b"\n")[:-1]
    records: list[dict[str, Any]] = []
    dropped = len(tail)
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            if lineno == len(lines) and not tail:
                dropped = len(line) + 1
                end -= dropped
                break
            raise ValueError(f"{path}:{lineno}: not a valid JSON trace line ({exc.msg})") from None
        if not isinstance(rec, dict) or "id" not in rec or "status" not in rec:
            raise ValueError(f"{path}:{lineno}: a trace line needs an object with 'id' and 'status'")
        records.append(rec)
    if dropped and repair:
        with path.open("r+b") as fh:
            fh.truncate(end)
            fh.flush()
            os.fsync(fh.fileno())
    return records, dropped


def latest_by_id(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """One record per question, in first-seen order: its last success, else its last attempt
    (degraded or error)."""
    out: dict[int, dict[str, Any]] = {}
    for rec in records:
        qid = int(rec["id"])
        prev = out.get(qid)
        if prev is None or rec["status"] == "ok" or prev["status"] != "ok":
            out[qid] = rec
    return out
