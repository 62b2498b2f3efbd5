"""BM25 and learned-sparse indexing at growing corpus sizes: time per phase and peak RSS; learned-sparse search.

Figures: BENCHMARKS.md, "BM25 and learned-sparse indexing at scale" and "Learned sparse retrieval at scale"
(``--kind learned-search``).

Usage (from the repository root):

    python benchmarks/sparse_index_scale.py [--kind bm25] [--sizes 250000,500000,1000000] [--queries 1000]
    python benchmarks/sparse_index_scale.py --kind bm25 --variant strings    # the BM25 build before term ids
    python benchmarks/sparse_index_scale.py --kind learned --sizes 250000,500000,1000000
    python benchmarks/sparse_index_scale.py --kind learned-search [--sizes 100000,300000,1000000] [--queries 300]
    python benchmarks/sparse_index_scale.py --smoke     # seconds: 3,000 documents of each kind, 2,000 rows searched

Each size runs in a fresh process (its peak RSS is that process's own, `harness.metering.run_measured`; the
readings after each phase are its ``VmHWM`` then, `harness.metering.high_water_bytes`). BM25 (``--kind bm25``): a seeded synthetic corpus is streamed into `BM25Retriever.index`, the
class and call `evaluate --model bm25` uses (the documents come from a generator instead of
corpus.jsonl, whose reader streams): MS MARCO-like passages of 20-92 words (mean 56) drawn from a
Zipfian (s = 1) vocabulary of 1,000,000 made-up words whose 33 most frequent are Lucene's stop words;
then ``--queries`` queries of 2-8 words are searched at depth 100. ``--variant strings`` indexes as the
harness did before the term-ids build (every term kept as a str, bm25s given the lists of str), for the
before/after comparison. Learned sparse (``--kind learned``): SPLADE-like rows (`rows`:
~120 active dimensions of 30,522 a document, ~40 a query) added to `SparseIndex` in chunks of 1,024
rows as `evaluate` adds them, the posting lists built, then the queries searched at depth 100;
``--variant stacked`` builds the posting lists as before the in-place build (stack the chunks, then transpose:
two copies). No model runs: the rows are what an encoder would give, so the figures are the harness's index alone.
The "index" phase includes generating the corpus; the generator alone is timed on the smallest size.
A size whose fit (from the sizes already run) predicts more than ``--max-rss-gb`` is skipped, not run.

Learned-sparse search (``--kind learned-search``; defaults ``--sizes 100000,300000,1000000 --queries 300``):
all sizes in this one process, the same SPLADE-like rows (positive float32 weights, dimension frequencies
Zipf-like as in text) added to `SparseIndex` in chunks of 1,024 rows; then the queries are searched for the
top 100. Prints, per size: the time to build the posting lists (the adds not included), the search time, and
the process's peak RSS growth.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _smoke  # noqa: E402

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[5])
import sparse_index_scale as bench
kind, variant, n, n_queries = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if kind == "generate":
    words = bench.vocabulary()
    started = time.perf_counter()
    total = sum(len(doc.text) for doc in bench.bm25_docs(n, words))
    print(json.dumps({"generate_s": time.perf_counter() - started, "chars": total}))
    sys.exit(0)
index_s, search_s, after_index, extra = bench.run_bm25(n, n_queries, variant) if kind == "bm25" \
    else bench.run_learned(n, n_queries, variant)
print(json.dumps({"index_s": index_s, "search_s": search_s, "rss_index": after_index, **extra}))
"""

VOCABULARY, STOP_RANKS = 1_000_000, 33


def _words(rng):
    """The vocabulary, most frequent first: Lucene's stop words, then distinct made-up lowercase words."""
    import numpy as np

    from harness.retrieval.bm25 import LUCENE_STOPWORDS

    words, seen = sorted(LUCENE_STOPWORDS), set(LUCENE_STOPWORDS)
    while len(words) < VOCABULARY:
        lengths = rng.integers(3, 11, size=VOCABULARY)
        letters = rng.integers(97, 123, size=int(lengths.sum()), dtype=np.uint8).tobytes()
        ends = np.cumsum(lengths).tolist()
        for start, end in zip([0, *ends[:-1]], ends):
            word = letters[start:end].decode()
            if word not in seen and len(words) < VOCABULARY:
                seen.add(word)
                words.append(word)
    return words


def vocabulary(seed: int = 0):
    """The corpus's vocabulary (an object array, most frequent first); made once, before any timer."""
    import numpy as np

    return np.array(_words(np.random.default_rng(seed)), dtype=object)


