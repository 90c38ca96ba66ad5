"""Which kernels OpenVINO's CPU plugin runs MiniLM with here: the layer types of the compiled model and the
primitive each runs on (``gemm_mlas_f32``, ``brgemm_avx512_I8``, ``jit_gemm_i8``, ...), counted.

Why: to know what a number measured on this CPU says about another. ``ONEDNN_MAX_CPU_ISA=AVX2`` caps
the oneDNN kernels (and OpenVINO's own JIT subgraphs) to AVX2, but not everything: this script shows
which layers kept wider instructions (OpenVINO's MLAS float32 GEMMs, its MVN kernels).

    python benchmarks/ov_kernels.py                          # the shipped float32 IR
    ONEDNN_MAX_CPU_ISA=AVX2 python benchmarks/ov_kernels.py --ir some-int8.xml --precision f32
"""

from __future__ import annotations

import argparse
import collections
import os
from pathlib import Path

import numpy as np


def main() -> None:
    import openvino as ov

    from autofocus.index.embedders import packaged_minilm_path
    from autofocus.index.exported_encoder import INPUT_NAMES
    from autofocus.index.openvino_model import model_path

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ir", type=Path, default=None, help="an OpenVINO IR (.xml); default: the shipped float32 one")
    parser.add_argument("--precision", default="f32", help="INFERENCE_PRECISION_HINT (f32, bf16)")
    args = parser.parse_args()

    core = ov.Core()
    compiled = core.compile_model(str(args.ir or model_path(packaged_minilm_path())), "CPU",
                                  {"INFERENCE_PRECISION_HINT": args.precision, "INFERENCE_NUM_THREADS": 2})
    compiled.create_infer_request().infer({n: np.ones((8, 128), np.int64) for n in INPUT_NAMES})
    kernels: collections.Counter[tuple[str, str]] = collections.Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        layer = info["layerType"].astype(str)
        if layer not in ("Const", "Input", "Output", "Reshape"):
            kernels[(layer, info["primitiveType"].astype(str))] += 1
    print(f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA')}; plugin capabilities: "
          f"{core.get_property('CPU', 'OPTIMIZATION_CAPABILITIES')}")
    for (layer, primitive), n in kernels.most_common():
        print(f"{n:4d} {layer:28s} {primitive}")


if __name__ == "__main__":
    main()
