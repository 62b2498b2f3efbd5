"""The exact top-k that both flat searches share (in memory, `harness.retrieval.index.faiss_index.VectorIndex`, and
streamed from the cache, `harness.retrieval.streamed`), and the sharded one (`harness.engines.ray_search`).

`TopScan` is the kernel: document tiles multiplied with blocks of queries (numpy's sgemm), only the scores above each
query's running cut merged into its top. `exact_top` makes the top the same bits wherever it runs: FAISS (or the
scan) finds the candidates, their scores are recomputed in float64 and rounded to float32, and at the cut the greater
doc_ids are kept among equal scores (trec_eval's order). `merge_top` merges the tops of disjoint sets of rows by the
same rule; `rescore_groups` groups the candidates read back for rescoring.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

SCAN_TILE = 1024  # documents multiplied at once (what `harness.retrieval.streamed.plan_search` counts)
SCAN_QUERIES = 1024  # queries multiplied at once, at most
MERGE_BYTES = 4 << 20  # the most the merge of one tile's candidates holds at once


@dataclass
class ScanWork:
    """What a `TopScan` did: GEMM tiles multiplied, document rows scanned (each once per pass), the (query, tile)
    pairs that had a score above the query's running cut, and the candidates admitted past it."""

    tiles: int = 0
    rows: int = 0
    merged: int = 0
    admitted: int = 0


