"""Learned sparse retrieval at scale: search time and memory against corpus size.

Figures: BENCHMARKS.md, "Learned sparse retrieval at scale".

Usage (from the repository root):

    python benchmarks/sparse_scale.py [--sizes 100000,300000,1000000] [--queries 300]
    python benchmarks/sparse_scale.py --smoke     # seconds: 2,000 rows, 20 queries

Synthetic SPLADE-like rows (vocabulary 30,522, ~120 active dimensions per document and ~40 per query,
dimension frequencies Zipf-like as in text, positive float32 weights) go into `SparseIndex` in chunks of
1,024 rows, as `evaluate` adds them; then `--queries` queries are searched for the top 100. Prints, per
size: the time to build the posting lists, the search time, and the process's peak RSS growth.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _smoke  # noqa: E402


def rows(rng, n: int, active: int, vocabulary: int):
    import numpy as np
    import scipy.sparse

    weights = 1.0 / np.arange(1, vocabulary + 1) ** 0.8
    weights /= weights.sum()
    columns = rng.choice(vocabulary, size=(n, active), p=weights)
    data = rng.random((n, active), dtype=np.float32) * 2
    matrix = scipy.sparse.csr_matrix(
        (data.ravel(), (np.repeat(np.arange(n), active), columns.ravel())), shape=(n, vocabulary), dtype=np.float32
    )
    matrix.sum_duplicates()
    return matrix


def main() -> int:
    import numpy as np

    from harness.retrieval.learned_sparse import SparseIndex

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,300000,1000000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--smoke", action="store_true", help="seconds, 2,000 rows: proves the script runs")
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        args.sizes, args.queries = "2000", 20
    rng = np.random.default_rng(0)
    queries = rows(rng, args.queries, 40, 30522)
    query_ids = [f"q{i}" for i in range(args.queries)]
    print(f"{'docs':>9} {'nnz/doc':>8} {'build s':>8} {'search s':>9} {'ms/query':>9} {'peak RSS +MB':>13}")
    for size in map(int, args.sizes.split(",")):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        index = SparseIndex()
        for start in range(0, size, 1024):
            n = min(1024, size - start)
            index.add([f"d{start + i}" for i in range(n)], rows(rng, n, 120, 30522))
        started = time.perf_counter()
        index._matrix()
        build = time.perf_counter() - started
        started = time.perf_counter()
        index.search(query_ids, queries, 100)
        search = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(
            f"{size:>9,} {index._matrix().nnz / size:>8.1f} {build:>8.2f} {search:>9.2f} "
            f"{1000 * search / args.queries:>9.1f} {(peak - before) / 1024:>13.0f}"
        )
        del index
    return 0


if __name__ == "__main__":
    sys.exit(main())
