"""Approximate FAISS indexes vs exact search on real BEIR data: quality and time, in one process run.

Usage (from the repository root):

    python benchmarks/index_choices.py [--datasets ../shared/data/beir/scifact,../shared/data/beir/nfcorpus]
                                       [--cache-dir /tmp/beir-harness-bench-cache]

Encodes each corpus once with the default model (the embedding cache makes every later row a
cache hit), then evaluates with flat, hnsw, ivf, ivfpq and sq8 and prints nDCG@10, the index's
recall of the exact top-10 and top-100, and the index build and search times.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from harness.retrieval.index import IndexSpec
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset

SPECS = [
    IndexSpec("flat"),
    IndexSpec("hnsw", hnsw_m=32, ef_construction=200, ef_search=128),
    IndexSpec("hnsw", hnsw_m=16, ef_construction=100, ef_search=32),
    IndexSpec("ivf", nprobe=16),
    IndexSpec("ivf", nprobe=4),
    IndexSpec("ivfpq", nprobe=16, pq_m=48, pq_nbits=8),
    IndexSpec("sq8"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="../shared/data/beir/scifact,../shared/data/beir/nfcorpus")
    parser.add_argument("--cache-dir", default="/tmp/beir-harness-bench-cache")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    print(f"{'dataset':<9} {'index':<34} {'nDCG@10':>8} {'R-exact@10':>10} {'R-exact@100':>11} "
          f"{'build s':>8} {'search s':>8}")
    for dataset in args.datasets.split(","):
        for spec in SPECS:
            outcome = evaluate_dataset(EvaluateConfig(
                dataset_path=Path(dataset), output_dir=None, progress=False, cache_dir=Path(args.cache_dir),
                index=spec))
            result = outcome.result
            params = ", ".join(f"{k}={v}" for k, v in result.config.items()
                               if k in ("hnsw_m", "ef_construction", "ef_search", "nlist", "nprobe", "pq_m"))
            label = f"{spec.kind} {params}".strip()
            quality = result.index_quality
            print(f"{result.dataset:<9} {label:<34} {result.metrics['nDCG@10']:>8.5f} "
                  f"{quality.get('recall_of_exact@10', 1.0):>10.4f} {quality.get('recall_of_exact@100', 1.0):>11.4f} "
                  f"{result.timings['index']:>8.3f} {result.timings['search']:>8.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
