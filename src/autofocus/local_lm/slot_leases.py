"""Which prompt start each of a llama-server's slots holds, and slots leased to one sequence of requests.

llama-server gives an idle slot to whichever request comes, and the pauses between a sequence's
requests (the trie of a question's choices, the candidates of one yes/no question) left its slot
idle: on WordNet, whose 12 types make ~25 requests a question, other questions' requests took it and
each next request evaluated the question again. A lease holds a slot for one sequence, each of its
requests naming it. What the slots hold is known here only: every change to it (a start evaluated
into a slot, restored into one, saved in the prompt cache, a server that starts afresh) goes through
``SlotLeases``, the one owner of that state (``local_lm.slots`` fills the slots through it).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from autofocus.local_lm.server_http import LocalServerError


def start_file(start: str) -> str:
    """The prompt cache's name for a saved prompt start: the hash of its text (the folder names the model
    and settings)."""
    return f"start-{hashlib.sha256(start.encode()).hexdigest()[:32]}.bin"


class SlotServer(Protocol):
    """What the leases ask of their server (``LocalServer``): its slots, their folder, its routes."""

    n_parallel: int
    slot_dir: Path | None

    def post(self, route: str, body: dict[str, Any], timeout: float) -> Any: ...


class SlotLeases:
    """The slots of one server: the start each was given (``slot_starts``), those that hold it and
    nothing after it (``clean``), the starts saved in the prompt cache (``saved_starts``), and the
    slots leased now."""

    def __init__(self, server: SlotServer) -> None:
        self.server = server
        self.slot_starts: dict[int, str] = {}
        self.saved_starts: set[str] = set()
        self.clean: set[int] = set()
        self._leased: set[int] = set()
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def lease(self, prompt: str, timeout: float = 60.0) -> Iterator[int]:
        """A slot held for a sequence of requests that build on one prompt; no other request of this
        process is sent to it meanwhile. The free slot holding the longest start (``slot_starts``) that
        begins ``prompt``, else a free one given none, else any. The longest saved start that begins
        ``prompt`` is restored into it first, a file copy, unless the slot holds that start and nothing
        after it: so a question's own part is always evaluated right after its start, and its answer
        does not depend on which question the slot served before (a longer common prefix with that one
        would be reused and the rest evaluated in other batches, whose sums round otherwise).
        Waits while every slot is held."""
        best = self.longest_saved(prompt)
        with self._changed:
            self._changed.wait_for(lambda: len(self._leased) < self.server.n_parallel)
            free = [s for s in range(self.server.n_parallel) if s not in self._leased]
            fits = [s for s in free if prompt.startswith(self.slot_starts.get(s, "\0"))]
            if fits:
                slot = max(fits, key=lambda s: (len(self.slot_starts[s]), s in self.clean))
            else:
                slot = ([s for s in free if s not in self.slot_starts] or free)[0]
                self.slot_starts.pop(slot, None)
            self._leased.add(slot)
            clean = slot in self.clean
            self.clean.discard(slot)  # the requests add to it
        try:
            if best and not (clean and self.slot_starts.get(slot) == best) and self.restore(slot, best, timeout) is not None:
                self.slot_starts[slot] = best
            yield slot
        finally:
            with self._changed:
                self._leased.discard(slot)
                self._changed.notify()

    def longest_saved(self, prompt: str) -> str:
        """The longest saved start that begins ``prompt`` ("" where none does); read from a copy, since
        other questions' threads add starts meanwhile."""
        return max((s for s in self.saved_starts.copy() if prompt.startswith(s)), key=len, default="")

    def given(self, slot: int, start: str) -> None:
        """``slot`` now holds ``start`` and nothing after it (just evaluated or restored)."""
        self.slot_starts[slot] = start
        self.clean.add(slot)

    def saved(self, start: str) -> None:
        """``start`` is in the prompt cache now: a lease for a prompt it begins restores it."""
        self.saved_starts.add(start)

    def is_saved(self, start: str) -> bool:
        return start in self.saved_starts

    def restore(self, slot: int, start: str, timeout: float) -> int | None:
        """Restore the saved ``start`` into ``slot``: its tokens, or None where it would not restore (a
        damaged or foreign file is dropped, and the start forgotten)."""
        name, folder = start_file(start), self.server.slot_dir
        try:
            done = self.server.post(f"slots/{slot}?action=restore", {"filename": name}, timeout)
        except (LocalServerError, OSError):
            self.saved_starts.discard(start)
            if folder is not None:
                (folder / name).unlink(missing_ok=True)
            return None
        if folder is not None:
            with contextlib.suppress(OSError):
                os.utime(folder / name)  # recently used: pruned last
        return int(done.get("n_restored", done.get("n_tokens", 0)) or 0)

    def forget(self) -> None:
        """The server stopped: a new one's slots hold nothing (the saved starts stay in the prompt cache)."""
        self.slot_starts.clear()
        self.clean.clear()
