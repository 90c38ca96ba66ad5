"""Fill embedding stores: embed node documents in resumable chunks, or import published vectors.

Embedding 1 M documents with the local model takes about 2 h on 2 cores, so a
crash or Ctrl-C must not lose finished work: each chunk is flushed to the memmap and recorded in the
done mask and manifest before the next one starts, and a rerun embeds only the rows not yet done.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from autofocus import digests
from autofocus.index.cache import EmbeddingCache, default_cache
from autofocus.index.embedders import Embedder, l2_normalise, trained_tokens
from autofocus.index.progress import progress_bar
from autofocus.index.store import (
    MANIFEST,
    VECTORS,
    EmbeddingStore,
    IndexCorruptError,
    IndexError_,
    check_free_space,
    discard,
    skb_fingerprint,
    store_bytes,
    writing,
)
from autofocus.skb.model import SKB

log = logging.getLogger(__name__)
DocumentFn = Callable[[SKB, np.ndarray, str, int], list[str]]


def default_documents() -> DocumentFn:
    """``autofocus.skb.documents.render_documents``, imported late so the index layer has no load-time cycle."""
    from autofocus.skb.documents import render_documents

    return render_documents


def documents_digest(skb: SKB, documents: DocumentFn, variant: str, budget: int, sample: int = 512) -> str:
    """SHA-256 (16 hex) of ``sample`` evenly spaced nodes' documents as ``documents`` renders them now.

    A change to the rendering code keeps the SKB's fingerprint; this digest is what tells an index of
    old documents from a current one. Rendering a few hundred documents costs milliseconds, and a
    change that touches more than a sliver of the documents shows in the sample.
    """
    ids = np.unique(np.linspace(0, skb.num_nodes - 1, min(sample, skb.num_nodes)).astype(np.int64))
    h = hashlib.sha256()
    for text in documents(skb, ids, variant, budget):
        h.update(text.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()[:16]


def embed_unique(embedder: Embedder, texts: list[str], batch_size: int) -> np.ndarray:
    """Vectors of ``texts``, each distinct text embedded once, longest first.

    Sorting the whole chunk by length keeps every batch's padding small (sentence-transformers sorts
    only inside one call); duplicates (empty documents rendered alike, repeated boilerplate) cost nothing.
    """
    unique, inverse = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
    lengths = np.fromiter((len(t) for t in unique), dtype=np.int64, count=len(unique))
    order = np.argsort(-lengths, kind="stable")
    vecs = embedder.embed(unique[order].tolist(), batch_size=batch_size)
    out = np.empty_like(vecs)
    out[order] = vecs
    return out[inverse]


def open_or_discard(directory: Path) -> EmbeddingStore | None:
    """The store at ``directory`` opened for writing, or None when there is none; a damaged one
    (``IndexCorruptError``: cut short, overwritten, an unreadable manifest) is removed, with a warning,
    so that it is built again from nothing instead of being completed with zero rows."""
    if not (directory / MANIFEST).exists():
        return None
    try:
        store = EmbeddingStore.open(directory, writable=True)
        if store.consistent and store.manifest.sample is None:  # from before sampled digests: checked whole once
            store.verify()
            store.manifest.sample = digests.sampled(directory / VECTORS)
            store.save_manifest()
        return store
    except IndexCorruptError as exc:
        log.warning("%s; building the store again from nothing", exc.reason)
        discard(directory)
        return None


def build_embeddings(
    skb: SKB, embedder: Embedder, variant: str, directory: Path, *, documents: DocumentFn | None = None,
    doc_budget_tokens: int | None = None, chunk_size: int = 2048, batch_size: int = 64, progress: bool = True,
) -> EmbeddingStore:
    """Embed every node's ``variant`` document into the store at ``directory``, resuming a partial one.

    ``doc_budget_tokens`` defaults to the embedder's trained length (``embedders.trained_tokens``).

    Example:
        >>> store = build_embeddings(skb, get_embedder("local:all-MiniLM-L6-v2"), "text", Path("idx/text"))
    """
    directory = Path(directory)
    with writing(directory):
        return _build(skb, embedder, variant, directory, documents or default_documents(),
                      doc_budget_tokens or trained_tokens(embedder), chunk_size, batch_size, progress)


def _build(skb: SKB, embedder: Embedder, variant: str, directory: Path, documents: DocumentFn, budget: int,
           chunk_size: int, batch_size: int, progress: bool) -> EmbeddingStore:
    """``build_embeddings`` with the store's lock held."""
    fp = skb_fingerprint(skb)
    n = skb.num_nodes
    digest = documents_digest(skb, documents, variant, budget) if n else None
    store = open_or_discard(directory)
    if store is not None:
        store.check(model=embedder.name, skb_fingerprint=fp, num_nodes=n, variant=variant, doc_budget_tokens=budget)
        if store.manifest.documents != digest:  # rendered differently (or by a version that kept no digest)
            log.warning("%s: the documents are rendered differently from when it was built (digest %s, now %s): "
                        "embedding every row again", directory, store.manifest.documents, digest)
            store.restart(digest)
        todo = np.flatnonzero(~np.asarray(store.done))
        if len(todo) == 0 and store.consistent:
            return store
    else:
        todo = np.arange(n, dtype=np.int64)
        if n:  # before the first chunk is embedded, not after: a full disk is known now
            check_free_space(directory, store_bytes(n, embedder.dim))
    with progress_bar(progress, n, f"embedding {variant!r} ({budget} tokens)", completed=n - len(todo)) as advance:
        for start in range(0, len(todo), chunk_size):
            ids = todo[start : start + chunk_size]
            texts = documents(skb, ids, variant, budget)
            if len(texts) != len(ids):
                raise IndexError_(f"document function returned {len(texts)} texts for {len(ids)} nodes")
            vecs = embed_unique(embedder, texts, batch_size)
            if store is None:
                store = EmbeddingStore.create(
                    directory, model=embedder.name, dim=int(vecs.shape[1]), variant=variant,
                    doc_budget_tokens=budget, skb_fingerprint=fp, num_nodes=n, documents=digest,
                )
            store.begin_write()
            store.write_rows(ids, vecs)
            advance(len(ids))
    if store is None:  # an SKB without nodes
        raise IndexError_("the SKB has no nodes to embed")
    store.finish()
    return store


