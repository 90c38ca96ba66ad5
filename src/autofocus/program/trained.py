"""Models a program was adapted with (``autofocus adapt``): a reranker for step 8 (a cross-encoder, or a
fine-tuned bi-encoder) and a type reader for step 1, trained on one knowledge base's own questions.

They are files beside the program file, in a folder named after it (``adapted.json`` ->
``adapted.trained/``): ``reranker/`` (a sentence-transformers ``CrossEncoder`` or ``SentenceTransformer``
folder, its kind in the manifest) and
``type_reader.json`` (a linear classifier over the question's embedding), with ``manifest.json``
saying what each was trained on (the knowledge base's content digest, the base model, pairs, epochs,
minutes, validation scores). The program file names the folder, so a saved program carries them.

A part trained on another knowledge base ranks that one's documents: loading it beside a knowledge
base with another content digest warns (it may still help a near copy); a missing, half-written or
foreign folder is an error that names the file.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from cachetools import LRUCache

from autofocus import paths
from autofocus.config import RERANKER_KINDS
from autofocus.index.cache import EmbeddingCache, default_cache
from autofocus.index.exported_encoder import weights_digest
from autofocus.index.sentence_model import SentenceModel, SentenceModelError, input_length
from autofocus.saved_files import SavedFileError, read_json_file, read_saved
from autofocus.skb.model import SKB

log = logging.getLogger("autofocus")

MANIFEST = "manifest.json"
RERANKER_DIR = "reranker"
TYPE_READER_FILE = "type_reader.json"
FORMAT = "autofocus-trained/1"
CROSS_ENCODER, BI_ENCODER = RERANKER_KINDS  # the kinds of trained reranker
TRAINED_BACKENDS: tuple[str, ...] = ("auto", "torch", "openvino")  # what runs a trained model
T = TypeVar("T")
BI_ENCODER_SCALE = 20.0  # cosine -> logit, as MultipleNegativesRankingLoss scales it in training


class TrainedPartsError(SavedFileError):
    """A trained-parts folder that is missing, incomplete or not one (names the file and what is wrong)."""


def parts_folder(program_file: Path | str) -> Path:
    """Where a program file's trained parts live: ``adapted.json`` -> ``adapted.trained``."""
    path = Path(program_file)
    return path.with_name(f"{path.stem}.trained")


class _SharedModel:
    """A trained model is read-only: the copies of a program made for other threads share it (a copy per
    thread would hold its weights again), and its calls take turns, as the index's embedder's do."""

    _lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> _SharedModel:
        return self


def _length(folder: Path, max_length: int | None) -> int:
    """The word pieces a trained model reads: the manifest's length, else the folder's own (at most 512)."""
    return min(max_length or input_length(folder), 512)


