"""Rank resolution (`harness.evaluation.resolution`) against independent references: scipy's ``ttest_rel`` and
``permutation_test``, statsmodels' ``multipletests``, and brute-force loops over the same seeded draws."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import HarnessError
from harness.evaluation.resolution import ACROSS, Settings, letter_display, resolve, resolve_across
from harness.evaluation.significance import adjust, bootstrap_test, randomization_test, t_test

GRID = [0.0, 0.25, 0.5, 0.75, 1.0]  # scores on a grid: ties in queries, in means and in resampled means


def _matrix(systems: int, queries: int, seed: int, grid: bool = True) -> np.ndarray:
    """Systems × queries scores where some systems are copies, some are shifted and some differ a little."""
    rng = np.random.default_rng(seed)
    base = rng.choice(GRID, size=queries) if grid else rng.random(queries)
    rows = []
    for s in range(systems):
        kind = rng.integers(0, 4)
        if kind == 0 and rows:  # a copy of another system: never separable from it
            rows.append(rows[rng.integers(0, len(rows))].copy())
        elif kind == 1:  # the base, some queries moved up
            rows.append(np.where(rng.random(queries) < 0.5, np.minimum(base + 0.25 * (s % 3 + 1), 1.0), base))
        else:
            rows.append(rng.choice(GRID, size=queries) if grid else rng.random(queries))
    return np.asarray(rows, dtype=np.float64)


matrices = st.builds(_matrix, st.integers(2, 6), st.integers(2, 30), st.integers(0, 2**32 - 1), st.booleans())


# --------------------------------------------------------------------------- the tests of one pair


@settings(derandomize=True, deadline=None, max_examples=40)
@given(matrices)
def test_every_pair_under_the_t_test_is_scipys_ttest_rel(scores):
    from scipy import stats

    names = [f"s{k}" for k in range(len(scores))]
    resolution = resolve(names, scores, settings=Settings(test="t"))
    for (i, a), (j, b) in combinations(enumerate(names), 2):
        d = scores[i] - scores[j]
        if not d.any():
            expected = 1.0
        elif d.max() - d.min() < 1e-15:
            expected = 0.0  # a constant shift: zero variance, infinite t (scipy says NaN)
        else:
            expected = stats.ttest_rel(scores[i], scores[j]).pvalue
        assert resolution.pair(a, b).p == pytest.approx(expected, rel=1e-9, abs=1e-300)
        assert t_test(scores[j], scores[i]) == resolution.pair(a, b).p


def _sign_flip_p(a, b, rounds, seed):
    """The randomization test written out: the same signs as numpy draws them for the seed, one round at a time."""
    diffs = [y - x for x, y in zip(a, b)]
    if not any(diffs):
        return 1.0
    observed = abs(math.fsum(diffs) / len(diffs))
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(rounds, len(diffs)))
    exceed = sum(abs(math.fsum(s * d for s, d in zip(row, diffs)) / len(diffs)) >= observed - 1e-12 for row in signs)
    return (exceed + 1) / (rounds + 1)


@settings(derandomize=True, deadline=None, max_examples=25)
@given(matrices, st.integers(0, 2**32 - 1), st.integers(1, 300))
def test_every_pair_under_the_randomization_test_is_the_sign_flip_loop_over_the_same_draws(scores, seed, rounds):
    names = [f"s{k}" for k in range(len(scores))]
    resolution = resolve(names, scores, settings=Settings(rounds=rounds, seed=seed))
    for (i, a), (j, b) in combinations(enumerate(names), 2):
        expected = _sign_flip_p(scores[i], scores[j], rounds, seed)
        assert resolution.pair(a, b).p == pytest.approx(expected, rel=1e-12)
        assert randomization_test(scores[i], scores[j], rounds, seed) == resolution.pair(a, b).p


@pytest.mark.parametrize("seed", range(6))
def test_the_randomization_test_is_scipys_exact_permutation_test_within_monte_carlo_error(seed):
    """scipy enumerates all 2^n sign patterns of n ≤ 10 queries; ours samples 20,000 of them."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    a = rng.choice(GRID, size=10)
    b = np.clip(a + rng.choice([-0.25, 0.0, 0.25, 0.5], size=10), 0, 1)
    exact = stats.permutation_test(
        (b, a),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=np.inf,
        alternative="two-sided",
    ).pvalue
    rounds = 20_000
    ours = resolve(["a", "b"], np.asarray([a, b]), settings=Settings(rounds=rounds, seed=seed)).pair("b", "a").p
    assert abs(ours - exact) <= 4 * math.sqrt(max(exact * (1 - exact), 1e-4) / rounds) + 1 / rounds


