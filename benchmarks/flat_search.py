"""Exact (flat) search, each way it runs: how fast, against what, and what the driver holds.

Figures: BENCHMARKS.md, "Exact search at the chip's pace" (``pace``), "Ray: sharded exact search on a local 2-CPU
cluster" (``ray``) and "GPUs and the full BEIR sweep", search beside a GPU encoder (``faiss``).

Usage (from the repository root):

    python benchmarks/flat_search.py pace [--docs 1000000] [--queries 1000] [--dim 384] [--depth 100] [--rounds 3]
    python benchmarks/flat_search.py faiss [--docs 1000000] [--queries 6980] [--dim 384] [--depth 100]
    python benchmarks/flat_search.py ray [--docs 200000] [--queries 1000] [--rounds 2] [--cpus 2] [--memory]
    python benchmarks/flat_search.py --smoke     # seconds: each part on a few thousand documents

Random unit vectors throughout (a flat search's cost does not depend on their values).

* ``pace``: the flat search's rate as a share of this host's GEMM rate, in memory and streamed. The vectors are
  written in the embedding cache's chunks of 16,384 rows, each to its own ``.npy`` file. In memory:
  `harness.retrieval.index.VectorIndex` (``--index flat``) holding every vector. Streamed:
  `harness.retrieval.streamed.StreamedIndex` reading each chunk from its memory-mapped file, as a search over the
  cache's chunks does when the index does not fit the memory budget (`--memory-budget`, docs/scale.md). The two
  are alternated `--rounds` times; the figure is the median of each, and the runs must be identical. The GEMM
  rate is `harness.host.gemm_probe` (what ``beir-harness env --bench`` prints) at the search's own shape (a block
  of queries times one scan tile, `harness.retrieval.index.SCAN_TILE`), fp32 only, probed for 3 s before each
  round's two searches; the share is the median search rate over the median probe. The search's rate is its
  useful work, 2 × queries × documents × dimension floating-point operations, over its time.
* ``faiss``: does exact search dominate a GPU run? A FAISS ``IndexFlatIP`` searched once with `--queries` queries
  (MS MARCO dev's 6,980 by default); flat search is linear in the document count, so the time for MS MARCO's
  8,841,823 passages is projected as ``time × 8,841,823 / docs`` and printed next to the encode time of a GPU
  at a given rate (a formula until a GPU is measured).
* ``ray``: sharded search on Ray workers against one in-memory flat index on the driver. The vectors are written
  into an embedding cache entry (chunks of `--chunk` vectors, as an encoding run leaves them); then, alternated
  `--rounds` times (best of the rounds printed): local, what ``--ray-search driver`` does (a `VectorIndex` built
  from the cached chunks, build and search timed apart); local with FAISS on one thread (what each Ray task
  runs); and `harness.engines.ray_search.search_sharded` on a private local cluster of `--cpus` CPUs
  (127.0.0.1; cluster start-up and one warm-up search of one query not timed). The runs are compared document
  for document and score for score. With `--memory`, the driver's peak memory each way is its own, measured in
  a fresh process by `harness.metering.run_measured`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _smoke

CHUNK_ROWS = 16_384  # what `harness.retrieval.encode.encode_corpus` stores per chunk
MSMARCO_DOCS = 8_841_823
DEFAULTS = {  # part → (docs, queries, rounds)
    "pace": (1_000_000, 1000, 3),
    "faiss": (1_000_000, 6980, 1),
    "ray": (200_000, 1000, 2),
}
SMOKE = {"pace": (3000, 40, 1), "faiss": (2000, 50, 1), "ray": (2000, 50, 1)}


def unit_vectors(rng, rows: int, dim: int):
    """`rows` random float32 vectors of norm 1."""
    import numpy as np

    block = rng.standard_normal((rows, dim), dtype=np.float32)
    return block / np.linalg.norm(block, axis=1, keepdims=True)


def same_runs(first, second) -> bool:
    return all([(s.doc_id, s.score) for s in first[q]] == [(s.doc_id, s.score) for s in second[q]] for q in first)


# --- pace: in memory and streamed, against the GEMM rate -------------------------------------------------------


def _npy_chunks(folder: Path, docs: int, dim: int, chunk_rows: int) -> list[Path]:
    import numpy as np

    rng, paths = np.random.default_rng(0), []
    for start in range(0, docs, chunk_rows):
        path = folder / f"chunk-{len(paths):05d}.npy"
        np.save(path, unit_vectors(rng, min(chunk_rows, docs - start), dim))
        paths.append(path)
    return paths


def _pace_indexes(paths: list[Path], dim: int, chunk_rows: int):
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


def pace(args, chunk_rows: int) -> int:
    import numpy as np

    from harness.host import gemm_probe
    from harness.retrieval.index import SCAN_QUERIES, SCAN_TILE

    queries = unit_vectors(np.random.default_rng(1), args.queries, args.dim)
    query_ids = [f"q{i}" for i in range(args.queries)]
    shape = (min(args.queries, SCAN_QUERIES), args.dim, SCAN_TILE)
    probe_seconds = 0.2 if args.smoke else 3.0
    times: dict[str, list[float]] = {"in memory": [], "streamed": []}
    gemm: list[float] = []  # fp32 GFLOP/s, one probe a round, right before that round's searches
    runs = {}
    with tempfile.TemporaryDirectory(prefix="beir-harness-flat-search-") as folder:
        memory, streamed = _pace_indexes(
            _npy_chunks(Path(folder), args.docs, args.dim, chunk_rows), args.dim, chunk_rows
        )
        for _ in range(args.rounds):
            probe = gemm_probe(seconds=probe_seconds, shape=shape, flags=[])  # fp32 only: the flat search's
            gemm.append(next(rate["gflops"] for rate in probe["rates"] if rate["precision"] == "fp32"))
            for name, index in (("in memory", memory), ("streamed", streamed)):
                started = time.perf_counter()
                runs[name] = index.search(query_ids, queries, args.depth)
                times[name].append(time.perf_counter() - started)
    fp32 = statistics.median(gemm)
    print(
        f"GEMM fp32 (numpy's BLAS) at {shape[0]} x {shape[1]} x {shape[2]}: {fp32:.1f} GFLOP/s (median of "
        f"{len(gemm)} probes of {probe_seconds:g} s, one before each round: {', '.join(f'{g:.1f}' for g in gemm)})"
    )
    flops = 2 * args.queries * args.docs * args.dim
    print(f"flat exact search, {args.docs:,} docs x {args.queries:,} queries x {args.dim}, top {args.depth}:")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        rate = flops / median / 1e9
        own = [flops / s / 1e9 / g for s, g in zip(seconds, gemm)]  # each round against its own probe
        print(
            f"  {name:9} {median:8.2f} s (median of {len(seconds)}: "
            f"{', '.join(f'{s:.2f}' for s in seconds)})  {rate:6.1f} GFLOP/s = {rate / fp32:5.1%} of the GEMM rate "
            f"(each round against its own probe: {', '.join(f'{share:.1%}' for share in own)})"
        )
    ratio = statistics.median(times["streamed"]) / statistics.median(times["in memory"])
    print(f"streamed / in memory = {ratio:.2f}; identical runs: {same_runs(runs['in memory'], runs['streamed'])}")
    print(f"work: in memory {memory.work}; streamed {streamed.work} ({streamed.passes} passes)")
    return 0


# --- faiss: FAISS flat alone, projected to MS MARCO -------------------------------------------------------------


def faiss_projection(args) -> int:
    import faiss
    import numpy as np

    rng = np.random.default_rng(0)
    index = faiss.IndexFlatIP(args.dim)
    for start in range(0, args.docs, 100_000):
        index.add(unit_vectors(rng, min(100_000, args.docs - start), args.dim))
    queries = unit_vectors(rng, args.queries, args.dim)
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


# --- ray: sharded on a local cluster against the driver's flat index --------------------------------------------


def _inputs(docs: int, dim: int) -> dict:
    return {"kind": "corpus", "benchmark": "flat_search", "docs": docs, "dim": dim}


def _write_entry(root: Path, docs: int, dim: int, chunk: int):
    """A complete corpus cache entry of `docs` random unit vectors; returns it, the chunk sizes and doc_ids."""
    import numpy as np

    from harness.io.cache import embedding_entry

    entry = embedding_entry(root, _inputs(docs, dim))
    entry.start(chunk)
    rng = np.random.default_rng(0)
    rows, doc_ids = [], []
    for index, start in enumerate(range(0, docs, chunk)):
        block = unit_vectors(rng, min(chunk, docs - start), dim)
        ids = [f"doc{start + i}" for i in range(len(block))]
        entry.write_chunk(index, ids, block)
        rows.append(len(block))
        doc_ids += ids
    entry.finish(len(rows), docs, dim)
    return entry, rows, doc_ids


def _local(entry, query_ids, queries, depth: int, threads: int | None = None):
    """(run, build seconds, search seconds) of one flat index on this process, fed from the cache; FAISS on
    `threads` threads (None: its default, every core)."""
    import faiss

    from harness.retrieval.index import VectorIndex

    started = time.perf_counter()
    index = None
    for ids, vectors in entry.chunks(mmap=True):
        index = index or VectorIndex(vectors.shape[1])
        index.add(ids, vectors)
    built = time.perf_counter()
    default = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(threads or default)
    try:
        run = index.search(query_ids, queries, depth)
    finally:
        faiss.omp_set_num_threads(default)
    return run, built - started, time.perf_counter() - built


def _driver_peak(mode: str, root: Path, args) -> int:
    """The driver's own peak memory (MiB) searching the entry under `root` as `mode` does, in a fresh process."""
    from harness.metering import run_measured

    options = {"--docs": args.docs, "--dim": args.dim, "--queries": args.queries, "--depth": args.depth}
    command = [__file__, "ray", "--measure", mode, "--entry", str(root), "--cpus", str(args.cpus)]
    child = run_measured(command + [str(x) for pair in options.items() for x in pair])
    if child.returncode != 0:
        raise SystemExit(f"the {mode} driver failed:\n{child.stderr[-2000:]}")
    return child.peak_bytes // 2**20


