"""Depth-k pooling of systems whose runs differ in length (mutation testing: docs/mutation-report.md).

Every earlier pool test gave each system a run of the same length. Here systems return 1, 3, 5 and 8
documents a query (and some none), pooled at depths below, between and above those lengths. The reference
is a brute-force loop written here: the uncapped pool is the union of each run's first `depth` documents
minus the judged ones; under a cap, round-robin by rank means a document whose best rank is r is kept only
after every document with a better best rank (whatever order the systems are visited in).
"""

from __future__ import annotations

import random

import pytest

from harness.judging.pool import pool_runs
from harness.records import Run

QUERIES = ("q1", "q2", "q3")


def make_runs(seed=0):
    """Four systems; system s returns LENGTHS[s] documents for q1 and q2 (from a shared set of 12, so
    they overlap), and only systems 2 and 3 answer q3."""
    rng = random.Random(seed)
    lengths = (1, 3, 5, 8)
    runs = []
    for system, length in enumerate(lengths):
        scores = {}
        for query in QUERIES:
            if query == "q3" and system < 2:
                continue
            docs = rng.sample([f"d{i}" for i in range(12)], length)
            scores[query] = {doc: float(length - rank) for rank, doc in enumerate(docs)}  # ranked as sampled
        runs.append(Run(scores, name=f"s{system}"))
    return runs


def tops_by_hand(runs, query, depth):
    """Each system's first `depth` documents for `query`, in rank order (from the scores, by hand)."""
    out = []
    for run in runs:
        scores = dict((s.doc_id, s.score) for s in run.get(query, ()))
        ranked = sorted(scores, key=lambda d: (-scores[d], d))
        out.append(ranked[:depth])
    return out


def best_rank_by_hand(tops, judged):
    best = {}
    for ranked in tops:
        for rank, doc in enumerate(ranked):
            if doc not in judged:
                best[doc] = min(best.get(doc, rank), rank)
    return best


JUDGED = {"q1": {"d0", "d5"}, "q3": {"d11"}}


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5, 7, 8, 20])
def test_the_uncapped_pool_takes_each_systems_own_top_depth(depth):
    runs = make_runs()
    pool = pool_runs(runs, depth, JUDGED)
    expected, dropped = {}, 0
    for query in QUERIES:
        tops = tops_by_hand(runs, query, depth)
        union = {doc for ranked in tops for doc in ranked}
        judged = JUDGED.get(query, set())
        dropped += len(union & judged)
        if union - judged:
            expected[query] = sorted(union - judged)
    assert pool.pairs == expected
    assert pool.judged_dropped == dropped
    assert pool.capped_out == 0 and pool.added == 0


@pytest.mark.parametrize("depth", [2, 4, 8])
@pytest.mark.parametrize("cap", [1, 2, 3, 5, 6, 9, 30])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_a_cap_keeps_the_best_ranked_documents_of_runs_of_any_length(depth, cap, seed):
    runs = make_runs(seed)
    pool = pool_runs(runs, depth, JUDGED, max_per_query=cap, seed=seed)
    capped = 0
    for query in QUERIES:
        tops = tops_by_hand(runs, query, depth)
        best = best_rank_by_hand(tops, JUDGED.get(query, set()))
        kept = set(pool.pairs.get(query, ()))
        assert kept <= set(best)
        assert len(kept) == min(cap, len(best))
        capped += len(best) - len(kept)
        if kept:
            worst_kept = max(best[d] for d in kept)
            # round-robin by rank: everything ranked better than the worst kept document is kept too
            assert {d for d, r in best.items() if r < worst_kept} <= kept
    assert pool.capped_out == capped


def test_a_short_run_listed_first_does_not_shorten_the_others():
    short = Run({"q": {"a": 1.0}}, name="short")
    long = Run({"q": {"b": 3.0, "c": 2.0, "d": 1.0}}, name="long")
    for runs in ([short, long], [long, short]):
        assert pool_runs(runs, 3, {}).pairs == {"q": ["a", "b", "c", "d"]}
        assert pool_runs(runs, 2, {}).pairs == {"q": ["a", "b", "c"]}


def test_a_system_without_the_query_adds_nothing_and_breaks_nothing():
    runs = [Run({"q1": {"a": 1.0}}, name="x"), Run({"q2": {"b": 2.0, "c": 1.0}}, name="y")]
    assert pool_runs(runs, 5, {}).pairs == {"q1": ["a"], "q2": ["b", "c"]}
    assert pool_runs(runs, 5, {}, max_per_query=1).pairs == {"q1": ["a"], "q2": ["b"]}


