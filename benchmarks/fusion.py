"""Fusion: quality on SciFact (BM25 + the default bi-encoder) and the time to fuse and score.

Figures: BENCHMARKS.md, "Fusion: quality on SciFact and the time to fuse".

Usage (from the repository root):

    python benchmarks/fusion.py [--data ../shared/data/beir/scifact] [--queries 10000] [--model all-MiniLM-L6-v2]
    python benchmarks/fusion.py --smoke     # seconds: the lesson eval set, the hashing encoder, 20 queries

Part 1 evaluates BM25 and all-MiniLM-L6-v2 on SciFact (the embedding cache makes a rerun cheap), then
fuses their saved runs with every method as `beir-harness fuse` does, printing nDCG@10 and the wall
time of `fuse_results` (read and verify both runs, read the qrels, fuse, score, build the result).
Part 2 times the fusion and the scoring alone on synthetic runs of `--queries` queries × 1,000
documents (MS MARCO dev has 6,980 queries), two runs overlapping by half.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _smoke  # noqa: E402

METHODS = ("rrf", "combsum", "combmnz", "wsum", "dbsf")


def real(data: Path, depth: int, dense: str = "sentence-transformers/all-MiniLM-L6-v2") -> None:
    from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
    from harness.pipeline.fuse import fuse_results
    from harness.retrieval.fusion import FusionSpec

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        paths = []
        for model in ("bm25", dense):
            outcome = evaluate_dataset(
                EvaluateConfig(dataset_path=data, model=model, output_dir=out, progress=False, top_k=depth)
            )
            paths.append(outcome.paths[0])
            print(
                f"  {model:<40} nDCG@10 {outcome.result.metrics['nDCG@10']:.4f}  "
                f"Recall@100 {outcome.result.metrics['Recall@100']:.4f}"
            )
        for method in METHODS:
            spec = FusionSpec(method=method)
            started = time.perf_counter()
            fused = fuse_results(paths, spec, out / "fused" / method).result
            seconds = time.perf_counter() - started
            label = f"{method}(bm25, {dense.rsplit('/', 1)[-1]})"
            recall = fused.metrics.get("Recall@100", float("nan"))  # fuse scores cutoffs up to its runs' depth
            print(
                f"  {label:<40} nDCG@10 {fused.metrics['nDCG@10']:.4f}  Recall@100 {recall:.4f}  "
                f"fuse_results {seconds * 1000:.0f} ms"
            )


def synthetic(n_queries: int, depth: int = 1000) -> None:
    from harness.evaluation.metrics import evaluate, standard_metrics
    from harness.records import Qrels, Run
    from harness.retrieval.fusion import FusionSpec, fuse

    rng = random.Random(0)
    runs = []
    for shift in (0, depth // 2):
        scores = {
            f"q{q}": {f"d{(q * 7 + shift + i) % 50000}": rng.random() for i in range(depth)} for q in range(n_queries)
        }
        runs.append(Run.from_scores(scores))
    qrels = Qrels({f"q{q}": {f"d{(q * 7 + i * 37) % 50000}": 1 for i in range(5)} for q in range(n_queries)})
    for method in METHODS:
        started = time.perf_counter()
        fused = fuse(runs, FusionSpec(method=method, depth=depth))
        fuse_seconds = time.perf_counter() - started
        started = time.perf_counter()
        evaluate(qrels, fused, standard_metrics([1, 3, 5, 10, 20, 100, 1000]))
        score_seconds = time.perf_counter() - started
        print(
            f"  {method:<8} fuse {fuse_seconds:6.2f} s   score {score_seconds:6.2f} s   "
            f"({n_queries} queries x {depth} documents, 2 runs)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/beir/scifact"))
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2", help="the dense system")
    parser.add_argument("--smoke", action="store_true", help="seconds, on the lesson eval set: proves the script runs")
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        args.data, args.model, args.queries = _smoke.DEMO, "hash:64", 20
    for depth in (1000, 100):
        print(
            f"{args.data.name} test, fusion of BM25 and {args.model.rsplit('/', 1)[-1]} (runs of depth {depth}, "
            "default settings):"
        )
        real(args.data, depth, args.model)
    print("synthetic runs:")
    synthetic(args.queries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