def bm25_docs(n: int, words, seed: int = 0, block: int = 10_000):
    """`n` synthetic passages (Doc) over `words`, generated a block at a time: the corpus is never held whole."""
    import numpy as np

    from harness.records import Doc

    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(1.0 / np.arange(1, VOCABULARY + 1))
    cumulative /= cumulative[-1]
    for start in range(0, n, block):
        lengths = rng.integers(20, 93, size=min(block, n - start))
        ranks = np.searchsorted(cumulative, rng.random(int(lengths.sum())))
        cuts = np.cumsum(lengths)[:-1]
        for offset, row in enumerate(np.split(ranks, cuts)):
            yield Doc(f"d{start + offset}", "", " ".join(words[row]))


def bm25_queries(n: int, words, seed: int = 1):
    """Queries of 2-8 words drawn from the corpus's Zipfian vocabulary, stop words excluded."""
    import numpy as np

    from harness.records import Query

    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(1.0 / np.arange(STOP_RANKS + 1, VOCABULARY + 1))
    cumulative /= cumulative[-1]
    return [
        Query(
            f"q{i}",
            " ".join(words[STOP_RANKS + r] for r in np.searchsorted(cumulative, rng.random(int(rng.integers(2, 9))))),
        )
        for i in range(n)
    ]


def run_bm25(n: int, n_queries: int, variant: str):
    """Index `n` passages and search `n_queries` queries; (index s, search s, peak RSS after indexing, extra)."""
    import time

    from harness.metering import high_water_bytes
    from harness.records import doc_text
    from harness.retrieval.bm25 import BM25Retriever

    words = vocabulary()
    queries = bm25_queries(n_queries, words)
    retriever = BM25Retriever()
    rss_start = high_water_bytes()
    started = time.perf_counter()
    if variant == "strings":  # the build before term ids, kept here to measure against
        tokens = []
        for doc in bm25_docs(n, words):
            retriever._doc_ids.append(doc.doc_id)
            tokens.append(retriever.analyzer(doc_text(doc)))
        retriever._bm25.index(tokens, show_progress=False)
        del tokens
    else:
        retriever.index(bm25_docs(n, words), progress=False)
    index_s = time.perf_counter() - started
    after_index = high_water_bytes()
    started = time.perf_counter()
    run = retriever.search(queries, 100)
    search_s = time.perf_counter() - started
    postings = int(retriever._bm25.scores["data"].size)
    return (
        index_s,
        search_s,
        after_index,
        {"postings": postings, "rss_start": rss_start, "hits": sum(len(run[q.query_id]) for q in queries)},
    )


def rows(rng, n: int, active: int, vocabulary: int):
    """`n` SPLADE-like rows: `active` dimensions of `vocabulary` drawn Zipf-like (duplicates summed)."""
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


def run_learned(n: int, n_queries: int, variant: str):
    """SPLADE-like rows into `SparseIndex` in 1,024-row chunks, posting lists built, queries searched."""
    import time

    import numpy as np

    from harness.metering import high_water_bytes
    from harness.retrieval.learned_sparse import SparseIndex

    rng = np.random.default_rng(0)
    queries = rows(rng, n_queries, 40, 30522)
    index = SparseIndex()
    rss_start = high_water_bytes()
    started = time.perf_counter()
    for start in range(0, n, 1024):
        count = min(1024, n - start)
        index.add([f"d{start + i}" for i in range(count)], rows(rng, count, 120, 30522))
    if variant == "stacked":  # the build before the in-place one: stack the chunks, then transpose (two copies)
        import scipy.sparse

        index._postings = scipy.sparse.vstack(index._chunks, format="csr")
        index._chunks = []
        index._postings = index._postings.T.tocsr()
    postings = int(index._matrix().nnz)
    index_s = time.perf_counter() - started
    after_index = high_water_bytes()
    started = time.perf_counter()
    index.search([f"q{i}" for i in range(n_queries)], queries, 100)
    return index_s, time.perf_counter() - started, after_index, {"postings": postings, "rss_start": rss_start}


def learned_search(sizes: list[int], n_queries: int) -> None:
    """All `sizes` in this process: posting lists built, queries searched, peak RSS growth; one row a size."""
    import numpy as np

    from harness.metering import high_water_bytes
    from harness.retrieval.learned_sparse import SparseIndex

    rng = np.random.default_rng(0)
    queries = rows(rng, n_queries, 40, 30522)
    query_ids = [f"q{i}" for i in range(n_queries)]
    print(f"{'docs':>9} {'nnz/doc':>8} {'build s':>8} {'search s':>9} {'ms/query':>9} {'peak RSS +MB':>13}")
    for size in sizes:
        before = high_water_bytes()
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
        peak = high_water_bytes()
        print(
            f"{size:>9,} {index._matrix().nnz / size:>8.1f} {build:>8.2f} {search:>9.2f} "
            f"{1000 * search / n_queries:>9.1f} {(peak - before) / 2**20:>13.0f}"
        )
        del index