def test_extra_pairs_sit_on_top_of_the_cap_unless_judged_or_pooled():
    runs = [Run({"q": {"a": 3.0, "b": 2.0, "c": 1.0}}, name="x")]
    pool = pool_runs(runs, 3, {"q": {"j"}}, max_per_query=1, extra=[("q", "z"), ("q", "a"), ("q", "j"), ("r", "y")])
    assert pool.pairs == {"q": ["a", "z"], "r": ["y"]}
    assert (pool.added, pool.judged_dropped, pool.capped_out) == (2, 1, 2)


def _refused(spec):
    from harness.errors import HarnessError
    from harness.judging.pool import check_spec

    with pytest.raises(HarnessError) as caught:
        check_spec(spec)
    return str(caught.value)


def test_a_pool_spec_is_checked_at_its_bounds():
    from harness.judging.pool import PoolSpec, check_spec

    check_spec(PoolSpec(depth=1, max_per_query=1))
    check_spec(PoolSpec(depth=1, max_per_query=None))
    check_spec(PoolSpec(scale=({"grade": 0}, {"grade": 9})))
    assert _refused(PoolSpec(depth=0)) == (
        "pool depth 0: pool at least the top 1 document of each system (set `depth` ≥ 1; TREC pools use 10 to 100)"
    )
    assert _refused(PoolSpec(max_per_query=0)) == "max per query 0: give a cap ≥ 1, or none"
    message = "grade scale {}: grades must be distinct integers 0-9 (one key each)"
    for grades in ([], [1, 1], [10], [-1], [True], ["1"], [1.0], [None]):
        assert _refused(PoolSpec(scale=tuple({"grade": g} for g in grades))) == message.format(grades)


def test_no_system_wins_every_tie_under_a_cap():
    # two systems, disjoint documents, a cap of one: which system's rank 1 is kept is the seeded per-query order
    queries = [f"q{i}" for i in range(40)]
    a = Run({q: {f"a-{q}": 1.0} for q in queries}, name="a")
    b = Run({q: {f"b-{q}": 1.0} for q in queries}, name="b")
    for seed in (0, 1):
        kept = pool_runs([a, b], 1, {}, max_per_query=1, seed=seed).pairs
        winners = [kept[q][0][0] for q in queries]
        assert 5 < winners.count("a") < 35  # each system first in some queries (40 fair coin flips)
    first, other = (pool_runs([a, b], 1, {}, max_per_query=1, seed=s).pairs for s in (0, 1))
    assert first != other  # the seed decides the order
    assert pool_runs([a, b], 1, {}, max_per_query=1, seed=0).pairs == first  # and the same seed the same pool


def capped_pool_by_hand(runs, depth, cap, seed):
    """The documented, reproducible order: for each query, the systems shuffled by Python's
    ``random.Random(f"{seed}:{query}")``, then round-robin by rank until the cap (nothing judged here)."""
    pairs = {}
    for query in sorted({q for run in runs for q in run}):
        tops = tops_by_hand(runs, query, depth)
        order = list(range(len(runs)))
        random.Random(f"{seed}:{query}").shuffle(order)
        kept = []
        for rank in range(depth):
            for system in order:
                if rank < len(tops[system]) and tops[system][rank] not in kept:
                    kept.append(tops[system][rank])
        pairs[query] = sorted(kept[:cap])
    return pairs


def test_a_manifests_seed_reproduces_its_pool_and_the_default_is_the_manifests():
    # a pool written with the default seed records seed 0 in its manifest (PoolSpec's default): rerunning
    # with that seed, or with no seed at all, must give the very same pairs to judge
    from harness.judging.pool import PoolSpec

    queries = [f"q{i}" for i in range(30)]
    runs = [Run({q: {f"{name}-{q}-{r}": 3.0 - r for r in range(3)} for q in queries}, name=name) for name in "abc"]
    recorded = PoolSpec().seed
    assert recorded == 0
    for seed in (0, 1, 5):
        assert pool_runs(runs, 3, {}, max_per_query=2, seed=seed).pairs == capped_pool_by_hand(runs, 3, 2, seed)
    assert pool_runs(runs, 3, {}, max_per_query=2).pairs == capped_pool_by_hand(runs, 3, 2, recorded)
    assert capped_pool_by_hand(runs, 3, 2, 0) != capped_pool_by_hand(runs, 3, 2, 1)  # the seed decides something


def test_every_judged_extra_pair_is_counted_dropped():
    runs = [Run({"q": {"a": 2.0, "j1": 1.0}}, name="x")]
    judged = {"q": {"j1", "j2", "j3"}, "r": {"k"}}
    extra = [("q", "j2"), ("q", "j3"), ("r", "k"), ("q", "z")]
    pool = pool_runs(runs, 2, judged, extra=extra)
    # by hand: j1 pooled but judged (1), then j2, j3 and k asked for but judged (3); z added
    assert pool.pairs == {"q": ["a", "z"]}
    assert (pool.judged_dropped, pool.added, pool.capped_out) == (4, 1, 0)
