"""SQLite caches opened by one opener: a damaged file (not a database, cut short, malformed) is moved aside
with one line naming it, and the cache goes on afresh; a busy or unwritable file is not damage."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from autofocus.sqlite_cache import CacheFile, header_damage, is_damage


def _setup(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v BLOB)")


def _filled(path: Path, rows: int = 400) -> bytes:
    f = CacheFile(path, _setup)
    f.db.executemany("INSERT INTO t VALUES (?, ?)", [(i, os.urandom(500)) for i in range(rows)])
    f.db.commit()
    f.close()
    return path.read_bytes()


def test_only_corruption_counts_as_damage() -> None:
    assert is_damage(sqlite3.DatabaseError("file is not a database"))
    locked = sqlite3.OperationalError("database is locked")
    assert not is_damage(locked) and not is_damage(OSError("disk full"))


def test_the_header_tells_a_cut_short_or_foreign_file_from_a_new_one(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    assert header_damage(path) is None  # absent: a new cache
    data = _filled(path)
    assert header_damage(path) is None
    path.write_bytes(data[: len(data) // 3])
    assert (header_damage(path) or "").startswith("cut short")
    path.write_bytes(b"PK\x03\x04" + bytes(200))
    assert header_damage(path) == "not an SQLite database"
    path.write_bytes(b"")
    assert header_damage(path) is None


def test_damage_found_while_in_use_starts_the_file_afresh(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "c.sqlite"
    data = _filled(path)
    f = CacheFile(path, _setup)
    path.write_bytes(data[:4096] + os.urandom(len(data) - 4096))  # the header kept, the pages overwritten
    with pytest.raises(sqlite3.DatabaseError) as caught:
        f.db.execute("SELECT count(*) FROM t WHERE v IS NOT NULL").fetchall()
    with caplog.at_level("WARNING"):
        assert f.recovered(caught.value)
    assert f.db.execute("SELECT count(*) FROM t").fetchone() == (0,)
    assert (tmp_path / "c.sqlite.damaged").is_file()
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [f"{path}: damaged cache"]
    assert not f.recovered(sqlite3.OperationalError("database is locked"))  # not damage: the caller raises it


def test_a_damaged_shard_of_dspys_disk_cache_is_moved_aside_before_dspy_opens_it(tmp_path: Path) -> None:
    """Without it DSPy turns its disk cache off for the whole process, naming no file."""
    shard = tmp_path / "dspy" / "000" / "cache.db"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(os.urandom(20_000))
    code = ("import autofocus\nfrom dspy.clients import _get_dspy_cache\n"
            "print(type(_get_dspy_cache().disk_cache).__name__)")
    env = {**os.environ, "DSPY_CACHEDIR": str(tmp_path / "dspy")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.stdout.strip() == "FanoutCache", out.stderr
    assert f"{shard}: damaged cache (not an SQLite database)" in out.stderr
    assert (shard.parent / "cache.db.damaged").is_file()
