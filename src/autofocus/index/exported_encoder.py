"""What the exported backends of a local sentence-transformers model share (``onnx_model``,
``openvino_model``): which models export, the cache of exported files, the modules that are exported
(a mean-pooled encoder; a cross-encoder's one-logit head), and the length-batched loop that runs them.

Exports are made from the very weights the torch backend loads, never downloaded, into
``<AUTOFOCUS_HOME>/models`` (or the folders ``AUTOFOCUS_MODELS`` lists), keyed by the weights' digest and the library
versions, under a file lock so that parallel processes export once. Only BERT-like encoders with mean
pooling, or with a one-logit sequence-classification head (a cross-encoder), are exported; anything else
stays on torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autofocus import paths

INPUT_NAMES: tuple[str, ...] = ("input_ids", "attention_mask", "token_type_ids")
QUERY_TEXTS = 8  # at most this many texts run single-threaded (a question and its constants)


class ExportUnavailable(RuntimeError):
    """An exported backend cannot serve this model here (missing package, unsupported architecture)."""


def models_dirs() -> list[Path]:
    """Where exported models live: the folders ``AUTOFOCUS_MODELS`` lists (separated as in ``PATH``; an
    export found in any is used, a new one goes into the first), else ``<AUTOFOCUS_HOME>/models``."""
    listed = [Path(p) for p in os.environ.get("AUTOFOCUS_MODELS", "").split(os.pathsep) if p]
    if not listed:
        return [paths.sub("models")]
    listed[0].mkdir(parents=True, exist_ok=True)
    return listed


def read_json(path: Path) -> dict[str, Any]:
    """A model directory's JSON file, or {} where it has none."""
    return json.loads(path.read_text()) if path.is_file() else {}


def _bert_like(model_dir: Path) -> dict[str, Any]:
    """The model's config when it is a BERT-like encoder with a fast tokenizer; raises ``ExportUnavailable`` otherwise."""
    config = read_json(model_dir / "config.json")
    if config.get("model_type") not in ("bert", "roberta", "xlm-roberta", "mpnet") or not (model_dir / "tokenizer.json").is_file():
        raise ExportUnavailable(f"{model_dir}: exported backends serve BERT-like encoders with a tokenizer.json only")
    return config