@settings(derandomize=True, deadline=None, max_examples=25)
@given(matrices, st.integers(0, 2**32 - 1), st.integers(1, 200))
def test_every_pair_under_the_bootstrap_test_is_the_shifted_bootstrap_loop_over_the_same_resamples(
    scores, seed, rounds
):
    names = [f"s{k}" for k in range(len(scores))]
    resolution = resolve(names, scores, settings=Settings(test="bootstrap", rounds=rounds, seed=seed))
    rows = np.random.default_rng(seed).integers(0, scores.shape[1], size=(rounds, scores.shape[1]))
    for (i, a), (j, b) in combinations(enumerate(names), 2):
        d = scores[i] - scores[j]
        observed = math.fsum(d) / len(d)
        if not d.any():
            expected = 1.0
        else:
            exceed = sum(abs(math.fsum(d[row]) / len(d) - observed) >= abs(observed) - 1e-12 for row in rows)
            expected = (exceed + 1) / (rounds + 1)
        pair = resolution.pair(a, b)
        assert pair.p == pytest.approx(expected, rel=1e-12)
        assert bootstrap_test(scores[j], scores[i], rounds, seed) == pair.p
        # The difference's interval: numpy's linear quantiles of the same resampled differences.
        differences = [math.fsum(d[row]) / len(d) for row in rows]
        assert (pair.low, pair.high) == pytest.approx(tuple(np.quantile(differences, [0.025, 0.975])), abs=1e-12)
        assert pair.difference == pytest.approx(observed, abs=1e-12)


# --------------------------------------------------------------------------- corrections


@settings(derandomize=True, deadline=None, max_examples=60)
@given(
    st.lists(st.sampled_from([0.0, 1e-4, 0.001, 0.01, 0.02, 0.04, 0.05, 0.3, 0.9, 1.0]) | st.floats(0, 1), max_size=30),
    st.sampled_from(["holm", "bh", "bonferroni"]),
)
def test_corrections_are_statsmodels_multipletests(p_values, correction):
    from statsmodels.stats.multitest import multipletests

    method = {"holm": "holm", "bh": "fdr_bh", "bonferroni": "bonferroni"}[correction]
    expected = multipletests(p_values, method=method)[1].tolist() if p_values else []
    assert adjust(p_values, correction) == pytest.approx(expected, abs=1e-12)
    assert adjust(p_values, "none") == p_values


def test_an_unknown_correction_is_refused_naming_the_known_ones():
    with pytest.raises(HarnessError, match="holm, bh, bonferroni, none"):
        adjust([0.1], "sidak")


# --------------------------------------------------------------------------- ranks and letters


def _brute_ranks(means: list[float]) -> list[int]:
    rounded = [round(m, 12) for m in means]
    return [1 + sum(other > mine for other in rounded) for mine in rounded]


def _brute_rank_intervals(datasets: list[np.ndarray], rounds: int, seed: int, fresh: bool) -> list[tuple[int, int]]:
    """Each system's 2.5 % (floor) and 97.5 % (ceil) quantile of its ranks over the stratified resamples: one
    generator across datasets in order (or one per dataset with `fresh`), every resample of one dataset first."""
    shared = np.random.default_rng(seed)
    draws = []
    for block in datasets:
        generator = np.random.default_rng(seed) if fresh else shared
        draws.append(generator.integers(0, block.shape[1], size=(rounds, block.shape[1])))
    systems = datasets[0].shape[0]
    ranks = [[] for _ in range(systems)]
    for r in range(rounds):
        total = [0.0] * systems
        for block, rows in zip(datasets, draws):
            for s in range(systems):
                total[s] += math.fsum(block[s][rows[r]]) / block.shape[1]
        for s, rank in enumerate(_brute_ranks([t / len(datasets) for t in total])):
            ranks[s].append(rank)
    return [
        (sorted(values)[math.floor((rounds - 1) * 0.025)], sorted(values)[math.ceil((rounds - 1) * 0.975)])
        for values in ranks
    ]


@settings(derandomize=True, deadline=None, max_examples=30)
@given(st.lists(matrices, min_size=1, max_size=3), st.integers(0, 2**32 - 1), st.integers(1, 120))
def test_ranks_and_rank_intervals_are_the_brute_force_stratified_bootstrap(blocks, seed, rounds):
    systems = min(len(b) for b in blocks)
    blocks = [b[:systems] for b in blocks]
    if systems < 2:
        return
    names = [f"s{k}" for k in range(systems)]
    resolution = resolve_across(names, blocks, settings=Settings(rounds=rounds, seed=seed))
    means = [math.fsum(math.fsum(b[s]) / b.shape[1] for b in blocks) / len(blocks) for s in range(systems)]
    expected_ranks = _brute_ranks(means)
    intervals = _brute_rank_intervals(blocks, rounds, seed, fresh=False)
    for s, name in enumerate(names):
        standing = resolution.standing(name)
        assert standing.mean == pytest.approx(means[s], abs=1e-12)
        assert (standing.rank, standing.rank_low, standing.rank_high) == (expected_ranks[s], *intervals[s])
    assert [s.rank for s in resolution.standings] == sorted(expected_ranks)
    assert resolution.scope == ACROSS and resolution.n_queries == sum(b.shape[1] for b in blocks)


