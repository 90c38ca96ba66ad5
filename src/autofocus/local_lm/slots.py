"""The prompt starts every question shares, evaluated once and copied into llama-server's slots.

Every question's step-1 prompt starts with the same instructions and schema (about 900 tokens on the
demo), and so does every step-2 prompt. A slot whose KV cache already holds that start evaluates only
the question's own part (about 80 tokens), but at the start of a run every slot holds nothing, so the
first questions in flight each evaluate the whole start in their own slot: eight times 900 tokens at
about 45 tokens/s on 2 cores, minutes before the first answer. The server's RAM prompt cache cannot
share them: it moves a saved prompt into the one slot that restores it. Here each start is evaluated
once, saved with llama-server's slot actions (``--slot-save-path``) and restored into its share of the
other slots, a file copy that takes milliseconds; requests then go to the idle slot whose prompt
shares most with theirs (llama-server's own choice).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from autofocus.local_lm.scoring import Messages, render, scoring_server
from autofocus.local_lm.server import LocalServerError
from autofocus.usage import add_usage

MIN_START_CHARS = 200  # a shorter shared start is not worth a slot


def shared_start(first: str, second: str) -> str:
    """The text two prompts share, up to its last line break: the question's part begins after it, and a
    cut at a line break tokenizes as the whole prompt does."""
    n = next((i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b), min(len(first), len(second)))
    return first[: first.rfind("\n", 0, n) + 1]


def share_prompt_starts(lm: Any, families: Sequence[tuple[Messages, Messages]], timeout: float = 900.0) -> list[int]:
    """Evaluate the start each family of prompts shares once and copy it into the slots: family ``i`` of
    ``n`` gets slots ``i, i + n, i + 2n, ...``. A family is two conversations that differ only where
    questions differ. Returns the tokens of each start put in place; ``[]`` where ``lm`` is not a local
    LM on llama-server, or the server cannot save slots (one started elsewhere without
    ``--slot-save-path``): then every slot fills itself, as before.
    """
    server = scoring_server(lm)
    if server is None or server.n_parallel < 2:
        return []
    evaluated: list[int] = []
    try:
        starts = [shared_start(render(server, a, "", timeout), render(server, b, "", timeout)) for a, b in families]
        starts = [s for s in starts if len(s) >= MIN_START_CHARS][: server.n_parallel]
        for i, start in enumerate(starts):
            done = server.post("completion", {"prompt": start, "n_predict": 0, "id_slot": i, "cache_prompt": True,
                                              "temperature": 0.0}, timeout)  # fmt: skip
            add_usage(calls=1, input_tokens=int(done.get("tokens_evaluated", 0)), output_tokens=0)
            name = f"start-{hashlib.sha1(start.encode()).hexdigest()[:16]}.bin"  # runs sharing a server differ
            server.post(f"slots/{i}?action=save", {"filename": name}, timeout)
            server.slot_starts[i] = start
            for slot in range(i + len(starts), server.n_parallel, len(starts)):
                server.post(f"slots/{slot}?action=restore", {"filename": name}, timeout)
                server.slot_starts[slot] = start
            evaluated.append(int(done.get("tokens_evaluated", 0)))
    except (LocalServerError, OSError, ValueError, KeyError):  # an optimisation: the slots fill themselves
        return evaluated  # (e.g. a shared server started without --slot-save-path)
    return evaluated
