"""Embedding backends side by side on this CPU: documents per second on 128-token documents, and how
far each backend's vectors stay from torch's.

One arm per backend the project has: ``torch``, ``onnx``, ``onnx-int8``, ``openvino``, and
``openvino-bf16`` where the CPU has bf16 kernels (elsewhere it would run float32 and is left out).
``--candidates`` adds int8 variants that are not shipped, to re-check the choice on another CPU:

- ``onnx-static-int8``: every MatMul in int8 with activation scales calibrated on the SKB's own
  documents (``onnxruntime.quantization.quantize_static``, QDQ, weights per channel), run by ONNX Runtime;
- ``openvino-static-int8``: the same QDQ model run by OpenVINO;
- ``openvino-nncf-int8``: OpenVINO's own post-training int8 (NNCF, transformer preset; needs ``nncf``).

Every arm embeds the very same texts through the length-sorted, dynamically padded batches of the
index build, in rounds in one process, the arms' order reversed every other round; reported: the
median of the rounds (wall and CPU seconds, all threads) and each arm's speed relative to the
``auto`` backend's in the same round (median and range): on a shared machine the ratio is what to trust.

Texts (``--texts``): ``fixed``: each exactly ``--budget`` word pieces (the SKB's documents
concatenated and cut), the throughput table's unit; ``documents``: the SKB's documents of both
variants at the budget, the length mix an index build sees. Writes ``benchmarks/results/embed.json``.

    .venv/bin/python benchmarks/bench_embed.py --skb data/demo                      # the table: minutes on a quiet machine
    .venv/bin/python benchmarks/bench_embed.py --skb data/demo --candidates --texts documents
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autofocus.index.cpu_features import int8_dot_product
from autofocus.index.embedders import DEFAULT_EMBEDDER, get_embedder, l2_normalise, packaged_minilm_path
from autofocus.index.exported_encoder import LengthBatchedEncoder
from autofocus.skb.documents import render_documents
from autofocus.skb.model import SKB

RESULTS = Path(__file__).parent / "results" / "embed.json"
VARIANTS = ("text", "text+rel")
Embed = Callable[[list[str]], np.ndarray]


def shipped_backends() -> list[str]:
    """The backends installed here; ``openvino-bf16`` only where the CPU has bf16 kernels."""
    from autofocus.index.onnx_model import onnx_available
    from autofocus.index.openvino_model import bf16_supported, openvino_available

    out = ["torch"]
    if onnx_available():
        out += ["onnx", "onnx-int8"]
    if openvino_available():
        out += ["openvino"] + (["openvino-bf16"] if bf16_supported() else [])
    return out


def sample_documents(skb: SKB, n: int, budget: int, seed: int) -> list[str]:
    """``n`` seeded nodes' documents in both variants (2n texts)."""
    ids = np.sort(np.random.default_rng(seed).choice(skb.num_nodes, size=min(n, skb.num_nodes), replace=False))
    return [t for v in VARIANTS for t in render_documents(skb, ids, v, budget)]


