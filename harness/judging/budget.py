"""Pooling under a judging budget: which N pairs of a depth-k pool to judge first.

Every candidate pair (a document in some system's top `depth` for a query, not judged yet) gets a priority
from the ranks the systems gave it, and the `budget` pairs of highest priority are judged, across all queries:

* ``depth``: the best rank any system gave it (every query's rank-1 documents first, then rank 2, ...): a
  uniformly shallower depth-k pool; among equal best ranks, pairs more systems retrieved at that depth first.
* ``rrf``: the reciprocal-rank-fusion score Σ_s 1/(60 + rank_s) over the systems that retrieved it (Cormack
  et al. 2009), as trectools' fusion-based pool maker orders documents.
* ``rbp``: the rank-biased weight Σ_s (1 − p)·p^(rank_s − 1) with persistence p = 0.8 (Moffat & Zobel 2008;
  Moffat, Webber & Zobel's RBP-based pooling, 2007; VisualPool's "RBP" strategy): the expected contribution
  of the document to the systems' RBP scores.

Ties in priority go to the query id, then the document id (ascending), so a budget pool is deterministic.
`BENCHMARKS.md` ("Pooling under a judging budget") measures the three on NFCorpus and SciFact: ``rbp`` kept
the system ranking wherever ``depth`` did and found more relevant documents at every budget, and ``rrf``
found the most at some budgets but once changed the ranking; so ``rbp`` is the default.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from harness.records import Run

STRATEGIES = ("depth", "rrf", "rbp")
RRF_K = 60
RBP_PERSISTENCE = 0.8


def _priority(ranks: Sequence[int], strategy: str) -> tuple:
    """The sort key (smaller first) of a pair the systems ranked at `ranks` (1-based)."""
    if strategy == "depth":
        best = min(ranks)
        return (best, -sum(1 for r in ranks if r == best))
    if strategy == "rrf":
        return (-sum(1.0 / (RRF_K + r) for r in ranks),)
    if strategy == "rbp":
        return (-sum((1 - RBP_PERSISTENCE) * RBP_PERSISTENCE ** (r - 1) for r in ranks),)
    raise ValueError(f"unknown pooling strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")


def candidate_ranks(
    runs: Sequence[Run], depth: int, candidates: Mapping[str, Iterable[str]] | None = None
) -> dict[tuple[str, str], list[int]]:
    """(query, doc) → the ranks (1-based) the systems gave it in their top `depth`; only `candidates` if given."""
    allowed = {q: set(docs) for q, docs in candidates.items()} if candidates is not None else None
    ranks: dict[tuple[str, str], list[int]] = {}
    for run in runs:
        for query_id, ranked in run.items():
            for rank, scored in enumerate(ranked[:depth], start=1):
                if allowed is None or scored.doc_id in allowed.get(query_id, ()):
                    ranks.setdefault((query_id, scored.doc_id), []).append(rank)
    return ranks


def prioritised(ranks: Mapping[tuple[str, str], Sequence[int]], strategy: str) -> list[tuple[str, str]]:
    """Every pair of `ranks`, the first to judge first (`strategy`'s priority; ties by query, then document)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown pooling strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    return sorted(ranks, key=lambda pair: (*_priority(ranks[pair], strategy), pair))


def budget_pairs(
    runs: Sequence[Run],
    depth: int,
    budget: int,
    strategy: str = "rbp",
    candidates: Mapping[str, Iterable[str]] | None = None,
) -> dict[str, list[str]]:
    """The `budget` pairs to judge first of the depth-`depth` pool of `runs` (restricted to `candidates`, the
    pairs not judged yet): query id → document ids, sorted."""
    chosen: dict[str, list[str]] = {}
    for query_id, doc_id in prioritised(candidate_ranks(runs, depth, candidates), strategy)[:budget]:
        chosen.setdefault(query_id, []).append(doc_id)
    return {q: sorted(docs) for q, docs in sorted(chosen.items())}