@settings(derandomize=True, deadline=None, max_examples=20)
@given(matrices, st.integers(0, 2**32 - 1), st.integers(1, 120))
def test_one_datasets_rank_intervals_draw_from_a_generator_of_its_own(scores, seed, rounds):
    names = [f"s{k}" for k in range(len(scores))]
    resolution = resolve(names, scores, settings=Settings(rounds=rounds, seed=seed), dataset="d")
    intervals = _brute_rank_intervals([scores], rounds, seed, fresh=True)
    assert [(resolution.standing(n).rank_low, resolution.standing(n).rank_high) for n in names] == intervals
    assert resolution.scope == "d" and resolution.datasets == ("d",)


def _random_separable(order: list[str], seed: int) -> set[frozenset[str]]:
    rng = np.random.default_rng(seed)
    p = rng.choice([0.001, 0.01, 0.2, 0.8], size=(len(order), len(order)))
    alpha = rng.choice([0.005, 0.05, 0.5])
    return {frozenset((a, b)) for (i, a), (j, b) in combinations(enumerate(order), 2) if p[i, j] < alpha}


@settings(derandomize=True, deadline=None, max_examples=150)
@given(st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_letters_never_join_a_separable_pair_and_always_join_any_other(n, seed):
    order = [f"s{k}" for k in range(n)]
    separable = _random_separable(order, seed)
    letters = letter_display(order, separable)
    names = {s: set(_split_letters(letters[s])) for s in order}
    for a, b in combinations(order, 2):
        shared = names[a] & names[b]
        if frozenset((a, b)) in separable:
            assert not shared, (a, b, letters)
        else:
            assert shared, (a, b, letters)
    assert all(names[s] for s in order)
    # Letters are given in rank order: the best system holds "a", and each new letter first appears at a system
    # no better ranked than where the previous one first appeared.
    assert "a" in names[order[0]]
    first_seen = []
    for s in order:
        first_seen += [x for x in _split_letters(letters[s]) if x not in first_seen]
    assert first_seen == sorted(first_seen, key=_letter_index)


def _split_letters(text: str) -> list[str]:
    out = []
    for char in text:
        if char.isdigit():
            out[-1] += char
        else:
            out.append(char)
    return out


def _letter_index(name: str) -> int:
    import string

    alphabet = string.ascii_lowercase + string.ascii_uppercase
    return (int(name[1:]) - 1 if len(name) > 1 else 0) * len(alphabet) + alphabet.index(name[0])


def test_sixty_systems_each_separable_from_every_other_get_sixty_letters():
    order = [f"s{k}" for k in range(60)]
    letters = letter_display(order, {frozenset(p) for p in combinations(order, 2)})
    assert [letters[s] for s in order[:3]] == ["a", "b", "c"] and letters["s52"] == "a2"


@settings(derandomize=True, deadline=None, max_examples=20)
@given(matrices, st.sampled_from(["randomization", "t", "bootstrap"]), st.sampled_from(["holm", "bh", "none"]))
def test_the_letters_and_adjusted_p_of_a_resolution_follow_its_own_pairs(scores, test, correction):
    from statsmodels.stats.multitest import multipletests

    names = [f"s{k}" for k in range(len(scores))]
    chosen = Settings(test=test, correction=correction, alpha=0.05, rounds=200, seed=1)
    resolution = resolve(names, scores, settings=chosen)
    raw = [p.p for p in resolution.pairs]
    if correction != "none":
        method = {"holm": "holm", "bh": "fdr_bh"}[correction]
        assert [p.p_adjusted for p in resolution.pairs] == pytest.approx(multipletests(raw, method=method)[1].tolist())
    for pair in resolution.pairs:
        assert pair.separable == (pair.p_adjusted < 0.05)
        shared = set(resolution.standing(pair.system).letters) & set(resolution.standing(pair.other).letters)
        assert bool(shared) != pair.separable
    assert len(resolution.pairs) == len(names) * (len(names) - 1) // 2


# --------------------------------------------------------------------------- fixtures with known answers


def test_systems_far_apart_are_each_separable_and_ranked_exactly():
    rng = np.random.default_rng(0)
    base = rng.random(200) * 0.3
    scores = np.asarray([base + 0.2 * k + rng.normal(0, 0.01, 200) for k in range(4)])
    resolution = resolve(["w", "x", "y", "z"], scores, settings=Settings(rounds=2000))
    assert [(s.system, s.rank, s.rank_low, s.rank_high, s.letters) for s in resolution.standings] == [
        ("z", 1, 1, 1, "a"),
        ("y", 2, 2, 2, "b"),
        ("x", 3, 3, 3, "c"),
        ("w", 4, 4, 4, "d"),
    ]
    assert all(p.separable and p.low > 0 for p in resolution.pairs)


def test_copies_of_one_system_are_never_separable_and_share_every_rank():
    scores = np.tile(np.random.default_rng(1).random(50), (3, 1))
    resolution = resolve(["a", "b", "c"], scores)
    assert {(s.rank, s.rank_low, s.rank_high, s.letters) for s in resolution.standings} == {(1, 1, 1, "a")}
    assert all(p.p == 1.0 and not p.separable and p.low == p.high == 0.0 for p in resolution.pairs)


def test_across_one_dataset_is_that_datasets_resolution():
    scores = _matrix(5, 40, 3)
    names = list("abcde")
    one = resolve(names, scores, settings=Settings(rounds=300))
    across = resolve_across(names, [scores], settings=Settings(rounds=300))
    assert one.standings == across.standings and one.pairs == across.pairs


def test_the_t_test_across_datasets_is_welch_satterthwaite_over_the_per_dataset_means():
    from scipy import stats

    rng = np.random.default_rng(4)
    blocks = [rng.random((2, n)) for n in (30, 55, 80)]
    resolution = resolve_across(["a", "b"], blocks, settings=Settings(test="t"))
    d = [b[1] - b[0] for b in blocks]
    v = [np.var(x, ddof=1) / len(x) for x in d]
    t = sum(x.mean() for x in d) / math.sqrt(sum(v))
    df = sum(v) ** 2 / sum(vi**2 / (len(x) - 1) for vi, x in zip(v, d))
    assert resolution.pair("b", "a").p == pytest.approx(2 * stats.t.sf(abs(t), df), rel=1e-9)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"names": ["only"]}, "two or more systems"),
        ({"names": ["a", "a"]}, "named twice"),
        ({"settings": Settings(test="wilcoxon")}, "randomization, t, bootstrap"),
        ({"settings": Settings(correction="sidak")}, "holm, bh, bonferroni, none"),
        ({"settings": Settings(alpha=1.0)}, "strictly between 0 and 1"),
        ({"settings": Settings(alpha=0.0)}, "strictly between 0 and 1"),
        ({"settings": Settings(rounds=0)}, "must be positive"),
        ({"scores": np.zeros((2, 0))}, "at least one query"),
    ],
)
def test_bad_input_is_one_line(change, message):
    arguments = {"names": ["a", "b"], "scores": np.zeros((2, 3)), "settings": Settings()}
    arguments.update(change)
    if len(arguments["names"]) == 1:
        arguments["scores"] = np.zeros((1, 3))
    with pytest.raises(HarnessError, match=message):
        resolve(arguments["names"], arguments["scores"], settings=arguments["settings"])


