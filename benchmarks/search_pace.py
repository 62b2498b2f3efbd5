"""Exact search at the chip's pace: the flat search's rate as a share of this host's GEMM rate, and the streamed
search's time next to the in-memory search's on the same vectors.

Figures: BENCHMARKS.md, "Exact search at the chip's pace".

Usage (from the repository root):

    python benchmarks/search_pace.py [--docs 1000000] [--queries 1000] [--dim 384] [--depth 100] [--rounds 3]
    python benchmarks/search_pace.py --smoke     # seconds: 3,000 documents, 40 queries, 2 chunks

Random unit vectors (a flat search's cost does not depend on their values) in the embedding cache's chunks of
16,384 rows, each written to its own ``.npy`` file. In memory: `harness.retrieval.index.VectorIndex` (``--index
flat``) holding every vector. Streamed: `harness.retrieval.streamed.StreamedIndex` reading each chunk from its
memory-mapped file, as a search over the cache's chunks does when the index does not fit the memory budget
(`--memory-budget`, docs/scale.md). The two are alternated `--rounds` times in one process; the figure is the
median of each, and the runs must be identical.

The GEMM rate is `harness.host.gemm_probe` (what ``beir-harness env --bench`` prints) at the search's own shape:
a block of queries times one scan tile of documents (`harness.retrieval.index.SCAN_TILE`), fp32 only, probed for
3 s before each round's two searches (so a drift of the machine's pace shows in both); the share is the median
search rate over the median probe, and each round's against its own probe is printed beside it. The search's rate is
its useful work, 2 × queries × documents × dimension floating-point operations, over its time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import _smoke

CHUNK_ROWS = 16_384  # what `harness.retrieval.encode.encode_corpus` stores per chunk


def _write_chunks(folder: Path, docs: int, dim: int, chunk_rows: int, seed: int) -> list[Path]:
    import numpy as np

    rng = np.random.default_rng(seed)
    paths = []
    for start in range(0, docs, chunk_rows):
        block = rng.standard_normal((min(chunk_rows, docs - start), dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        path = folder / f"chunk-{len(paths):05d}.npy"
        np.save(path, block)
        paths.append(path)
    return paths


def _indexes(paths: list[Path], dim: int, chunk_rows: int):
    import numpy as np

    from harness.retrieval.index import VectorIndex
    from harness.retrieval.streamed import StreamedIndex, rows_from_chunks

    lengths = [np.load(path, mmap_mode="r").shape[0] for path in paths]
    doc_ids = [f"d{row}" for row in range(sum(lengths))]
    memory = VectorIndex(dim)
    memory.reserve(len(doc_ids))
    start = 0
    for path, length in zip(paths, lengths):
        memory.add(doc_ids[start : start + length], np.load(path))
        start += length
    memory.build()

    def load(i: int):
        return np.load(paths[i], mmap_mode="r")

    streamed = StreamedIndex(
        lambda: (load(i) for i in range(len(paths))),
        rows_from_chunks(load, lengths),
        doc_ids,
        dim,
        budget=None,
        chunk_rows=chunk_rows,
        strict=False,
    )
    return memory, streamed


def _timed(index, query_ids, queries, depth):
    started = time.perf_counter()
    run = index.search(query_ids, queries, depth)
    return time.perf_counter() - started, run


def _same(first, second) -> bool:
    return all([(s.doc_id, s.score) for s in first[q]] == [(s.doc_id, s.score) for s in second[q]] for q in first)


def main() -> int:
    import numpy as np

    from harness.host import gemm_probe
    from harness.retrieval.index import SCAN_QUERIES, SCAN_TILE

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="alternated runs of each search (median reported)")
    parser.add_argument("--smoke", action="store_true", help="seconds, 3,000 documents: proves the script runs")
    args = parser.parse_args()
    print(_smoke.host_line())
    chunk_rows = CHUNK_ROWS
    if args.smoke:
        print(_smoke.NOTICE)
        args.docs, args.queries, args.rounds, chunk_rows = 3000, 40, 1, 2048
    rng = np.random.default_rng(1)
    queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    query_ids = [f"q{i}" for i in range(args.queries)]
    shape = (min(args.queries, SCAN_QUERIES), args.dim, SCAN_TILE)
    probe_seconds = 0.2 if args.smoke else 3.0
    with tempfile.TemporaryDirectory(prefix="beir-harness-search-pace-") as folder:
        paths = _write_chunks(Path(folder), args.docs, args.dim, chunk_rows, seed=0)
        memory, streamed = _indexes(paths, args.dim, chunk_rows)
        times: dict[str, list[float]] = {"in memory": [], "streamed": []}
        gemm: list[float] = []  # fp32 GFLOP/s, one probe a round, right before that round's searches
        runs = {}
        for _ in range(args.rounds):
            probe = gemm_probe(seconds=probe_seconds, shape=shape, flags=[])  # fp32 only: the flat search's
            gemm.append(next(rate["gflops"] for rate in probe["rates"] if rate["precision"] == "fp32"))
            for name, index in (("in memory", memory), ("streamed", streamed)):
                seconds, runs[name] = _timed(index, query_ids, queries, args.depth)
                times[name].append(seconds)
    fp32 = statistics.median(gemm)
    print(
        f"GEMM fp32 (numpy's BLAS) at {shape[0]} x {shape[1]} x {shape[2]}: {fp32:.1f} GFLOP/s (median of "
        f"{len(gemm)} probes of {probe_seconds:g} s, one before each round: {', '.join(f'{g:.1f}' for g in gemm)})"
    )
    flops = 2 * args.queries * args.docs * args.dim
    print(f"flat exact search, {args.docs:,} docs x {args.queries:,} queries x {args.dim}, top {args.depth}:")
    for name in ("in memory", "streamed"):
        seconds = times[name]
        median = statistics.median(seconds)
        rate = flops / median / 1e9
        own = [flops / s / 1e9 / g for s, g in zip(seconds, gemm)]  # each round against its own probe
        print(
            f"  {name:9} {median:8.2f} s (median of {len(seconds)}: "
            f"{', '.join(f'{s:.2f}' for s in seconds)})  {rate:6.1f} GFLOP/s = {rate / fp32:5.1%} of the GEMM rate "
            f"(each round against its own probe: {', '.join(f'{share:.1%}' for share in own)})"
        )
    ratio = statistics.median(times["streamed"]) / statistics.median(times["in memory"])
    print(f"streamed / in memory = {ratio:.2f}; identical runs: {_same(runs['in memory'], runs['streamed'])}")
    print(f"work: in memory {memory.work}; streamed {streamed.work} ({streamed.passes} passes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
