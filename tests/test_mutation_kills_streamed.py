"""The streamed search's deeper pass keeps the budget its first pass was sized by (mutation testing:
docs/mutation-report.md).

Documents whose scores tie across the cut make `exact_top` search deeper; the deeper pass holds more results
a query, so a budget that just fits the first pass is below the deeper pass's minimum. A user's (strict)
budget is checked on the first pass only: the search must go on and return the exact top, which the
reference computes by brute force (float64 dot products, ties to the greater doc id as trec_eval orders them).
"""

from __future__ import annotations

import numpy as np
import pytest

import harness.retrieval.streamed as streamed
from harness.retrieval.streamed import MemoryBudgetError, StreamedIndex, plan_search

N_DOCS, DIM, DEPTH, CHUNK = 64, 8, 5, 16


def corpus():
    rng = np.random.default_rng(3)
    docs = np.repeat(rng.standard_normal((1, DIM)).astype(np.float32), N_DOCS, axis=0)  # every score ties
    docs[:3] *= 2  # three clear winners above the tie
    queries = np.abs(rng.standard_normal((4, DIM)).astype(np.float32)) * np.sign(docs[0])
    return [f"d{i:02d}" for i in range(N_DOCS)], docs, queries


def brute_force(doc_ids, docs, queries, depth):
    out = []
    for query in queries:
        scores = [float(np.float32(np.dot(query.astype(np.float64), doc.astype(np.float64)))) for doc in docs]
        ranked = sorted(range(len(docs)), key=lambda r: (scores[r], doc_ids[r]), reverse=True)[:depth]
        out.append({doc_ids[r]: scores[r] for r in ranked})
    return out


def index(doc_ids, docs, budget, strict=True):
    chunks = [docs[start : start + CHUNK] for start in range(0, len(docs), CHUNK)]
    return StreamedIndex(lambda: iter(chunks), docs.__getitem__, doc_ids, DIM, budget, CHUNK, strict=strict)


def first_pass_minimum(n_queries):
    k = DEPTH + 1  # exact_top's first search: depth + 1 + depth // 8 results
    return plan_search(1 << 50, 0, n_queries, DIM, k - 1, CHUNK).minimum


@pytest.fixture(autouse=True)
def nothing_resident(monkeypatch):
    monkeypatch.setattr(streamed, "resident_bytes", lambda: 0)


def test_the_ties_do_need_a_deeper_pass_that_the_first_budget_cannot_hold():
    doc_ids, docs, queries = corpus()
    budget = first_pass_minimum(len(queries))
    with pytest.raises(MemoryBudgetError):
        plan_search(budget, 0, len(queries), DIM, 2 * (DEPTH + 1) - 1, CHUNK)
    calls = []
    searcher = index(doc_ids, docs, None)
    searcher.query_block = len(queries)
    original = searcher._search
    searcher._search = lambda q, k: calls.append(k) or original(q, k)
    searcher.search([f"q{i}" for i in range(len(queries))], queries, DEPTH)
    assert calls[0] == DEPTH + 1 and len(calls) > 1 and calls[-1] == N_DOCS
    assert searcher.passes == len(calls)  # each pass over the chunks counted once


def test_a_strict_budget_that_fits_the_first_pass_carries_the_deeper_passes():
    doc_ids, docs, queries = corpus()
    budget = first_pass_minimum(len(queries))
    searcher = index(doc_ids, docs, budget, strict=True)
    run = searcher.search([f"q{i}" for i in range(len(queries))], queries, DEPTH)
    expected = brute_force(doc_ids, docs, queries, DEPTH)
    for i, want in enumerate(expected):
        got = {s.doc_id: s.score for s in run[f"q{i}"]}
        assert got.keys() == want.keys()
        assert got == pytest.approx(want)
    assert searcher.plan is not None and searcher.plan.minimum == budget  # the first pass's plan is kept


def test_a_strict_budget_below_the_first_pass_is_refused():
    doc_ids, docs, queries = corpus()
    budget = first_pass_minimum(len(queries)) - 1
    with pytest.raises(MemoryBudgetError, match="too small for a streamed search"):
        index(doc_ids, docs, budget, strict=True).search([f"q{i}" for i in range(len(queries))], queries, DEPTH)


def test_a_default_budget_below_the_minimum_searches_in_the_smallest_blocks():
    doc_ids, docs, queries = corpus()
    searcher = index(doc_ids, docs, 1, strict=False)
    run = searcher.search([f"q{i}" for i in range(len(queries))], queries, DEPTH)
    for i, want in enumerate(brute_force(doc_ids, docs, queries, DEPTH)):
        assert {s.doc_id for s in run[f"q{i}"]} == set(want)
    assert searcher.plan.query_block == len(queries) and searcher.plan.minimum == 0


def test_each_search_plans_afresh():
    doc_ids, docs, queries = corpus()
    searcher = index(doc_ids, docs, first_pass_minimum(len(queries)), strict=True)
    searcher.search([f"q{i}" for i in range(len(queries))], queries, DEPTH)
    # a second search on one query: its own first pass, its own (smaller) minimum
    searcher.search(["q0"], queries[:1], DEPTH)
    assert searcher.plan.minimum == first_pass_minimum(1)


# The working set plan_search counts, worked out by hand from its documented parts for one search: 100 queries
# of dimension 8, depth 5 (k = 6 with the tie-breaking extra), chunks of 16 rows, 1 MiB held already.
#   fixed     = base 1,048,576 + results 100*6*12 = 7,200 + run 100*5*160 = 80,000 + two chunks 2*16*8*4 = 1,024
#               + slack 48 MiB = 50,331,648                                                   -> 51,468,448
#   per query = 6*64 = 384 + score block min(16, 1024)*4 = 64 + the query 8*4 = 32          -> 480
#   minimum   = fixed + 20 (the smallest block) * 480                                         -> 51,478,048
BASE, FIXED, PER_QUERY, MINIMUM = 1 << 20, 51_468_448, 480, 51_478_048