# --------------------------------------------------------------------------- report --resolution, every format

SYSTEMS6 = ["bm25", "dense", "hybrid", "copy", "weak", "noise"]


@pytest.fixture(scope="module")
def paper(tmp_path_factory):
    """Six systems on two datasets (SciFact's and NFCorpus' names; other queries): some far apart, one a copy."""
    from test_comparison import write_result

    root = tmp_path_factory.mktemp("paper")
    rng = np.random.default_rng(11)
    scores = {}
    for dataset, n in (("scifact", 60), ("nfcorpus", 45)):
        base = rng.choice(GRID, size=n)
        rows = {
            "bm25": base,
            "dense": np.clip(base + rng.choice([0, 0.25], size=n), 0, 1),
            "hybrid": np.clip(base + rng.choice([0, 0.25, 0.5], size=n), 0, 1),
            "copy": base.copy(),
            "weak": np.clip(base - rng.choice([0, 0.25, 0.5], size=n), 0, 1),
            "noise": rng.choice(GRID, size=n),
        }
        for system, values in rows.items():
            write_result(root, dataset, system, {f"q{k}": float(v) for k, v in enumerate(values)})
        order = sorted(range(n), key=lambda k: f"q{k}")  # the queries as the results pair them: by id
        scores[dataset] = {system: values[order] for system, values in rows.items()}
    return root, scores


def _cli(*args: str):
    from cli_runner import invoke

    return invoke(["report", *map(str, args)])


