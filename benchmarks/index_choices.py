"""Approximate FAISS indexes vs exact search on real BEIR data: quality and time, in one process run.

Usage (from the repository root):

    python benchmarks/index_choices.py [--datasets ../shared/data/beir/scifact,../shared/data/beir/nfcorpus]
                                       [--cache-dir /tmp/beir-harness-bench-cache] [--model all-MiniLM-L6-v2]
    python benchmarks/index_choices.py --smoke     # seconds: the lesson eval set, the hashing encoder

Encodes each corpus once with the default model (the embedding cache makes every later row a
cache hit), then evaluates with flat, hnsw, ivf, ivfpq and sq8 and prints nDCG@10, the index's
recall of the exact top-10 and top-100, and the index build and search times.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path

import _smoke

from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.retrieval.index import IndexSpec

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
    parser.add_argument("--model", default=None, help="any `evaluate --model` [the default model]")
    parser.add_argument("--smoke", action="store_true", help="seconds, on the lesson eval set: proves the script runs")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        args.cache_dir = str(_smoke.scratch("index"))  # 300 documents: IVF-PQ needs 256 to train
        args.datasets = str(_smoke.synthetic_beir(Path(args.cache_dir) / "synthetic"))
        args.model = "hash:48"  # IVF-PQ with pq_m=48: the dimension must divide by 48
    try:
        show(args)
    finally:
        if args.smoke:
            shutil.rmtree(args.cache_dir, ignore_errors=True)
    return 0


def show(args) -> None:
    """One row per dataset and index choice."""
    print(
        f"{'dataset':<9} {'index':<34} {'nDCG@10':>8} {'R-exact@10':>10} {'R-exact@100':>11} "
        f"{'build s':>8} {'search s':>8}"
    )
    for dataset in args.datasets.split(","):
        for spec in SPECS:
            model = {"model": args.model} if args.model else {}
            outcome = evaluate_dataset(
                EvaluateConfig(
                    dataset_path=Path(dataset),
                    output_dir=None,
                    progress=False,
                    cache_dir=Path(args.cache_dir),
                    index=spec,
                    **model,
                )
            )
            result = outcome.result
            params = ", ".join(
                f"{k}={v}"
                for k, v in result.config.items()
                if k in ("hnsw_m", "ef_construction", "ef_search", "nlist", "nprobe", "pq_m")
            )
            label = f"{spec.kind} {params}".strip()
            quality = result.index_quality
            print(
                f"{result.dataset:<9} {label:<34} {result.metrics['nDCG@10']:>8.5f} "
                f"{quality.get('recall_of_exact@10', 1.0):>10.4f} {quality.get('recall_of_exact@100', 1.0):>11.4f} "
                f"{result.timings['index']:>8.3f} {result.timings['search']:>8.3f}",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
