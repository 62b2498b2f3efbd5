"""Sharded exact search on Ray workers vs one in-memory flat index on the driver.

Figures: BENCHMARKS.md, "Ray: sharded exact search on a local 2-CPU cluster".

Usage (from the repository root):

    python benchmarks/ray_search.py [--docs 200000] [--dim 384] [--queries 1000] [--depth 100] [--cpus 2]
    python benchmarks/ray_search.py --memory    # also the driver's peak RSS each way
    python benchmarks/ray_search.py --smoke     # seconds: 2,000 documents, 50 queries

Random unit vectors are written into an embedding cache entry (chunks of `--chunk` vectors, as an
encoding run leaves them) under a temporary folder. Then, alternated `--rounds` times (A, B, C, A, B, C; best
of the rounds is printed, as the machine may be loaded by other work):

* local: what ``--ray-search driver`` does — a FAISS ``IndexFlatIP`` built from the cached chunks,
  searched for the top `--depth` of every query (build and search timed apart);
* local on one thread: the same search with FAISS on one thread (what each Ray task runs), to tell
  the cost of the cluster from that of FAISS's threading on a loaded machine;
* ray-sharded: `harness.engines.ray_search.search_sharded` on a private local cluster of `--cpus`
  CPUs (127.0.0.1, no usage statistics): one task per CPU reads its shard of chunks and searches it,
  the driver merges. Cluster start-up and one warm-up search of one query (workers importing FAISS
  and harness) are not timed: they happen once per run, not per search.

The runs are compared document for document and score for score. With `--memory`, the driver's peak
RSS is measured each way in a fresh process (the local flat index holds every vector; the sharded
driver holds doc_ids, queries and the merged tops).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _smoke


def _write_entry(root: Path, docs: int, dim: int, chunk: int):
    """A complete corpus cache entry of `docs` random unit vectors; returns it, the chunk sizes and doc_ids."""
    import numpy as np

    from harness.io.cache import embedding_entry

    entry = embedding_entry(root, _inputs(docs, dim))
    entry.start(chunk)
    rng = np.random.default_rng(0)
    rows, doc_ids = [], []
    for index, start in enumerate(range(0, docs, chunk)):
        block = rng.standard_normal((min(chunk, docs - start), dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        ids = [f"doc{start + i}" for i in range(len(block))]
        entry.write_chunk(index, ids, block)
        rows.append(len(block))
        doc_ids += ids
    entry.finish(len(rows), docs, dim)
    return entry, rows, doc_ids


def _local(entry, doc_ids, query_ids, queries, depth: int, threads: int | None = None):
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


def _inputs(docs: int, dim: int) -> dict:
    return {"kind": "corpus", "benchmark": "ray_search", "docs": docs, "dim": dim}


def _peak_rss(mode: str, root: Path, args) -> int:
    """In a fresh process (`--measure`): search the entry under `root` as `mode` does; its peak RSS in MiB."""
    command = [
        sys.executable,
        __file__,
        "--measure",
        mode,
        "--entry",
        str(root),
        "--docs",
        str(args.docs),
        "--dim",
        str(args.dim),
        "--queries",
        str(args.queries),
        "--depth",
        str(args.depth),
        "--cpus",
        str(args.cpus),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def _measure(args) -> int:
    """The `--measure` child: one search, then its own peak RSS (MiB) as the last word printed."""
    import numpy as np

    from harness.engines.ray_engine import RaySpec, session
    from harness.engines.ray_search import search_sharded
    from harness.io.cache import embedding_entry
    from harness.metering import high_water_bytes

    entry = embedding_entry(Path(args.entry), _inputs(args.docs, args.dim))
    chunk_ids = [ids for ids, _ in entry.chunks(mmap=True)]
    doc_ids = [doc_id for ids in chunk_ids for doc_id in ids]
    queries = np.random.default_rng(1).standard_normal((args.queries, args.dim), dtype=np.float32)
    query_ids = [f"q{i}" for i in range(args.queries)]
    if args.measure == "driver":
        _local(entry, doc_ids, query_ids, queries, args.depth)
    else:
        with session(RaySpec(local_cpus=args.cpus)):
            search_sharded(entry, [len(ids) for ids in chunk_ids], doc_ids, query_ids, queries, args.depth)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across fork and exec.
    print(high_water_bytes() // 2**20)
    return 0


def main() -> int:
    import numpy as np

    from harness.engines.ray_engine import RaySpec, connect
    from harness.engines.ray_search import search_sharded

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--chunk", type=int, default=16_384)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="seconds, 2,000 documents: proves the script runs")
    parser.add_argument(
        "--memory",
        action="store_true",
        help="also the driver's peak RSS, each way, in a fresh process (vectors left in the cache)",
    )
    parser.add_argument("--measure", choices=["driver", "sharded"], help=argparse.SUPPRESS)
    parser.add_argument("--entry", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        return _measure(args)
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        args.docs, args.queries, args.chunk, args.rounds = 2000, 50, 300, 1
    root = Path(tempfile.mkdtemp(prefix="beir-harness-ray-search-"))
    ray_tmp = None
    try:
        entry, rows, doc_ids = _write_entry(root, args.docs, args.dim, args.chunk)
        rng = np.random.default_rng(1)
        queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        query_ids = [f"q{i}" for i in range(args.queries)]
        import ray

        if len(tempfile.gettempdir()) > 40 and "RAY_TMPDIR" not in os.environ:  # socket paths: <= 107 bytes
            ray_tmp = os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rs-", dir="/tmp")
        started = connect(RaySpec(local_cpus=args.cpus))
        local_build, local_search, one_thread, sharded, identical, shards = [], [], [], [], True, 0
        try:
            search_sharded(entry, rows, doc_ids, query_ids[:1], queries[:1], args.depth)  # warm-up, not timed
            for _ in range(args.rounds):  # alternated, so a load spike hits both
                local_run, build_s, search_s = _local(entry, doc_ids, query_ids, queries, args.depth)
                local_build.append(build_s)
                local_search.append(search_s)
                began = time.perf_counter()
                sharded_run, facts = search_sharded(entry, rows, doc_ids, query_ids, queries, args.depth)
                sharded.append(time.perf_counter() - began)
                one_run, _, one_s = _local(entry, doc_ids, query_ids, queries, args.depth, threads=1)
                one_thread.append(one_s)
                identical &= sharded_run == local_run == one_run
                shards = facts["search_shards"]
        finally:
            if started:
                ray.shutdown()
        if args.memory:
            peaks = {mode: _peak_rss(mode, root, args) for mode in ("driver", "sharded")}
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
    if args.memory:
        print(
            f"driver peak RSS: local flat {peaks['driver']} MiB, ray-sharded {peaks['sharded']} MiB "
            f"(the vectors: {args.docs * args.dim * 4 / 2**20:.0f} MiB)"
        )
    print(f"sharded / local = {min(sharded) / local_best:.2f}; identical runs: {identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
