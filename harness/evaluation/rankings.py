"""System-ranking agreement between two sets of qrels: do they rank the systems the same way?

Each system is scored on one metric under qrels A and under qrels B, over the queries both judge; the two
rankings of the systems are compared by

* **Kendall's τ-b** of the two score lists: (concordant − discordant) / sqrt((n0 − ties_A)(n0 − ties_B)) over
  the n0 = n(n−1)/2 pairs of systems (scipy's ``kendalltau``, ``variant="b"``): a tie in either score list is a
  tie, counted in neither. τ ≥ 0.9 is the usual bar for "the same ranking" (Voorhees 2000); below 0.8 the
  rankings differ noticeably.
* **τ_ap** (Yilmaz, Aslam & Robertson 2008), which weighs swaps at the top more: with B's ranking as the list
  and A's as the truth, τ_ap = 2/(N−1) Σ_{i=2..N} C(i)/(i−1) − 1, C(i) the systems above rank i in B's list
  that A also puts above the system at rank i. It is not symmetric: A is the reference (the human qrels).
* **top-k overlap**: the share of A's top k systems that are in B's top k.

Ties: τ-b takes ties in the scores as ties; τ_ap and the top-k need strict orders, so equal scores are ordered
by system name (ascending), the same rule in both rankings. Intervals: the queries are resampled with
replacement (`harness.evaluation.agreement_stats`, seeded), every system's mean recomputed under both qrels on
the same resample, and each statistic's percentile interval taken over the resamples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.evaluation.agreement_stats import DEFAULT_ROUNDS, DEFAULT_SEED, Interval, bootstrap_interval

SAME_RANKING = 0.9  # Voorhees (2000): τ at or above it, "the same ranking"


def kendall_tau_b(first: Sequence[float], second: Sequence[float]) -> float:
    """Kendall's τ-b of two paired score lists (scipy's ``kendalltau``, ``variant="b"``); NaN when either list is
    all ties (or fewer than 2 items: there scipy would warn as well)."""
    from scipy.stats import kendalltau

    if len(first) != len(second):
        raise ValueError(f"{len(first)} scores against {len(second)}: give one score per system in each")
    if len(first) < 2:
        return math.nan
    return float(kendalltau(first, second, variant="b").statistic)


def rank_order(scores: Mapping[str, float]) -> list[str]:
    """The systems best first: by score descending, equal scores by name (the module's tie rule)."""
    return sorted(scores, key=lambda name: (-scores[name], name))


def tau_ap(reference: Mapping[str, float], other: Mapping[str, float]) -> float:
    """Yilmaz et al.'s AP correlation of `other`'s ranking against `reference`'s (both by `rank_order`)."""
    listed, truth = rank_order(other), {name: position for position, name in enumerate(rank_order(reference))}
    if set(truth) != set(listed):
        raise ValueError("both rankings must hold the same systems")
    n = len(listed)
    if n < 2:
        return math.nan
    total = sum(sum(truth[above] < truth[listed[i]] for above in listed[:i]) / i for i in range(1, n))
    return 2 * total / (n - 1) - 1


def top_k_overlap(first: Mapping[str, float], second: Mapping[str, float], k: int) -> float:
    """The share of `first`'s top k systems (by `rank_order`) in `second`'s top k."""
    k = min(k, len(first))
    return len(set(rank_order(first)[:k]) & set(rank_order(second)[:k])) / k if k else math.nan


@dataclass(frozen=True)
class SystemScores:
    """One system under both qrels."""

    name: str
    score_a: float
    score_b: float
    rank_a: int  # 1 = best, by `rank_order`
    rank_b: int


@dataclass(frozen=True)
class RankingAgreement:
    """How far two qrels agree on the ranking of the systems (`compare_rankings`)."""

    metric: str
    label_a: str
    label_b: str
    n_queries: int
    systems: tuple[SystemScores, ...]
    tau: Interval
    tau_ap: Interval
    top_k: int
    overlap: Interval

    def format_text(self) -> str:
        """The table of systems, then τ, τ_ap and the top-k overlap with their intervals."""
        width = max([len(s.name) for s in self.systems] + [6])
        lines = [
            f"{self.metric} of {len(self.systems)} systems over the {self.n_queries} queries both qrels judge:",
            f"  {'system':<{width}} {'A':>8} {'rank A':>6} {'B':>8} {'rank B':>6}",
        ]
        for s in sorted(self.systems, key=lambda s: s.rank_a):
            lines.append(f"  {s.name:<{width}} {s.score_a:>8.4f} {s.rank_a:>6} {s.score_b:>8.4f} {s.rank_b:>6}")
        level = f"{self.tau.level:.0%}"
        lines += [
            f"A = {self.label_a}; B = {self.label_b}",
            f"Kendall's τ-b {self.tau.format()}  τ_ap (A the reference) {self.tau_ap.format()}  "
            f"top-{self.top_k} overlap {self.overlap.format()}",
            f"  [{level} intervals: percentile bootstrap over the queries, {self.tau.rounds} resamples, seeded]",
            f"  {_verdict(self.tau.value)}",
        ]
        return "\n".join(lines)

    def to_json(self) -> dict:
        """The figures as plain data."""

        def interval(i: Interval) -> dict:
            return {"value": _finite(i.value), "low": _finite(i.low), "high": _finite(i.high), "level": i.level}

        return {
            "metric": self.metric,
            "qrels_a": self.label_a,
            "qrels_b": self.label_b,
            "n_queries": self.n_queries,
            "systems": [vars(s) for s in self.systems],
            "tau": interval(self.tau),
            "tau_ap": interval(self.tau_ap),
            "top_k": self.top_k,
            "top_k_overlap": interval(self.overlap),
            "rounds": self.tau.rounds,
        }


def _finite(value: float) -> float | None:
    return None if value != value else value


def _verdict(tau: float) -> str:
    if tau != tau:
        return "τ undefined: every system scores the same under one of the qrels"
    if tau >= SAME_RANKING:
        return f"τ ≥ {SAME_RANKING}: the usual bar for the same ranking (Voorhees 2000) is met"
    return f"τ < {SAME_RANKING}: below the usual bar for the same ranking (Voorhees 2000); the qrels rank differently"


def compare_rankings(
    per_query_a: Mapping[str, Mapping[str, float]],
    per_query_b: Mapping[str, Mapping[str, float]],
    metric: str = "",
    labels: tuple[str, str] = ("A", "B"),
    top_k: int = 3,
    rounds: int = DEFAULT_ROUNDS,
    seed: int = DEFAULT_SEED,
) -> RankingAgreement:
    """Compare the systems' rankings under two qrels from their per-query scores.

    Args:
        per_query_a, per_query_b: system → query id → the metric's value, under qrels A and B, for the same
            systems and the same queries (a query absent from a system's row counts 0).
        metric: The metric's name, for the table.
        labels: What A and B are (file names).
        top_k: The k of the top-k overlap (at most the number of systems).
        rounds, seed: The bootstrap over queries.
    """
    import numpy as np

    names = sorted(per_query_a)
    queries = sorted(
        {q for name in names for q in per_query_a[name]} | {q for name in names for q in per_query_b[name]}
    )
    a = np.array([[per_query_a[n].get(q, 0.0) for q in queries] for n in names], dtype=np.float64)
    b = np.array([[per_query_b[n].get(q, 0.0) for q in queries] for n in names], dtype=np.float64)
    k = min(top_k, len(names))

    def statistic(function):
        def of(rows: Sequence[int]) -> float:
            mean_a, mean_b = a[:, rows].mean(axis=1), b[:, rows].mean(axis=1)
            return function(dict(zip(names, mean_a.tolist())), dict(zip(names, mean_b.tolist())))

        return of

    tau = statistic(lambda x, y: kendall_tau_b([x[n] for n in names], [y[n] for n in names]))
    ap = statistic(tau_ap)
    overlap = statistic(lambda x, y: top_k_overlap(x, y, k))
    scores_a, scores_b = dict(zip(names, a.mean(axis=1).tolist())), dict(zip(names, b.mean(axis=1).tolist()))
    rank_a = {n: i + 1 for i, n in enumerate(rank_order(scores_a))}
    rank_b = {n: i + 1 for i, n in enumerate(rank_order(scores_b))}
    systems = tuple(SystemScores(n, scores_a[n], scores_b[n], rank_a[n], rank_b[n]) for n in names)
    n = len(queries)
    return RankingAgreement(
        metric,
        labels[0],
        labels[1],
        n,
        systems,
        bootstrap_interval(n, tau, rounds, seed),
        bootstrap_interval(n, ap, rounds, seed),
        k,
        bootstrap_interval(n, overlap, rounds, seed),
    )
