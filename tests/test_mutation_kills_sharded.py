"""The sharded search's cut: merging shards' tops, and cutting chunks and queries into shards and blocks
(mutation testing: docs/mutation-report.md).

Scores are drawn from a few values so that ties straddle the cut in most queries; the reference is a
brute-force ranking of every row (score descending, then doc id descending: trec_eval's order) written here.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.engines.ray_search import plan_shards, query_blocks
from harness.retrieval.index import merge_top


def doc_id(row):
    return f"d{row:03d}"


def ranked_by_hand(scores, rows, depth):
    pairs = sorted(zip(scores.tolist(), rows.tolist()), key=lambda p: (p[0], doc_id(p[1])), reverse=True)
    return pairs[:depth]


def parts_of(rng, n_queries, sizes, depth, values):
    """Disjoint row sets (one per shard), each with its own exact top `depth`, and the full score table."""
    total = sum(sizes)
    table = rng.choice(values, size=(n_queries, total)).astype(np.float32)
    parts, start = [], 0
    for size in sizes:
        rows = np.arange(start, start + size)
        keep = min(depth, size)
        top_scores = np.empty((n_queries, keep), np.float32)
        top_rows = np.empty((n_queries, keep), np.int64)
        for q in range(n_queries):
            pairs = ranked_by_hand(table[q, rows], rows, keep)
            order = rng.permutation(keep)  # rows in no particular order within a query, as exact_top gives them
            top_scores[q] = [pairs[i][0] for i in order]
            top_rows[q] = [pairs[i][1] for i in order]
        parts.append((top_scores, top_rows))
        start += size
    return parts, table


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("depth", [1, 3, 5, 8])
@pytest.mark.parametrize("sizes", [(4, 4), (2, 7, 3), (10, 1, 1, 5), (1, 1)])
def test_merged_shards_are_the_top_of_every_row(seed, depth, sizes):
    rng = np.random.default_rng(seed)
    parts, table = parts_of(rng, 5, sizes, depth, values=[0.5, 1.0, 1.5])
    scores, rows = merge_top(parts, depth, doc_id)
    keep = min(depth, sum(min(depth, s) for s in sizes))
    assert scores.shape == rows.shape == (5, keep)
    for q in range(5):
        want = ranked_by_hand(table[q], np.arange(table.shape[1]), keep)
        got = sorted(zip(scores[q].tolist(), rows[q].tolist()), key=lambda p: (p[0], doc_id(p[1])), reverse=True)
        assert got == want


@pytest.mark.parametrize("chunks", [[5], [3, 3, 3], [10, 1, 1, 1, 10], [1] * 7, [4, 8, 2, 6, 5]])
@pytest.mark.parametrize("shards", [1, 2, 3, 4, 8])
def test_shards_cover_every_chunk_once_in_order(chunks, shards):
    plan = plan_shards(chunks, shards)
    assert len(plan) == min(shards, len(chunks))
    assert [index for shard in plan for index in shard.chunks] == list(range(len(chunks)))
    start = 0
    for number, shard in enumerate(plan):
        assert shard.number == number and shard.chunks
        assert shard.rows == tuple(chunks[i] for i in shard.chunks)
        assert shard.start == start
        start += sum(shard.rows)
    assert start == sum(chunks)


def test_shards_share_the_rows_about_evenly():
    plan = plan_shards([1] * 12, 3)
    assert [sum(shard.rows) for shard in plan] == [4, 4, 4]
    plan = plan_shards([6, 1, 1, 1, 1, 1, 1], 2)
    assert [sum(shard.rows) for shard in plan] == [6, 6]
    assert plan_shards([], 4) == []


@pytest.mark.parametrize("n", [0, 1, 5, 9, 10, 11, 19, 20, 21, 35])
@pytest.mark.parametrize("block", [1, 4, 10])
def test_query_blocks_cover_the_queries_with_the_remainder_in_the_last(n, block):
    blocks = query_blocks(n, block)
    assert [i for low, high in blocks for i in range(low, high)] == list(range(n))
    if n:
        assert all(high - low == block for low, high in blocks[:-1])
        last = blocks[-1][1] - blocks[-1][0]
        assert last == n if n < block else block <= last < 2 * block
    assert query_blocks(3, 0) == [(0, 1), (1, 2), (2, 3)]


@pytest.mark.parametrize("chunks", [[3, 2, 0], [4, 0, 0], [0, 5, 0], [2, 2, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0]])
@pytest.mark.parametrize("shards", [1, 2, 3])
def test_empty_chunks_never_make_more_shards_than_asked(chunks, shards):
    # a chunk of no rows (plan_shards takes any row counts) joins a shard: the plan is still at most `shards`
    # shards, covering every chunk once, in order (checked by hand)
    plan = plan_shards(chunks, shards)
    assert 1 <= len(plan) <= min(shards, len(chunks))
    assert [index for shard in plan for index in shard.chunks] == list(range(len(chunks)))
    assert [shard.number for shard in plan] == list(range(len(plan)))
