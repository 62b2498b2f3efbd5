"""System-ranking agreement between two qrels: τ-b against scipy's kendalltau, τ_ap against a brute-force loop
of Yilmaz, Aslam & Robertson's (2008) formula, the top-k overlap by hand, the bootstrap over queries against a
brute-force resampling loop; `judgments rankings` end to end with scores from pytrec_eval."""

from __future__ import annotations

import random

import numpy as np
import pytest
import pytrec_eval
from click.testing import CliRunner
from scipy.stats import kendalltau

from harness.cli import cli
from harness.evaluation.rankings import compare_rankings, kendall_tau_b, tau_ap, top_k_overlap


def _by_name_order(scores: dict[str, float]) -> list[str]:
    # The documented tie rule, written again here: best score first, equal scores by name.
    return sorted(scores, key=lambda n: (-scores[n], n))


def _brute_tau_ap(truth: dict[str, float], estimated: dict[str, float]) -> float:
    # τ_ap = 2/(N-1) Σ_{i=2..N} C(i)/(i-1) − 1, C(i): items above rank i (in the estimated list) that the truth
    # also ranks above the item at rank i.
    listed = _by_name_order(estimated)
    truth_position = {name: p for p, name in enumerate(_by_name_order(truth))}
    n = len(listed)
    total = 0.0
    for i in range(2, n + 1):
        item = listed[i - 1]
        correct = 0
        for above in listed[: i - 1]:
            if truth_position[above] < truth_position[item]:
                correct += 1
        total += correct / (i - 1)
    return 2.0 / (n - 1) * total - 1.0


@pytest.mark.parametrize("seed", range(8))
def test_kendall_tau_b_matches_scipy_with_ties(seed):
    rng = random.Random(seed)
    n = rng.randint(3, 12)
    first = [rng.choice([0.1, 0.2, 0.3, 0.4, 0.5]) for _ in range(n)]  # ties on purpose
    second = [x + rng.choice([-0.1, 0.0, 0.1]) for x in first]
    expected = kendalltau(first, second, variant="b").statistic
    assert kendall_tau_b(first, second) == pytest.approx(expected)