# -- imports --------------------------------------------------------------------------------------------
def load_torch_file(path: Path, allow_pickle: bool = False) -> Any:
    """``torch.load`` restricted to tensors and containers unless ``allow_pickle`` (trusted files only)."""
    import pickle

    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        return torch.load(path, map_location="cpu", weights_only=not allow_pickle, mmap=True)
    except RuntimeError as exc:
        if "mmap" not in str(exc):  # legacy (non-zip) files cannot be memory-mapped
            raise IndexError_(f"{path}: cannot read as a torch file: {exc}") from exc
    except pickle.UnpicklingError as exc:
        raise IndexError_(
            f"{path}: holds objects other than tensors and containers, refused by torch.load(weights_only=True); "
            "if you trust the file, rerun with --allow-pickle"
        ) from exc
    return torch.load(path, map_location="cpu", weights_only=not allow_pickle)


def _as_matrix(value: Any, where: str) -> np.ndarray:
    """A tensor/array/list of vectors as a 2-D float32 array; ``(1, d)`` rows (STaRK's layout) flatten."""
    import torch

    arr = value.detach().float().numpy() if isinstance(value, torch.Tensor) else np.asarray(value, np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim == 3 and arr.shape[1] == 1:
        arr = arr[:, 0, :]
    if arr.ndim != 2:
        raise IndexError_(f"{where}: expected vectors, got an array of shape {arr.shape}")
    return arr


def iter_vector_file(obj: Any, where: str, chunk: int = 65536) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(node ids, vectors)`` chunks from the published layouts.

    - a tensor ``[N, d]`` (row i = node i);
    - AF-Retriever's dict ``{"indices": ids, "embeddings": [n, d], ...}``;
    - STaRK's dict ``{node_id: tensor (d,) or (1, d)}``.
    """
    import torch

    if isinstance(obj, torch.Tensor | np.ndarray):
        for start in range(0, len(obj), chunk):
            part = _as_matrix(obj[start : start + chunk], where)
            yield np.arange(start, start + len(part), dtype=np.int64), part
        return
    if not isinstance(obj, Mapping):
        raise IndexError_(f"{where}: expected a tensor or a dict, got {type(obj).__name__}")
    if "embeddings" in obj:
        if "indices" not in obj:
            raise IndexError_(f"{where}: dict has 'embeddings' but no 'indices'")
        ids = np.asarray(obj["indices"], dtype=np.int64).reshape(-1)
        emb = obj["embeddings"]
        if len(ids) != len(emb):
            raise IndexError_(f"{where}: {len(ids)} indices but {len(emb)} embeddings")
        for start in range(0, len(ids), chunk):
            yield ids[start : start + chunk], _as_matrix(emb[start : start + chunk], where)
        return
    try:
        keys = sorted(int(k) for k in obj)
    except (TypeError, ValueError) as exc:
        raise IndexError_(f"{where}: dict keys must be node ids (integers): {exc}") from exc
    lookup = {int(k): k for k in obj}
    for start in range(0, len(keys), chunk):
        part = keys[start : start + chunk]
        rows = [_as_matrix(obj[lookup[k]], f"{where}[{k}]") for k in part]
        if any(len(r) != 1 for r in rows):
            raise IndexError_(f"{where}: each value must be one vector (shape (d,) or (1, d))")
        yield np.asarray(part, dtype=np.int64), np.concatenate(rows, axis=0)


def import_embeddings(
    file: Path, skb: SKB, directory: Path, *, variant: str, model: str, allow_pickle: bool = False,
    progress: bool = True,
) -> EmbeddingStore:
    """Convert a published ``.pt`` file of node vectors into a float16 store named after ``model``.

    Queries must then be embedded by that same ``model``, which the manifest records and searches check.
    """
    file = Path(file)
    obj = load_torch_file(file, allow_pickle=allow_pickle)
    with writing(Path(directory)):
        return _import(obj, file, skb, Path(directory), variant, model, progress)


def _import(obj: Any, file: Path, skb: SKB, directory: Path, variant: str, model: str,
            progress: bool) -> EmbeddingStore:
    """``import_embeddings`` with the store's lock held."""
    n = skb.num_nodes
    fp = skb_fingerprint(skb)
    store = open_or_discard(Path(directory))
    if store is not None:
        store.check(model=model, skb_fingerprint=fp, num_nodes=n, variant=variant)
    seen = np.zeros(n, dtype=bool)
    with progress_bar(progress, None, f"importing {file.name}") as advance:
        for ids, vecs in iter_vector_file(obj, str(file)):
            bad = (ids < 0) | (ids >= n)
            if bad.any():
                raise IndexError_(f"{file}: node id {int(ids[bad][0])} out of range (the SKB has {n} nodes)")
            if seen[ids].any() or len(np.unique(ids)) != len(ids):
                raise IndexError_(f"{file}: duplicate node ids")
            seen[ids] = True
            if not np.isfinite(vecs).all():
                raise IndexError_(f"{file}: non-finite values in the vectors of nodes {ids[0]}..{ids[-1]}")
            if store is None:
                store = EmbeddingStore.create(
                    directory, model=model, dim=int(vecs.shape[1]), variant=variant, doc_budget_tokens=None,
                    skb_fingerprint=fp, num_nodes=n, source=f"imported:{file.name}",
                )
            store.check(dim=int(vecs.shape[1]))
            store.begin_write()
            store.write_rows(ids, l2_normalise(vecs))
            advance(len(ids))
    if store is None:
        raise IndexError_(f"{file}: no vectors found")
    store.finish()
    return store


def import_query_embeddings(
    file: Path, model: str, texts: Mapping[int, str] | None = None, cache: EmbeddingCache | None = None,
    allow_pickle: bool = False,
) -> int:
    """Put published query/entity vectors into the query cache under ``model``; returns how many.

    A dict keyed by strings (AF's ``entity_emb_dict.pt``) is keyed by the text itself; a dict keyed by
    ids or a tensor (STaRK's ``query_emb_dict.pt``) needs ``texts`` mapping those ids to the query text.
    """
    file = Path(file)
    obj = load_torch_file(file, allow_pickle=allow_pickle)
    cache = cache or default_cache()
    if isinstance(obj, Mapping) and obj and all(isinstance(k, str) for k in obj) and "embeddings" not in obj:
        keys = list(obj)
        vecs = np.concatenate([_as_matrix(obj[k], f"{file}[{k!r}]") for k in keys], axis=0)
        cache.put_many(model, keys, l2_normalise(vecs))
        return len(keys)
    if texts is None:
        raise IndexError_(f"{file}: vectors are keyed by id; give the question texts (e.g. --qa qa.csv)")
    count = 0
    for ids, vecs in iter_vector_file(obj, str(file)):
        missing = [int(i) for i in ids if int(i) not in texts]
        if missing:
            raise IndexError_(f"{file}: no question text for id {missing[0]} ({len(missing)} ids missing)")
        cache.put_many(model, [texts[int(i)] for i in ids], l2_normalise(vecs))
        count += len(ids)
    return count