def check_model_folder(folder: Path, what: str) -> None:
    """Refuse, in one line naming the file, a model folder whose config or weights are missing, cut short
    or damaged, before anything loads or exports it (an export of broken weights costs minutes, then
    fails). Cheap: the config parsed, the safetensors header read and its tensors' extent checked against
    the file's size (``safetensors.safe_open``), no weights read."""
    config = folder / "config.json"
    try:
        if not isinstance(json.loads(config.read_text()), dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        raise TrainedPartsError(f"{folder}: not a {what} folder (no config.json)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TrainedPartsError(f"{config}: unreadable model config ({exc}); run `autofocus adapt` again") from None
    weights = folder / "model.safetensors"
    if not weights.is_file():
        if (folder / "pytorch_model.bin").is_file():  # torch's own format: torch checks it as it loads
            return
        raise TrainedPartsError(f"{weights}: missing (the {what} folder's weights); run `autofocus adapt` again")
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(weights), framework="numpy") as fh:
            fh.keys()
    except (SafetensorError, OSError) as exc:
        raise TrainedPartsError(f"{weights}: damaged or cut short ({exc}); run `autofocus adapt` again") from None


def _on_openvino(folder: Path, backend: str, open_exported: Callable[[], T]) -> T | None:
    """The model converted to OpenVINO by ``open_exported`` (once, cached as the index's embedder is), or
    None where it cannot serve there and ``backend`` is ``auto`` (torch then loads it, and names what is
    wrong with a broken folder)."""
    if backend not in TRAINED_BACKENDS:
        raise ValueError(f"unknown backend {backend!r} for a trained model; use one of {TRAINED_BACKENDS}")
    if backend == "torch":
        return None
    from autofocus.index.exported_encoder import ExportUnavailable

    try:
        return open_exported()
    except Exception as exc:  # a missing runtime, another architecture, a broken folder
        if backend == "openvino":
            raise TrainedPartsError(str(exc) if isinstance(exc, ExportUnavailable)  # names the folder where it matters
                                    else f"{folder}: OpenVINO cannot convert it ({type(exc).__name__}: {exc})") from None
        log.debug("trained model on torch: %s: %s", type(exc).__name__, exc)
    return None


class CrossEncoderModel(_SharedModel):
    """A trained cross-encoder: P(candidate answers question) per candidate, in batches.

    ``backend``: ``auto`` runs it on OpenVINO where that is installed (the same logits as torch's to
    float32 rounding, faster on CPUs: docs/results.md), else on torch; ``torch`` or ``openvino`` choose."""

    kind = CROSS_ENCODER
    exported: Any = None  # the OpenVINO pair scorer, where it runs there

    def __init__(self, folder: Path, *, max_length: int | None = None, batch_size: int = 32,
                 backend: str = "auto") -> None:
        self.folder, self.batch_size = Path(folder), batch_size
        check_model_folder(self.folder, "cross-encoder")
        length = _length(self.folder, max_length)
        self.exported = _on_openvino(self.folder, backend, lambda: _openvino_pair_scorer(self.folder, length))
        self.backend = "openvino" if self.exported is not None else "torch"
        if self.exported is None:
            from sentence_transformers.cross_encoder import CrossEncoder

            try:
                self.model = CrossEncoder(str(self.folder), max_length=max_length, device="cpu", local_files_only=True)
            except (OSError, ValueError, KeyError) as exc:  # a folder without weights, config or tokenizer
                raise TrainedPartsError(f"{self.folder}: not a cross-encoder folder ({type(exc).__name__}: {exc})") from None

    def logits(self, question: str, texts: list[str]) -> np.ndarray:
        """Raw scores (log-odds of an answer), one per text."""
        if not texts:
            return np.zeros(0, dtype=np.float64)
        pairs = [(question, t) for t in texts]
        with self._lock:
            if self.exported is not None:
                out = self.exported.encode(pairs, batch_size=self.batch_size)
            else:
                import torch

                out = self.model.predict(pairs, batch_size=self.batch_size, activation_fn=torch.nn.Identity(),
                                         show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float64).reshape(-1)

    def probabilities(self, question: str, texts: list[str]) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.logits(question, texts)))


class BiEncoderModel(_SharedModel):
    """A sentence embedder fine-tuned on the knowledge base's questions: the index's kind of embedder
    (``index.sentence_model``) loaded from a trained folder, question and candidates embedded apart,
    scored by cosine. Its probabilities are the softmax over the candidates given, the distribution its
    training loss fitted (so they depend on the list, as a ranking does).

    A candidate's vector does not depend on the question, so each description is embedded once and kept
    in the embedding cache (by default the autofocus home's, on disk, under the model's weights digest):
    a candidate met again, by a later question, run or tuning trial, costs a lookup. ``backend`` as the
    cross-encoder's."""

    kind = BI_ENCODER

    def __init__(self, folder: Path, *, max_length: int | None = None, batch_size: int = 32,
                 cache: EmbeddingCache | None = None, backend: str = "auto") -> None:
        self.folder, self.batch_size = Path(folder), batch_size
        check_model_folder(self.folder, "sentence-transformers")
        length = _length(self.folder, max_length)
        self.encoder = _on_openvino(self.folder, backend, lambda: _loaded(SentenceModel(self.folder, "openvino", length)))
        if self.encoder is None:
            try:
                self.encoder = _loaded(SentenceModel(self.folder, "torch", length))
            except SentenceModelError as exc:
                raise TrainedPartsError(str(exc)) from None
        self.backend = self.encoder.backend
        self.cache = cache if cache is not None else default_cache()
        self.name = f"bi-encoder-{weights_digest(self.folder)}-{length}t"  # the cache's key
        self.dim = self.encoder.dim

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """Unit vectors of ``texts`` (the embedder the cache calls for the ones it lacks)."""
        return self.encoder.encode(texts, batch_size=batch_size)

    def logits(self, question: str, texts: list[str]) -> np.ndarray:
        """Scaled cosine of the question and each text."""
        if not texts:
            return np.zeros(0, dtype=np.float64)
        q = self.cache.embed(self, [question])[0]
        d = self.cache.embed(self, texts, batch_size=self.batch_size)
        return BI_ENCODER_SCALE * (d.astype(np.float64) @ q.astype(np.float64))

    def probabilities(self, question: str, texts: list[str]) -> np.ndarray:
        z = self.logits(question, texts)
        if not len(z):
            return z
        e = np.exp(z - z.max())
        return e / e.sum()