def check_exportable(model_dir: Path) -> dict[str, Any]:
    """The model's config when it is a BERT-like encoder with mean pooling; raises ``ExportUnavailable`` otherwise."""
    config = _bert_like(model_dir)
    modules = json.loads((model_dir / "modules.json").read_text()) if (model_dir / "modules.json").is_file() else []
    pooling = next((m for m in modules if m.get("type", "").endswith("Pooling")), None)
    if any(m.get("type", "").rsplit(".", 1)[-1] not in ("Transformer", "Pooling", "Normalize") for m in modules):
        raise ExportUnavailable(f"{model_dir}: exported backends support mean pooling only (no further layers)")
    pool_cfg = read_json(model_dir / pooling["path"] / "config.json") if pooling else {}
    mean = pool_cfg["pooling_mode"] == "mean" if "pooling_mode" in pool_cfg else (  # sentence-transformers 6 writes one mode
        pool_cfg.get("pooling_mode_mean_tokens") and not any(
            pool_cfg.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")))
    if not mean:
        raise ExportUnavailable(f"{model_dir}: exported backends support mean pooling only")
    return config


def check_pair_scorer(model_dir: Path) -> dict[str, Any]:
    """The model's config when it is a BERT-like cross-encoder with one logit; raises ``ExportUnavailable`` otherwise."""
    config = _bert_like(model_dir)
    heads = config.get("architectures") or []
    if not any(a.endswith("ForSequenceClassification") for a in heads) or len(config.get("id2label") or {"0": 0}) != 1:
        raise ExportUnavailable(f"{model_dir}: exported pair scoring serves one-logit sequence classifiers only")
    return config


def weights_digest(model_dir: Path) -> str:
    """What a transformer folder computes: its config, weights and tokenizer (names a model's derived files)."""
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json"):
        path = model_dir / name
        if path.is_file():
            h.update(name.encode())
            with path.open("rb") as fh:
                while block := fh.read(1 << 24):
                    h.update(block)
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """A weights bar, config notes and tracer warnings on a one-time export are noise."""
    import warnings

    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def exported_file(model_dir: Path, versions: str, filename: str, export: Callable[[Path, Path], None]) -> Path:
    """``filename`` in the model's export folder (keyed by weights and ``versions``), made by
    ``export(model_dir, folder)`` on first use; ``export`` writes under temporary names, then renames."""
    model_dir = Path(model_dir)
    key = hashlib.sha256(f"{weights_digest(model_dir)}|{versions}".encode()).hexdigest()[:16]
    name, dirs = f"{model_dir.resolve().name}-{key}", models_dirs()
    found = [d / name / filename for d in dirs if (d / name / filename).is_file()]
    if found:
        return found[0]
    folder = dirs[0] / name
    path = folder / filename
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        with paths.locked(folder / ".lock"):
            if not path.is_file():
                with _quiet_transformers():
                    export(model_dir, folder)
                paths.replace_atomically(folder / "export.json",
                                         json.dumps({"source": str(model_dir), "versions": versions}, indent=2))
    return path


def mean_pooled_module(model_dir: Path) -> Any:
    """Encoder + mean pooling as one ``torch.nn.Module`` (eager attention, so ONNX Runtime can fuse it)."""
    import torch
    from transformers import AutoModel

    encoder = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager", local_files_only=True).eval()

    class MeanPooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    return MeanPooled()


def pair_logits_module(model_dir: Path) -> Any:
    """A cross-encoder's encoder and classification head as one ``torch.nn.Module``: a pair's logit."""
    import torch
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir), attn_implementation="eager",
                                                               local_files_only=True).eval()

    class PairLogits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits

    return PairLogits()


def physical_cores() -> int:
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


class LengthBatchedEncoder:
    """Tokenise, batch by length (little padding) and run an exported model; returns its output rows
    (mean-pooled vectors, or a cross-encoder's logits for text pairs).

    Subclasses give ``_runner(threads)``: a callable from the three int64 inputs to the pooled rows.
    Two runners: one with every physical core for batches (index builds), one single-threaded for a
    handful of texts (queries), where waking a second thread on a busy machine costs more than it saves.
    """

    def __init__(self, model_dir: Path, max_seq_length: int,
                 check: Callable[[Path], dict[str, Any]] = check_exportable) -> None:
        from tokenizers import Tokenizer

        check(model_dir)
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=max_seq_length)  # longest first, as transformers' pairs
        self._runners: dict[int, Callable[[dict[str, np.ndarray]], np.ndarray]] = {}
        self._lock = threading.Lock()

    def _runner(self, threads: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
        raise NotImplementedError

    def _cached_runner(self, threads: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
        with self._lock:
            if threads not in self._runners:
                self._runners[threads] = self._runner(threads)
            return self._runners[threads]

    def encode(self, texts: Sequence[str | tuple[str, str]], batch_size: int = 64) -> np.ndarray:
        """The model's output, one row per text (or pair: a tuple is read as two segments), in the order given."""
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=True)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(-lengths, kind="stable")
        run = self._cached_runner(1 if len(texts) <= QUERY_TEXTS else physical_cores())
        out: np.ndarray | None = None
        for start in range(0, len(order), max(1, batch_size)):
            rows = order[start : start + batch_size]
            width = int(lengths[rows[0]])
            ids, segments = np.zeros((2, len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows.tolist()):
                ids[r, : lengths[i]] = encodings[i].ids
                segments[r, : lengths[i]] = encodings[i].type_ids
            mask = (np.arange(width) < lengths[rows, None]).astype(np.int64)
            vecs = run({"input_ids": ids, "attention_mask": mask, "token_type_ids": segments})
            if out is None:
                out = np.empty((len(texts), vecs.shape[1]), dtype=np.float32)
            out[rows] = vecs
        return out if out is not None else np.zeros((0, 0), np.float32)
