"""ONNX Runtime backend for local sentence-transformers models: exported from the local weights once, cached
(``exported_encoder``).

Why: ``index build`` spent its time in MiniLM's forward pass (about 40-70 documents per second on 2
cores with torch). ONNX Runtime with its transformer fusions (attention, skip layer norm, bias GELU)
and int8 weights with VNNI kernels needs no other model and runs on any x86 or ARM CPU.

Backends:

- ``onnx``: float32, graph fused by ``onnxruntime.transformers.optimizer``;
- ``onnx-int8``: the same with dynamic int8 quantisation of the feed-forward weights, per output
  channel (per-tensor scales cost too much accuracy: cosine 0.94 to torch's vectors); attention keeps
  float32 weights (``benchmarks/bench_embed.py`` measures agreement and speed). Activations are
  quantised per call, so a text's vector depends slightly on the batch it is embedded in. It pays only
  on CPUs with int8 dot products (VNNI): with plain AVX2 it runs at float32's speed, and static int8
  (activation scales calibrated on documents) at half of it (docs/results.md, 2026-11-28).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from autofocus.index.exported_encoder import (
    INPUT_NAMES,
    ExportUnavailable,
    LengthBatchedEncoder,
    check_exportable,
    exported_file,
    mean_pooled_module,
)

ONNX_BACKENDS: tuple[str, ...] = ("onnx", "onnx-int8")
OPSET = 17


def onnx_available() -> bool:
    """Whether ``onnxruntime`` and ``onnx`` import (the ``onnx`` extra, part of ``dev``)."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def _versions() -> str:
    import onnxruntime
    import torch
    import transformers

    return f"torch{torch.__version__}-tf{transformers.__version__}-ort{onnxruntime.__version__}-opset{OPSET}"


def model_path(model_dir: Path, backend: str) -> Path:
    """The cached ONNX file of ``backend`` for the model in ``model_dir`` (exported on first use)."""
    if backend not in ONNX_BACKENDS:
        raise ValueError(f"unknown ONNX backend {backend!r}; use one of {ONNX_BACKENDS}")
    return exported_file(model_dir, _versions(), f"{backend}.onnx", _export_all)


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


def _export_raw(model_dir: Path, out: Path) -> None:
    import torch

    dummy = tuple(torch.ones((2, 8), dtype=torch.int64) for _ in INPUT_NAMES)
    axes = {name: {0: "batch", 1: "tokens"} for name in INPUT_NAMES} | {"embedding": {0: "batch"}}
    with torch.no_grad():
        torch.onnx.export(mean_pooled_module(model_dir), dummy, str(out), input_names=list(INPUT_NAMES),
                          output_names=["embedding"], dynamic_axes=axes, opset_version=OPSET, dynamo=False)


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


class OnnxEncoder(LengthBatchedEncoder):
    """An ONNX Runtime session per thread count over the exported model."""

    def __init__(self, model_dir: Path, backend: str, max_seq_length: int) -> None:
        if not onnx_available():
            raise ExportUnavailable("the ONNX backend needs onnxruntime and onnx (pip install 'autofocus[onnx]')")
        super().__init__(model_dir, max_seq_length)
        self.path = model_path(model_dir, backend)

    def _runner(self, threads: int) -> Any:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        return lambda feed: np.asarray(session.run(None, feed)[0])