def _openvino_pair_scorer(folder: Path, length: int) -> Any:
    from autofocus.index.openvino_model import OpenVinoEncoder

    return OpenVinoEncoder(folder, "openvino", length, pairs=True)


def _loaded(model: SentenceModel) -> SentenceModel:
    """``model`` loaded now, so that a folder its backend cannot serve fails here."""
    model.load()
    return model


RerankerModel = CrossEncoderModel | BiEncoderModel


def open_reranker(folder: Path, record: dict[str, Any], backend: str = "auto") -> RerankerModel:
    """The trained reranker in ``folder`` as its manifest ``record`` describes it (a cross-encoder where it
    names no kind: manifests written before bi-encoders), run by ``backend`` (``TRAINED_BACKENDS``)."""
    kind = record.get("kind", CROSS_ENCODER)
    if kind not in RERANKER_KINDS:
        raise TrainedPartsError(f"{folder}: unknown reranker kind {kind!r} ({CROSS_ENCODER} or {BI_ENCODER})")
    model = CrossEncoderModel if kind == CROSS_ENCODER else BiEncoderModel
    return model(folder, max_length=record.get("max_length"), backend=backend)


@dataclass
class TypeReader:
    """Step 1's answer type from the question's embedding: multinomial logistic regression, fitted on a
    knowledge base's own questions (their answers' types), so a schema's ways of asking are learnt,
    not written as rules."""

    types: list[str]
    coef: np.ndarray  # (types, dim)
    intercept: np.ndarray  # (types,)
    embedder: str  # the model whose question vectors it reads

    def probabilities(self, vector: np.ndarray) -> dict[str, float]:
        z = self.coef @ np.asarray(vector, dtype=np.float64) + self.intercept
        z = np.exp(z - z.max())
        p = z / z.sum()
        return {t: float(v) for t, v in zip(self.types, p, strict=True)}

    def to_dict(self) -> dict[str, Any]:
        return {"types": self.types, "coef": self.coef.round(6).tolist(), "intercept": self.intercept.round(6).tolist(),
                "embedder": self.embedder}

    @classmethod
    def from_dict(cls, doc: dict[str, Any], where: str) -> TypeReader:
        try:
            types, coef = [str(t) for t in doc["types"]], np.asarray(doc["coef"], dtype=np.float64)
            intercept = np.asarray(doc["intercept"], dtype=np.float64)
            embedder = str(doc["embedder"])
        except (KeyError, TypeError, ValueError) as exc:
            raise TrainedPartsError(f"{where}: not a type reader ({type(exc).__name__}: {exc})") from None
        if coef.ndim != 2 or coef.shape[0] != len(types) or intercept.shape != (len(types),):
            raise TrainedPartsError(f"{where}: type reader shapes disagree ({len(types)} types, coef {coef.shape}, "
                                    f"intercept {intercept.shape})")
        if not np.isfinite(coef).all() or not np.isfinite(intercept).all():
            raise TrainedPartsError(f"{where}: type reader weights are not finite")
        return cls(types, coef, intercept, embedder)