def test_a_paper_table_of_six_systems_on_two_datasets_equals_the_references_in_every_format(paper):
    """p = `compare`'s (and the sign-flip loop's), adjusted p = statsmodels' Holm over each scope's 15 pairs, rank
    intervals = the brute-force bootstrap, letters = what the adjusted p allow; CSV (both layouts), JSON, LaTeX and
    the HTML page carry the same figures."""
    import io
    import json

    import pandas as pd
    from statsmodels.stats.multitest import multipletests

    root, scores = paper
    rounds, seed = 300, 5
    options = ("--resolution", "--rounds", rounds, "--seed", seed)
    data = json.loads(_cli(root, *options, "--format", "json").stdout)
    assert [s["scope"] for s in data["scopes"]] == ["nfcorpus", "scifact", ACROSS]  # registry order
    long = pd.read_csv(io.StringIO(_cli(root, *options, "--format", "csv", "--layout", "long").stdout))
    wide = pd.read_csv(io.StringIO(_cli(root, *options, "--format", "csv").stdout), header=[0, 1], index_col=0)
    for scope in data["scopes"]:
        datasets = scope["datasets"]
        blocks = [np.asarray([scores[d][s] for s in SYSTEMS6]) for d in datasets]
        fresh = scope["scope"] != ACROSS
        intervals = dict(zip(SYSTEMS6, _brute_rank_intervals(blocks, rounds, seed, fresh)))
        for standing in scope["systems"]:
            name = standing["system"]
            assert (standing["rank_low"], standing["rank_high"]) == intervals[name]
            row = wide.loc[name]
            assert (row[(scope["scope"], "rank_low")], row[(scope["scope"], "rank_high")]) == intervals[name]
            assert row[(scope["scope"], "letters")] == standing["letters"]
        raw = [pair["p"] for pair in scope["pairs"]]
        holm = multipletests(raw, method="holm")[1]
        for pair, expected in zip(scope["pairs"], holm):
            assert pair["p_adjusted"] == pytest.approx(expected, abs=1e-12)
            a, b = (SYSTEMS6.index(pair[k]) for k in ("system", "other"))
            if fresh:
                (d,) = datasets
                assert pair["p"] == randomization_test(scores[d][SYSTEMS6[b]], scores[d][SYSTEMS6[a]], rounds, seed)
                assert pair["p"] == pytest.approx(_sign_flip_p(blocks[0][b], blocks[0][a], rounds, seed), rel=1e-12)
            letters = {s["system"]: set(s["letters"]) for s in scope["systems"]}
            assert bool(letters[pair["system"]] & letters[pair["other"]]) == (pair["p_adjusted"] >= 0.05)
            rows = long[
                (long.scope == scope["scope"]) & (long.system == pair["system"]) & (long.other == pair["other"])
            ]
            assert rows.p.item() == pair["p"] and rows.p_adjusted.item() == pair["p_adjusted"]
            assert wide.loc[pair["system"], (scope["scope"], f"p adjusted vs {pair['other']}")] == pair["p_adjusted"]
    scifact = data["scopes"][1]
    assert {s["system"]: s["letters"] for s in scifact["systems"]}["copy"] == {
        s["system"]: s["letters"] for s in scifact["systems"]
    }["bm25"]
    latex = _cli(root, *options, "--format", "latex").stdout
    assert r"\textsuperscript{" in latex and "paired randomization test, 300 rounds, holm correction" in latex
    assert "Seed 5" in latex and r"$\alpha$ = 0.05" in latex
    markdown = _cli(root, *options).stdout
    assert "| hybrid |" in markdown and "Letters: systems sharing a letter are not separable" in markdown
    page = _cli(root, *options, "--format", "html").stdout
    assert page.count('class="rank-intervals"') == 3 and page.count("<line ") == 3 * len(SYSTEMS6)
    standing = next(s for s in data["scopes"][2]["systems"] if s["system"] == "noise")
    assert f"noise: rank {standing['rank']}, 95 % interval {standing['rank_low']}–{standing['rank_high']}" in page


def test_compare_and_report_give_one_p_value_for_every_test(paper):
    import json

    from cli_runner import invoke

    root, _ = paper
    first, second = root / "scifact" / "bm25" / "test.json", root / "scifact" / "hybrid" / "test.json"
    (compared,) = json.loads(
        invoke(["compare", str(first), str(second), "--rounds", "400", "--seed", "2", "--json"]).stdout
    )
    for test, key in (("randomization", "p_randomization"), ("t", "p_t_test"), ("bootstrap", "p_bootstrap")):
        data = json.loads(
            _cli(root, "--resolution", "--test", test, "--rounds", 400, "--seed", 2, "--format", "json").stdout
        )
        pairs = next(s for s in data["scopes"] if s["scope"] == "scifact")["pairs"]
        pair = next(p for p in pairs if {p["system"], p["other"]} == {"bm25", "hybrid"})
        assert pair["p"] == compared[key], test


