"""SQLite files that hold caches, opened so that a damaged one never breaks a command: a file that is not
a database, or is cut short or malformed, is moved aside (``<name>.damaged``) with one line naming it and
started afresh. What a cache holds can be computed again; a command that fails on it cannot go on.

Damage is found cheaply on open (the header's magic and its page count against the file's size, then the
caller's first statements) and, where it shows only later, by the error a statement raises
(``is_damage``), which the caller hands to ``CacheFile.recovered``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAGIC = b"SQLite format 3\x00"
_DAMAGE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
_SIDE_FILES = ("-wal", "-shm", "-journal")


def is_damage(exc: BaseException) -> bool:
    """Whether ``exc`` says the file is damaged (not a database, malformed), as opposed to busy, locked,
    unwritable or full, which moving the file aside would not mend."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(exc, sqlite3.DatabaseError) and code is not None:
        return code & 0xFF in _DAMAGE_CODES
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError)


def header_damage(path: Path) -> str | None:
    """Why ``path``'s header shows it damaged (not a database, shorter than its pages), or None: a
    read of 100 bytes and a stat, so every open can afford it. An empty or absent file is a new cache.
    A file shorter than its pages is looked at again a moment later: another process's checkpoint may
    be growing it."""
    reason = _header_damage(path)
    if reason is not None and reason.startswith("cut short"):
        time.sleep(0.2)
        reason = _header_damage(path)
    return reason


def _header_damage(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            header = fh.read(100)
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if not header:
        return None
    if len(header) < 100 or not header.startswith(MAGIC):
        return "not an SQLite database"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages, changed, valid_for = (int.from_bytes(header[i:i + 4], "big") for i in (28, 24, 92))
    if pages and changed == valid_for and size < pages * page_size:  # the page count is current
        return f"cut short ({size:,} bytes; its header counts {pages:,} pages of {page_size:,})"
    return None


def move_aside(path: Path, reason: str, inode: int | None = None) -> None:
    """Move a damaged cache file (and its journal files) to ``<name>.damaged``, saying so in one line.
    ``inode``: the file found damaged; where another process has already replaced it, nothing moves."""
    try:
        if inode is not None and path.stat().st_ino != inode:
            return
        os.replace(path, path.with_name(f"{path.name}.damaged"))
    except FileNotFoundError:
        return
    for suffix in _SIDE_FILES:
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    log.warning("%s: damaged cache (%s); moved aside to %s.damaged and started afresh", path, reason, path.name)


def check_folder(folder: Path) -> None:
    """Move aside the damaged SQLite files (``*.db``, one level of subfolders deep) of a cache another
    library opens (DSPy's disk cache: one per shard), before it opens them: a damaged shard would
    otherwise turn its disk cache off for the whole process, without naming the file."""
    for path in [*folder.glob("*.db"), *folder.glob("*/*.db")]:
        reason = header_damage(path)
        if reason is not None:
            move_aside(path, reason)


class CacheFile:
    """One SQLite cache file and its connection (``db``), opened through ``setup`` (pragmas, tables); a
    damaged file is moved aside and made afresh on open, and again when a statement shows damage later
    (``recovered``). ``connect``: ``sqlite3.connect``'s options."""

    def __init__(self, path: Path, setup: Callable[[sqlite3.Connection], None], **connect: Any) -> None:
        self.path, self.setup, self.connect = Path(path), setup, connect
        self.path.parent.mkdir(parents=True, exist_ok=True)
        reason = header_damage(self.path)
        if reason is not None:
            move_aside(self.path, reason)
        try:
            self.db = self._open()
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):
                raise
            move_aside(self.path, str(exc), self.inode)
            self.db = self._open()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), **self.connect)
        try:
            self.inode = self.path.stat().st_ino
            self.setup(db)
        except BaseException:
            db.close()
            raise
        return db

    def recovered(self, exc: BaseException) -> bool:
        """Whether ``exc`` was damage, now mended: the file moved aside and ``db`` a fresh one (what it held
        is gone: the caller computes it again). False for any other error, which the caller raises."""
        if not is_damage(exc):
            return False
        self.db.close()
        move_aside(self.path, str(exc), self.inode)
        self.db = self._open()
        return True

    def close(self) -> None:
        self.db.close()
