"""Encoder backends: torch fp32 vs ONNX Runtime fp32 and int8 — throughput and nDCG@10, one run.

Usage (from the repository root):

    python benchmarks/onnx_backend.py [--sample 1000] [--cache-dir /tmp/beir-harness-onnx-bench]

1. Throughput: the same `--sample` SciFact documents (longest first, batches of 32, as `evaluate`
   encodes them) with each backend, in this process, alternating backends to share the machine's state.
2. Quality: `evaluate` with `--backend onnx-int8` on SciFact and NFCorpus, next to torch fp32
   (which reproduces MTEB's published 0.64508 and 0.31594 exactly; see BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.encode import encode_corpus, load_encoder
from harness.formats import iter_corpus, locate_beir_folder
from harness.onnx_backend import onnx_encoder
from harness.pipeline import EvaluateConfig, evaluate_dataset

TORCH_NDCG = {"scifact": 0.64508, "nfcorpus": 0.31594}


def throughput(encoder, docs) -> float:
    started = time.perf_counter()
    for _ in encode_corpus(encoder, iter(docs), batch_size=32, progress=False):
        pass
    return len(docs) / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=1000)
    parser.add_argument("--data", default="../shared/data/beir")
    parser.add_argument("--cache-dir", default="/tmp/beir-harness-onnx-bench")
    args = parser.parse_args()
    cache = Path(args.cache_dir)
    folder = locate_beir_folder(Path(args.data) / "scifact", "test")
    docs = [doc for _, doc in zip(range(args.sample), iter_corpus(folder.corpus))]
    torch_encoder = load_encoder()
    encoders = {"torch": torch_encoder, "onnx": onnx_encoder(torch_encoder, "onnx", cache),
                "onnx-int8": onnx_encoder(torch_encoder, "onnx-int8", cache)}
    rates = {name: [] for name in encoders}
    for _ in range(2):  # alternate, so drift on a shared machine hits every backend alike
        for name, encoder in encoders.items():
            rates[name].append(throughput(encoder, docs))
    best = {name: max(values) for name, values in rates.items()}
    print(f"throughput on {len(docs)} SciFact documents (best of 2, docs/s):")
    for name, rate in best.items():
        print(f"  {name:<10} {rate:6.1f}   {rate / best['torch']:.2f}x torch")
    print("nDCG@10 with onnx-int8 (torch fp32 in brackets):")
    for dataset in ("scifact", "nfcorpus"):
        started = time.perf_counter()
        result = evaluate_dataset(EvaluateConfig(dataset_path=Path(args.data) / dataset, output_dir=None,
                                                 progress=False, cache_dir=cache, backend="onnx-int8")).result
        wall = time.perf_counter() - started
        print(f"  {dataset:<9} {result.metrics['nDCG@10']:.5f} ({TORCH_NDCG[dataset]:.5f})  "
              f"delta {result.metrics['nDCG@10'] - TORCH_NDCG[dataset]:+.5f}  wall {wall:.0f} s, "
              f"encode {result.timings['encode']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
