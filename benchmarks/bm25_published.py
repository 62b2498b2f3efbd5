"""BM25 (`--model bm25`) on SciFact and NFCorpus next to the published BM25 numbers.

Usage (from the repository root):

    python benchmarks/bm25_published.py [--datasets ../shared/data/beir/scifact,../shared/data/beir/nfcorpus]
    python benchmarks/bm25_published.py --smoke     # seconds: the lesson eval set, proves the script runs

Prints nDCG@10 and Recall@100 beside the published row a `--model bm25` result reproduces (as
`harness.datasets.published.reproduced` chooses it: pyserini's BM25 flat, Lucene, k1=0.9, b=0.4) and
the BEIR paper's Elasticsearch multifield figure, from the published scores shipped in the package,
with the wall time of each run. The rows are found through the registry's API, never by the text of a
row's ``variant`` (which a source update may reword).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import _smoke

from harness.datasets import published
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset


def published_bm25(dataset: str, split: str) -> tuple[published.PublishedScore | None, published.PublishedScore | None]:
    """(the row a BM25 result reproduces, the BEIR paper's BM25 row) for a dataset and split; None where absent."""
    reproduced = published.reproduced(dataset, split, "bm25")
    paper = next((row for row in published.find(dataset, split, "bm25") if row.family == "BEIR paper"), None)
    return reproduced, paper


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="../shared/data/beir/scifact,../shared/data/beir/nfcorpus")
    parser.add_argument("--smoke", action="store_true", help="seconds, on the lesson eval set: proves the script runs")
    args = parser.parse_args()
    print(_smoke.host_line())
    datasets = [str(_smoke.DEMO)] if args.smoke else args.datasets.split(",")
    if args.smoke:
        print(_smoke.NOTICE)
        for name in ("scifact", "nfcorpus"):  # the lookup the full run makes must still find its rows
            flat, paper = published_bm25(name, "test")
            if flat is None or paper is None:
                raise SystemExit(f"no published BM25 row for {name}: the published-scores table changed")
            print(
                f"published {name}: {flat.column} {flat.values['nDCG@10']:.4f}, {paper.column} "
                f"{paper.values['nDCG@10']:.3f}"
            )
    print(f"{'dataset':<9} {'nDCG@10':>8} {'published':>9} {'delta':>8} {'BEIR paper':>10} {'R@100':>7} {'wall s':>7}")
    worst = 0.0
    for dataset in datasets:
        started = time.perf_counter()
        result = evaluate_dataset(
            EvaluateConfig(dataset_path=Path(dataset), model="bm25", output_dir=None, progress=False)
        ).result
        wall = time.perf_counter() - started
        flat, paper = published_bm25(result.dataset, result.split)
        ours = result.metrics["nDCG@10"]
        if flat is None and not args.smoke:
            raise SystemExit(f"{result.dataset}: no published BM25 row to compare with")
        reference = flat.values["nDCG@10"] if flat else float("nan")
        worst = max(worst, abs(ours - reference)) if flat else worst
        print(
            f"{result.dataset:<9} {ours:>8.4f} {reference:>9.4f} {ours - reference:>+8.4f} "
            f"{paper.values['nDCG@10'] if paper else float('nan'):>10.3f} "
            f"{result.metrics['Recall@100']:>7.4f} {wall:>7.1f}"
        )
    column = published.preferred_column("bm25")
    print(f"largest |delta| vs {column}: {worst:.4f} (goal <= 0.01)")
    return 0 if worst <= 0.01 or args.smoke else 1


if __name__ == "__main__":
    sys.exit(main())
