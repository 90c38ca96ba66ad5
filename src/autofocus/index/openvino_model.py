"""OpenVINO backend for local sentence-transformers models: converted from the local weights once, cached
(``exported_encoder``).

Why: on CPUs with bfloat16 instructions (AVX512-BF16, AMX) OpenVINO runs MiniLM in bf16 about 1.4x
faster than ONNX Runtime's int8 weights and 3x faster than torch, and its vectors stay within cosine
0.9999 of torch's where int8 falls to 0.986 (docs/results.md, 2026-11-25). Without those instructions bf16 has no
fast kernels; on a CPU without int8 dot products either (plain AVX2) OpenVINO's float32 is the fastest
backend, ahead of ONNX Runtime's float32 and int8 (docs/results.md, 2026-11-28), and ``auto`` picks it there.

Backends:

- ``openvino``: float32;
- ``openvino-bf16``: the same graph run with bf16 as its inference precision (weights are stored in
  float32; OpenVINO converts them at compile time).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np

from autofocus.index.exported_encoder import (
    INPUT_NAMES,
    ExportUnavailable,
    LengthBatchedEncoder,
    check_exportable,
    check_pair_scorer,
    exported_file,
    mean_pooled_module,
    pair_logits_module,
)

log = logging.getLogger(__name__)

OPENVINO_BACKENDS: tuple[str, ...] = ("openvino", "openvino-bf16")
_PRECISION = {"openvino": "f32", "openvino-bf16": "bf16"}


def openvino_available() -> bool:
    """Whether ``openvino`` imports (the ``openvino`` extra, part of ``dev``)."""
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


@cache
def bf16_supported() -> bool:
    """Whether OpenVINO's CPU plugin has bf16 kernels on this CPU."""
    import openvino as ov

    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def _versions() -> str:
    import openvino
    import torch
    import transformers

    return f"torch{torch.__version__}-tf{transformers.__version__}-ov{openvino.__version__}"


def model_path(model_dir: Path, pairs: bool = False) -> Path:
    """The cached OpenVINO IR (``.xml`` beside its ``.bin``) of the model in ``model_dir``: its mean-pooled
    encoder, or with ``pairs`` a cross-encoder's logit."""
    stem, module = ("openvino-pairs", pair_logits_module) if pairs else ("openvino", mean_pooled_module)
    return exported_file(model_dir, _versions(), f"{stem}.xml", partial(_convert, module, stem))


def _convert(module: Callable[[Path], Any], stem: str, model_dir: Path, folder: Path) -> None:
    """Convert from the torch module; the ``.bin`` is renamed before the ``.xml`` that marks it done."""
    import openvino as ov
    import torch

    example = {name: torch.ones((2, 8), dtype=torch.int64) for name in INPUT_NAMES}
    example["attention_mask"][0, 5:] = 0  # a padded row, so the mask path is traced
    with torch.no_grad():
        model = ov.convert_model(module(model_dir), example_input=example,
                                 input=[(name, [-1, -1], ov.Type.i64) for name in INPUT_NAMES])
    ov.save_model(model, str(folder / f"{stem}-tmp.xml"), compress_to_fp16=False)
    os.replace(folder / f"{stem}-tmp.bin", folder / f"{stem}.bin")
    os.replace(folder / f"{stem}-tmp.xml", folder / f"{stem}.xml")


class OpenVinoEncoder(LengthBatchedEncoder):
    """A compiled OpenVINO model per thread count, one inference request each. With ``pairs`` the model is
    a cross-encoder and ``encode`` takes (question, text) pairs and returns their logits (one column)."""

    def __init__(self, model_dir: Path, backend: str, max_seq_length: int, *, pairs: bool = False) -> None:
        if backend not in OPENVINO_BACKENDS:
            raise ValueError(f"unknown OpenVINO backend {backend!r}; use one of {OPENVINO_BACKENDS}")
        if not openvino_available():
            raise ExportUnavailable("the OpenVINO backend needs openvino (pip install 'autofocus[openvino]')")
        super().__init__(model_dir, max_seq_length, check_pair_scorer if pairs else check_exportable)
        self.precision = _PRECISION[backend]
        if self.precision == "bf16" and not bf16_supported():
            log.warning("this CPU has no bf16 kernels in OpenVINO: %s runs in float32 here", backend)
        self.path = model_path(model_dir, pairs)

    def _runner(self, threads: int) -> Any:
        import openvino as ov

        compiled = ov.Core().compile_model(str(self.path), "CPU", {
            "INFERENCE_PRECISION_HINT": self.precision, "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_NUM_THREADS": threads,
        })  # fmt: skip
        request = compiled.create_infer_request()
        return lambda feed: np.array(request.infer(feed)[0], dtype=np.float32)  # a copy: the buffer is reused
