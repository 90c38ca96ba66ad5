"""Embedders, float16 embedding stores and FAISS search per node type (see ``autofocus.kb`` for the handle)."""

from autofocus.index.build import build_embeddings, import_embeddings, import_query_embeddings
from autofocus.index.cache import EmbeddingCache, default_cache
from autofocus.index.embedders import DEFAULT_EMBEDDER, Embedder, EmbedderError, get_embedder
from autofocus.index.search import AnnParams, IndexKind, NodeIndex
from autofocus.index.store import (
    ChecksumError,
    EmbeddingStore,
    IndexIncompleteError,
    IndexMismatchError,
    Manifest,
)

__all__ = [
    "DEFAULT_EMBEDDER",
    "AnnParams",
    "ChecksumError",
    "Embedder",
    "EmbedderError",
    "EmbeddingCache",
    "EmbeddingStore",
    "IndexIncompleteError",
    "IndexKind",
    "IndexMismatchError",
    "Manifest",
    "NodeIndex",
    "build_embeddings",
    "default_cache",
    "get_embedder",
    "import_embeddings",
    "import_query_embeddings",
]
