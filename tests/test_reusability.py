"""Pool reusability: leave-one-system-out and leave-one-group-out, checked against the test written again by hand
(the unique pairs by loops, the scores by pytrec_eval, the ranks by sorting), on a pool made by `pool --runs`."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import pytrec_eval
from cli_runner import invoke
from hypothesis import given, settings
from hypothesis import strategies as st

DEPTH = 3


def _dataset(tmp_path):
    rng = random.Random(9)
    root = tmp_path / "set"
    (root / "qrels").mkdir(parents=True)
    docs = [f"d{i}" for i in range(15)]
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": "", "text": f"t {d}"}) + "\n" for d in docs)
    )
    queries = [f"q{i}" for i in range(6)]
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": f"x {q}"}) + "\n" for q in queries))
    runs = {}
    for s in ("alpha", "beta", "gamma", "delta"):
        run = {}
        for q in queries:
            ranked = docs[:]
            rng.shuffle(ranked)
            run[q] = ranked[:8]
        runs[s] = run
        (tmp_path / f"{s}.trec").write_text(
            "".join(f"{q} Q0 {d} {i + 1} {20 - i} {s}\n" for q, ranked in run.items() for i, d in enumerate(ranked))
        )
    # the qrels the pool's judgments made: every pooled pair graded
    qrels = {}
    for q in queries:
        for run in runs.values():
            for d in run[q][:DEPTH]:
                qrels.setdefault(q, {})[d] = rng.choice([0, 1, 1, 2])
    (tmp_path / "judged.qrels").write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, ds in qrels.items() for d, g in ds.items())
    )
    outsider = {q: docs[::-1][:8] for q in queries}
    (tmp_path / "new.trec").write_text(
        "".join(
            f"{q} Q0 {d} {i + 1} {20 - i} newcomer\n" for q, ranked in outsider.items() for i, d in enumerate(ranked)
        )
    )
    pool = tmp_path / "pool"
    args = ["pool", str(root), "--depth", str(DEPTH), "--out", str(pool)]
    for s in runs:
        args += ["--runs", str(tmp_path / f"{s}.trec")]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    return pool, qrels, runs, outsider


def _ndcg(qrels, run):
    as_scores = {q: {d: float(100 - i) for i, d in enumerate(ranked)} for q, ranked in run.items()}
    values = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(as_scores)
    return float(np.mean([values[q]["ndcg_cut_10"] if q in values else 0.0 for q in qrels]))


def _expected(qrels, runs, groups):
    unit = {s: groups.get(s, s) for s in runs}
    full = {s: _ndcg(qrels, run) for s, run in runs.items()}
    rows = {}
    for s, run in runs.items():
        removed = set()  # what the unit (s, or every system of its group) pooled and no other system did
        members = [m for m in runs if unit[m] == unit[s]]
        others = [o for o in runs if unit[o] != unit[s]]
        for q in qrels:
            for m in members:
                for d in runs[m][q][:DEPTH]:
                    if all(d not in runs[o][q][:DEPTH] for o in others):
                        removed.add((q, d))
        reduced = {q: {d: g for d, g in ds.items() if (q, d) not in removed} for q, ds in qrels.items()}
        left = _ndcg(reduced, run)
        table = {**{o: full[o] for o in runs if o != s}, s: left}
        rank = sorted(table, key=lambda n: (-table[n], n)).index(s) + 1
        rows[s] = (full[s], left, rank, len(removed))
    return rows


@pytest.mark.parametrize("groups", [{}, {"alpha": "team1", "beta": "team1"}])
def test_leave_one_out_matches_the_test_written_by_hand(tmp_path, groups):
    pool, qrels, runs, _ = _dataset(tmp_path)
    args = ["judgments", "reusability", str(pool), str(tmp_path / "judged.qrels"), "--json"]
    for system, group in groups.items():
        args += ["--group", f"{system}={group}"]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    got = {row["system"]: row for row in json.loads(result.output)["rows"]}
    expected = _expected(qrels, runs, groups)
    assert set(got) == set(expected)
    for system, (full, left, rank, removed) in expected.items():
        assert got[system]["score"] == pytest.approx(full)
        assert got[system]["score_left_out"] == pytest.approx(left)
        assert got[system]["rank_left_out"] == rank
        assert got[system]["removed"] == removed
    assert any(row["removed"] for row in got.values())  # the test removed something


def test_a_run_outside_the_pool_gets_a_warning_with_judged_at_k(tmp_path):
    pool, qrels, _, outsider = _dataset(tmp_path)
    result = invoke(
        ["judgments", "reusability", str(pool), str(tmp_path / "judged.qrels"), "--runs", str(tmp_path / "new.trec")],
    )
    assert result.exit_code == 0, result.output
    unjudged = sum(1 for q in qrels for d in outsider[q][:10] if d not in qrels[q])
    # Judged@k as ir_measures defines it: the judged share of the top k documents retrieved (8 here)
    judged_at_10 = np.mean([sum(d in qrels[q] for d in outsider[q][:10]) / len(outsider[q][:10]) for q in qrels])
    line = next(line for line in result.output.splitlines() if line.startswith("WARNING newcomer"))
    assert f"Judged@10 {judged_at_10:.3f}, {unjudged} of its top-10 documents nobody judged" in line
    assert "leave-one-system-out on the depth-3 pool" in result.output


def test_a_group_naming_no_pool_system_is_one_line(tmp_path):
    pool, *_ = _dataset(tmp_path)
    result = invoke(["judgments", "reusability", str(pool), str(tmp_path / "judged.qrels"), "--group", "omega=team1"])
    assert result.exit_code == 1
    assert "--group 'omega': no such system in the pool (its systems: alpha, beta, gamma, delta)" in result.output


def test_report_pool_flags_a_result_whose_system_the_pool_was_built_without(tmp_path):
    from harness.judging.reusability import check_against_pool
    from harness.records import Qrels, Run

    pool, qrels, runs, outsider = _dataset(tmp_path)

    def as_run(ranked, name):
        return Run({q: {d: float(100 - i) for i, d in enumerate(docs)} for q, docs in ranked.items()}, name)

    pooled = {name: as_run(r, name) for name, r in runs.items()}
    judged = Qrels(qrels)
    inside = check_against_pool("alpha", as_run(runs["alpha"], "alpha"), judged, pooled, DEPTH, DEPTH)
    outside = check_against_pool("newcomer", as_run(outsider, "newcomer"), judged, pooled, DEPTH, DEPTH)
    assert inside.in_pool and inside.unjudged == 0 and inside.judged_at_k == pytest.approx(1.0)
    unjudged = sum(1 for q in qrels for d in outsider[q][:DEPTH] if d not in qrels[q])
    assert not outside.in_pool and outside.unjudged == unjudged > 0
    assert outside.judged_at_k == pytest.approx(
        np.mean([sum(d in qrels[q] for d in outsider[q][:DEPTH]) / DEPTH for q in qrels])
    )
    assert outside.format_text().startswith("WARNING newcomer: scored on qrels built without it")


# --- every column against brute force, on pools where leaving a system out changes things ------------------------


@st.composite
def _pools(draw):
    """Runs (distinct scores, so the ranked order is the given one), a depth, groups, and qrels grading every pooled
    pair (grades 0-2: a grade of 1 is relevant, so "≥ 1" and "≥ 2" differ) plus some pairs no system pooled."""
    docs = [f"d{i}" for i in range(8)]
    queries = [f"q{j}" for j in range(draw(st.integers(1, 3)))]
    systems = [f"s{i}" for i in range(draw(st.integers(2, 5)))]
    runs = {s: {q: draw(st.lists(st.sampled_from(docs), min_size=1, max_size=6, unique=True)) for q in queries}
            for s in systems}  # fmt: skip
    depth = draw(st.integers(1, 4))
    grade = st.sampled_from([0, 1, 1, 2])
    qrels = {q: {d: draw(grade) for s in systems for d in runs[s][q][:depth]} for q in queries}
    for q in queries:
        for d in draw(st.lists(st.sampled_from(docs), max_size=2)):
            qrels[q].setdefault(d, draw(grade))
    grouped = draw(st.booleans())
    groups = {s: draw(st.sampled_from(["g1", "g2"])) for s in systems if draw(st.booleans())} if grouped else {}
    return runs, depth, qrels, groups


def _scores(ranked: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    return {q: {d: float(100 - i) for i, d in enumerate(docs)} for q, docs in ranked.items()}


@settings(derandomize=True, deadline=None, max_examples=60)
@given(_pools())
def test_every_column_of_the_leave_one_out_table_is_the_brute_force_one(pool):
    from harness.judging.reusability import leave_one_out
    from harness.records import Qrels, Run

    runs, depth, qrels, groups = pool
    measured = leave_one_out(
        Qrels(qrels), {s: Run(_scores(r), s) for s, r in runs.items()}, depth, "nDCG@10", groups or None
    )
    unit = {s: groups.get(s, s) for s in runs}
    full = {s: _ndcg(qrels, r) for s, r in runs.items()}
    full_rank = {s: i + 1 for i, s in enumerate(sorted(full, key=lambda s: (-full[s], s)))}
    rows = {row.system: row for row in measured.rows}
    assert sorted(rows) == sorted(runs) and measured.by_group == bool(groups)
    for s, run in runs.items():
        removed = set()
        for q in qrels:
            for m in (m for m in runs if unit[m] == unit[s]):
                for d in runs[m][q][:depth]:
                    pooled_by_others = any(d in runs[o][q][:depth] for o in runs if unit[o] != unit[s])
                    if not pooled_by_others and d in qrels[q]:
                        removed.add((q, d))
        left = _ndcg({q: {d: g for d, g in ds.items() if (q, d) not in removed} for q, ds in qrels.items()}, run)
        table = {**full, s: left}
        row = rows[s]
        assert row.unit == unit[s]
        assert row.score == pytest.approx(full[s]) and row.score_left_out == pytest.approx(left)
        assert row.delta == pytest.approx(left - full[s])
        assert row.rank == full_rank[s]
        assert row.rank_left_out == sorted(table, key=lambda n: (-table[n], n)).index(s) + 1
        assert row.rank_change == row.rank_left_out - full_rank[s]
        assert row.removed == len(removed)
        assert row.removed_relevant == sum(1 for q, d in removed if qrels[q][d] >= 1)
