"""Steps 1-2's outputs, asked once per question and kept for every tuning trial (paper A.6).

The target type (step 1) and the query (step 2) depend on no tuned setting, so a study asks them once
per question and keeps them in ``llm_outputs.jsonl`` under an identity of what they do depend on (LMs,
query format, optimised prompts, the SKB); later runs of the same study read them back, and an answer
degraded by an LM outage is asked again next run.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autofocus.config import AutofocusConfig
from autofocus.evaluation.traces import TraceWriter, read_traces
from autofocus.trace import Trace
from autofocus.usage import map_concurrently

LLM_OUTPUTS_FILE = "llm_outputs.jsonl"


@dataclass
class LLMOutput:
    """What steps 1-2 produced for one question, with what they cost."""

    id: int
    query: str
    target_type: str | None
    cypher: str | None
    lm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    events: list[str] = field(default_factory=list)


def llm_identity(
    system: str, cfg: AutofocusConfig, skb_fingerprint: str, program_sha256: str | None = None
) -> str:
    """What steps 1-2 depend on: their LMs, the query format, optimised prompts and the SKB schema."""
    key = {
        "system": system,
        "lm": {s: cfg.runtime.lm.for_step(s) for s in ("target_type", "cypher")},
        "temperature": cfg.runtime.lm.temperature,
        "max_tokens": cfg.runtime.lm.max_tokens,
        "query_format": cfg.query.query_format,
        "query": cfg.steps.grounds,
        "program": program_sha256,
        "skb": skb_fingerprint,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


class LLMOutputCache:
    """``llm_outputs.jsonl``: one line per question and identity; the last line of a question wins."""

    def __init__(self, path: Path, identity: str) -> None:
        self.path = Path(path)
        self.identity = identity
        self.other_identities = 0  # lines left by other LMs/prompts, ignored

    def load(self) -> dict[int, LLMOutput]:
        records, _ = read_traces(self.path)
        out: dict[int, LLMOutput] = {}
        self.other_identities = 0
        for rec in records:
            if rec.get("identity") != self.identity:
                self.other_identities += 1
                continue
            fields = {k: rec[k] for k in LLMOutput.__dataclass_fields__ if k in rec}
            out[int(rec["id"])] = LLMOutput(**fields)
        return out

    def append(self, outputs: Iterable[LLMOutput]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with TraceWriter(self.path) as writer:
            for o in outputs:
                writer.append({"id": o.id, "status": "ok", "identity": self.identity, **asdict(o)})


DEGRADED = "degraded:"


def transient(output: LLMOutput) -> bool:
    """Steps 1-2 were degraded by an LM outage (``autofocus.trace.Degradation``): ask again next run.
    A malformed answer is not transient: the same prompt gets the same answer."""
    return any(e.startswith(DEGRADED) for e in output.events)


def ask_llm(program: Any, item: Any) -> LLMOutput:
    """Steps 1-2 of one question through the program's own LM calls (the DSPy cache applies)."""
    trace = Trace(system=getattr(program, "system", "afr"), question=item.query)
    start = time.perf_counter()
    target_type, cypher = program.llm_steps(item.query, trace)
    tokens_in, tokens_out = trace.tokens
    return LLMOutput(
        id=int(item.id),
        query=item.query,
        target_type=target_type,
        cypher=cypher,
        lm_calls=trace.lm_calls,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        seconds=time.perf_counter() - start,
        events=[f"{e.kind}: {e.detail}"[:300] for e in trace.events]
        + [f"{DEGRADED} {d.step}: {d.error}"[:300] for d in trace.degraded],
    )


def fill_llm_outputs(
    program: Any,
    items: Sequence[Any],
    cache: LLMOutputCache,
    *,
    concurrency: int = 1,
    on_done: Callable[[LLMOutput], None] | None = None,
) -> tuple[dict[int, LLMOutput], int]:
    """The step 1-2 outputs of ``items``: cached ones read, the others asked (concurrently) and saved.

    Returns ``(outputs by question id, number asked now)``. Outputs of transient LM failures are
    used in this run but not saved, so the next run asks again.
    """
    have = cache.load()
    todo = [it for it in items if int(it.id) not in have or have[int(it.id)].query != it.query]

    def one(item: Any) -> LLMOutput:
        out = ask_llm(program, item)
        if not transient(out):
            cache.append([out])
        if on_done is not None:
            on_done(out)
        return out

    for out in map_concurrently(one, todo, concurrency):
        have[out.id] = out
    return {int(it.id): have[int(it.id)] for it in items}, len(todo)
