"""Query-embedding cache: in memory and in one SQLite file, keyed by model name + SHA-256 of the text.

A benchmark run embeds the same questions and constant names again and again (every config, every
optimisation trial); with a hosted model each repeat costs money and latency. SQLite gives atomic,
concurrent-safe appends across threads and processes without a server, which an npy/json shard
would have to re-implement.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from autofocus import paths


class TextEmbedder(Protocol):
    """What the cache needs of an embedder (``index.embedders.Embedder`` has it; the embedders read
    this cache, so it names no class of theirs)."""

    name: str

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray: ...


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


class EmbeddingCache:
    """Thread-safe two-level cache of float32 vectors; ``path=None`` keeps it in memory only."""

    def __init__(self, path: Path | None, memory_items: int = 8192) -> None:
        self.path = path
        self.memory_items = memory_items
        self._mem: OrderedDict[tuple[str, bytes], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.hits = 0
        self.misses = 0
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), timeout=60, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, key BLOB NOT NULL, vec BLOB NOT NULL, "
                "PRIMARY KEY (model, key)) WITHOUT ROWID"
            )

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
            if todo and self._db is not None:
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
        assert self._db is not None
        found: dict[bytes, np.ndarray] = {}
        for start in range(0, len(keys), 500):  # stay under SQLite's bound-parameter limit
            part = keys[start : start + 500]
            rows = self._db.execute(
                f"SELECT key, vec FROM vectors WHERE model = ? AND key IN ({','.join('?' * len(part))})",
                [model, *part],
            ).fetchall()
            found.update({k: np.frombuffer(v, dtype=np.float32) for k, v in rows})
        return found

    def put_many(self, model: str, texts: Sequence[str], vecs: np.ndarray) -> None:
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        rows = [(model, text_key(t), vecs[i].tobytes()) for i, t in enumerate(texts)]
        with self._lock:
            for _, key, blob in rows:
                self._remember(model, key, np.frombuffer(blob, dtype=np.float32))
            if self._db is not None and rows:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)
                self._db.execute("COMMIT")

    def dim(self, model: str) -> int | None:
        """Dimension of the cached vectors of ``model`` (None if it has none)."""
        with self._lock:
            for (m, _), vec in self._mem.items():
                if m == model:
                    return len(vec)
            if self._db is None:
                return None
            row = self._db.execute("SELECT length(vec) FROM vectors WHERE model = ? LIMIT 1", [model]).fetchone()
        return None if row is None else int(row[0]) // 4

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
            if self._db is not None:
                self._db.close()
                self._db = None


_DEFAULT: dict[Path, EmbeddingCache] = {}
_DEFAULT_LOCK = threading.Lock()


def default_cache() -> EmbeddingCache:
    """The process-wide cache under ``autofocus.paths.sub("embeddings")`` (follows ``AUTOFOCUS_HOME``)."""
    path = paths.sub("embeddings") / "queries.sqlite"
    with _DEFAULT_LOCK:
        if path not in _DEFAULT:
            _DEFAULT[path] = EmbeddingCache(path)
        return _DEFAULT[path]