def test_significance_against_a_baseline_carries_p_values_in_every_csv_and_a_footnote_in_latex(paper):
    import io

    import pandas as pd
    from statsmodels.stats.multitest import multipletests

    root, scores = paper
    options = ("--significance", "bm25", "--rounds", 300, "--seed", 1, "--correction", "bh")
    wide = pd.read_csv(io.StringIO(_cli(root, *options, "--format", "csv").stdout), index_col=0)
    long = pd.read_csv(
        io.StringIO(_cli(root, *options, "--metric", "nDCG@10", "--layout", "long", "--format", "csv").stdout)
    )
    for system in ("dense", "weak", "noise"):
        raw = [randomization_test(scores[d]["bm25"], scores[d][system], 300, 1) for d in ("nfcorpus", "scifact")]
        adjusted = multipletests(raw, method="fdr_bh")[1]
        for dataset, p, q in zip(("nfcorpus", "scifact"), raw, adjusted):
            assert wide.loc[dataset, f"{system} p vs bm25"] == p
            assert wide.loc[dataset, f"{system} p adjusted vs bm25"] == pytest.approx(q, abs=1e-12)
            row = long[(long.system == system) & (long.dataset == dataset)]
            assert row.p.item() == p and row.p_adjusted.item() == pytest.approx(q, abs=1e-12)
            assert (row.significant.fillna("").item() == "†") == (q < 0.05)
            d = scores[dataset][system] - scores[dataset]["bm25"]
            assert row.difference.item() == pytest.approx(d.mean(), abs=1e-12)
            assert row.difference_low.item() <= d.mean() <= row.difference_high.item()
    latex = _cli(root, *options, "--format", "latex").stdout
    assert "footnotesize $^\\dagger$ differs from bm25 (paired randomization test, 300 rounds, seed 1, bh" in latex


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--test", "wilcoxon"], 2, "'wilcoxon' is not one of 'randomization', 't', 'bootstrap'"),
        (["--correction", "sidak"], 2, "'sidak' is not one of 'holm', 'bh', 'bonferroni', 'none'"),
        (["--alpha", "1.5"], 2, "--alpha"),
        (["--metric", "nDCG@10", "--metric", "Recall@100"], 2, "--resolution tabulates one metric"),
    ],
    ids=["unknown-test", "unknown-correction", "alpha-outside", "several-metrics"],
)
def test_bad_options_of_a_resolution_are_refused_before_any_result_is_read(paper, args, code, message):
    root, _ = paper
    result = _cli(root / "nowhere", "--resolution", *args)
    assert result.exit_code == code and message in result.stderr


def test_a_resolution_of_one_system_or_of_different_queries_is_one_line_naming_the_files(tmp_path):
    from test_comparison import write_result

    write_result(tmp_path, "scifact", "bm25", {"q1": 0.5, "q2": 0.25})
    result = _cli(tmp_path, "--resolution")
    assert result.exit_code == 1 and "two or more systems" in result.stderr
    assert [line for line in result.stderr.splitlines() if not line.startswith("WARNING")] == [
        "Error: a resolution compares two or more systems on a dataset; these results hold bm25 on scifact"
    ]
    other = write_result(tmp_path, "scifact", "dense", {"q1": 0.5, "q3": 0.25})
    result = _cli(tmp_path, "--resolution")
    first = tmp_path / "scifact" / "bm25" / "test.json"
    assert result.exit_code == 1 and f"{first} and {other} cover different queries of scifact" in result.stderr
    result = _cli(tmp_path, "--significance", "bm25", "--format", "csv")
    assert result.exit_code == 1 and "cover different queries of scifact" in result.stderr


def test_too_few_rounds_for_holm_over_many_pairs_is_said():
    note = Settings(rounds=1000).floor_note(4950)
    assert note and "≥ 99,000" in note
    assert Settings(rounds=1000, correction="bh").floor_note(4950) is None
    assert Settings(rounds=1000, test="t").floor_note(4950) is None


# --------------------------------------------------------------------------- CQADupStack's forums, compare's seed

CQA_SYSTEMS = ["bm25", "dense", "noise"]


