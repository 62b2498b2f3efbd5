"""Encoder backends: torch fp32 vs ONNX Runtime fp32 and int8 — throughput and nDCG@10, one run.

Usage (from the repository root):

    python benchmarks/onnx_backend.py [--sample 1000] [--cache-dir /tmp/beir-harness-onnx-bench]
    python benchmarks/onnx_backend.py --smoke     # seconds: all three modes, a tiny random model, the lesson set

1. Throughput: the same `--sample` SciFact documents (longest first, batches of 32, as `evaluate`
   encodes them) with each backend, in this process, alternating backends to share the machine's state.
2. Quality: `evaluate` with `--backend onnx-int8` on SciFact and NFCorpus, next to torch fp32
   (which reproduces MTEB's published 0.64508 and 0.31594 exactly; see BENCHMARKS.md).

With ``--variants``, instead: the quantization choices that were compared before picking
``harness.runtimes.onnx_backend.QUANTIZATION`` — speed and cosine to the fp32 vectors of each, on `--sample`
documents.

With ``--profile``, instead: ONNX Runtime's own profiler over the int8 and fp32 graphs on `--sample`
documents — the share of time per operator type, and which operators the int8 graph actually runs
(the integer kernels, or a fall-back to float ones).

Every run first prints the host: CPU model, the instruction sets that pick kernels, cores.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import _smoke

from harness.io.formats import iter_corpus, locate_beir_folder
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.retrieval.encode import encode_corpus, load_encoder
from harness.runtimes.onnx_backend import onnx_encoder
from harness.runtimes.spec import EncoderSpec

TORCH_NDCG = {"scifact": 0.64508, "nfcorpus": 0.31594}


def throughput(encoder, docs) -> float:
    started = time.perf_counter()
    for _ in encode_corpus(encoder, iter(docs), batch_size=32, progress=False):
        pass
    return len(docs) / (time.perf_counter() - started)


VARIANTS = {
    "unsigned, per tensor, every op": {"weight_type": "QUInt8"},
    "unsigned, per channel, MatMul only": {
        "weight_type": "QUInt8",
        "per_channel": True,
        "op_types_to_quantize": ["MatMul"],
    },
    "signed, per channel, 7-bit, every op": {"weight_type": "QInt8", "per_channel": True, "reduce_range": True},
    "signed, per channel, every op": {"weight_type": "QInt8", "per_channel": True},
    "signed, per channel, MatMul only": {
        "weight_type": "QInt8",
        "per_channel": True,
        "op_types_to_quantize": ["MatMul"],
    },
    "signed, per channel, 7-bit, MatMul only": {  # the recipe where int8 kernels saturate (AVX2, AVX512 w/o VNNI)
        "weight_type": "QInt8",
        "per_channel": True,
        "op_types_to_quantize": ["MatMul"],
        "reduce_range": True,
    },
    "fused graph, signed, per channel": {"weight_type": "QInt8", "per_channel": True, "fused": True},
}


def compare_variants(torch_encoder, docs, folder: Path) -> None:
    """Each quantization variant's speed and cosine to fp32, on the same batches, in this process."""
    import numpy as np
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers import optimizer

    from harness.records import doc_text
    from harness.runtimes.onnx_backend import export

    fp32 = export(torch_encoder.model, folder / "fp32", quantize=False)
    fused = folder / "fused.onnx"
    if not fused.exists():
        config = torch_encoder.model[0].auto_model.config
        optimizer.optimize_model(
            str(fp32), model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size
        ).save_model_to_file(str(fused))
    paths = {"fp32": fp32}
    for name, options in VARIANTS.items():
        options = dict(options)
        source = fused if options.pop("fused", False) else fp32
        paths[name] = folder / (name.replace(", ", "_").replace(" ", "-") + ".onnx")
        if not paths[name].exists():
            extra = {"extra_options": {"DefaultTensorType": 1}} if source == fused else {}
            quantize_dynamic(
                str(source), str(paths[name]), **{**options, **extra, "weight_type": QuantType[options["weight_type"]]}
            )
    texts = sorted((doc_text(doc) for doc in docs), key=len, reverse=True)
    tokenizer = torch_encoder.model.tokenizer
    batches = [
        tokenizer(texts[i : i + 32], padding=True, truncation=True, max_length=256, return_tensors="np")
        for i in range(0, len(texts), 32)
    ]

    def run(path):
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = {i.name for i in session.get_inputs()}
        started, out = time.perf_counter(), []
        for batch in batches:
            hidden = session.run(None, {k: v.astype(np.int64) for k, v in batch.items() if k in names})[0]
            mask = batch["attention_mask"][..., None].astype(np.float32)
            vectors = (hidden * mask).sum(1) / mask.sum(1)
            out.append(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
        return len(texts) / (time.perf_counter() - started), np.concatenate(out)

    rates, vectors = {name: [] for name in paths}, {}
    for _ in range(2):  # alternate, best of two
        for name, path in paths.items():
            rate, vectors[name] = run(path)
            rates[name].append(rate)
    base = max(rates["fp32"])
    print(f"quantization variants on {len(texts)} documents (speed vs onnx fp32; cosine to fp32):")
    for name in VARIANTS:
        cosine = (vectors[name] * vectors["fp32"]).sum(axis=1)
        print(f"  {name:<40} {max(rates[name]) / base:5.2f}x  mean {cosine.mean():.4f}  min {cosine.min():.3f}")


def profile(torch_encoder, docs, cache: Path) -> None:
    """Time per operator type, from ONNX Runtime's profiler, for the fp32 and int8 graphs."""
    import json
    from collections import Counter

    import numpy as np
    import onnxruntime as ort

    from harness.records import doc_text

    texts = sorted((doc_text(doc) for doc in docs), key=len, reverse=True)
    tokenizer = torch_encoder.model.tokenizer
    batches = [
        tokenizer(texts[i : i + 32], padding=True, truncation=True, max_length=256, return_tensors="np")
        for i in range(0, len(texts), 32)
    ]
    for backend in ("onnx", "onnx-int8"):
        path = onnx_encoder(torch_encoder, backend, cache).session._model_path
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.enable_profiling = True
        options.profile_file_prefix = str(cache / f"profile-{backend}")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = {i.name for i in session.get_inputs()}
        for batch in batches:
            session.run(None, {k: v.astype(np.int64) for k, v in batch.items() if k in names})
        events = json.loads(Path(session.end_profiling()).read_text())
        by_op: Counter = Counter()
        for event in events:
            if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
                by_op[event.get("args", {}).get("op_name", "?")] += event.get("dur", 0)
        total = sum(by_op.values()) or 1
        print(f"{backend}: {total / 1e6:.2f} s in operators over {len(texts)} documents; by operator type:")
        for op, micros in by_op.most_common(8):
            print(f"  {op:<28} {micros / total:6.1%}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=1000)
    parser.add_argument("--data", default="../shared/data/beir")
    parser.add_argument("--datasets", default="scifact,nfcorpus", help="folders under --data; the first one is sampled")
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--cache-dir", default="/tmp/beir-harness-onnx-bench")
    parser.add_argument("--variants", action="store_true", help="compare the quantization variants instead")
    parser.add_argument("--profile", action="store_true", help="profile the fp32 and int8 graphs instead")
    parser.add_argument(
        "--smoke", action="store_true", help="seconds: every mode with a tiny random model on the lesson eval set"
    )
    args = parser.parse_args()
    from harness.host import host_info

    host = host_info()
    print(f"{_smoke.host_line()} ({' '.join(host['cpu_flags'])})")
    if not args.smoke:
        return measure(args)
    print(_smoke.NOTICE)
    work = _smoke.scratch("onnx")
    try:
        args.model, args.cache_dir = str(_smoke.tiny_model(work)), str(work / "cache")
        args.data, args.datasets, args.sample = str(_smoke.DEMO.parent), _smoke.DEMO.name, 15
        for mode in ("variants", "profile", None):
            args.variants, args.profile = mode == "variants", mode == "profile"
            measure(args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def measure(args) -> int:
    """The mode `args` asks for: variants, profile, or throughput and quality of the backends."""
    cache = Path(args.cache_dir)
    datasets = args.datasets.split(",")
    folder = locate_beir_folder(Path(args.data) / datasets[0], "test")
    docs = [doc for _, doc in zip(range(args.sample), iter_corpus(folder.corpus))]
    torch_encoder = load_encoder(args.model)
    if args.variants:
        compare_variants(torch_encoder, docs, cache / "variants")
        return 0
    if args.profile:
        profile(torch_encoder, docs, cache)
        return 0
    encoders = {
        "torch": torch_encoder,
        "onnx": onnx_encoder(torch_encoder, "onnx", cache),
        "onnx-int8": onnx_encoder(torch_encoder, "onnx-int8", cache),
    }
    rates = {name: [] for name in encoders}
    for _ in range(2):  # alternate, so drift on a shared machine hits every backend alike
        for name, encoder in encoders.items():
            rates[name].append(throughput(encoder, docs))
    best = {name: max(values) for name, values in rates.items()}
    print(f"throughput on {len(docs)} {datasets[0]} documents (best of 2, docs/s):")
    for name, rate in best.items():
        print(f"  {name:<10} {rate:6.1f}   {rate / best['torch']:.2f}x torch")
    print("nDCG@10 with onnx-int8 (torch fp32 in brackets):")
    for dataset in datasets:
        started = time.perf_counter()
        result = evaluate_dataset(
            EvaluateConfig(
                dataset_path=Path(args.data) / dataset,
                model=args.model,
                output_dir=None,
                progress=False,
                cache_dir=cache,
                encoder=EncoderSpec(backend="onnx-int8"),
            )
        ).result
        wall = time.perf_counter() - started
        torch_ndcg = TORCH_NDCG.get(dataset, float("nan")) if args.model.endswith("all-MiniLM-L6-v2") else float("nan")
        print(
            f"  {dataset:<9} {result.metrics['nDCG@10']:.5f} ({torch_ndcg:.5f})  "
            f"delta {result.metrics['nDCG@10'] - torch_ndcg:+.5f}  wall {wall:.0f} s, "
            f"encode {result.timings['encode']:.0f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