def child(kind: str, variant: str, n: int, n_queries: int) -> dict:
    """One size in a fresh process."""
    here = str(Path(__file__).resolve().parent)
    from harness.metering import run_measured

    proc = run_measured(["-c", CHILD, kind, variant, str(n), str(n_queries), here])
    if proc.returncode != 0:
        raise SystemExit(f"{kind} at {n:,} docs failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "rss_peak": proc.peak_bytes}


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares line through (docs, value): (per document, fixed)."""
    import numpy as np

    if len(points) < 2:
        return points[0][1] / points[0][0], 0.0
    slope, intercept = np.polyfit([p[0] for p in points], [p[1] for p in points], 1)
    return float(slope), float(intercept)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kind",
        choices=["bm25", "learned", "learned-search"],
        default="bm25",
        help="learned-search: learned-sparse build and search time and RSS growth, all sizes in one process",
    )
    parser.add_argument(
        "--variant",
        choices=["ids", "strings", "in-place", "stacked"],
        default=None,
        help="bm25: ids (default) or strings (the build before term ids); learned: in-place (default) or stacked",
    )
    parser.add_argument("--sizes", default=None, help="[250000,500000,1000000; learned-search: 100000,300000,1000000]")
    parser.add_argument("--queries", type=int, default=None, help="[1000; learned-search: 300]")
    parser.add_argument("--max-rss-gb", type=float, default=8.0, help="skip a size the fit puts above this")
    parser.add_argument("--target", type=int, default=8_841_823, help="the size the fit is extrapolated to")
    parser.add_argument("--smoke", action="store_true", help="seconds, 3,000 documents: proves the script runs")
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.kind == "learned-search" and not args.smoke:
        learned_search([int(size) for size in (args.sizes or "100000,300000,1000000").split(",")], args.queries or 300)
        return 0
    args.sizes, args.queries = args.sizes or "250000,500000,1000000", args.queries or 1000
    kinds = [(args.kind, args.variant or ("ids" if args.kind == "bm25" else "in-place"))]
    if args.smoke:
        print(_smoke.NOTICE)
        args.sizes, args.queries = "1500,3000", 20
        kinds = [("bm25", "strings"), ("bm25", "ids"), ("learned", "stacked"), ("learned", "in-place")]
    sizes = [int(size) for size in args.sizes.split(",")]
    if any(kind == "bm25" for kind, _ in kinds):
        generated = child("generate", "-", sizes[0], 0)
        print(
            f"generator alone: {sizes[0]:,} docs in {generated['generate_s']:.1f} s "
            f"({generated['chars'] / sizes[0]:.0f} chars/doc)"
        )
    for kind, variant in kinds:
        measure(kind, variant, sizes, args)
    if args.smoke:  # the learned-sparse search part: 2,000 rows, 20 queries
        print("learned-search, all sizes in this process:")
        learned_search([2000], 20)
    return 0


def measure(kind: str, variant: str, sizes: list[int], args) -> None:
    """Run each size of one kind, print its row, then the fitted per-document cost at `args.target`."""
    label = f"{kind} ({variant})"
    print(
        f"{label}: {'docs':>10} {'postings':>12} {'index s':>8} {'search s':>9} {'ms/query':>9} "
        f"{'start GB':>9} {'RSS index GB':>13} {'peak RSS GB':>12}"
    )
    rss, index_times, search_times = [], [], []
    for n in sizes:
        if len(rss) >= 2 and fit(rss)[0] * n + fit(rss)[1] > args.max_rss_gb * 2**30:
            print(f"{label}: {n:>10,} skipped: the fit predicts over {args.max_rss_gb:g} GB")
            continue
        row = child(kind, variant, n, args.queries)
        rss.append((n, row["rss_peak"]))
        index_times.append((n, row["index_s"]))
        search_times.append((n, row["search_s"] / args.queries))
        print(
            f"{label}: {n:>10,} {row['postings']:>12,} {row['index_s']:>8.1f} {row['search_s']:>9.1f} "
            f"{1000 * row['search_s'] / args.queries:>9.2f} {row['rss_start'] / 2**30:>9.2f} "
            f"{row['rss_index'] / 2**30:>13.2f} "
            f"{row['rss_peak'] / 2**30:>12.2f}",
            flush=True,
        )
    per_doc, fixed = fit(rss)
    per_doc_s, _ = fit(index_times)
    per_query, query_fixed = fit(search_times)
    print(
        f"{label}: fitted from the rows above (a fit, not a measurement): {per_doc:.0f} bytes/doc peak RSS "
        f"+ {fixed / 2**30:.2f} GB; {1e6 * per_doc_s:.1f} s per 1M docs to index; at {args.target:,} docs: "
        f"peak RSS {(per_doc * args.target + fixed) / 2**30:.1f} GB, index {per_doc_s * args.target / 60:.0f} min, "
        f"{1000 * (per_query * args.target + query_fixed):.0f} ms/query"
    )


if __name__ == "__main__":
    sys.exit(main())
