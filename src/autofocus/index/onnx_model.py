"""ONNX Runtime backend for local sentence-transformers models: exported from the local weights once, cached.

Why: ``index build`` spent its time in MiniLM's forward pass (about 40-70 documents per second on 2
cores with torch). ONNX Runtime with its transformer fusions (attention, skip layer norm, bias GELU)
and int8 weights with VNNI kernels is the cheapest speed-up that needs no other model. The model is
exported from the very weights the torch backend loads (``torch.onnx.export``, mean pooling inside
the graph), never downloaded, into ``<AUTOFOCUS_HOME>/models`` (or ``AUTOFOCUS_MODELS``), keyed by the
weights' digest and the library versions, under a file lock so that parallel processes export once.

Backends:

- ``onnx``: float32, graph fused by ``onnxruntime.transformers.optimizer``;
- ``onnx-int8``: the same with dynamic int8 quantisation of the feed-forward weights, per output
  channel (per-tensor scales cost too much accuracy: cosine 0.94 to torch's vectors); attention keeps
  float32 weights (``benchmarks/bench_embed.py`` measures agreement and speed). Activations are
  quantised per call, so a text's vector depends slightly on the batch it is embedded in.

Only BERT-like encoders with mean pooling are exported; anything else stays on torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autofocus import paths

ONNX_BACKENDS: tuple[str, ...] = ("onnx", "onnx-int8")
OPSET = 17


class OnnxUnavailable(RuntimeError):
    """The ONNX backend cannot serve this model here (missing package, unsupported architecture)."""


def onnx_available() -> bool:
    """Whether ``onnxruntime`` and ``onnx`` import (the ``onnx`` extra, part of ``dev``)."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def models_dir() -> Path:
    """Where exported models live: ``AUTOFOCUS_MODELS`` or ``<AUTOFOCUS_HOME>/models``."""
    root = os.environ.get("AUTOFOCUS_MODELS")
    if root:
        path = Path(root)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return paths.sub("models")


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def check_exportable(model_dir: Path) -> dict[str, Any]:
    """The model's config when it is a BERT-like encoder with mean pooling; raises ``OnnxUnavailable`` otherwise."""
    config = _read_json(model_dir / "config.json")
    modules = json.loads((model_dir / "modules.json").read_text()) if (model_dir / "modules.json").is_file() else []
    pooling = next((m for m in modules if m.get("type", "").endswith("Pooling")), None)
    pool_cfg = _read_json(model_dir / pooling["path"] / "config.json") if pooling else {}
    if config.get("model_type") not in ("bert", "roberta", "xlm-roberta", "mpnet") or not (model_dir / "tokenizer.json").is_file():
        raise OnnxUnavailable(f"{model_dir}: the ONNX backend exports BERT-like encoders with a tokenizer.json only")
    if not pool_cfg.get("pooling_mode_mean_tokens") or any(
        pool_cfg.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")
    ):
        raise OnnxUnavailable(f"{model_dir}: the ONNX backend supports mean pooling only")
    return config


def _weights_digest(model_dir: Path) -> str:
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json"):
        path = model_dir / name
        if path.is_file():
            h.update(name.encode())
            with path.open("rb") as fh:
                while block := fh.read(1 << 24):
                    h.update(block)
    return h.hexdigest()[:16]


def _versions() -> str:
    import onnxruntime
    import torch
    import transformers

    return f"torch{torch.__version__}-tf{transformers.__version__}-ort{onnxruntime.__version__}-opset{OPSET}"


