"""Does exact search dominate a GPU run? FAISS flat on the CPU at MS MARCO's query count.

Figures: BENCHMARKS.md, "GPUs and the full BEIR sweep": search on the CPU next to a GPU encoder.

Usage (from the repository root):

    python benchmarks/search_scale.py [--docs 1000000] [--queries 6980] [--dim 384] [--depth 100]
    python benchmarks/search_scale.py --smoke     # seconds: 2,000 documents, 50 queries

Random unit vectors (search cost does not depend on their values): `--docs` documents in a FAISS
``IndexFlatIP`` (what `--index flat` builds) searched with `--queries` queries for the top `--depth`,
timed on this CPU; flat search is linear in the document count, so the time for MS MARCO's
8,841,823 passages is projected as ``time × 8,841,823 / docs`` and printed next to the encode time of
a GPU at a given rate (a formula until a GPU is measured).
"""

from __future__ import annotations

import argparse
import time

import _smoke

MSMARCO_DOCS = 8_841_823


def main() -> int:
    import faiss
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=6980)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--smoke", action="store_true", help="seconds, 2,000 documents: proves the script runs")
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        args.docs, args.queries = 2000, 50
    rng = np.random.default_rng(0)
    index = faiss.IndexFlatIP(args.dim)
    for start in range(0, args.docs, 100_000):
        block = rng.standard_normal((min(100_000, args.docs - start), args.dim), dtype=np.float32)
        index.add(block / np.linalg.norm(block, axis=1, keepdims=True))
    queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    started = time.perf_counter()
    index.search(queries, args.depth)
    seconds = time.perf_counter() - started
    projected = seconds * MSMARCO_DOCS / args.docs
    print(
        f"FAISS flat, {args.docs:,} docs x {args.queries:,} queries, top {args.depth}, {faiss.omp_get_max_threads()} "
        f"threads: {seconds:.1f} s ({2 * args.docs * args.queries * args.dim / seconds / 1e9:.0f} GFLOP/s)"
    )
    print(f"projected for MS MARCO ({MSMARCO_DOCS:,} passages): {projected:.0f} s = {projected / 60:.1f} min")
    for rate in (10_000, 30_000, 100_000):
        print(
            f"  vs encoding MS MARCO on a GPU at {rate:,} docs/s: {MSMARCO_DOCS / rate / 60:.1f} min "
            f"(search / encode = {projected / (MSMARCO_DOCS / rate):.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