class TopScan:
    """The running float32 top-k of every query over document blocks met one at a time, in row order.

    Each tile of a block is multiplied with a block of queries (numpy's sgemm), and only the scores above a query's
    running cut (its k-th best score so far, carried from block to block) are merged into its top-k: after the first
    tiles few are, so the cost is the GEMM's, whether the documents come as one array or as many chunks.
    Which of several documents tied at the k-th score are kept is not decided here
    (`exact_top` rescores the candidates and settles the cut).
    """

    def __init__(self, queries: np.ndarray, k: int, query_block: int = SCAN_QUERIES, work: ScanWork | None = None):
        import numpy as np

        self.queries = np.ascontiguousarray(queries, dtype=np.float32)
        self.k, self.query_block, self.seen = k, max(1, min(query_block, SCAN_QUERIES)), 0
        self.work = work if work is not None else ScanWork()
        self.scores = np.full((len(self.queries), k), -np.inf, dtype=np.float32)
        self.rows = np.full((len(self.queries), k), -1, dtype=np.int64)
        self.cut = np.full(len(self.queries), -np.inf, dtype=np.float32)

    def add(self, block: np.ndarray) -> None:
        """Scan the next `block` of document vectors (float32 (rows, dim); a memory map is read once)."""
        import numpy as np

        block = np.asarray(block, dtype=np.float32)
        for begin in range(0, len(block), SCAN_TILE):
            tile = np.ascontiguousarray(block[begin : begin + SCAN_TILE])
            for first in range(0, len(self.queries), self.query_block):
                scores = self.queries[first : first + self.query_block] @ tile.T
                self._merge(first, scores, self.seen + begin)
                self.work.tiles += 1
        self.work.rows += len(block)
        self.seen += len(block)

    def _merge(self, first: int, scores: np.ndarray, first_row: int) -> None:
        """Merge the scores of one tile above the running cuts of queries `first`, `first` + 1, ... into their tops
        (the queries in groups, so that what the merge holds stays under `MERGE_BYTES`)."""
        import numpy as np

        above = scores > self.cut[first : first + len(scores), None]
        if not above.any():
            return
        tile = scores.shape[1]
        group = max(1, MERGE_BYTES // ((self.k + tile) * 20))
        for low in range(0, len(scores), group):
            flat = np.flatnonzero(above[low : low + group])
            if flat.size:
                self._admit(first + low, scores[low : low + group], flat, first_row)

    def _admit(self, first: int, scores: np.ndarray, flat: np.ndarray, first_row: int) -> None:
        """Merge the entries `flat` (flat positions in `scores`, ascending) into the tops of queries `first`..."""
        import numpy as np

        local, column = np.divmod(flat, scores.shape[1])
        counts = np.bincount(local)
        hit = np.flatnonzero(counts)
        counts = counts[hit]
        slot = np.repeat(np.arange(len(hit)), counts)
        rank = np.arange(len(flat)) - np.repeat(np.cumsum(counts) - counts, counts)
        self.work.merged += len(hit)
        self.work.admitted += len(flat)
        k, queries = self.k, hit + first
        all_scores = np.full((len(hit), k + int(counts.max())), -np.inf, dtype=np.float32)
        all_rows = np.full(all_scores.shape, -1, dtype=np.int64)
        all_scores[:, :k], all_rows[:, :k] = self.scores[queries], self.rows[queries]
        all_scores[slot, k + rank] = scores[local, column]
        all_rows[slot, k + rank] = first_row + column
        keep = np.argpartition(-all_scores, k - 1, axis=1)[:, :k]
        self.scores[queries] = np.take_along_axis(all_scores, keep, axis=1)
        self.rows[queries] = np.take_along_axis(all_rows, keep, axis=1)
        self.cut[queries] = self.scores[queries].min(axis=1)

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows), (queries, k), best first; -1 rows (score -inf) when fewer than k documents were met."""
        import numpy as np

        order = np.argsort(-self.scores, axis=1, kind="stable")
        return np.take_along_axis(self.scores, order, axis=1), np.take_along_axis(self.rows, order, axis=1)


def scan_top(
    queries: np.ndarray, blocks: Iterable[np.ndarray], k: int, query_block: int = SCAN_QUERIES, work=None
) -> tuple[np.ndarray, np.ndarray]:
    """`TopScan` of `queries` over `blocks`: (scores, rows) of the float32 top-`k`, best first, rows global."""
    scan = TopScan(queries, k, query_block, work)
    for block in blocks:
        scan.add(block)
    return scan.result()


# FAISS finds the candidates; a document it scores within this fraction of the cut (relative to the cut's and the
# top score's size) may still belong in the top once scores are recomputed (its float32 scores differ from the
# exact ones by ~1e-7 on unit vectors, and by kernel and thread count), so it is a candidate.
RESCORE_MARGIN = 1e-5
RESCORE_BYTES = 8 << 20  # candidate vectors read back at once for rescoring (within streamed's SLACK_BYTES)


def _ranked(scores, rows, doc_id, depth: int) -> tuple[list[float], list[int]]:
    """One query's candidates in the run's order (score, then doc_id, descending), the first `depth`."""
    import numpy as np

    order = np.argsort(-scores, kind="stable")
    if len(order) <= depth or scores[order[depth]] != scores[order[depth - 1]]:
        return scores[order[:depth]].tolist(), rows[order[:depth]].tolist()  # the cut falls between two scores
    best = sorted(zip(scores.tolist(), (doc_id(row) for row in rows.tolist()), rows.tolist()), reverse=True)[:depth]
    return [score for score, _, _ in best], [row for _, _, row in best]


def exact_top(search, queries: np.ndarray, n: int, depth: int, doc_id, vectors) -> tuple[np.ndarray, np.ndarray]:
    """The exact top `depth` of every query over `n` vectors, the same bits wherever it runs.

    FAISS finds the candidates: every document it scores above the cut or within `RESCORE_MARGIN` of it
    (searching deeper until none is left out). Their scores are then recomputed one way — float64 dot
    products rounded to float32 — since FAISS's own float32 scores change in the last bits with its
    kernels, the thread count and the shape of the search (a shard vs the whole corpus). At the cut,
    among equal scores, the greater doc_ids are kept (the run's own tie order, trec_eval's), so the
    result is the first `depth` of the complete ranking whatever the order of the vectors (FAISS alone
    keeps whichever tie its heap met first).

    Args:
        search: FAISS search over the vectors, ``(queries, k) -> (scores, rows)``.
        queries: float32 query vectors.
        n: How many vectors `search` searches.
        depth: Documents kept per query.
        doc_id: row → doc_id (asked only where equal scores straddle the cut).
        vectors: rows (an int64 array) → their float32 vectors.

    Returns:
        (scores, rows), (queries, min(depth, n)); rows in no particular order within a query.
    """
    import numpy as np

    depth = min(depth, n)
    k = min(depth + 1 + depth // 8, n)  # a little deeper than kept: few queries need a second search
    scores, rows = search(queries, k)
    top_scores = np.empty((len(queries), depth), dtype=np.float32)
    top_rows = np.empty((len(queries), depth), dtype=np.int64)
    floors = scores[:, depth - 1] - RESCORE_MARGIN * (np.abs(scores[:, depth - 1]) + np.abs(scores[:, 0]))
    found = list(zip(scores, rows))
    wide, deeper = k, [i for i in range(len(queries)) if k < n and scores[i, -1] >= floors[i]]
    while deeper:  # a candidate may lie deeper than FAISS returned: those queries again, together (one pass of a
        wide = min(2 * wide, n)  # streamed search, `harness.retrieval.streamed`, for all of them)
        wider_scores, wider_rows = search(np.ascontiguousarray(queries[deeper]), wide)
        for position, i in enumerate(deeper):
            found[i] = (wider_scores[position], wider_rows[position])
        deeper = [i for position, i in enumerate(deeper) if wide < n and wider_scores[position, -1] >= floors[i]]
    candidates = [found_rows[found_scores >= floors[i]] for i, (found_scores, found_rows) in enumerate(found)]
    for group in rescore_groups([len(rows) for rows in candidates], queries.shape[1]):
        read = vectors(np.concatenate([candidates[i] for i in group]))  # one read-back per group, not per query
        start = 0
        for i in group:
            part, start = read[start : start + len(candidates[i])], start + len(candidates[i])
            exact = (np.asarray(part, dtype=np.float64) @ queries[i].astype(np.float64)).astype(np.float32)
            top_scores[i], top_rows[i] = _ranked(exact, candidates[i], doc_id, depth)
    return top_scores, top_rows


def rescore_groups(counts: Sequence[int], dimension: int, budget: int = RESCORE_BYTES) -> list[range]:
    """Consecutive queries whose candidates (`counts` rows each, float32 of `dimension`) are read back together:
    as many as `budget` bytes hold, at least one. A streamed search maps every chunk once per read-back, so reading
    each query's candidates alone cost a pass of chunk maps per query (BENCHMARKS.md, "Exact search at the chip's
    pace")."""
    groups, first, held = [], 0, 0
    for i, count in enumerate(counts):
        size = count * dimension * 4
        if i > first and held + size > budget:
            groups.append(range(first, i))
            first, held = i, 0
        held += size
    if first < len(counts):
        groups.append(range(first, len(counts)))
    return groups


def merge_top(parts: Sequence[tuple[np.ndarray, np.ndarray]], depth: int, doc_id) -> tuple[np.ndarray, np.ndarray]:
    """Merge per-query tops over disjoint sets of rows, each `exact_top` of its set, into the top `depth` of
    their union by the same rule (score descending, then doc_id descending at the cut)."""
    import numpy as np

    scores = np.concatenate([part[0] for part in parts], axis=1)
    rows = np.concatenate([part[1] for part in parts], axis=1)
    order = np.argsort(-scores, axis=1, kind="stable")
    scores, rows = np.take_along_axis(scores, order, axis=1), np.take_along_axis(rows, order, axis=1)
    if scores.shape[1] <= depth:
        return scores, rows
    tied = np.flatnonzero(scores[:, depth] == scores[:, depth - 1])
    scores, rows = scores[:, :depth].copy(), rows[:, :depth].copy()
    for i in tied:  # every candidate of this query, ranked by the full rule
        all_scores = np.concatenate([part[0][i] for part in parts])
        all_rows = np.concatenate([part[1][i] for part in parts])
        scores[i], rows[i] = _ranked(all_scores, all_rows, doc_id, depth)
    return scores, rows
