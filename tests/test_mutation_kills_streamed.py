"""The streamed search's deeper pass keeps the budget its first pass was sized by (mutation-testing holes,
issue item 2).

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
    chunks = [docs[start:start + CHUNK] for start in range(0, len(docs), CHUNK)]
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
