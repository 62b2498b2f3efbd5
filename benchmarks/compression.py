"""Compressed embeddings: quality retained against bytes per document, and what a sweep costs.

Figures: BENCHMARKS.md, "Compressed embeddings: Matryoshka dimensions, int8 and binary".

Usage (from the repository root):

    python benchmarks/compression.py [--data ../shared/data/beir] [--datasets scifact,nfcorpus]
    python benchmarks/compression.py --smoke     # seconds: the lesson eval set, the hashing encoder

For each dataset: one **cold** evaluation of all-MiniLM-L6-v2 into a fresh cache (the corpus is encoded),
then the **warm sweep** — dimensions {384, 256, 128, 64} × {float32, int8 raw, int8 rescored, binary raw,
binary rescored} (20 cells, rescoring with multiplier 2) — as `beir-harness bench --truncate-dims ...
--embedding-precisions ... --rescore-multipliers 0,2` runs it (model load included), from that cache.
Prints the quality-against-storage table (nDCG@10, % retained of float32 at 384, bytes per document, the
search stage's time) and the wall time of the sweep against the cold evaluation.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _smoke  # noqa: E402

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSIONS = (384, 256, 128, 64)


def run(folder: Path, work: Path, model: str = MODEL, dimensions=DIMENSIONS) -> None:
    from harness.pipeline.bench import run_bench
    from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
    from harness.reporting.comparison import load_results
    from harness.reporting.compression import compression_rows
    from harness.retrieval.compress import CompressionSpec, compression_grid

    cache = work / "cache"
    base = EvaluateConfig(dataset_path=folder, model=model, output_dir=work / "cold", progress=False, cache_dir=cache)
    started = time.perf_counter()
    cold = evaluate_dataset(base).result
    cold_seconds = time.perf_counter() - started
    grid = compression_grid(CompressionSpec(), list(dimensions), ["float32", "int8", "binary"], [0, 2])
    started = time.perf_counter()
    report = run_bench([model], [str(folder)], replace(base, output_dir=work / "sweep"), compressions=grid)
    sweep_seconds = time.perf_counter() - started
    assert not report.failed, report.format_table()
    results = {r.variant: r for r in load_results([work / "sweep"])}
    rows = compression_rows(list(results.values()))
    by_row = {(r.dimension, r.variant): r for r in rows}
    print(
        f"\n{folder.name}: cold evaluation (encode {cold.config['n_docs']} documents) {cold_seconds:.1f} s, "
        f"nDCG@10 {cold.metrics['nDCG@10']:.4f}; warm sweep of {len(grid)} cells {sweep_seconds:.1f} s "
        f"(= {sweep_seconds / cold_seconds:.3f} × the cold evaluation)"
    )
    print(f"{'dim':>4}  {'precision':<16} {'nDCG@10':>8} {'retained':>9} {'bytes/doc':>10} {'search ms':>10}")
    search_ms = {
        (int(r.config.get("dimension")), _variant(r)): 1000 * r.timings.get("search", 0.0) for r in results.values()
    }
    for (dimension, variant), row in sorted(by_row.items(), key=lambda item: (-item[0][0], item[0][1])):
        retained = f"{row.retained:.1f}%" if row.retained is not None else "-"
        print(
            f"{dimension:>4}  {variant:<16} {row.value:>8.4f} {retained:>9} {row.bytes_per_doc:>10.1f} "
            f"{search_ms[(dimension, variant)]:>10.1f}"
        )


def _variant(result) -> str:
    precision = result.config.get("embedding_precision", "float32")
    if precision == "float32":
        return precision
    multiplier = result.config.get("rescore_multiplier")
    return f"{precision} {'rescore' + str(multiplier) if multiplier else 'raw'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/beir"))
    parser.add_argument("--datasets", default="scifact,nfcorpus")
    parser.add_argument("--smoke", action="store_true", help="seconds, on the lesson eval set: proves the script runs")
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        with tempfile.TemporaryDirectory() as tmp:
            run(_smoke.DEMO, Path(tmp), "hash:384")
        return
    for name in args.datasets.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            run(args.data / name, Path(tmp))


if __name__ == "__main__":
    main()