@pytest.fixture(scope="module")
def forums(tmp_path_factory):
    """Three systems on CQADupStack's 12 forums (1 to 7 queries each: forums of unequal weight per query) and on
    SciFact; per dataset the systems × queries arrays per stratum, queries in id order as the results pair them."""
    from test_comparison import write_result

    from harness.datasets import registry

    root = tmp_path_factory.mktemp("forums")
    rng = np.random.default_rng(23)
    strata = {"cqadupstack": [], "scifact": []}
    for k, forum in enumerate(registry.get("cqadupstack").subsets):
        n = 1 + (5 * k) % 7
        base = rng.choice(GRID, size=n) * (0.3 if k % 2 else 1.0)  # forums of different levels
        rows = {
            "bm25": base,
            "dense": np.clip(base + rng.choice([0, 0.25], size=n), 0, 1),
            "noise": rng.choice(GRID, size=n),
        }
        for system, values in rows.items():
            write_result(root, f"cqadupstack/{forum}", system, {f"q{j}": float(v) for j, v in enumerate(values)})
        order = sorted(range(n), key=lambda j: f"q{j}")
        strata["cqadupstack"].append((forum, np.asarray([rows[s][order] for s in CQA_SYSTEMS])))
    base = rng.choice(GRID, size=25)
    rows = {"bm25": base, "dense": np.clip(base + rng.choice([0, 0.25], size=25), 0, 1), "noise": rng.random(25)}
    for system, values in rows.items():
        write_result(root, "scifact", system, {f"q{j}": float(v) for j, v in enumerate(values)})
    order = sorted(range(25), key=lambda j: f"q{j}")
    strata["scifact"].append(("", np.asarray([rows[s][order] for s in CQA_SYSTEMS])))
    # The forums in the order of their pooled query ids ("android/q0" ...), as the strata are resampled.
    strata["cqadupstack"].sort(key=lambda item: item[0])
    return root, {dataset: [block for _, block in items] for dataset, items in strata.items()}


def _stratified_loop(blocks: list[np.ndarray], weights: list[float], rounds: int, seed: int):
    """Means, rank intervals and sign-flip p of every pair on the weighted mean over strata, written out: one
    generator for the signs and one for the resamples, each drawing stratum after stratum."""
    systems = blocks[0].shape[0]
    means = [math.fsum(w * math.fsum(b[s]) / b.shape[1] for w, b in zip(weights, blocks)) for s in range(systems)]
    signs_rng, rows_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    signs = [signs_rng.choice((-1.0, 1.0), size=(rounds, b.shape[1])) for b in blocks]
    rows = [rows_rng.integers(0, b.shape[1], size=(rounds, b.shape[1])) for b in blocks]
    ranks = [[] for _ in range(systems)]
    for r in range(rounds):
        resampled = [
            math.fsum(w * math.fsum(b[s][rw[r]]) / b.shape[1] for w, b, rw in zip(weights, blocks, rows))
            for s in range(systems)
        ]
        for s, rank in enumerate(_brute_ranks(resampled)):
            ranks[s].append(rank)
    intervals = [
        (sorted(v)[math.floor((rounds - 1) * 0.025)], sorted(v)[math.ceil((rounds - 1) * 0.975)]) for v in ranks
    ]
    p = {}
    for i, j in combinations(range(systems), 2):
        d = [b[j] - b[i] for b in blocks]
        if not any(x.any() for x in d):
            p[i, j] = 1.0
            continue
        observed = abs(math.fsum(w * math.fsum(x) / len(x) for w, x in zip(weights, d)))
        exceed = sum(
            abs(math.fsum(w * math.fsum(sg[r] * x) / len(x) for w, x, sg in zip(weights, d, signs))) >= observed - 1e-12
            for r in range(rounds)
        )
        p[i, j] = (exceed + 1) / (rounds + 1)
    return means, intervals, p


def _check_scope(scope: dict, expected) -> None:
    means, intervals, p = expected
    for standing in scope["systems"]:
        s = CQA_SYSTEMS.index(standing["system"])
        assert standing["mean"] == pytest.approx(means[s], abs=1e-12), standing
        assert (standing["rank"], standing["rank_low"], standing["rank_high"]) == (
            _brute_ranks(means)[s],
            *intervals[s],
        ), standing
    for pair in scope["pairs"]:
        i, j = sorted(CQA_SYSTEMS.index(pair[k]) for k in ("system", "other"))
        assert pair["p"] == pytest.approx(p[i, j], rel=1e-12), pair


def test_cqadupstack_is_resolved_on_the_mean_of_its_forums_resampled_within_each_forum(forums):
    """The dataset's mean is the mean of its forum means (not of its pooled queries), and its rank intervals and
    p-values are the loop that resamples and flips signs within each forum."""
    import json

    root, strata = forums
    rounds, seed = 200, 3
    data = json.loads(_cli(root, "--resolution", "--rounds", rounds, "--seed", seed, "--format", "json").stdout)
    scope = next(s for s in data["scopes"] if s["scope"] == "cqadupstack")
    blocks = strata["cqadupstack"]
    assert scope["n_queries"] == sum(b.shape[1] for b in blocks)
    forum_means = [
        math.fsum(math.fsum(b[s]) / b.shape[1] for b in blocks) / len(blocks) for s in range(len(CQA_SYSTEMS))
    ]
    _check_scope(scope, _stratified_loop(blocks, [1 / len(blocks)] * len(blocks), rounds, seed))
    assert [s["mean"] for s in sorted(scope["systems"], key=lambda s: CQA_SYSTEMS.index(s["system"]))] == (
        pytest.approx(forum_means, abs=1e-12)
    )


