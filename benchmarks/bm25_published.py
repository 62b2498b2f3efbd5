"""BM25 (`--model bm25`) on SciFact and NFCorpus next to the published BM25 numbers.

Usage (from the repository root):

    python benchmarks/bm25_published.py [--datasets ../shared/data/beir/scifact,../shared/data/beir/nfcorpus]

Prints nDCG@10 and Recall@100 beside pyserini's BM25 flat (Lucene, k1=0.9, b=0.4: the variant
beir-harness reproduces) and the BEIR paper's Elasticsearch multifield figures, from the published
scores shipped in the package, with the wall time of each run.
"""

from __future__ import annotations

import argparse
import csv
import importlib.resources
import sys
import time
from pathlib import Path

from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset


def published() -> dict[tuple[str, str], dict[str, str]]:
    text = importlib.resources.files("harness").joinpath("data/published-scores.csv").read_text(encoding="utf-8")
    return {(row["dataset"], row["variant"]): row for row in csv.DictReader(text.splitlines()) if row["system"] == "bm25"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="../shared/data/beir/scifact,../shared/data/beir/nfcorpus")
    args = parser.parse_args()
    table = published()
    print(f"{'dataset':<9} {'nDCG@10':>8} {'pyserini flat':>13} {'delta':>8} {'BEIR paper':>10} "
          f"{'R@100':>7} {'wall s':>7}")
    worst = 0.0
    for dataset in args.datasets.split(","):
        started = time.perf_counter()
        result = evaluate_dataset(EvaluateConfig(dataset_path=Path(dataset), model="bm25", output_dir=None,
                                                 progress=False)).result
        wall = time.perf_counter() - started
        flat = float(table[(result.dataset, "pyserini BM25 flat")]["ndcg@10"])
        paper = next(float(row["ndcg@10"]) for (name, variant), row in table.items()
                     if name == result.dataset and variant.startswith("BEIR paper"))
        ours = result.metrics["nDCG@10"]
        worst = max(worst, abs(ours - flat))
        print(f"{result.dataset:<9} {ours:>8.4f} {flat:>13.4f} {ours - flat:>+8.4f} {paper:>10.3f} "
              f"{result.metrics['Recall@100']:>7.4f} {wall:>7.1f}")
    print(f"largest |delta| vs pyserini BM25 flat: {worst:.4f} (goal <= 0.01)")
    return 0 if worst <= 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