@dataclass
class TrainedParts:
    """The trained models of one adapted program and what they were trained on (``manifest``)."""

    folder: Path
    manifest: dict[str, Any]
    reranker: RerankerModel | None = None
    type_reader: TypeReader | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def summary(self) -> dict[str, Any]:
        """What a run's manifest and ``report`` say about the models that ranked it."""
        m = self.manifest
        return {"folder": str(self.folder), "content_digest": m.get("content_digest"),
                "reranker": m.get("reranker"), "type_reader": m.get("type_reader")}

    @classmethod
    def load(cls, folder: Path | str, skb: SKB | None = None, embedder: str | None = None) -> TrainedParts:
        """Open a trained-parts folder; warns (``warnings``, the log) where it was trained on another
        knowledge base or its type reader reads another embedder's vectors."""
        folder = Path(folder)
        manifest = read_saved(folder / MANIFEST, FORMAT, "trained-parts manifest", error=TrainedPartsError,
                              missing=" (was `autofocus adapt` interrupted?)")
        parts = cls(folder, manifest)
        if manifest.get("reranker"):
            parts.reranker = open_reranker(folder / RERANKER_DIR, manifest["reranker"])
        if manifest.get("type_reader"):
            reader_path = folder / TYPE_READER_FILE
            doc = read_json_file(reader_path, "type reader", error=TrainedPartsError)
            parts.type_reader = TypeReader.from_dict(doc, str(reader_path))
        parts.check(skb, embedder)
        return parts

    def check(self, skb: SKB | None, embedder: str | None) -> None:
        """Warn where the parts do not fit the knowledge base they are loaded beside."""
        if skb is not None:
            from autofocus.skb.cache import content_digest

            trained_on = self.manifest.get("content_digest")
            if trained_on and trained_on != content_digest(skb):
                self.warn(f"{self.folder}: trained on another knowledge base ({self.manifest.get('skb', '?')}, content "
                          f"{trained_on[:12]}); its scores may not fit this one: run `autofocus adapt` on it")
            if self.type_reader is not None:
                unknown = sorted(set(self.type_reader.types) - set(skb.schema.answer_types))
                if unknown:
                    raise TrainedPartsError(f"{self.folder / TYPE_READER_FILE}: types {', '.join(unknown)} are no "
                                            "answer type of this knowledge base: it was trained on another one")
        if self.type_reader is not None and embedder is not None and self.type_reader.embedder != embedder:
            self.warn(f"{self.folder / TYPE_READER_FILE}: reads {self.type_reader.embedder} vectors, the program "
                      f"embeds with {embedder}; the type reader is left out")
            self.type_reader = None

    def warn(self, text: str) -> None:
        self.warnings.append(text)
        log.warning(text)


MAX_LOADED = 4
"""Trained-parts folders kept loaded, the least recently used dropped beyond it: each holds a model's
weights (about 100 MB for a MiniLM-sized one), and a process (``lm serve``'s worker, a tuning run) uses
one or two at a time; a folder adapted again is a new entry (its manifest's time is part of the key)."""
_LOADED: LRUCache[tuple[str, int, str], TrainedParts] = LRUCache(MAX_LOADED)
_LOADED_LOCK = threading.Lock()  # one load per folder, whichever thread asks first


def load_trained(folder: str | Path | None, kb: Any) -> TrainedParts | None:
    """A config's ``trained`` folder opened for ``kb`` (once per folder and manifest version: programs are
    deep-copied and rebuilt per trial; ``MAX_LOADED`` kept); None without one."""
    if not folder:
        return None
    folder = Path(folder)
    try:
        stamp = (folder / MANIFEST).stat().st_mtime_ns
    except OSError:
        stamp = -1
    embedder = getattr(getattr(kb, "embedder", None), "name", None)
    key = (str(folder.resolve()), stamp, str(embedder))
    with _LOADED_LOCK:
        if key not in _LOADED:
            _LOADED[key] = TrainedParts.load(folder, getattr(kb, "skb", None), embedder)
        return _LOADED[key]


def write_manifest(folder: Path, manifest: dict[str, Any]) -> Path:
    """The manifest last, atomically: a folder without one is an unfinished adaptation."""
    folder.mkdir(parents=True, exist_ok=True)
    paths.replace_atomically(folder / MANIFEST, json.dumps({"format": FORMAT, **manifest}, indent=2, default=_json_default))
    return folder / MANIFEST


def _json_default(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)