def test_the_mean_over_datasets_weighs_cqadupstack_as_one_dataset(forums):
    """Across datasets each dataset weighs 1/2 (CQADupStack's forums 1/24 each): the mean is the plain mean of the
    two datasets' means, and the rank intervals and p-values the loop over those weights."""
    import json

    root, strata = forums
    rounds, seed = 200, 8
    data = json.loads(_cli(root, "--resolution", "--rounds", rounds, "--seed", seed, "--format", "json").stdout)
    scope = next(s for s in data["scopes"] if s["scope"] == ACROSS)
    assert scope["datasets"] == ["cqadupstack", "scifact"]
    forums_, (scifact,) = strata["cqadupstack"], strata["scifact"]
    dataset_means = [
        (math.fsum(math.fsum(b[s]) / b.shape[1] for b in forums_) / len(forums_) + math.fsum(scifact[s]) / 25) / 2
        for s in range(len(CQA_SYSTEMS))
    ]
    by_system = {s["system"]: s["mean"] for s in scope["systems"]}
    assert [by_system[s] for s in CQA_SYSTEMS] == pytest.approx(dataset_means, abs=1e-12)
    weights = [1 / (2 * len(forums_))] * len(forums_) + [1 / 2]
    _check_scope(scope, _stratified_loop([*forums_, scifact], weights, rounds, seed))


@pytest.mark.parametrize("correction", ["bh", "bonferroni", "none"])
def test_the_footnote_names_the_correction_given_in_every_format(paper, correction):
    import json

    from statsmodels.stats.multitest import multipletests

    root, _ = paper
    options = ("--resolution", "--rounds", 300, "--seed", 5, "--correction", correction)
    said = "no correction" if correction == "none" else f"{correction} correction across the pairs"
    data = json.loads(_cli(root, *options, "--format", "json").stdout)
    assert said in data["footnote"] and "holm" not in data["footnote"]
    for fmt in ("markdown", "latex", "html"):
        text = _cli(root, *options, "--format", fmt).stdout
        assert said in text and "holm" not in text, fmt
    if correction != "none":
        method = {"bh": "fdr_bh", "bonferroni": "bonferroni"}[correction]
        for scope in data["scopes"]:
            raw = [pair["p"] for pair in scope["pairs"]]
            expected = multipletests(raw, method=method)[1]
            assert [pair["p_adjusted"] for pair in scope["pairs"]] == pytest.approx(expected.tolist(), abs=1e-12)


def _shifted_bootstrap_p(a, b, rounds, seed):
    """The shifted bootstrap written out over numpy's resamples for the seed, one round at a time."""
    d = np.asarray(b) - np.asarray(a)
    if not d.any():
        return 1.0
    observed = math.fsum(d) / len(d)
    rows = np.random.default_rng(seed).integers(0, len(d), size=(rounds, len(d)))
    exceed = sum(abs(math.fsum(d[row]) / len(d) - observed) >= abs(observed) - 1e-12 for row in rows)
    return (exceed + 1) / (rounds + 1)


@pytest.mark.parametrize("seed", [5, 17])
def test_compare_draws_from_the_seed_it_is_given(paper, seed):
    """`compare --seed` gives the sign-flip and bootstrap loops' p over that seed's draws, and the p of
    ``report --resolution --seed`` for the same pair (pairs close enough that the draws move p)."""
    import json

    from cli_runner import invoke

    root, scores = paper
    rounds = 300
    resolved = {}
    for test in ("randomization", "bootstrap"):
        data = json.loads(
            _cli(root, "--resolution", "--test", test, "--rounds", rounds, "--seed", seed, "--format", "json").stdout
        )
        resolved[test] = next(s for s in data["scopes"] if s["scope"] == "scifact")["pairs"]
    for first, second in (("bm25", "noise"), ("bm25", "dense"), ("copy", "weak")):
        a, b = scores["scifact"][first], scores["scifact"][second]
        paths = [str(root / "scifact" / system / "test.json") for system in (first, second)]
        (compared,) = json.loads(
            invoke(["compare", *paths, "--rounds", str(rounds), "--seed", str(seed), "--json"]).stdout
        )
        randomization, bootstrap = _sign_flip_p(a, b, rounds, seed), _shifted_bootstrap_p(a, b, rounds, seed)
        assert compared["p_randomization"] == pytest.approx(randomization, rel=1e-12), (first, second)
        assert compared["p_bootstrap"] == pytest.approx(bootstrap, rel=1e-12), (first, second)
        for test, key in (("randomization", "p_randomization"), ("bootstrap", "p_bootstrap")):
            pair = next(p for p in resolved[test] if {p["system"], p["other"]} == {first, second})
            assert pair["p"] == compared[key], (test, first, second)
