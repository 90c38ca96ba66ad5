"""``KnowledgeBase``: an SKB with its embedder and vector indexes, the one handle the program needs.

``KnowledgeBaseLike`` is what programs and steps require of it (the type of their ``kb``), so tests
and benchmarks can pass small stand-ins.

Example:
    >>> kb = KnowledgeBase.open("data/demo")  # doctest: +SKIP
    >>> ids, scores = kb.index("text").search(kb.embed_query("JSON parsing"), node_type="module", k=5)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from autofocus.index.build import DocumentFn, build_embeddings, default_documents, documents_digest
from autofocus.index.cache import EmbeddingCache, default_cache
from autofocus.index.embedders import (
    DEFAULT_EMBEDDER,
    Embedder,
    SentenceTransformerEmbedder,
    get_embedder,
    split_backend,
    trained_tokens,
    with_backend,
)
from autofocus.index.search import AnnParams, IndexKind, NodeIndex
from autofocus.index.store import (
    MANIFEST,
    EmbeddingStore,
    IndexCorruptError,
    IndexIncompleteError,
    Manifest,
    default_index_root,
    read_manifest,
    skb_fingerprint,
    store_dir,
)
from autofocus.skb.model import SKB

log = logging.getLogger(__name__)

class KnowledgeBaseLike(Protocol):
    """What a program needs of its knowledge base: the SKB, query embeddings and one index per variant."""

    @property
    def skb(self) -> SKB: ...

    @property
    def source(self) -> Path | None:
        """The SKB directory or STaRK folder it was loaded from (QA splits live there); None in memory."""
        ...

    @property
    def embedder(self) -> Embedder: ...

    def index(self, variant: str = "text") -> NodeIndex:
        """The vector index over the node documents of ``variant`` (``text`` or ``text+rel``)."""
        ...

    def store_dir(self, variant: str) -> Path:
        """Where the embeddings of ``variant`` are stored (its ``manifest.json`` has their checksum)."""
        ...

    def embed_query(self, text: str) -> np.ndarray: ...

    def embed_queries(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray: ...


def manifests(root: Path) -> list[Manifest]:
    """The manifests of every store under an index root; an unreadable one is left out with a warning
    (opening that store names it; ``index build`` builds it again)."""
    found = []
    for path in sorted(Path(root).glob(f"*/*/{MANIFEST}")):
        try:
            found.append(read_manifest(path.parent))
        except IndexCorruptError as exc:
            log.warning("%s", exc.reason)
    return found


def backend_of_existing(spec: str, root: Path) -> str:
    """A local spec without a backend gets the backend of the stores of that model under ``root``
    (when there are stores of exactly one backend): queries are embedded by the backend that embedded
    the nodes. Otherwise (none built yet, or several) the spec is returned unchanged (auto)."""
    base, backend = split_backend(spec)
    if backend != "auto" or not base.startswith("local:"):
        return spec
    model = get_embedder(with_backend(base, "torch")).name.rsplit("@", 1)[0]
    found = {m.model.rsplit("@", 1)[1] for m in manifests(root) if m.model.rsplit("@", 1)[0] == model and "@" in m.model}
    return with_backend(base, found.pop()) if len(found) == 1 else spec


class IndexNotFoundError(FileNotFoundError):
    """No index for this embedder and variant, and building one was not allowed."""


class KnowledgeBase:
    """SKB + embedder + one :class:`NodeIndex` per document variant (opened or built on first use).

    Args:
        skb: the knowledge base.
        embedder: embeds queries (and node documents when an index is built).
        index_root: holds ``<embedder slug>/<variant>/`` stores.
        index_kind: FAISS index kind for unfiltered searches (``flat`` is exact).
        doc_budget_tokens: document budget of the stores (part of their path); ``None``: the embedder's
            trained length (``embedders.trained_tokens``, 128 for MiniLM). Imported vectors (a store
            without a budget) serve every budget.
        build_missing: build missing indexes on first use; ``None`` allows it for local embedders only
            (embedding every node with a hosted model costs money, so that takes an explicit build).
    """

    def __init__(
        self, skb: SKB, embedder: Embedder, index_root: Path, *, index_kind: IndexKind = "flat",
        ann_params: AnnParams | None = None, doc_budget_tokens: int | None = None, documents: DocumentFn | None = None,
        build_missing: bool | None = None, progress: bool = True, cache: EmbeddingCache | None = None,
    ) -> None:
        self.skb = skb
        # the SKB directory it was loaded from (``open``): programs read its QA splits (HybGRAG's examples)
        self.source: Path | None = None
        self.embedder = embedder
        self.index_root = Path(index_root)
        self.index_kind = index_kind
        self.ann_params = ann_params
        self.doc_budget_tokens = doc_budget_tokens or trained_tokens(embedder)
        self.documents = documents
        self.build_missing = isinstance(embedder, SentenceTransformerEmbedder) if build_missing is None else build_missing
        self.progress = progress
        self.cache = cache or default_cache()
        self._indexes: dict[str, NodeIndex] = {}
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, object]) -> KnowledgeBase:
        """Shared, not copied: it is read-only (indexes open once, under a lock), and DSPy deep-copies
        programs (``Module.deepcopy``, ``load_state``, optimisers)."""
        return self

    @classmethod
    def open(
        cls, skb: SKB | str | Path, embedder: str | Embedder = DEFAULT_EMBEDDER, index_dir: Path | str | None = None,
        *, index_kind: IndexKind = "flat", ann_params: AnnParams | None = None, doc_budget_tokens: int | None = None,
        documents: DocumentFn | None = None, build_missing: bool | None = None, progress: bool = True,
        cache: EmbeddingCache | None = None,
    ) -> KnowledgeBase:
        """Load the SKB if given a path (cached loader) and attach the embedder and index directory.

        ``index_dir`` defaults to ``<SKB cache dir>/index`` for a path and to a fingerprint-keyed
        folder under the autofocus home for an in-memory SKB. A local embedder spec that names no
        backend takes the backend of the indexes already there (``backend_of_existing``).
        """
        source: Path | None = None
        if not isinstance(skb, SKB):
            from autofocus.skb.io import load_skb

            source = Path(skb)
            skb = load_skb(source, progress=progress)
        root = Path(index_dir) if index_dir is not None else default_index_root(skb, source)
        if isinstance(embedder, str):
            embedder = get_embedder(backend_of_existing(embedder, root))
        kb = cls(
            skb, embedder, root, index_kind=index_kind, ann_params=ann_params,
            doc_budget_tokens=doc_budget_tokens, documents=documents, build_missing=build_missing,
            progress=progress, cache=cache,
        )
        kb.source = source
        return kb

    def store_dir(self, variant: str) -> Path:
        """The store of ``variant`` at this budget, or the imported (budget-free) one when only that exists."""
        budgeted = store_dir(self.index_root, self.embedder.name, variant, self.doc_budget_tokens)
        imported = store_dir(self.index_root, self.embedder.name, variant)
        if not (budgeted / MANIFEST).is_file() and (imported / MANIFEST).is_file():
            return imported
        return budgeted

    def build(self, variant: str, *, chunk_size: int = 2048, batch_size: int = 64) -> EmbeddingStore:
        """Embed (or finish embedding) every node document of ``variant``."""
        return build_embeddings(
            self.skb, self.embedder, variant, self.store_dir(variant), documents=self.documents,
            doc_budget_tokens=self.doc_budget_tokens, chunk_size=chunk_size, batch_size=batch_size,
            progress=self.progress,
        )

    def index(self, variant: str = "text") -> NodeIndex:
        """The index of ``variant`` for this embedder, built first if missing or unfinished (when allowed)."""
        with self._lock:
            if variant not in self._indexes:
                self._indexes[variant] = self._open_index(variant)
            return self._indexes[variant]

    def _open_index(self, variant: str) -> NodeIndex:
        directory = self.store_dir(variant)
        damage: IndexCorruptError | None = None
        try:
            store = EmbeddingStore.open(directory) if (directory / MANIFEST).is_file() else None
        except IndexCorruptError as exc:
            if not self.build_missing:
                raise
            store, damage = None, exc  # built again from nothing below (``index.build.open_or_discard``)
        if store is None or not store.consistent:
            if not self.build_missing:
                raise self._missing_error(variant, store)
            try:
                self.build(variant)
            except OSError as exc:  # a read-only or full folder: say why it was being built
                if damage is None:
                    raise
                raise IndexCorruptError(damage.reason, f"building it again failed: {exc.filename or directory}: "
                                                       f"{exc.strerror or exc}") from None
            store = EmbeddingStore.open(directory)
        store.check(model=self.embedder.name, skb_fingerprint=skb_fingerprint(self.skb), num_nodes=self.skb.num_nodes,
                    variant=variant, doc_budget_tokens=store.manifest.doc_budget_tokens and self.doc_budget_tokens)
        if store.manifest.documents is not None and store.manifest.documents != (digest := self.digest(store)):
            if not self.build_missing:
                store.check(documents=digest)  # raises, naming the rebuild command
            self.build(variant)
            store = EmbeddingStore.open(directory)
        return NodeIndex(store, self.skb.node_type, self.skb.node_type_names, kind=self.index_kind,
                         params=self.ann_params)

    def digest(self, store: EmbeddingStore) -> str:
        """The store's documents digest as they render now. Indexes from before digests carry none and are
        used as they are: only ``index build`` re-embeds them."""
        budget = store.manifest.doc_budget_tokens or 0
        return documents_digest(self.skb, self.documents or default_documents(), store.manifest.variant, budget)

    def _missing_error(self, variant: str, store: EmbeddingStore | None) -> Exception:
        if store is not None:
            return IndexIncompleteError(
                f"{store.directory}: unfinished ({store.manifest.rows_done}/{store.manifest.num_nodes} rows); "
                f"resume with `autofocus index build --variant {variant} --embedder {self.embedder.name}`"
            )
        others = sorted(f"{m.model} ({m.variant}, {f'{m.doc_budget_tokens} tokens' if m.doc_budget_tokens else 'imported'})"
                        for m in manifests(self.index_root))
        found = f"; indexes here were built with: {', '.join(others)}" if others else ""
        return IndexNotFoundError(
            f"no {variant!r} index for embedder {self.embedder.name!r} under {self.index_root}{found}. "
            f"Queries must be embedded by the model that embedded the nodes: pass that model as the embedder, "
            f"or build with `autofocus index build --variant {variant} --embedder {self.embedder.name} "
            f"--budget {self.doc_budget_tokens}`"
        )

    def embed_query(self, text: str) -> np.ndarray:
        """The query's vector ``(d,)``, from the cache when seen before."""
        return self.cache.embed(self.embedder, [text])[0]

    def embed_queries(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Vectors ``(n, d)`` of many queries, the uncached ones embedded in batches."""
        return self.cache.embed(self.embedder, texts, batch_size=batch_size)
