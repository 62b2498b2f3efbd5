"""Exact search in bounded memory: the corpus vectors streamed from the embedding cache, block by block.

A flat index holds every corpus vector (n × dim × 4 bytes: 13.6 GB for MS MARCO at 384 dimensions,
27 GB at 768). When that does not fit the memory budget, `StreamedIndex` searches the cache's chunk
files instead: each chunk is memory-mapped (and unmapped after it, so its pages leave this process),
and scanned by the same kernel as the in-memory flat search (`harness.retrieval.index.TopScan`: numpy's sgemm
tile by tile, each query's running cut carried from chunk to chunk, so a chunk costs its GEMM and no more).
The candidates are then rescored and cut by the same rule as the
in-memory flat search (`harness.retrieval.index.exact_top`: float64 scores rounded to float32, equal
scores at the cut by doc_id descending), reading their vectors back from the chunks, so both paths
return the same run.

`search_blocks` and `merge_topk` are the reusable parts: any holder of some of the vectors (a Ray
worker with its shards) can search its blocks and hand its partial top-k to `merge_topk`.

Memory: the budget counts the whole process (its resident set when the search is planned), the
running top-k of every query, the run being built, two mapped chunks (the next is mapped before the
last is released) and the working set of one query block; `plan_search` picks the largest query
block that fits and refuses a budget below the minimum.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.errors import HarnessError, setting
from harness.metering import proc_bytes
from harness.presentation import parse_size, size_text  # noqa: F401 - parse_size: re-exported (the budget)
from harness.records import Run

if TYPE_CHECKING:
    import numpy as np

    from harness.retrieval.index import ScanWork

logger = logging.getLogger(__name__)

DEFAULT_BUDGET_FRACTION = 0.5  # of MemAvailable when no budget is given: room for the OS and other processes
MIN_QUERY_BLOCK = 20  # FAISS's sgemm threshold: smaller blocks take another kernel (other float rounding)
RUN_BYTES_PER_HIT = 160  # a scored document in the Run's dicts: key str, float, dict slot
SLACK_BYTES = 48 << 20  # allocator fragmentation, numpy temporaries, Python objects of the merge
# (and the candidates read back for rescoring: `harness.retrieval.index.RESCORE_BYTES`)


class MemoryBudgetError(HarnessError):
    """The memory budget cannot hold even one query block against one chunk."""

    usage = True  # a command-line mistake found late: exit code 2, as for a bad option


def default_budget() -> int | None:
    """The whole process's budget when none is given: what it holds now plus half of the memory available now
    (Linux's MemAvailable, which does not count this process; else half of physical memory), or None.

    So the default compares a search's own needs with the memory free, not the process's size: a large process
    (a test runner, a notebook) still searches a small corpus in memory."""
    available = proc_bytes("/proc/meminfo", "MemAvailable")
    if available is None:
        try:
            available = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    return resident_bytes() + int(available * DEFAULT_BUDGET_FRACTION)


def resident_bytes() -> int:
    """This process's resident set now (VmRSS), or its peak where /proc is missing."""
    now = proc_bytes("/proc/self/status", "VmRSS")
    if now is not None:
        return now
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def in_memory_bytes(n_docs: int, dimension: int, n_queries: int, depth: int, chunk_rows: int = 16384) -> int:
    """What the in-memory flat search adds to the process: the vectors (their storage reserved at once,
    `harness.retrieval.index.VectorIndex.reserve`), the doc ids, one chunk being encoded, the results, the run."""
    return (
        n_docs * (dimension * 4 + 24)
        + 2 * chunk_rows * dimension * 4
        + n_queries * (depth + 1) * 12
        + n_queries * depth * RUN_BYTES_PER_HIT
    )


@dataclass(frozen=True)
class SearchPlan:
    """How a streamed search fits its budget: the query block, and the bytes it counted."""

    budget: int
    query_block: int
    minimum: int


def plan_search(
    budget: int, base: int, n_queries: int, dimension: int, depth: int, chunk_rows: int, given: bool = True
) -> SearchPlan:
    """The largest query block whose working set, with the mapped chunks, fits `budget`.

    Args:
        budget: Bytes the whole process may hold.
        given: The budget is the caller's setting (named in the error), else the default (`default_budget`).
        base: Bytes held already (the resident set: interpreter, libraries, doc ids, query vectors).
        n_queries, dimension, depth: The search.
        chunk_rows: Rows of the largest chunk (mapped whole while it is searched).

    Raises:
        MemoryBudgetError: `budget` is below the minimum (named in the message).
    """
    k = depth + 1  # one more than the depth shows a tie across the cut (`exact_top`)
    # Two chunks mapped: the next one is mapped before the last one's map is released.
    fixed = (
        base + n_queries * k * 12 + n_queries * depth * RUN_BYTES_PER_HIT + 2 * chunk_rows * dimension * 4 + SLACK_BYTES
    )
    # FAISS's scores and rows, the concatenation with the running top-k, its argsort, the kept part;
    # and the block of the sgemm's score matrix (`harness.retrieval.index.TopScan` multiplies 1,024 documents at once).
    per_query = k * 64 + min(chunk_rows, 1024) * 4 + dimension * 4
    smallest = min(n_queries, MIN_QUERY_BLOCK) or 1
    minimum = fixed + smallest * per_query
    if budget < minimum:
        what = (
            f"{setting('memory_budget')} {size_text(budget, places=2)}"
            if given
            else f"the memory this process may use ({size_text(budget, places=2)}: its size now and half the memory available)"
        )
        raise MemoryBudgetError(
            f"{what} is too small for a streamed search: one block of "
            f"{smallest} queries against one {chunk_rows}-document chunk needs at least {size_text(minimum, places=2)} "
            f"({size_text(base, places=2)} of it held already by this process); "
            + (
                f"raise it to {size_text(minimum, places=2)} or more"
                if given
                else f"free memory, or give {setting('memory_budget')} of {size_text(minimum, places=2)} or more"
            )
        )
    block = min(n_queries, max(smallest, (budget - fixed) // per_query))
    return SearchPlan(budget, int(block), minimum)


def query_blocks(n_queries: int, block: int) -> list[slice]:
    """Slices of at most `block` queries (a tail under `MIN_QUERY_BLOCK` joins the block before it, so that every
    block takes FAISS's sgemm kernel as one search of all queries does)."""
    block = max(1, block)
    starts = list(range(0, n_queries, block))
    if len(starts) > 1 and n_queries - starts[-1] < MIN_QUERY_BLOCK:
        starts.pop()
    return [slice(start, end) for start, end in zip(starts, starts[1:] + [n_queries])]


def merge_topk(partials: Iterable[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best (scores, rows) per query over partial results (each (n_queries, k_i) arrays, rows global).

    The scores kept are the exact top-k scores; which of several documents tied at the k-th score are
    kept is not decided here (the earlier partial's first, stably) — `harness.retrieval.index.exact_top`
    rescores the candidates and settles the cut. Rows of -1 (FAISS's padding) sort last.
    """
    import numpy as np

    parts = list(partials)
    scores = np.hstack([part[0] for part in parts])
    rows = np.hstack([part[1] for part in parts])
    scores = np.where(rows < 0, -np.inf, scores).astype(np.float32, copy=False)
    keep = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, keep, axis=1), np.take_along_axis(rows, keep, axis=1)


def search_blocks(
    query_vectors: np.ndarray,
    blocks: Iterable[np.ndarray],
    k: int,
    query_block: int = 1024,
    start: int = 0,
    work: ScanWork | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k of every query over document blocks met one at a time (`TopScan`: the running cut of
    each query carries from block to block, so many chunks cost what one array of the same vectors costs).

    Args:
        query_vectors: float32 (n_queries, dim).
        blocks: float32 (rows, dim) arrays (memory maps welcome), in row order; each is searched
            against every query block, then released.
        k: Results per query.
        query_block: Queries searched together against a block.
        start: The global row of the first block's first vector.
        work: Where to count the work done (`harness.retrieval.index.ScanWork`).

    Returns:
        (scores, rows): (n_queries, k) float32 and int64, rows global, best first (-1 padding when
        the blocks hold fewer than k vectors).
    """
    from harness.retrieval.index import TopScan

    scan = TopScan(query_vectors, k, query_block, work)
    scan.seen = start
    for block in blocks:
        scan.add(block)  # a view of a mapped chunk: read once, never copied whole
    return scan.result()


def rows_from_chunks(load: Callable[[int], np.ndarray], lengths: Sequence[int]) -> Callable[[np.ndarray], np.ndarray]:
    """Global rows → their vectors, read from the chunks that hold them (`load(i)`: chunk i, memory-mapped; each map is
    released after its rows are copied, so reading candidates back holds only them)."""
    import numpy as np

    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    def rows_of(rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        chunk_of = np.searchsorted(starts, rows, side="right") - 1
        out = None
        for chunk in np.unique(chunk_of):
            picked = chunk_of == chunk
            vectors = load(int(chunk))
            if out is None:
                out = np.empty((len(rows), vectors.shape[1]), dtype=np.float32)
            out[picked] = vectors[rows[picked] - starts[chunk]]
            del vectors
        return out if out is not None else np.empty((0, 0), dtype=np.float32)

    return rows_of


def reblock(chunks: Iterable[np.ndarray], rows: int | None) -> Iterator[np.ndarray]:
    """The chunks cut into blocks of at most `rows` rows (views; None keeps the chunks whole)."""
    for chunk in chunks:
        if rows is None:
            yield chunk
            continue
        for begin in range(0, len(chunk), rows):
            yield chunk[begin : begin + rows]


class StreamedIndex:
    """An exact inner-product index whose vectors stay on disk, searched chunk by chunk (`search_blocks`).

    Args:
        chunks: Called once per pass over the corpus; yields its chunks' vectors in row order
            (`harness.io.cache.EmbeddingEntry.chunks` with ``mmap=True``, verified against the manifest).
        rows_of: Global rows (int64 array) → their float32 vectors, for rescoring the candidates
            (`rows_from_chunks`).
        doc_ids: The doc_ids in row order.
        dimension: The vectors' dimension.
        budget: Bytes the process may hold; None: `default_budget`.
        strict: Refuse a budget below the minimum (one given by the user); otherwise (the default budget)
            search at the minimum, with a warning.
        chunk_rows: Rows of the largest chunk.
        doc_block: Rows searched at once inside a chunk (None: the whole chunk); for tests.
        query_block: Fix the query block instead of planning it from the budget; for tests.
    """

    spec_kind = "flat"
    nlist = None

    def __init__(
        self,
        chunks: Callable[[], Iterable[np.ndarray]],
        rows_of: Callable[[np.ndarray], np.ndarray],
        doc_ids: Sequence[str],
        dimension: int,
        budget: int | None,
        chunk_rows: int,
        doc_block: int | None = None,
        query_block: int | None = None,
        strict: bool = True,
    ):
        self._chunks, self._rows_of, self._doc_ids, self.dimension = chunks, rows_of, doc_ids, dimension
        self.budget, self.chunk_rows, self.strict = budget, chunk_rows, strict
        self.doc_block, self.query_block = doc_block, query_block
        self.plan: SearchPlan | None = None
        self.passes = 0  # passes over the chunks (a deeper one only for queries whose cut ties: `exact_top`)
        self.work: ScanWork | None = None  # what the passes scanned (`harness.retrieval.index.ScanWork`)

    def __len__(self) -> int:
        return len(self._doc_ids)

    @property
    def doc_ids(self) -> Sequence[str]:
        return self._doc_ids

    def build(self) -> None:
        """Nothing to build: the vectors are the cache's."""

    def facts(self) -> dict[str, float]:
        """The bytes per document a flat index of these vectors would serialize to (as `VectorIndex.facts`)."""
        import faiss

        from harness.retrieval.index import serialized_size

        header = serialized_size(faiss.IndexFlatIP(self.dimension))
        return {"bytes_per_doc": (header + len(self) * self.dimension * 4) / max(1, len(self))}

    def _search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        block = self.query_block
        if block is None:
            budget = self.budget if self.budget is not None else default_budget()
            base = resident_bytes()
            try:
                plan = plan_search(budget, base, len(queries), self.dimension, k - 1, self.chunk_rows, self.strict)
            except MemoryBudgetError as exc:
                # A deeper pass (`exact_top`: ties across the cut) holds k results of a few queries; the budget
                # was checked on the first pass, so the smallest blocks go on rather than lose the search.
                if self.strict and self.plan is None:
                    raise
                logger.warning("%s; searching %d queries in the smallest blocks", exc, len(queries))
                plan = SearchPlan(budget, min(len(queries), MIN_QUERY_BLOCK), 0)
            self.plan = self.plan or plan  # the first pass's plan: what the search was sized by
            block = plan.query_block
            logger.info("streamed exact search: %d queries a block, budget %s", block, size_text(budget, places=2))
        self.passes += 1
        return search_blocks(queries, reblock(self._chunks(), self.doc_block), k, block, work=self.work)

    def search(self, query_ids: Sequence[str], vectors: np.ndarray, depth: int, name: str = "run") -> Run:
        """The `depth` best documents of each query, exactly as `harness.retrieval.index.VectorIndex.search`
        ranks them for a flat index."""
        import numpy as np

        from harness.retrieval.index import ScanWork, exact_top

        depth = min(depth, len(self))
        if depth <= 0 or len(query_ids) == 0:
            return Run.from_scores({query_id: {} for query_id in query_ids}, name=name)
        queries = np.ascontiguousarray(vectors, dtype=np.float32)
        self.plan, self.passes, self.work = None, 0, ScanWork()
        scores, rows = exact_top(self._search, queries, len(self), depth, self._doc_ids.__getitem__, self._rows_of)
        doc_ids = self._doc_ids
        return Run.adopt(
            {
                query_id: {doc_ids[row]: score for row, score in zip(query_rows, query_scores)}
                for query_id, query_scores, query_rows in zip(query_ids, scores.tolist(), rows.tolist())
            },
            name=name,
        )
