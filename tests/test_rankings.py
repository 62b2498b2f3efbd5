"""System-ranking agreement between two qrels: τ-b against scipy's kendalltau, τ_ap against a brute-force loop
of Yilmaz, Aslam & Robertson's (2008) formula, the top-k overlap by hand, the bootstrap over queries against a
brute-force resampling loop; `judgments rankings` end to end with scores from pytrec_eval."""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pytest
import pytrec_eval
from cli_runner import invoke
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import kendalltau

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
    result = invoke(args)
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
    result = invoke(["judgments", "rankings", str(tmp_path / "human.qrels"), str(b), *runs])
    assert result.exit_code == 1
    assert expected in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1


# --- differential cases: rankings that disagree, ties everywhere, seeds -----------------------------------------

_GRID = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])  # few values: ties at every cut, sums exact in binary


def _same(x: float, y: float) -> bool:
    return (x != x and y != y) or x == pytest.approx(y)


@settings(derandomize=True, deadline=None, max_examples=120)
@given(st.lists(st.tuples(_GRID, _GRID), min_size=0, max_size=12))
def test_kendall_tau_b_is_scipys_variant_b_on_lists_full_of_ties(pairs):
    first, second = [x for x, _ in pairs], [y for _, y in pairs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns where τ is undefined (fewer than two items)
        expected = kendalltau(first, second, variant="b").statistic if len(pairs) >= 2 else math.nan
    assert _same(kendall_tau_b(first, second), float(expected))


def test_tau_ap_takes_its_first_argument_as_the_reference():
    # A ranks a > b > c > d, B ranks b > c > d > a: B's list b, c, d, a has C = 1, 2, 0 against A (a is above
    # nobody in A's truth), τ_ap = 2/3·(1/1 + 2/2 + 0/3) − 1 = 1/3; with B the reference, −2/9.
    a, b = {"a": 4, "b": 3, "c": 2, "d": 1}, {"a": 1, "b": 4, "c": 3, "d": 2}
    assert _brute_tau_ap(a, b) == pytest.approx(1 / 3) and _brute_tau_ap(b, a) == pytest.approx(-2 / 9)
    assert tau_ap(a, b) == pytest.approx(1 / 3)
    assert tau_ap(b, a) == pytest.approx(-2 / 9)


@st.composite
def _two_rankings(draw):
    names = [f"s{i}" for i in range(draw(st.integers(2, 9)))]
    reference = {n: draw(_GRID) for n in names}  # ties: broken by name, in both rankings
    other = dict(zip(names, draw(st.permutations([float(i) for i in range(len(names))]))))
    return reference, other


@settings(derandomize=True, deadline=None, max_examples=150)
@given(_two_rankings())
def test_tau_ap_is_the_papers_loop_with_the_reference_first(rankings):
    reference, other = rankings
    assert tau_ap(reference, other) == pytest.approx(_brute_tau_ap(reference, other))
    assert tau_ap(other, reference) == pytest.approx(_brute_tau_ap(other, reference))


def _brute_overlap(first: dict[str, float], second: dict[str, float], k: int) -> float:
    k = min(k, len(first))
    top_first, top_second = set(_by_name_order(first)[:k]), set(_by_name_order(second)[:k])
    return len([n for n in top_first if n in top_second]) / k


@st.composite
def _per_query_scores(draw):
    names = [f"s{i}" for i in range(draw(st.integers(2, 6)))]
    queries = [f"q{j}" for j in range(draw(st.integers(1, 7)))]
    a = {n: {q: draw(_GRID) for q in queries} for n in names}
    b = {n: {q: draw(_GRID) for q in queries} for n in names}
    return a, b, draw(st.integers(1, 4)), draw(st.integers(1, 2**31))


@settings(derandomize=True, deadline=None, max_examples=60)
@given(_per_query_scores())
def test_every_figure_and_interval_of_compare_rankings_is_the_brute_force_bootstrap(case):
    a, b, k, seed = case
    names, queries = sorted(a), sorted(next(iter(a.values())))
    rounds = 40
    measured = compare_rankings(a, b, top_k=k, rounds=rounds, seed=seed)

    def figures(chosen: list[str]) -> tuple[float, float, float]:
        mean_a = {n: sum(a[n][q] for q in chosen) / len(chosen) for n in names}
        mean_b = {n: sum(b[n][q] for q in chosen) / len(chosen) for n in names}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tau = float(kendalltau([mean_a[n] for n in names], [mean_b[n] for n in names], variant="b").statistic)
        return tau, _brute_tau_ap(mean_a, mean_b), _brute_overlap(mean_a, mean_b, k)

    draws = np.random.default_rng(seed).integers(0, len(queries), size=(rounds, len(queries)))
    resampled = [figures([queries[i] for i in row]) for row in draws]
    for position, interval in enumerate((measured.tau, measured.tau_ap, measured.overlap)):
        assert _same(interval.value, figures(queries)[position])
        values = [v[position] for v in resampled if v[position] == v[position]]
        if values:
            assert (interval.low, interval.high) == pytest.approx(tuple(np.quantile(values, [0.025, 0.975])))
        else:
            assert interval.low != interval.low and interval.undefined == rounds
    for scores, field in ((a, "rank_a"), (b, "rank_b")):
        means = {n: sum(scores[n].values()) / len(queries) for n in names}
        expected = {n: i + 1 for i, n in enumerate(_by_name_order(means))}
        assert {s.name: getattr(s, field) for s in measured.systems} == expected


def test_compare_rankings_takes_a_as_the_reference_of_tau_ap():
    # Every query ranks a > b > c > d under A and b > c > d > a under B: τ_ap 1/3 with A the reference.
    scores_a, scores_b = {"a": 0.9, "b": 0.7, "c": 0.5, "d": 0.3}, {"a": 0.2, "b": 0.8, "c": 0.6, "d": 0.4}
    a = {n: {f"q{j}": v for j in range(5)} for n, v in scores_a.items()}
    b = {n: {f"q{j}": v for j in range(5)} for n, v in scores_b.items()}
    measured = compare_rankings(a, b, rounds=20)
    assert measured.tau_ap.value == pytest.approx(_brute_tau_ap(scores_a, scores_b)) == pytest.approx(1 / 3)
    assert "τ_ap (A the reference) 0.333 [0.333, 0.333]" in measured.format_text()
    assert compare_rankings(b, a, rounds=20).tau_ap.value == pytest.approx(-2 / 9)


def test_each_interval_follows_its_seed():
    # Systems of one quality on few queries: every figure swings from resample to resample.
    rng = np.random.default_rng(3)
    a = {f"s{i}": {f"q{j}": float(rng.uniform()) for j in range(8)} for i in range(6)}
    b = {n: {q: float(rng.uniform()) for q in row} for n, row in a.items()}
    by_seed = {seed: compare_rankings(a, b, top_k=3, rounds=60, seed=seed) for seed in range(1, 6)}
    assert compare_rankings(a, b, top_k=3, rounds=60, seed=1) == by_seed[1]
    for figure in ("tau", "tau_ap", "overlap"):
        bounds = {(getattr(m, figure).low, getattr(m, figure).high) for m in by_seed.values()}
        assert len(bounds) > 1, figure  # an interval drawn with one seed whatever the seed given has one
