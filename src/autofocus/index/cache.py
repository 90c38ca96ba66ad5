"""Query-embedding cache: in memory and in one SQLite file, keyed by model name + SHA-256 of the text.

A benchmark run embeds the same questions and constant names again and again (every config, every
optimisation trial); with a hosted model each repeat costs money and latency. SQLite gives atomic,
concurrent-safe appends across threads and processes without a server, which an npy/json shard
would have to re-implement.

Each vector is stored with a digest of what it claims to be (the model's name, the text's key and the
vector's bytes): a row that fails it (a damaged file, bytes written over) is embedded again, never used,
and the file named in one line. A file SQLite cannot read is moved aside and started afresh
(``sqlite_cache``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from autofocus import paths
from autofocus.sqlite_cache import CacheFile

log = logging.getLogger(__name__)
TABLE = "checked_vectors"  # (model, key, vec, digest); ``vectors``, without digests, is what older versions wrote


class TextEmbedder(Protocol):
    """What the cache needs of an embedder (``index.embedders.Embedder`` has it; the embedders read
    this cache, so it names no class of theirs)."""

    name: str

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray: ...


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def vector_digest(model: str, key: bytes, vec: bytes) -> bytes:
    """What a stored vector claims to be: these bytes, from this model, for the text with this key."""
    return hashlib.blake2b(b"\0".join((model.encode("utf-8"), key, vec)), digest_size=16).digest()


def _setup(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA journal_mode=WAL")
    new = db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", [TABLE]).fetchone() is None
    db.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (model TEXT NOT NULL, key BLOB NOT NULL, vec BLOB NOT NULL, "
               "digest BLOB NOT NULL, PRIMARY KEY (model, key)) WITHOUT ROWID")
    old = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'vectors'").fetchone() is not None
    if new and old:  # an older version's rows (imported vectors among them) taken over once, with their digests
        db.create_function("vector_digest", 3, vector_digest, deterministic=True)
        db.execute(f"INSERT OR IGNORE INTO {TABLE} SELECT model, key, vec, vector_digest(model, key, vec) FROM vectors")


class EmbeddingCache:
    """Thread-safe two-level cache of float32 vectors; ``path=None`` keeps it in memory only."""

    def __init__(self, path: Path | None, memory_items: int = 8192) -> None:
        self.path = path
        self.memory_items = memory_items
        self._mem: OrderedDict[tuple[str, bytes], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._file: CacheFile | None = None
        self.hits = 0
        self.misses = 0
        self.rejected = 0  # rows that failed their digest, embedded again
        if path is not None:
            self._file = CacheFile(path, _setup, timeout=60, check_same_thread=False, isolation_level=None)

    def _remember(self, model: str, key: bytes, vec: np.ndarray) -> None:
        self._mem[(model, key)] = vec
        self._mem.move_to_end((model, key))
        while len(self._mem) > self.memory_items:
            self._mem.popitem(last=False)

    def get_many(self, model: str, texts: Sequence[str]) -> list[np.ndarray | None]:
        keys = [text_key(t) for t in texts]
        out: list[np.ndarray | None] = [None] * len(keys)
        with self._lock:
            todo: dict[bytes, list[int]] = {}
            for i, key in enumerate(keys):
                vec = self._mem.get((model, key))
                if vec is None:
                    todo.setdefault(key, []).append(i)
                else:
                    self._mem.move_to_end((model, key))
                    out[i] = vec
            if todo and self._file is not None:
                found = self._select(model, list(todo))
                for key, vec in found.items():
                    self._remember(model, key, vec)
                    for i in todo[key]:
                        out[i] = vec
            n_hit = sum(v is not None for v in out)
            self.hits += n_hit
            self.misses += len(out) - n_hit
        return out

    def _select(self, model: str, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        """The stored vectors of ``keys`` that pass their digest; the others count as missing."""
        rows: list[tuple[bytes, bytes, bytes]] = []
        for start in range(0, len(keys), 500):  # stay under SQLite's bound-parameter limit
            part = keys[start : start + 500]
            rows += self._execute(f"SELECT key, vec, digest FROM {TABLE} WHERE model = ? AND key IN "
                                  f"({','.join('?' * len(part))})", [model, *part])
        good = {k: np.frombuffer(v, dtype=np.float32) for k, v, d in rows if vector_digest(model, k, v) == d}
        if len(good) < len(rows):
            if not self.rejected:  # one line per file and process, however many lookups meet damaged rows
                log.warning("%s: %d cached vectors of %s fail their digest (the file is damaged); embedding them "
                            "again, as any others that fail it", self.path, len(rows) - len(good), model)
            self.rejected += len(rows) - len(good)
        return good

    def _execute(self, sql: str, params: Sequence[object] = (), many: bool = False) -> list[tuple]:
        """A statement on the file (``many``: for each row of ``params``, in one transaction); where it shows
        the file damaged, the file starts afresh (its rows are gone, to be embedded again) and the
        statement runs once more there."""
        assert self._file is not None
        for again in (False, True):
            db = self._file.db
            try:
                if not many:
                    return db.execute(sql, params).fetchall()
                db.execute("BEGIN")
                db.executemany(sql, params)  # type: ignore[arg-type]
                db.execute("COMMIT")
                return []
            except sqlite3.DatabaseError as exc:
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                if again or not self._file.recovered(exc):
                    raise
        return []

    def put_many(self, model: str, texts: Sequence[str], vecs: np.ndarray) -> None:
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        rows = [(model, key, blob, vector_digest(model, key, blob))
                for key, blob in ((text_key(t), vecs[i].tobytes()) for i, t in enumerate(texts))]
        with self._lock:
            for _, key, blob, _ in rows:
                self._remember(model, key, np.frombuffer(blob, dtype=np.float32))
            if self._file is not None and rows:
                self._execute(f"INSERT OR REPLACE INTO {TABLE} VALUES (?, ?, ?, ?)", rows, many=True)

    def dim(self, model: str) -> int | None:
        """Dimension of the cached vectors of ``model`` (None if it has none)."""
        with self._lock:
            for (m, _), vec in self._mem.items():
                if m == model:
                    return len(vec)
            if self._file is None:
                return None
            rows = self._execute(f"SELECT length(vec) FROM {TABLE} WHERE model = ? LIMIT 1", [model])
        return int(rows[0][0]) // 4 if rows else None

    def embed(self, embedder: TextEmbedder, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Vectors of ``texts`` by ``embedder``: cached ones looked up, the rest embedded once and stored."""
        texts = list(texts)
        found = self.get_many(embedder.name, texts)
        missing = list(dict.fromkeys(t for t, v in zip(texts, found, strict=True) if v is None))
        if missing:
            new = embedder.embed(missing, batch_size=batch_size)
            self.put_many(embedder.name, missing, new)
            by_text = dict(zip(missing, new, strict=True))
            found = [v if v is not None else by_text[t] for t, v in zip(texts, found, strict=True)]
        if not texts:
            return np.zeros((0, embedder.dim), np.float32)
        return np.stack(found).astype(np.float32, copy=False)  # type: ignore[arg-type]

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


_DEFAULT: dict[Path, EmbeddingCache] = {}
_DEFAULT_LOCK = threading.Lock()


def default_cache() -> EmbeddingCache:
    """The process-wide cache under ``autofocus.paths.sub("embeddings")`` (follows ``AUTOFOCUS_HOME``)."""
    path = paths.sub("embeddings") / "queries.sqlite"
    with _DEFAULT_LOCK:
        if path not in _DEFAULT:
            _DEFAULT[path] = EmbeddingCache(path)
        return _DEFAULT[path]