def test_kendall_tau_b_extremes():
    assert kendall_tau_b([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert kendall_tau_b([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert kendall_tau_b([1, 1, 1], [1, 2, 3]) != kendall_tau_b([1, 1, 1], [1, 2, 3])  # undefined: NaN


@pytest.mark.parametrize("seed", range(10))
def test_tau_ap_matches_a_brute_force_loop_of_the_formula(seed):
    rng = random.Random(seed)
    names = [f"s{i}" for i in range(rng.randint(2, 10))]
    truth = {n: rng.choice([0.1, 0.2, 0.3, 0.4]) for n in names}  # ties: broken by name in both
    estimated = {n: truth[n] + rng.uniform(-0.15, 0.15) for n in names}
    assert tau_ap(truth, estimated) == pytest.approx(_brute_tau_ap(truth, estimated))


def test_tau_ap_weighs_a_swap_at_the_top_more_than_one_at_the_bottom():
    truth = {"a": 4, "b": 3, "c": 2, "d": 1}
    top_swapped = {"a": 3, "b": 4, "c": 2, "d": 1}
    bottom_swapped = {"a": 4, "b": 3, "c": 1, "d": 2}
    assert kendall_tau_b(list(top_swapped.values()), list(truth.values())) == pytest.approx(
        kendall_tau_b(list(bottom_swapped.values()), list(truth.values()))
    )
    assert tau_ap(truth, top_swapped) < tau_ap(truth, bottom_swapped)
    assert tau_ap(truth, truth) == pytest.approx(1.0)


def test_top_k_overlap_by_hand():
    a = {"x": 0.9, "y": 0.8, "z": 0.7, "w": 0.1}
    b = {"x": 0.1, "y": 0.8, "z": 0.7, "w": 0.9}
    assert top_k_overlap(a, b, 2) == pytest.approx(0.5)  # {x, y} vs {w, y}
    assert top_k_overlap(a, b, 3) == pytest.approx(2 / 3)  # {x, y, z} vs {w, y, z}
    assert top_k_overlap(a, a, 10) == pytest.approx(1.0)  # k above the systems: all of them


def _per_query(seed: int, n_systems: int = 5, n_queries: int = 40):
    rng = np.random.default_rng(seed)
    quality = rng.uniform(0.2, 0.6, n_systems)
    names = [f"sys{i}" for i in range(n_systems)]
    a = {
        n: {f"q{j}": float(np.clip(quality[i] + rng.normal(0, 0.2), 0, 1)) for j in range(n_queries)}
        for i, n in enumerate(names)
    }
    b = {n: {q: float(np.clip(v + rng.normal(0, 0.1), 0, 1)) for q, v in a[n].items()} for n in names}
    return names, a, b


def test_the_bootstrap_over_queries_is_the_brute_force_resampling_loop():
    names, a, b = _per_query(1)
    queries = sorted(a[names[0]])
    measured = compare_rankings(a, b, "nDCG@10", top_k=2, rounds=200, seed=5)
    draws = np.random.default_rng(5).integers(0, len(queries), size=(200, len(queries)))
    taus, aps = [], []
    for row in draws:
        chosen = [queries[i] for i in row]
        mean_a = {n: np.mean([a[n][q] for q in chosen]) for n in names}
        mean_b = {n: np.mean([b[n][q] for q in chosen]) for n in names}
        taus.append(kendalltau([mean_a[n] for n in names], [mean_b[n] for n in names], variant="b").statistic)
        aps.append(_brute_tau_ap(mean_a, mean_b))
    assert (measured.tau.low, measured.tau.high) == pytest.approx(tuple(np.quantile(taus, [0.025, 0.975])))
    assert (measured.tau_ap.low, measured.tau_ap.high) == pytest.approx(tuple(np.quantile(aps, [0.025, 0.975])))
    full_a = {n: np.mean(list(a[n].values())) for n in names}
    full_b = {n: np.mean(list(b[n].values())) for n in names}
    assert measured.tau.value == pytest.approx(
        kendalltau([full_a[n] for n in names], [full_b[n] for n in names], variant="b").statistic
    )
    assert measured.tau.low <= measured.tau.value <= measured.tau.high
    assert [s.rank_a for s in sorted(measured.systems, key=lambda s: -full_a[s.name])] == [1, 2, 3, 4, 5]


def test_more_queries_narrow_the_interval():
    widths = []
    for n_queries in (20, 400):
        _, a, b = _per_query(2, n_queries=n_queries)
        measured = compare_rankings(a, b, rounds=300)
        widths.append(measured.tau.high - measured.tau.low)
    assert widths[0] > widths[1]


# --- the command -------------------------------------------------------------------------------------------------


def _files(tmp_path):
    rng = random.Random(4)
    human, llm = {}, {}
    for q in range(12):
        for d in range(8):
            grade = rng.choice([0, 0, 1, 2])
            human.setdefault(f"q{q}", {})[f"d{d}"] = grade
            llm.setdefault(f"q{q}", {})[f"d{d}"] = max(0, min(2, grade + rng.choice([-1, 0, 0, 1])))
    llm["q99"] = {"d1": 1}  # judged by B only: left out
    (tmp_path / "human.qrels").write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, docs in human.items() for d, g in docs.items())
    )
    (tmp_path / "llm.csv").write_text(
        "query_id,doc_id,grade,annotator\n"
        + "".join(f"{q},{d},{g},llm:x\n" for q, docs in llm.items() for d, g in docs.items())
    )
    runs = {}
    for s in range(4):
        run = {}
        for q in human:
            docs = [f"d{d}" for d in range(8)]
            rng.shuffle(docs)
            run[q] = {doc: float(10 - i) for i, doc in enumerate(docs)}
        runs[f"sys{s}"] = run
        (tmp_path / f"sys{s}.trec").write_text(
            "".join(
                f"{q} Q0 {d} {i + 1} {v} sys{s}\n" for q, docs in run.items() for i, (d, v) in enumerate(docs.items())
            )
        )
    return human, {q: v for q, v in llm.items() if q != "q99"}, runs


def test_rankings_command_prints_scores_ranks_tau_and_intervals(tmp_path):
    human, llm, runs = _files(tmp_path)
    args = ["judgments", "rankings", str(tmp_path / "human.qrels"), str(tmp_path / "llm.csv")]
    for s in runs:
        args += ["--runs", str(tmp_path / f"{s}.trec")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    scores = {}
    for label, qrels in (("a", human), ("b", llm)):
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"})
        scores[label] = {
            s: np.mean([v["ndcg_cut_10"] for v in evaluator.evaluate(run).values()]) for s, run in runs.items()
        }
    for s in runs:
        row = next(line.split() for line in result.output.splitlines() if line.split()[:1] == [s])
        assert float(row[1]) == pytest.approx(scores["a"][s], abs=5e-5)
        assert float(row[3]) == pytest.approx(scores["b"][s], abs=5e-5)
    tau = kendalltau([scores["a"][s] for s in runs], [scores["b"][s] for s in runs], variant="b").statistic
    assert f"Kendall's τ-b {tau:.3f} [" in result.output
    assert "over the 12 queries both qrels judge" in result.output
    assert "Voorhees 2000" in result.output


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("one-run", "--runs: 1 run given; ranking needs two or more systems"),
        ("no-shared-query", "none of its 1 judged queries is judged in"),
    ],
    ids=["one-run", "no-shared-query"],
)
def test_bad_input_is_one_line_before_any_scoring(tmp_path, case, expected):
    _files(tmp_path)
    other = tmp_path / "other.qrels"
    other.write_text("zz 0 d1 1\n")
    b = other if case == "no-shared-query" else tmp_path / "llm.csv"
    runs = ["--runs", str(tmp_path / "sys0.trec")] + (
        [] if case == "one-run" else ["--runs", str(tmp_path / "sys1.trec")]
    )
    result = CliRunner().invoke(cli, ["judgments", "rankings", str(tmp_path / "human.qrels"), str(b), *runs])
    assert result.exit_code == 1
    assert expected in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1