def test_the_minimum_is_the_fixed_part_and_the_smallest_block():
    plan = plan_search(MINIMUM, BASE, 100, 8, 5, 16)
    assert plan.minimum == MINIMUM and plan.query_block == 20 and plan.budget == MINIMUM
    with pytest.raises(MemoryBudgetError) as caught:
        plan_search(MINIMUM - 1, BASE, 100, 8, 5, 16)
    assert "one block of 20 queries against one 16-document chunk needs at least" in str(caught.value)


@pytest.mark.parametrize("extra_queries, block", [(0, 20), (1, 21), (30, 50), (79, 99), (80, 100), (500, 100)])
def test_the_block_is_what_the_budget_holds_beyond_the_fixed_part(extra_queries, block):
    budget = MINIMUM + extra_queries * PER_QUERY
    assert plan_search(budget, BASE, 100, 8, 5, 16).query_block == block
    assert plan_search(budget + PER_QUERY - 1, BASE, 100, 8, 5, 16).query_block == block  # whole queries only


def test_fewer_queries_than_the_smallest_block_are_one_block():
    # 7 queries: fixed = 1,048,576 + 7*6*12 + 7*5*160 + 1,024 + 50,331,648 = 51,387,352; minimum + 7 * 480
    plan = plan_search(51_387_352 + 7 * 480, BASE, 7, 8, 5, 16)
    assert plan.query_block == 7 and plan.minimum == 51_387_352 + 7 * 480
    with pytest.raises(MemoryBudgetError):
        plan_search(51_387_352 + 7 * 480 - 1, BASE, 7, 8, 5, 16)


def test_a_big_chunk_counts_only_faiss_s_1024_document_tile():
    # chunks of 4096 rows: two chunks 2*4096*8*4 = 262,144 instead of 1,024; per query 384 + 1024*4 + 32 = 4,512
    fixed = FIXED - 1_024 + 262_144
    assert plan_search(fixed + 20 * 4_512, BASE, 100, 8, 5, 4096).minimum == fixed + 20 * 4_512


def test_the_refusals_read_as_written():
    with pytest.raises(MemoryBudgetError) as given:
        plan_search(MINIMUM - 1, BASE, 100, 8, 5, 16, given=True)
    assert str(given.value) == (
        "`memory_budget` 49.09 MiB is too small for a streamed search: one block of 20 queries against one "
        "16-document chunk needs at least 49.09 MiB (1.00 MiB of it held already by this process); "
        "raise it to 49.09 MiB or more"
    )
    with pytest.raises(MemoryBudgetError) as default:
        plan_search(MINIMUM - 1, BASE, 100, 8, 5, 16, given=False)
    assert str(default.value) == (
        "the memory this process may use (49.09 MiB: its size now and half the memory available) is too small for "
        "a streamed search: one block of 20 queries against one 16-document chunk needs at least 49.09 MiB "
        "(1.00 MiB of it held already by this process); free memory, or give `memory_budget` of 49.09 MiB or more"
    )


def test_no_queries_count_as_a_block_of_one():
    # fixed = 1,048,576 + 0 + 0 + 1,024 + 50,331,648 = 51,381,248; one query's 480 on top
    assert plan_search(1 << 40, BASE, 0, 8, 5, 16).minimum == 51_381_248 + 480


def test_a_fixed_query_block_plans_nothing(monkeypatch):
    doc_ids, docs, queries = corpus()
    searcher = index(doc_ids, docs, 1, strict=True)  # a budget no plan could hold: never consulted
    searcher.query_block = 3
    blocks = []
    original = streamed.search_blocks
    monkeypatch.setattr(streamed, "search_blocks", lambda *a, **kw: blocks.append(a[3]) or original(*a, **kw))
    searcher.search([f"q{i}" for i in range(len(queries))], queries, DEPTH)
    assert searcher.plan is None and blocks and set(blocks) == {3}


def test_the_plan_and_a_fallback_are_logged_as_written(caplog):
    doc_ids, docs, queries = corpus()
    with caplog.at_level("INFO", logger="harness.retrieval.streamed"):
        index(doc_ids, docs, 1, strict=False).search([f"q{i}" for i in range(len(queries))], queries, DEPTH)
    messages = [record.getMessage() for record in caplog.records]
    # the first pass (k = 6): 4*6*12 + 4*5*160 + 2*16*8*4 + 48 MiB + 4 queries * 480 = 50,338,080 B = 48.01 MiB
    assert any(
        m.endswith(
            "is too small for a streamed search: one block of 4 queries against one 16-document chunk needs "
            "at least 48.01 MiB (0 B of it held already by this process); free memory, or give `memory_budget` "
            "of 48.01 MiB or more; searching 4 queries in the smallest blocks"
        )
        for m in messages
    ), messages
    assert "streamed exact search: 4 queries a block, budget 1 B" in messages
    caplog.clear()
    with caplog.at_level("INFO", logger="harness.retrieval.streamed"):
        index(doc_ids, docs, 3 << 30, strict=True).search([f"q{i}" for i in range(len(queries))], queries, DEPTH)
    assert "streamed exact search: 4 queries a block, budget 3.00 GiB" in [r.getMessage() for r in caplog.records]


def test_a_budget_is_the_caller_s_unless_told_otherwise():
    with pytest.raises(MemoryBudgetError) as caught:
        plan_search(MINIMUM - 1, BASE, 100, 8, 5, 16)
    assert str(caught.value).startswith("`memory_budget` 49.09 MiB is too small")