def model_path(model_dir: Path, backend: str) -> Path:
    """The cached ONNX file of ``backend`` for the model in ``model_dir`` (exported on first use)."""
    if backend not in ONNX_BACKENDS:
        raise ValueError(f"unknown ONNX backend {backend!r}; use one of {ONNX_BACKENDS}")
    model_dir = Path(model_dir)
    key = hashlib.sha256(f"{_weights_digest(model_dir)}|{_versions()}".encode()).hexdigest()[:16]
    folder = models_dir() / f"{model_dir.resolve().name}-{key}"
    path = folder / f"{backend}.onnx"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        with _locked(folder / ".lock"):
            if not path.is_file():
                _export_all(model_dir, folder)
    return path


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    with lock.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _export_all(model_dir: Path, folder: Path) -> None:
    """Export, fuse and quantise; each file is written under a temporary name, then renamed."""
    config = check_exportable(model_dir)
    raw = folder / "raw.onnx.tmp"
    _export_raw(model_dir, raw)
    fused = folder / "onnx.onnx.tmp"
    _fuse(raw, fused, config)
    raw.unlink()
    int8 = folder / "onnx-int8.onnx.tmp"
    _quantise(fused, int8, config)
    os.replace(int8, folder / "onnx-int8.onnx")
    os.replace(fused, folder / "onnx.onnx")
    (folder / "export.json").write_text(json.dumps({"source": str(model_dir), "versions": _versions()}, indent=2))


def _export_raw(model_dir: Path, out: Path) -> None:
    """``torch.onnx.export`` of encoder + mean pooling; eager attention so ORT can fuse it."""
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

    names = ["input_ids", "attention_mask", "token_type_ids"]
    dummy = tuple(torch.ones((2, 8), dtype=torch.int64) for _ in names)
    axes = {name: {0: "batch", 1: "tokens"} for name in names} | {"embedding": {0: "batch"}}
    with torch.no_grad():
        torch.onnx.export(MeanPooled(), dummy, str(out), input_names=names, output_names=["embedding"],
                          dynamic_axes=axes, opset_version=OPSET, dynamo=False)


def _fuse(src: Path, out: Path, config: dict[str, Any]) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(str(src), model_type="bert", num_heads=int(config["num_attention_heads"]),
                           hidden_size=int(config["hidden_size"]), opt_level=1)
    model.save_model_to_file(str(out))


def _quantise(src: Path, out: Path, config: dict[str, Any]) -> None:
    """Int8 weights (per output channel) for the feed-forward MatMuls only: they hold two thirds of the
    multiply-adds, and leaving attention in float32 keeps every vector within cosine 0.99 of torch's
    (quantising every MatMul: 0.988 at worst on the demo's documents)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(src), load_external_data=False)
    wide = {t.name for t in model.graph.initializer if int(config["intermediate_size"]) in t.dims}
    ffn = [n.name for n in model.graph.node if n.op_type == "MatMul" and any(i in wide for i in n.input)]
    quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8, per_channel=True, nodes_to_quantize=ffn,
                     op_types_to_quantize=["MatMul"], extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def physical_cores() -> int:
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


class OnnxEncoder:
    """Tokenise, batch by length (little padding) and run one ONNX session; returns mean-pooled rows.

    Two sessions: one with every physical core for batches (index builds), one single-threaded for
    a handful of texts (queries), where waking a second thread on a busy machine costs more than it
    saves.
    """

    def __init__(self, model_dir: Path, backend: str, max_seq_length: int) -> None:
        if not onnx_available():
            raise OnnxUnavailable("the ONNX backend needs onnxruntime and onnx (pip install 'autofocus[onnx]')")
        from tokenizers import Tokenizer

        check_exportable(model_dir)
        self.path = model_path(model_dir, backend)
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=max_seq_length)
        self._sessions: dict[int, Any] = {}
        self._lock = threading.Lock()

    def _session(self, threads: int) -> Any:
        import onnxruntime as ort

        with self._lock:
            if threads not in self._sessions:
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = threads
                opts.inter_op_num_threads = 1
                opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                self._sessions[threads] = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
            return self._sessions[threads]

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Mean-pooled token states, one row per text, in the order given."""
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=True)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(-lengths, kind="stable")
        session = self._session(1 if len(texts) <= 8 else physical_cores())
        out: np.ndarray | None = None
        for start in range(0, len(order), max(1, batch_size)):
            rows = order[start : start + batch_size]
            width = int(lengths[rows[0]])
            ids = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows.tolist()):
                ids[r, : lengths[i]] = encodings[i].ids
            mask = (np.arange(width) < lengths[rows, None]).astype(np.int64)
            vecs = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
            if out is None:
                out = np.empty((len(texts), vecs.shape[1]), dtype=np.float32)
            out[rows] = vecs
        return out if out is not None else np.zeros((0, 0), np.float32)
