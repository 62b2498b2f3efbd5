"""The exact scan's work, counted: tiles multiplied, rows read, scores admitted past each query's running cut.

`harness.retrieval.index.TopScan` is what both flat searches run (in memory and streamed from the cache's chunks),
and BENCHMARKS.md's "Exact search at the chip's pace" rests on two claims checked here by counting, not timing:
the scan admits only the scores above each query's running cut (a brute-force loop over the same tiles says how
many that is, ties at the cut included: small integer vectors, whose float32 products are exact), and a streamed
search over chunks does the in-memory search's work (the same tiles, rows and merges) and returns the same run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import harness.retrieval.streamed as streamed
from harness.retrieval.index import RESCORE_BYTES, SCAN_TILE, ScanWork, VectorIndex, rescore_groups, scan_top
from harness.retrieval.streamed import StreamedIndex, rows_from_chunks


def _integer_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-2, 3, size=(n, dim)).astype(np.float32)  # many tied scores


def _brute_force_scan(queries, blocks, k, query_block):
    """Tile by tile as documented: a tile's scores strictly above the query's k-th best so far are admitted."""
    tiles = merged = admitted = 0
    tops = [[] for _ in queries]
    for block in blocks:
        for begin in range(0, len(block), SCAN_TILE):
            tile = block[begin : begin + SCAN_TILE].astype(np.float64)
            tiles += math.ceil(len(queries) / query_block)
            for q, query in enumerate(queries.astype(np.float64)):
                cut = tops[q][-k] if len(tops[q]) >= k else -math.inf
                above = [float(s) for s in tile @ query if s > cut]
                merged += bool(above)
                admitted += len(above)
                tops[q] = sorted(tops[q] + above)[-k:]
    rows = sum(len(block) for block in blocks)
    return ScanWork(tiles, rows, merged, admitted), [sorted(top, reverse=True) for top in tops]


def _chunks(vectors: np.ndarray, size: int) -> list[np.ndarray]:
    return [vectors[start : start + size] for start in range(0, len(vectors), size)]


@pytest.mark.parametrize("chunk", [None, 700, 2 * SCAN_TILE, 1500])
@pytest.mark.parametrize("query_block, k", [(1024, 5), (3, 5), (4, 1), (2, 40)])
def test_the_scan_admits_only_scores_above_each_running_cut(chunk, query_block, k):
    docs, queries = _integer_vectors(2500, 8, 1), _integer_vectors(7, 8, 2)
    blocks = [docs] if chunk is None else _chunks(docs, chunk)
    work = ScanWork()
    scores, rows = scan_top(queries, blocks, k, query_block=query_block, work=work)
    want_work, want_tops = _brute_force_scan(queries, blocks, k, query_block)
    assert work == want_work
    assert scores.tolist() == want_tops  # the k best scores, best first
    exact = queries.astype(np.float64) @ docs.astype(np.float64).T
    for q in range(len(queries)):  # each row kept holds the score kept beside it
        assert exact[q, rows[q]].tolist() == scores[q].tolist()


def test_fewer_documents_than_k_pad_with_minus_one():
    docs, queries = _integer_vectors(3, 4, 5), _integer_vectors(2, 4, 6)
    work = ScanWork()
    scores, rows = scan_top(queries, [docs[:2], docs[2:]], 5, work=work)
    assert (rows[:, 3:] == -1).all() and np.isneginf(scores[:, 3:]).all()
    assert sorted(rows[0, :3].tolist()) == [0, 1, 2]
    assert work == ScanWork(tiles=2, rows=3, merged=4, admitted=6)


@pytest.fixture
def nothing_resident(monkeypatch):
    monkeypatch.setattr(streamed, "resident_bytes", lambda: 0)


def _unit(n: int, dim: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.mark.parametrize("chunk", [SCAN_TILE, 2 * SCAN_TILE, 3000])
def test_a_streamed_search_does_the_in_memory_search_s_work_and_returns_its_run(nothing_resident, chunk):
    docs, queries = _unit(5000, 16, 3), _unit(30, 16, 4)
    doc_ids = [f"d{row:05d}" for row in range(len(docs))]
    query_ids = [f"q{i}" for i in range(len(queries))]
    memory = VectorIndex(16)
    memory.add(doc_ids, docs)
    in_memory = memory.search(query_ids, queries, 10)
    chunks = _chunks(docs, chunk)
    reads, read_back = [], []

    def load(i):
        reads.append(i)
        return chunks[i]

    def map_back(i):
        read_back.append(i)
        return chunks[i]

    searcher = StreamedIndex(
        lambda: (load(i) for i in range(len(chunks))),
        rows_from_chunks(map_back, [len(c) for c in chunks]),
        doc_ids,
        16,
        budget=1 << 40,
        chunk_rows=chunk,
    )
    run = searcher.search(query_ids, queries, 10)
    for query_id in query_ids:
        assert [(s.doc_id, s.score) for s in run[query_id]] == [(s.doc_id, s.score) for s in in_memory[query_id]]
    assert reads == list(range(len(chunks))) * searcher.passes  # each chunk read once a pass
    assert searcher.work.rows == len(docs) * searcher.passes
    # the 30 queries' candidates (a few KiB) are read back in one group: each chunk mapped once, not once a query
    assert sorted(read_back) == sorted(set(read_back)) and len(read_back) <= len(chunks)
    if chunk % SCAN_TILE == 0:  # chunks cut on tile bounds: the very same tiles, merges and admissions
        assert searcher.work == memory.work
    else:  # a chunk's last tile is short, so the tiles differ; the rows read do not
        assert searcher.work.rows == memory.work.rows
        assert searcher.work.tiles == searcher.passes * sum(math.ceil(len(c) / SCAN_TILE) for c in chunks)


def _groups_by_hand(counts, dimension, budget):
    """Consecutive queries, a new group whenever adding the next query's rows would pass the budget."""
    groups, current, held = [], [], 0
    for i, count in enumerate(counts):
        if current and held + count * dimension * 4 > budget:
            groups.append(current)
            current, held = [], 0
        current.append(i)
        held += count * dimension * 4
    return groups + ([current] if current else [])


@pytest.mark.parametrize(
    "counts, budget",
    [([], 64), ([3, 3, 3], 24), ([3, 3, 3], 23), ([3, 3, 3], 36), ([10], 4), ([1, 9, 1, 1, 2], 40), ([2, 2], 1 << 30)],
)
def test_candidates_are_read_back_in_groups_the_budget_holds(counts, budget):
    groups = rescore_groups(counts, 1, budget)
    assert [list(group) for group in groups] == _groups_by_hand(counts, 1, budget)
    assert [i for group in groups for i in group] == list(range(len(counts)))  # every query once, in order


def test_the_default_read_back_holds_eight_mib():
    per_query = 113 * 384 * 4  # depth 100's candidates at dimension 384
    groups = rescore_groups([113] * 1000, 384)
    assert RESCORE_BYTES == 8 << 20 and len(groups[0]) == (8 << 20) // per_query
    assert len(groups) == math.ceil(1000 / ((8 << 20) // per_query))
