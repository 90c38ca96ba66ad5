"""The prompt starts every question shares, evaluated once, kept on disk, and copied into llama-server's slots.

Every question's step-1 prompt starts with the same instructions and schema (about 900 tokens on the
demo), and so does every step-2 prompt. A slot whose KV cache already holds that start evaluates only
the question's own part (about 80 tokens), but a new server's slots hold nothing, so the first
questions in flight would each evaluate the whole start in their own slot: eight times 900 tokens at
about 45 tokens/s on 2 cores, minutes before the first answer. The server's RAM prompt cache cannot
share them: it moves a saved prompt into the one slot that restores it. Here each start is put into
one slot, saved with llama-server's slot actions (``--slot-save-path``) and restored into its share of
the other slots, a file copy that takes milliseconds; requests then go to the slot leased for them.

The saved starts outlive the server: they stay in the prompt cache folder of the server's settings
(``LocalServer.prompt_cache_dir``: model, server program, weights' layout), one file per start named
by the hash of its text, so the next process restores a start instead of evaluating it again. A file
is written under a name of its writer's own and renamed into place, so a reader never restores half a
file; the folder is kept under ``AUTOFOCUS_PROMPT_CACHE_MB`` by dropping the least recently used.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autofocus.local_lm import startup
from autofocus.local_lm.scoring import Messages, render, scoring_server
from autofocus.local_lm.server import LocalServer
from autofocus.local_lm.server_http import LocalServerError
from autofocus.local_lm.slot_leases import start_file
from autofocus.usage import add_usage

MIN_START_CHARS = 200  # a shorter shared start is not worth a slot
PART_MAX_AGE_S = 3600.0  # a half-written file this old was left by a process that died while saving


def shared_start(first: str, second: str) -> str:
    """The text two prompts share, up to its last line break: the question's part begins after it, and a
    cut at a line break tokenizes as the whole prompt does."""
    n = next((i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b), min(len(first), len(second)))
    return first[: first.rfind("\n", 0, n) + 1]


def cache_limit_bytes() -> int:
    return int(float(os.environ.get("AUTOFOCUS_PROMPT_CACHE_MB", "2048")) * (1 << 20))


def prune(folder: Path, limit: int | None = None) -> None:
    """Keep the folder's saved starts under ``limit`` bytes, the least recently used going first, and
    drop half-written files that a process which died while saving left."""
    limit = cache_limit_bytes() if limit is None else limit
    now = time.time()
    files = []
    for path in folder.iterdir():
        with contextlib.suppress(FileNotFoundError):
            stat = path.stat()
            if path.suffix == ".part" and now - stat.st_mtime > PART_MAX_AGE_S:
                path.unlink()
            elif path.suffix == ".bin":
                files.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
        if total <= limit:
            break
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        total -= size


def _evaluate_and_save(server: LocalServer, slot: int, start: str, name: str, timeout: float,
                       after_cached: bool = False) -> int:
    """Evaluate ``start`` into ``slot`` and save it as ``name``; the tokens evaluated. All of it, from its first
    token, whatever the slot held (tokens evaluated after a prefix the slot kept fall in other batches,
    whose sums round otherwise, and the saved start must be the one a fresh server computes), unless
    ``after_cached``: the slot holds a saved start just restored, and the rest is evaluated after it."""
    done = server.post("completion", {"prompt": start, "n_predict": 0, "id_slot": slot, "cache_prompt": after_cached,
                                      "temperature": 0.0}, timeout)  # fmt: skip
    evaluated = int(done.get("tokens_evaluated", 0))
    add_usage(calls=1, input_tokens=evaluated, output_tokens=0)
    if server.slot_dir is None:  # a server whose folder is not known here: saved for its own slots only
        server.post(f"slots/{slot}?action=save", {"filename": name}, timeout)
        return evaluated
    part = f"{name}.{os.getpid()}-{threading.get_ident()}.part"
    server.post(f"slots/{slot}?action=save", {"filename": part}, timeout)
    os.replace(server.slot_dir / part, server.slot_dir / name)
    os.chmod(server.slot_dir / name, 0o600)  # the user's alone, whatever the server's umask
    prune(server.slot_dir)
    return evaluated


def share_prompt_starts(lm: Any, families: Sequence[tuple[Messages, Messages]], timeout: float = 900.0) -> list[int]:
    """Put the start each family of prompts shares into the slots: family ``i`` of ``n`` gets slots
    ``i, i + n, i + 2n, ...``. A family is two conversations that differ only where questions differ.
    Each start is restored from the prompt cache where it was saved before, else evaluated once and
    saved. Returns the tokens evaluated for each start (0 for a restored one); ``[]`` where ``lm`` is
    not a local LM on llama-server, or the server cannot save slots (one started elsewhere without
    ``--slot-save-path``): then every slot fills itself, as before.
    """
    server = scoring_server(lm)
    if server is None:
        return []
    evaluated: list[int] = []
    try:
        starts = [shared_start(render(server, a, "", timeout), render(server, b, "", timeout)) for a, b in families]
        starts = [s for s in starts if len(s) >= MIN_START_CHARS][: server.n_parallel]
        folder = server.slot_dir
        cached = [folder is not None and (folder / start_file(s)).is_file() for s in starts]
        waiting = ("restoring the prompt cache" if all(cached) else
                   "evaluating the prompts' shared start: the first run with these prompts and this model "
                   "(later runs restore it from disk)")  # fmt: skip
        with startup.phase("prompt_cache", waiting) as detail:
            for i, start in enumerate(starts):
                name = start_file(start)
                restored = server.slots.restore(i, start, timeout) if cached[i] else None
                evaluated.append(0 if restored is not None else _evaluate_and_save(server, i, start, name, timeout))
                server.slots.given(i, start)
                server.slots.saved(start)
                for slot in range(i + len(starts), server.n_parallel, len(starts)):
                    if server.slots.restore(slot, start, timeout) is not None:
                        server.slots.given(slot, start)
            detail.update(starts=len(starts), restored=evaluated.count(0), evaluated=sum(evaluated))
        if sum(evaluated):
            startup.notify("note", f"first run with these prompts on this model: their shared start ({sum(evaluated)} "
                           f"tokens) was evaluated in {detail['seconds']:.0f} s and saved; later runs restore it")
    except (LocalServerError, OSError, ValueError, KeyError):  # an optimisation: the slots fill themselves
        return evaluated  # (e.g. a shared server started without --slot-save-path)
    return evaluated


def keep_start(lm: Any, family: tuple[Messages, Messages], waiting: str, timeout: float = 900.0) -> int:
    """Save the start a family of prompts shares (two conversations that differ only where questions
    differ), so that every later request with that start has it restored into its slot by the lease
    (``SlotLeases.lease``), not evaluated: for a start that depends on something some questions share
    (step 2's schema part for the asked type), where ``share_prompt_starts`` keeps what all share. The
    first question that needs it evaluates it, after the longest saved start it begins with (restored
    first, so the saved state is the same whichever slot did it), while the others that need it wait:
    four slots evaluating one start at once would each take four times as long. Saved in the prompt
    cache, it outlives the process. ``waiting`` tells a listener what that first evaluation is
    (``local_lm.startup``). Returns the tokens evaluated (0 where the start was saved before, or ``lm``
    is not on llama-server). Like ``share_prompt_starts``, an optimisation: where the server does not
    answer (it stopped, or a shared one was killed) nothing is kept, and the step's own LM call meets the
    outage where an outage is handled (``program.steps.llm_call``)."""
    server = scoring_server(lm)
    if server is None:
        return 0
    try:
        return _keep_start(server, family, waiting, timeout)
    except (LocalServerError, OSError, ValueError, KeyError):
        return 0


def _keep_start(server: LocalServer, family: tuple[Messages, Messages], waiting: str, timeout: float) -> int:
    start = shared_start(*(render(server, messages, "", timeout) for messages in family))
    if len(start) < MIN_START_CHARS or server.slots.is_saved(start):
        return 0
    with _START_LOCKS_LOCK:
        lock = _START_LOCKS.setdefault(start, threading.Lock())
    with lock:
        name = start_file(start)
        on_disk = server.slot_dir is not None and (server.slot_dir / name).is_file()
        if not server.slots.is_saved(start) and not on_disk:
            base = server.slots.longest_saved(start)
            startup.notify("wait", waiting)
            try:
                with server.slots.lease(start, timeout) as slot:
                    after = bool(base) and server.slots.restore(slot, base, timeout) is not None
                    evaluated = _evaluate_and_save(server, slot, start, name, timeout, after_cached=after)
                    server.slots.given(slot, start)
            finally:
                startup.notify("done", waiting)
        else:
            evaluated = 0
        server.slots.saved(start)
        return evaluated


_START_LOCKS: dict[str, threading.Lock] = {}  # start text -> held while the first question evaluates it
_START_LOCKS_LOCK = threading.Lock()
