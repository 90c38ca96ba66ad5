"""A local sentence-transformers folder run by one backend (torch, ONNX Runtime or OpenVINO): what the
index's embedder and step 8's fine-tuned bi-encoder both are, a folder's sentence vectors.

Loaded on first use, offline (``HF_HUB_OFFLINE``: a missing file fails fast instead of reaching the hub),
and called by one thread at a time (neither torch modules nor the exported runners' buffers are
re-entrant). The exported backends read the folder's own input length unless told another.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autofocus.index.exported_encoder import read_json

LOCAL_BACKENDS: tuple[str, ...] = ("torch", "onnx", "onnx-int8", "openvino", "openvino-bf16")


class SentenceModelError(RuntimeError):
    """A folder that is not a sentence-transformers model (names it and what is wrong)."""


def input_length(model_dir: Path) -> int:
    """The tokens a sentence-transformers folder reads: its ``max_seq_length`` (older folders), else its
    tokenizer's ``model_max_length`` (where sentence-transformers 5.x/6 saves a fine-tuned model's), else 256."""
    settings = read_json(model_dir / "sentence_bert_config.json")
    tokenizer_length = read_json(model_dir / "tokenizer_config.json").get("model_max_length")
    if settings.get("max_seq_length"):
        return int(settings["max_seq_length"])
    if isinstance(tokenizer_length, int) and 0 < tokenizer_length <= 100_000:  # not the "no limit" sentinel
        return tokenizer_length
    return 256


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero) as float32."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


class SentenceModel:
    """The sentence vectors of the model in ``folder``, computed by ``backend`` on CPU.

    ``max_seq_length``: the word pieces read (None: the folder's own, ``input_length``; torch then keeps
    what sentence-transformers reads from the folder). ``load`` raises ``ExportUnavailable`` where an
    exported backend cannot serve the model, ``SentenceModelError`` where the folder is not a model.
    """

    def __init__(self, folder: Path | str, backend: str = "torch", max_seq_length: int | None = None,
                 device: str = "cpu") -> None:
        if backend not in LOCAL_BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(LOCAL_BACKENDS)}")
        self.folder, self.backend, self.device = Path(folder), backend, device
        self.length = max_seq_length or input_length(self.folder)
        self._torch_length = max_seq_length
        self._model: Any = None
        self._lock = threading.Lock()

    def check(self) -> None:
        if not (self.folder / "modules.json").is_file() and not (self.folder / "config.json").is_file():
            raise SentenceModelError(
                f"{self.folder} is not a sentence-transformers model directory (no modules.json or config.json)"
            )

    def load(self) -> Any:
        """The backend's model, loaded once."""
        with self._lock:
            if self._model is None:
                self.check()
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                self._model = self._load_torch() if self.backend == "torch" else self._load_exported()
        return self._model

    def _load_exported(self) -> Any:
        from autofocus.index.onnx_model import OnnxEncoder
        from autofocus.index.openvino_model import OpenVinoEncoder

        encoder = OpenVinoEncoder if self.backend.startswith("openvino") else OnnxEncoder
        return encoder(self.folder, self.backend, self.length)

    def _load_torch(self) -> Any:
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a "Loading weights" bar on every CLI call is noise
        try:
            model = SentenceTransformer(str(self.folder), device=self.device, local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:  # a folder without weights, config or tokenizer
            raise SentenceModelError(f"{self.folder}: not a sentence-transformers folder "
                                     f"({type(exc).__name__}: {exc})") from None
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        if self._torch_length:
            model.max_seq_length = self._torch_length
        return model

    @property
    def dim(self) -> int:
        """The vectors' width (an exported backend's from the config, without loading it)."""
        if self.backend != "torch":
            self.check()
            return int(read_json(self.folder / "config.json")["hidden_size"])
        model = self.load()
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    def encode(self, texts: Sequence[str], batch_size: int = 32, *, unit: bool = True) -> np.ndarray:
        """One float32 row per text, unit length. ``unit=False`` leaves an exported backend's rows as it
        pools them, for a caller that normalises every batch itself (torch's come normalised either way)."""
        model = self.load()
        with self._lock:
            if self.backend != "torch":
                rows = model.encode(list(texts), batch_size=batch_size)
                return l2_normalise(rows) if unit else rows
            return model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
                                show_progress_bar=False)
