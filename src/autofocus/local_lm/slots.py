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
import hashlib
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autofocus.local_lm import startup
from autofocus.local_lm.scoring import Messages, render, scoring_server
from autofocus.local_lm.server import LocalServer, LocalServerError
from autofocus.usage import add_usage

MIN_START_CHARS = 200  # a shorter shared start is not worth a slot
PART_MAX_AGE_S = 3600.0  # a half-written file this old was left by a process that died while saving


def shared_start(first: str, second: str) -> str:
    """The text two prompts share, up to its last line break: the question's part begins after it, and a
    cut at a line break tokenizes as the whole prompt does."""
    n = next((i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b), min(len(first), len(second)))
    return first[: first.rfind("\n", 0, n) + 1]


def start_file(start: str) -> str:
    """The prompt cache's name for a start: the hash of its text (the folder names the model and settings)."""
    return f"start-{hashlib.sha256(start.encode()).hexdigest()[:32]}.bin"


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


def _restore(server: LocalServer, slot: int, name: str, timeout: float) -> int | None:
    """Restore the saved start ``name`` into ``slot``: its tokens, or None where it would not restore
    (a damaged or foreign file is dropped)."""
    try:
        done = server.post(f"slots/{slot}?action=restore", {"filename": name}, timeout)
    except LocalServerError:
        if server.slot_dir is not None:
            (server.slot_dir / name).unlink(missing_ok=True)
        return None
    if server.slot_dir is not None:
        with contextlib.suppress(OSError):
            os.utime(server.slot_dir / name)  # recently used: pruned last
    return int(done.get("n_restored", done.get("n_tokens", 0)) or 0)


def _evaluate_and_save(server: LocalServer, slot: int, start: str, name: str, timeout: float) -> int:
    """Evaluate ``start`` into ``slot`` and save it as ``name``; the tokens evaluated. All of it, from its first
    token, whatever the slot held: tokens evaluated after a prefix the slot kept fall in other batches,
    whose sums round otherwise, and the saved start must be the one a fresh server computes."""
    done = server.post("completion", {"prompt": start, "n_predict": 0, "id_slot": slot, "cache_prompt": False,
                                      "temperature": 0.0}, timeout)  # fmt: skip
    evaluated = int(done.get("tokens_evaluated", 0))
    add_usage(calls=1, input_tokens=evaluated, output_tokens=0)
    if server.slot_dir is None:  # a server whose folder is not known here: saved for its own slots only
        server.post(f"slots/{slot}?action=save", {"filename": name}, timeout)
        return evaluated
    part = f"{name}.{os.getpid()}-{threading.get_ident()}.part"
    server.post(f"slots/{slot}?action=save", {"filename": part}, timeout)
    os.replace(server.slot_dir / part, server.slot_dir / name)
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
                restored = _restore(server, i, name, timeout) if cached[i] else None
                evaluated.append(0 if restored is not None else _evaluate_and_save(server, i, start, name, timeout))
                server.slot_starts[i] = start
                for slot in range(i + len(starts), server.n_parallel, len(starts)):
                    if _restore(server, slot, name, timeout) is not None:
                        server.slot_starts[slot] = start
            detail.update(starts=len(starts), restored=evaluated.count(0), evaluated=sum(evaluated))
        if sum(evaluated):
            startup.notify("note", f"first run with these prompts on this model: their shared start ({sum(evaluated)} "
                           f"tokens) was evaluated in {detail['seconds']:.0f} s and saved; later runs restore it")
    except (LocalServerError, OSError, ValueError, KeyError):  # an optimisation: the slots fill themselves
        return evaluated  # (e.g. a shared server started without --slot-save-path)
    return evaluated