def tokenizer() -> Any:
    """MiniLM's tokenizer, unpadded, cut at 256 word pieces (its ``max_seq_length``, as the backends cut)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(packaged_minilm_path() / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=256)
    return tok


def fixed_length_texts(docs: Sequence[str], n: int, tokens: int) -> list[str]:
    """``n`` texts of exactly ``tokens`` word pieces with [CLS] and [SEP]: the documents' word pieces
    concatenated, cut and decoded; slices that do not re-encode to ``tokens`` pieces are skipped."""
    tok = tokenizer()
    stream = [i for e in tok.encode_batch(list(docs), add_special_tokens=False) for i in e.ids]
    width = tokens - 2
    texts = tok.decode_batch([stream[k * width : (k + 1) * width] for k in range(len(stream) // width)])
    lengths = [len(e.ids) for e in tok.encode_batch(texts)]
    exact = [t for t, length in zip(texts, lengths, strict=True) if length == tokens]
    if len(exact) < n:
        raise SystemExit(f"only {len(exact)} texts of {tokens} word pieces from the sample, {n} asked: lower --docs")
    return exact[:n]


class FileEncoder(LengthBatchedEncoder):
    """An ONNX or OpenVINO model file behind the index build's batching: the candidate arms."""

    def __init__(self, path: Path, runtime: str) -> None:
        super().__init__(packaged_minilm_path(), 256)
        self.path, self.runtime = path, runtime

    def _runner(self, threads: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
        if self.runtime == "onnxruntime":
            import onnxruntime as ort

            opts = ort.SessionOptions()
            opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
            session = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
            return lambda feed: np.asarray(session.run(None, feed)[0])
        import openvino as ov

        compiled = ov.Core().compile_model(str(self.path), "CPU", {
            "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads})  # fmt: skip
        request = compiled.create_infer_request()
        return lambda feed: np.array(request.infer(feed)[0], dtype=np.float32)


def calibration_feeds(calib: list[str], batch: int = 16) -> list[dict[str, np.ndarray]]:
    """Padded model inputs of the calibration texts, ``batch`` at a time."""
    feeds = []
    for s in range(0, len(calib), batch):
        rows = [e.ids for e in tokenizer().encode_batch(calib[s : s + batch])]
        width = max(map(len, rows))
        ids = np.zeros((len(rows), width), np.int64)
        mask = np.zeros_like(ids)
        for r, row in enumerate(rows):
            ids[r, : len(row)], mask[r, : len(row)] = row, 1
        feeds.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    return feeds


def candidate_arms(calib: list[str], folder: Path) -> dict[str, Embed]:
    """The int8 variants that are not shipped (see the module docstring), calibrated on ``calib``."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from autofocus.index import onnx_model, openvino_model

    feeds = calibration_feeds(calib)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    qdq = folder / "static-int8.onnx"
    quantize_static(str(onnx_model.model_path(packaged_minilm_path(), "onnx")), str(qdq), Reader(),
                    quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                    extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})  # fmt: skip
    arms = {"onnx-static-int8": FileEncoder(qdq, "onnxruntime"), "openvino-static-int8": FileEncoder(qdq, "openvino")}
    try:
        import nncf
        import openvino as ov
    except ImportError:
        print("nncf is not installed: no openvino-nncf-int8 arm")
    else:
        model = ov.Core().read_model(str(openvino_model.model_path(packaged_minilm_path())))
        quantised = nncf.quantize(model, nncf.Dataset(feeds), model_type=nncf.ModelType.TRANSFORMER,
                                  subset_size=len(feeds))  # fmt: skip
        ov.save_model(quantised, str(folder / "nncf-int8.xml"), compress_to_fp16=False)
        arms["openvino-nncf-int8"] = FileEncoder(folder / "nncf-int8.xml", "openvino")
    return {name: (lambda texts, e=e, bs=64: l2_normalise(e.encode(texts, bs))) for name, e in arms.items()}


def cosine(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Row cosines, and the largest component difference once both are rounded to the stores' float16."""
    cos = (a * b).sum(axis=1)
    f16 = np.abs(a.astype(np.float16).astype(np.float32) - b.astype(np.float16).astype(np.float32)).max()
    return {"mean": float(cos.mean()), "min": float(cos.min()), "share_ge_0.99": float((cos >= 0.99).mean()),
            "max_abs_diff_float16": float(f16)}


def run_rounds(arms: dict[str, Embed], texts: list[str], rounds: int, reference: str) -> dict[str, Any]:
    """Each arm on ``texts`` once per round, alternating the order; medians and per-round ratios to ``reference``."""
    wall: dict[str, list[float]] = {a: [] for a in arms}
    cpu: dict[str, list[float]] = {a: [] for a in arms}
    load: list[float] = []
    for r in range(rounds):
        for name in list(arms) if r % 2 == 0 else list(arms)[::-1]:
            t0, c0 = time.perf_counter(), time.process_time()
            arms[name](texts)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
        load.append(os.getloadavg()[0])
        print(f"round {r + 1}/{rounds} (load {load[-1]:.1f}): "
              + ", ".join(f"{a} {len(texts) / wall[a][-1]:.1f}" for a in arms) + " docs/s", flush=True)  # fmt: skip
    rows = {}
    for name in arms:
        ratio = np.asarray(wall[reference]) / np.asarray(wall[name])
        rows[name] = {"docs_per_s": len(texts) / float(np.median(wall[name])),
                      "docs_per_cpu_s": len(texts) / float(np.median(cpu[name])),
                      f"speed_vs_{reference}": float(np.median(ratio)),
                      "ratio_range": [float(ratio.min()), float(ratio.max())], "runs_s": wall[name]}  # fmt: skip
    return {"rows": rows, "load_avg_1min": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skb", type=Path, default=Path("data/demo"))
    parser.add_argument("--texts", choices=("fixed", "documents"), default="fixed")
    parser.add_argument("--docs", type=int, default=256, help="texts embedded per arm and round")
    parser.add_argument("--budget", type=int, default=128, help="tokens per text (fixed) or document budget")
    parser.add_argument("--rounds", type=int, default=5, help="alternated rounds (medians reported)")
    parser.add_argument("--candidates", action="store_true", help="add the int8 variants that are not shipped")
    parser.add_argument("--without", default="", help="arms left out, comma-separated (under ONEDNN_MAX_CPU_ISA=AVX2, openvino-bf16 and "
                        "openvino-static-int8 fail to compile: the plugin still offers kernels the cap removed)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    from autofocus.skb.io import load_skb

    skb = load_skb(args.skb, progress=False)
    pool = sample_documents(skb, 4 * args.docs, args.budget, seed=0)
    texts = (fixed_length_texts(pool, args.docs, args.budget) if args.texts == "fixed"
             else sample_documents(skb, args.docs // 2, args.budget, seed=1))  # fmt: skip
    auto = get_embedder(DEFAULT_EMBEDDER).name.rsplit("@", 1)[1]
    if auto in args.without.split(","):
        auto = "openvino" if "openvino" in shipped_backends() else "torch"  # the reference of the ratios
    arms: dict[str, Embed] = {}
    for backend in (b for b in shipped_backends() if b not in args.without.split(",")):
        emb = get_embedder(f"{DEFAULT_EMBEDDER}@{backend}")
        arms[backend] = lambda t, e=emb: e.embed(t, batch_size=64)
    with tempfile.TemporaryDirectory() as tmp:
        if args.candidates:
            candidates = candidate_arms(sample_documents(skb, 128, args.budget, seed=2), Path(tmp))
            arms |= {name: fn for name, fn in candidates.items() if name not in args.without.split(",")}
        t0 = time.perf_counter()
        vectors = {name: fn(texts) for name, fn in arms.items()}  # warms up (exports on first use), and the vectors
        setup_s = time.perf_counter() - t0
        timing = run_rounds(arms, texts, args.rounds, auto)
    lengths = [len(e.ids) for e in tokenizer().encode_batch(texts)]
    for name, row in timing["rows"].items():
        row["cosine_to_torch"] = cosine(vectors[name], vectors["torch"])
    result: dict[str, Any] = {
        "command": "python benchmarks/bench_embed.py " + " ".join(
            f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in vars(args).items() if v),
        "skb": str(args.skb), "texts": args.texts, "n_texts": len(texts), "budget": args.budget,
        "mean_tokens": float(np.mean(lengths)), "rounds": args.rounds, "auto": auto,
        "setup_s": setup_s, **timing,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "processor": platform.processor(),
                    "int8_dot_product": int8_dot_product(), "bf16_kernels": "openvino-bf16" in arms},
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\n{len(texts)} {args.texts} texts, mean {result['mean_tokens']} tokens; auto = {auto}")
    print("| backend | docs/s (wall) | docs per CPU second | speed vs auto (median, range) | cosine to torch: mean / min |")
    print("| --- | --- | --- | --- | --- |")
    for name, row in timing["rows"].items():
        lo, hi = row["ratio_range"]
        c = row["cosine_to_torch"]
        print(f"| {name} | {row['docs_per_s']:.1f} | {row['docs_per_cpu_s']:.1f} | {row[f'speed_vs_{auto}']:.2f} "
              f"({lo:.2f}-{hi:.2f}) | {c['mean']:.5f} / {c['min']:.5f} |")


if __name__ == "__main__":
    main()
