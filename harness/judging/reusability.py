"""Is a pool reusable? Zobel's (1998) leave-one-out test, and the coverage of systems the pool never saw.

A pool is reusable when a system that did not contribute to it is still scored fairly on its qrels. The test
simulates one: for each system (or group of systems) that made the pool, the judged pairs that only it
contributed (in its top `depth` and in no other system's, for the same query) are treated as unjudged —
removed from the qrels, so they count as not relevant, as trec_eval counts any unjudged document — and the
system is scored again. Its rank is then taken among the other systems' scores on the full qrels. A large
drop in score or rank says the pool leans on that system: a new system like it would be underrated.
With groups (``system → group``), all of a group's systems are left out together (leave-one-group-out:
runs of one team are alike, TREC's rule).

A run that did not contribute at all gets its Judged@k and the number of its top-k documents nobody judged
(`harness.judging.coverage`), with a warning: its score rests on qrels built without it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from harness.evaluation.metrics import evaluate, parse_metric
from harness.evaluation.rankings import rank_order
from harness.records import Qrels, Run

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeftOut:
    """One system scored with the pairs only its unit (itself, or its group) contributed treated as unjudged."""

    system: str
    unit: str  # the system itself, or its group
    score: float  # on the full qrels
    score_left_out: float
    rank: int  # among every pool system on the full qrels (1 = best)
    rank_left_out: int  # its left-out score among the others' full scores
    removed: int  # judged pairs only its unit contributed
    removed_relevant: int  # of which relevant (grade ≥ 1)

    @property
    def delta(self) -> float:
        return self.score_left_out - self.score

    @property
    def rank_change(self) -> int:
        return self.rank_left_out - self.rank


@dataclass(frozen=True)
class Outsider:
    """A run that did not contribute to the pool: how much of its top k is judged."""

    system: str
    score: float
    judged_at_k: float
    unjudged: int  # its top-k pairs nobody judged
    k: int


@dataclass(frozen=True)
class Reusability:
    """The leave-one-out table (`leave_one_out`) and the runs scored on qrels built without them."""

    metric: str
    depth: int
    by_group: bool
    rows: tuple[LeftOut, ...]
    outsiders: tuple[Outsider, ...] = ()

    def format_text(self) -> str:
        """The table, one row per pool system, then a warning per outsider."""
        width = max([len(r.system) for r in self.rows] + [len(o.system) for o in self.outsiders] + [6])
        kind = "group" if self.by_group else "system"
        lines = [
            f"leave-one-{kind}-out on the depth-{self.depth} pool ({self.metric}; the pairs only that {kind} "
            "contributed treated as unjudged):",
            f"  {'system':<{width}} {'score':>8} {'left out':>8} {'Δ score':>8} {'rank':>5} {'left out':>8} "
            f"{'Δ rank':>6} {'pairs removed':>13} {'relevant':>8}",
        ]
        for r in sorted(self.rows, key=lambda r: r.rank):
            lines.append(
                f"  {r.system:<{width}} {r.score:>8.4f} {r.score_left_out:>8.4f} {r.delta:>+8.4f} {r.rank:>5} "
                f"{r.rank_left_out:>8} {r.rank_change:>+6} {r.removed:>13} {r.removed_relevant:>8}"
            )
        if self.rows:
            worst = min(self.rows, key=lambda r: (r.delta, r.system))
            lines.append(
                f"  largest drop: {worst.system} {worst.delta:+.4f} ({worst.delta / worst.score:+.1%})"
                if worst.score
                else f"  largest drop: {worst.system} {worst.delta:+.4f}"
            )
        for o in self.outsiders:
            lines.append(
                f"WARNING {o.system}: not in the pool; its {self.metric} {o.score:.4f} is scored on qrels built "
                f"without it: Judged@{o.k} {o.judged_at_k:.3f}, {o.unjudged} of its top-{o.k} documents nobody "
                "judged (counted not relevant)"
            )
        return "\n".join(lines)

    def to_json(self) -> dict:
        """The table and the outsiders as plain data."""
        return {
            "metric": self.metric,
            "depth": self.depth,
            "left_out": "group" if self.by_group else "system",
            "rows": [{**vars(r), "delta": r.delta, "rank_change": r.rank_change} for r in self.rows],
            "outsiders": [vars(o) for o in self.outsiders],
        }


def unique_pairs(runs: Mapping[str, Run], depth: int, units: Mapping[str, str]) -> dict[str, set[tuple[str, str]]]:
    """unit → the (query, doc) pairs in its systems' top `depth` and in no other unit's."""
    found: dict[tuple[str, str], set[str]] = {}
    for name, run in runs.items():
        for query_id, ranked in run.items():
            for scored in ranked[:depth]:
                found.setdefault((query_id, scored.doc_id), set()).add(units[name])
    unique: dict[str, set[tuple[str, str]]] = {unit: set() for unit in units.values()}
    for pair, owners in found.items():
        if len(owners) == 1:
            unique[next(iter(owners))].add(pair)
    return unique


def _without(qrels: Qrels, pairs: set[tuple[str, str]]) -> Qrels:
    return Qrels({q: {d: g for d, g in docs.items() if (q, d) not in pairs} for q, docs in qrels.items()})


def leave_one_out(
    qrels: Qrels,
    runs: Mapping[str, Run],
    depth: int,
    metric: str = "nDCG@10",
    groups: Mapping[str, str] | None = None,
    outsiders: Mapping[str, Run] | None = None,
) -> Reusability:
    """The leave-one-system-out (with `groups`: leave-one-group-out) table of the pool made of `runs`.

    Args:
        qrels: The qrels the pool's judgments made (every judged query).
        runs: The pool's systems (name → run), pooled to `depth`.
        depth: The pool's depth.
        metric: The metric scored.
        groups: system → group; a system not named is its own group. None: leave one system out.
        outsiders: Runs that did not contribute (name → run): their Judged@k and unjudged top-k, k the
            metric's cutoff (else `depth`).
    """
    spec = parse_metric(metric)
    key = str(spec)
    units = {name: (groups or {}).get(name, name) for name in runs}
    unique = unique_pairs(runs, depth, units)
    full = {name: evaluate(qrels, run, [spec]).means[key] for name, run in runs.items()}
    ranks = {name: i + 1 for i, name in enumerate(rank_order(full))}
    rows = []
    for name, run in sorted(runs.items()):
        removed = {pair for pair in unique[units[name]] if pair[1] in qrels.get(pair[0], {})}
        left = evaluate(_without(qrels, removed), run, [spec]).means[key]
        others = {other: score for other, score in full.items() if other != name}
        rank_left = rank_order({**others, name: left}).index(name) + 1
        relevant = sum(1 for q, d in removed if qrels[q][d] >= 1)
        rows.append(LeftOut(name, units[name], full[name], left, ranks[name], rank_left, len(removed), relevant))
    return Reusability(key, depth, bool(groups), tuple(rows), _outsiders(qrels, outsiders or {}, spec, depth))


def _outsiders(qrels: Qrels, runs: Mapping[str, Run], spec, depth: int) -> tuple[Outsider, ...]:
    k = spec.k or depth
    judged_spec = parse_metric(f"Judged@{k}")
    found = []
    for name, run in sorted(runs.items()):
        measured = evaluate(qrels, run, [spec, judged_spec]).means
        unjudged = sum(
            1 for q in qrels if q in run for scored in run[q][:k] if scored.doc_id not in qrels[q]
        )  # as `harness.judging.coverage.run_coverage` counts them
        found.append(Outsider(name, measured[str(spec)], measured[str(judged_spec)], unjudged, k))
        logger.info("%s: scored on qrels built without it (%d of its top-%d documents unjudged)", name, unjudged, k)
    return tuple(found)


@dataclass(frozen=True)
class PoolCheck:
    """A result against the pool its qrels came from: did its system help build it, and how much of its top
    k is judged (``report --pool``)."""

    system: str
    in_pool: bool  # its run's top `depth` is one of the pool systems' (it contributed)
    judged_at_k: float
    unjudged: int  # its top-k pairs nobody judged
    k: int

    def format_text(self) -> str:
        """One line; a warning for a system the pool was built without."""
        judged = f"Judged@{self.k} {self.judged_at_k:.3f}, {self.unjudged} of its top-{self.k} documents nobody judged"
        if self.in_pool:
            return f"  {self.system}: in the pool; {judged}"
        return (
            f"WARNING {self.system}: scored on qrels built without it (not in the pool): {judged} "
            "(counted not relevant; `beir-harness judgments reusability` says how much that matters)"
        )


def check_against_pool(
    name: str, run: Run, qrels: Qrels, pool_runs: Mapping[str, Run], depth: int, k: int
) -> PoolCheck:
    """Whether `run` is one of the pool's systems (the same top `depth` for every query) and its top-k coverage."""

    def top(of: Run) -> dict[str, list[str]]:
        return {q: [s.doc_id for s in ranked[:depth]] for q, ranked in of.items() if q in qrels}

    mine = top(run)
    in_pool = any(top(other) == mine for other in pool_runs.values())
    spec = parse_metric(f"Judged@{k}")
    judged = evaluate(qrels, run, [spec]).means[str(spec)]
    unjudged = sum(1 for q in qrels if q in run for scored in run[q][:k] if scored.doc_id not in qrels[q])
    return PoolCheck(name, in_pool, judged, unjudged, k)
