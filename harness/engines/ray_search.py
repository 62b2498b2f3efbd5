"""Exact search on Ray workers: each searches a shard of the cached corpus vectors, the driver merges.

With ``--engine ray`` and a flat index, search need not load every corpus vector into the driver.
The corpus vectors already lie in the embedding cache (`harness.io.cache`), on a filesystem every
node mounts, as chunks; a *search shard* is a run of whole chunks. A Ray task per shard memory-maps
its chunks, scores every query against them by exact inner product (FAISS ``knn``, query block ×
chunk, so a task holds one chunk's pages and one block's heaps) and returns, per query, its shard's
top ``depth`` (scores, global row numbers). The driver merges the shards' tops as they arrive.

Identical to the local flat index (`harness.retrieval.index.VectorIndex`, ``IndexFlatIP``): both
take their tops from `harness.retrieval.index.exact_top`, which lets FAISS find the candidates and
then recomputes their scores one way (FAISS's own float32 scores differ in the last bits with the
thread count — one per Ray task, all cores locally — and the shape of the search), and keeps at the
cut, among equal scores, the greater doc_ids (FAISS alone keeps whichever tie its heap met first,
which depends on the order of the vectors). Every document of the global top ``depth`` is in its own
shard's top ``depth`` under that rule, so merging the shards' tops
(`harness.retrieval.index.merge_top`) loses nothing.

A worker lost mid-search (its process killed, its node gone): Ray runs the shard's task again on
another worker (``retries`` times); when every try is lost, the run stops with an error naming
the shard, its chunks and documents. Needs the ``[ray]`` extra.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.engines.ray_engine import RaySpec, connect
from harness.errors import HarnessError, MissingDependencyError, setting
from harness.io.cache import CacheCorrupt, EmbeddingEntry
from harness.records import Run
from harness.retrieval.index import DocIds, exact_top, merge_top

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

SEARCH_PATH = "ray-sharded"
DEFAULT_RETRIES = 2
QUERY_BLOCK = 1024


@dataclass(frozen=True)
class SearchShard:
    """A run of whole cache chunks searched by one Ray task.

    Attributes:
        number: The shard's number (0-based), for messages.
        chunks: The cache chunk indices it covers, in corpus order.
        rows: How many vectors each of those chunks holds (checked on the worker).
        start: The global row number (corpus order) of its first vector.
    """

    number: int
    chunks: tuple[int, ...]
    rows: tuple[int, ...]
    start: int

    def describe(self, total: int) -> str:
        """``shard 1 of 3 (cache chunks 2-3, documents 17-40)``."""
        last = self.start + sum(self.rows)
        return (
            f"shard {self.number} of {total} (cache chunks {self.chunks[0]}-{self.chunks[-1]}, "
            f"documents {self.start + 1}-{last})"
        )


def plan_shards(chunk_rows: Sequence[int], shards: int) -> list[SearchShard]:
    """Cut chunks (their row counts, in corpus order) into at most `shards` runs of about equal rows."""
    if not chunk_rows:
        return []
    shards = max(1, min(shards, len(chunk_rows)))
    total = sum(chunk_rows)
    plan: list[SearchShard] = []
    first, start, seen = 0, 0, 0
    for index, rows in enumerate(chunk_rows):
        seen += rows
        left_chunks, left_shards = len(chunk_rows) - index - 1, shards - len(plan) - 1
        # Close a shard at its share of the rows, or when the chunks left are just enough for the shards left.
        if index == len(chunk_rows) - 1 or (
            left_shards > 0 and (seen * shards >= total * (len(plan) + 1) or left_chunks == left_shards)
        ):
            plan.append(
                SearchShard(len(plan), tuple(range(first, index + 1)), tuple(chunk_rows[first : index + 1]), start)
            )
            first, start = index + 1, seen
    return plan


def query_blocks(n_queries: int, block: int = QUERY_BLOCK) -> list[tuple[int, int]]:
    """[start, stop) blocks of about `block` queries (the remainder joins the last block)."""
    block = max(1, block)
    starts = list(range(0, n_queries, block))
    if len(starts) > 1 and n_queries - starts[-1] < block:
        starts.pop()
    return [(start, stop) for start, stop in zip(starts, starts[1:] + [n_queries])]


def search_shard(
    entry: EmbeddingEntry,
    shard: SearchShard,
    queries: np.ndarray,
    depth: int,
    block: int = QUERY_BLOCK,
    before: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray, str]:
    """On a worker: the exact top `depth` of every query over one shard's chunks.

    Returns:
        (scores, global rows, this worker's host); each array is (queries, min(depth, shard rows)).

    Raises:
        HarnessError: The cache entry is not visible here, or a chunk is not what the driver read.
    """
    import numpy as np

    if before is not None:
        before(shard.number)  # a fault-injection hook (`lose_worker_once`)
    if not (entry.root / "manifest.json").is_file():
        raise HarnessError(
            f"worker on {socket.gethostname()} cannot see the cache entry {entry.root}: the cache "
            "directory must be on a filesystem every Ray node mounts (set --cache-dir to such a path)"
        )
    depth = min(depth, sum(shard.rows))
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    blocks = query_blocks(len(queries), block)
    best: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(blocks)
    shard_ids = DocIds()  # this shard's doc_ids, for the tie rule at the cut

    def doc_id(row: int) -> str:
        return shard_ids[row - shard.start]

    start = shard.start
    for index, expected in zip(shard.chunks, shard.rows):
        try:
            doc_ids, vectors = entry.read_chunk(index, mmap=True)
        except CacheCorrupt as exc:
            raise HarnessError(f"search shard {shard.number}: {exc}") from None
        if len(vectors) != expected or vectors.shape[1] != queries.shape[1]:
            raise HarnessError(
                f"chunk {index} of {entry.root} holds {vectors.shape} vectors, the driver read "
                f"{expected} of dimension {queries.shape[1]} (was the cache rewritten meanwhile?)"
            )
        vectors = np.ascontiguousarray(vectors)  # a C-ordered float32 map already: no copy
        shard_ids.extend(doc_ids)
        search = partial(_knn, vectors, start)
        for number, (low, high) in enumerate(blocks):
            part = exact_top(search, queries[low:high], expected, depth, doc_id, partial(_rows_of, vectors, start))
            best[number] = part if best[number] is None else merge_top([best[number], part], depth, doc_id)
        start += expected
    scores = np.concatenate([part[0] for part in best])
    rows = np.concatenate([part[1] for part in best])
    return scores, rows, socket.gethostname()


def _rows_of(vectors: np.ndarray, start: int, rows: np.ndarray) -> np.ndarray:
    """The vectors of global `rows` of a chunk whose first row is `start`."""
    return vectors[rows - start]


def _knn(vectors: np.ndarray, start: int, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """FAISS's exact inner-product top `k` over one chunk, rows numbered from `start`."""
    import faiss

    scores, rows = faiss.knn(queries, vectors, k, metric=faiss.METRIC_INNER_PRODUCT)
    return scores, rows + start


def lose_worker_once(marker: str, shard: int, number: int) -> None:
    """A fault-injection hook for `search_sharded`'s ``before`` (tests, drills): the first time shard `shard`
    is searched anywhere, kill the worker process searching it (as a lost node would); `marker` is a file
    path every worker sees, created to remember that it happened."""
    if number != shard:
        return
    try:
        Path(marker).open("x").close()
    except FileExistsError:
        return
    os._exit(1)  # no cleanup, no exception: to Ray, the worker is gone


def _lost(ray: Any, exc: BaseException) -> str:
    """Why a shard's task failed, in one line: the worker's own HarnessError when it raised one."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, HarnessError):
        return str(cause)
    if _is_lost(ray, exc):
        return f"its Ray worker was lost ({type(exc).__name__})"
    text = str(cause or exc).strip().splitlines()
    return text[-1][:300] if text else type(exc).__name__


def search_sharded(
    entry: EmbeddingEntry,
    chunk_rows: Sequence[int],
    doc_ids: Sequence[str],
    query_ids: Sequence[str],
    queries: np.ndarray,
    depth: int,
    spec: RaySpec = RaySpec(),
    shards: int | None = None,
    retries: int = DEFAULT_RETRIES,
    name: str = "run",
    before: Callable[[int], None] | None = None,
) -> tuple[Run, dict[str, Any]]:
    """Exact inner-product search over a complete cache entry, one Ray task per shard of its chunks.

    Args:
        entry: A complete corpus entry, on a filesystem every Ray node mounts.
        chunk_rows: Vectors per chunk of the entry, in corpus order (as the driver read them).
        doc_ids: Every doc_id in corpus order (global row → id).
        query_ids, queries: The queries and their vectors (float32, one row each).
        depth: Documents kept per query.
        spec: Which cluster (joined, or started and shut down here).
        shards: How many tasks; None: one per CPU of the cluster (never more than the chunks).
        retries: How often a shard lost with its worker is searched again, on another worker.
        name: The run's name.
        before: Called on the worker with the shard's number before it searches (fault injection).

    Returns:
        The run (as `VectorIndex.search` of a flat index over the same vectors returns it) and what
        the result records: ``search_path``, ``search_shards``, ``search_workers``.

    Raises:
        HarnessError: A shard failed, or was lost more than `retries` times (named, with the reason).
    """
    import numpy as np

    ray = _import_ray()
    depth = min(depth, len(doc_ids))
    if depth <= 0 or len(query_ids) == 0:
        return Run.from_scores({query_id: {} for query_id in query_ids}, name=name), {}
    started_ray = connect(spec)
    try:
        plan = plan_shards(chunk_rows, shards or max(1, int(ray.cluster_resources().get("CPU", 1))))
        task = ray.remote(num_cpus=1, max_retries=retries, retry_exceptions=False)(search_shard)
        shared = ray.put(np.ascontiguousarray(queries, dtype=np.float32))  # once in the object store, not per task
        pending = {task.remote(entry, shard, shared, depth, before=before): shard for shard in plan}
        best, hosts = None, set()
        while pending:  # merged as they come: the driver holds two tops, not one per shard
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            shard = pending.pop(ref)
            try:
                scores, rows, host = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - RayTaskError, WorkerCrashedError and their kin
                for other in pending:
                    ray.cancel(other, force=True)
                tries = f" on each of its {retries + 1} tries" if retries else " on its only try"
                raise HarnessError(
                    f"{shard.describe(len(plan))} failed during sharded search: {_lost(ray, exc)}"
                    f"{tries if _is_lost(ray, exc) else ''}; rerun, or search on the driver "
                    f"({setting('ray_search')} driver)"
                ) from None
            hosts.add(host)
            best = (scores, rows) if best is None else merge_top([best, (scores, rows)], depth, doc_ids.__getitem__)
    finally:
        if started_ray:
            ray.shutdown()
    results = {}
    for query_id, query_scores, query_rows in zip(query_ids, best[0].tolist(), best[1].tolist()):
        results[query_id] = {doc_ids[row]: score for row, score in zip(query_rows, query_scores)}
    logger.info("sharded search: %d shards on %s", len(plan), ", ".join(sorted(hosts)))
    return Run.adopt(results, name=name), {
        "search_path": SEARCH_PATH,
        "search_shards": len(plan),
        "search_workers": ", ".join(sorted(hosts)),
    }


def _is_lost(ray: Any, exc: BaseException) -> bool:
    return isinstance(
        exc, (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.OutOfMemoryError)
    )


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError("sharded search needs Ray: pip install 'beir-harness[ray]'") from exc
    return ray


class ShardedCorpus:
    """The flat index of the ray engine's sharded search: the doc_ids and chunk sizes of a cache entry, not
    its vectors (they stay in the cache; the workers read them). Fed chunk by chunk like `VectorIndex`.

    Args:
        dimension: The vectors' dimension.
        entry: The corpus entry the chunks come from (complete by the time `search` is called).
        spec: Which Ray cluster searches.
    """

    def __init__(self, dimension: int, entry: EmbeddingEntry, spec: RaySpec = RaySpec()):
        self.dimension, self.entry, self.spec = dimension, entry, spec
        self.doc_ids = DocIds()
        self.chunk_rows: list[int] = []
        self.shards = 0

    def __len__(self) -> int:
        return len(self.doc_ids)

    def add(self, doc_ids: Sequence[str], vectors: np.ndarray) -> None:
        """Note one chunk (its vectors are the entry's chunk of the same number)."""
        if vectors.shape != (len(doc_ids), self.dimension):
            raise ValueError(f"vectors of shape {vectors.shape} for {len(doc_ids)} ids of dimension {self.dimension}")
        self.doc_ids.extend(doc_ids)
        self.chunk_rows.append(len(doc_ids))

    def build(self) -> None:
        """Nothing to build: the cache entry is the index."""

    def search(self, query_ids: Sequence[str], vectors: np.ndarray, depth: int, name: str = "run") -> Run:
        """`search_sharded` over the entry: the run a flat `VectorIndex` over the same vectors returns."""
        run, facts = search_sharded(
            self.entry, self.chunk_rows, self.doc_ids, query_ids, vectors, depth, self.spec, name=name
        )
        self.shards = facts.get("search_shards", 0)
        return run

    def facts(self) -> dict[str, Any]:
        """As a flat index's (`RowIndex.facts`: bytes per document as FAISS would serialize it), and the search
        path with its shard count."""
        import faiss

        from harness.retrieval.index import serialized_size

        header = serialized_size(faiss.IndexFlatIP(self.dimension))  # an empty flat index: its header only
        size = header + 4 * self.dimension * len(self)
        return {"bytes_per_doc": size / max(1, len(self)), "search_path": SEARCH_PATH, "search_shards": self.shards}