def _measure(args) -> int:
    """The `--memory` child: one search as `args.measure` does, nothing printed."""
    import numpy as np

    from harness.engines.ray_engine import RaySpec, session
    from harness.engines.ray_search import search_sharded
    from harness.io.cache import embedding_entry

    entry = embedding_entry(Path(args.entry), _inputs(args.docs, args.dim))
    chunk_ids = [ids for ids, _ in entry.chunks(mmap=True)]
    doc_ids = [doc_id for ids in chunk_ids for doc_id in ids]
    queries = np.random.default_rng(1).standard_normal((args.queries, args.dim), dtype=np.float32)
    query_ids = [f"q{i}" for i in range(args.queries)]
    if args.measure == "driver":
        _local(entry, query_ids, queries, args.depth)
    else:
        with session(RaySpec(local_cpus=args.cpus)):
            search_sharded(entry, [len(ids) for ids in chunk_ids], doc_ids, query_ids, queries, args.depth)
    return 0


def ray(args) -> int:
    import numpy as np
    import ray as ray_module

    from harness.engines.ray_engine import RaySpec, connect
    from harness.engines.ray_search import search_sharded

    root = Path(tempfile.mkdtemp(prefix="beir-harness-ray-search-"))
    ray_tmp = None
    try:
        entry, rows, doc_ids = _write_entry(root, args.docs, args.dim, args.chunk)
        queries = unit_vectors(np.random.default_rng(1), args.queries, args.dim)
        query_ids = [f"q{i}" for i in range(args.queries)]
        if len(tempfile.gettempdir()) > 40 and "RAY_TMPDIR" not in os.environ:  # socket paths: <= 107 bytes
            ray_tmp = os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rs-", dir="/tmp")
        started = connect(RaySpec(local_cpus=args.cpus))
        local_build, local_search, one_thread, sharded, identical, shards = [], [], [], [], True, 0
        try:
            search_sharded(entry, rows, doc_ids, query_ids[:1], queries[:1], args.depth)  # warm-up, not timed
            for _ in range(args.rounds):  # alternated, so a load spike hits both
                local_run, build_s, search_s = _local(entry, query_ids, queries, args.depth)
                local_build.append(build_s)
                local_search.append(search_s)
                began = time.perf_counter()
                sharded_run, facts = search_sharded(entry, rows, doc_ids, query_ids, queries, args.depth)
                sharded.append(time.perf_counter() - began)
                one_run, _, one_s = _local(entry, query_ids, queries, args.depth, threads=1)
                one_thread.append(one_s)
                identical &= sharded_run == local_run == one_run
                shards = facts["search_shards"]
        finally:
            if started:
                ray_module.shutdown()
        peaks = {mode: _driver_peak(mode, root, args) for mode in ("driver", "sharded")} if args.memory else {}
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if ray_tmp is not None:
            shutil.rmtree(ray_tmp, ignore_errors=True)
    best_build, best_search = min(zip(local_build, local_search), key=sum)  # the best round, both parts of it
    local_best = best_build + best_search
    print(
        f"{args.docs:,} docs x {args.dim} dims ({len(rows)} chunks), {args.queries:,} queries, top {args.depth}, "
        f"best of {args.rounds} alternated rounds:"
    )
    print(f"  local flat (driver): build {best_build:.2f} s + search {best_search:.2f} s = {local_best:.2f} s")
    print(f"  local flat, FAISS on 1 thread: search {min(one_thread):.2f} s")
    print(f"  ray-sharded ({shards} shards, {args.cpus}-CPU local cluster): {min(sharded):.2f} s")
    if peaks:
        print(
            f"driver peak RSS: local flat {peaks['driver']} MiB, ray-sharded {peaks['sharded']} MiB "
            f"(the vectors: {args.docs * args.dim * 4 / 2**20:.0f} MiB)"
        )
    print(f"sharded / local = {min(sharded) / local_best:.2f}; identical runs: {identical}")
    return 0 if identical else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["pace", "faiss", "ray"], nargs="?", help="which way to search (see above)")
    parser.add_argument("--docs", type=int, help="[pace, faiss: 1000000; ray: 200000]")
    parser.add_argument("--queries", type=int, help="[pace, ray: 1000; faiss: 6980, MS MARCO dev's]")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--rounds", type=int, help="alternated rounds [pace: 3, median; ray: 2, best; faiss: 1]")
    parser.add_argument("--chunk", type=int, default=16_384, help="ray: vectors a cache chunk holds")
    parser.add_argument("--cpus", type=int, default=2, help="ray: the local cluster's CPUs")
    parser.add_argument("--memory", action="store_true", help="ray: also the driver's own peak memory, each way")
    parser.add_argument("--smoke", action="store_true", help="seconds: every part on a few thousand documents")
    parser.add_argument("--measure", choices=["driver", "sharded"], help=argparse.SUPPRESS)
    parser.add_argument("--entry", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        return _measure(args)
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        status = 0
        for part, chunk_rows in (("pace", 2048), ("faiss", 0), ("ray", 300)):
            args.docs, args.queries, args.rounds = SMOKE[part]
            args.chunk, args.memory = chunk_rows or args.chunk, part == "ray"
            status = status or run_part(part, args, chunk_rows)
        return status
    if args.part is None:
        parser.error("name a part: pace, faiss or ray (or --smoke)")
    docs, queries, rounds = DEFAULTS[args.part]
    args.docs, args.queries, args.rounds = args.docs or docs, args.queries or queries, args.rounds or rounds
    return run_part(args.part, args, CHUNK_ROWS)


def run_part(part: str, args, chunk_rows: int) -> int:
    if part == "pace":
        return pace(args, chunk_rows)
    if part == "faiss":
        return faiss_projection(args)
    return ray(args)


if __name__ == "__main__":
    sys.exit(main())
