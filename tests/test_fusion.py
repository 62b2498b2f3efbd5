"""Fusion: every method and normalization against ranx and against a brute-force reference written out
here, comparing scores *and* order on runs with partial overlap, ties, different lengths and scales."""

from __future__ import annotations

import random
import statistics
import struct

import pytest
from cli_runner import invoke

from harness.errors import HarnessError
from harness.records import Run
from harness.retrieval.fusion import METHODS, NORMS, FusionSpec, fuse


def _ranked(scores: dict[str, float]) -> list[str]:
    """trec_eval's order, written out: score descending as pytrec_eval compares scores (float32: RRF's
    1/12 + 1/12 and 1/6 tie there), ties by doc_id descending."""
    return sorted(
        scores, key=lambda doc_id: (struct.unpack("f", struct.pack("f", scores[doc_id])), doc_id), reverse=True
    )


def _normalized(scores: dict[str, float], norm: str) -> dict[str, float]:
    values = list(scores.values())
    if norm == "minmax":
        low, high = min(values), max(values)
        return {d: (s - low) / (high - low) if high > low else 0.0 for d, s in scores.items()}
    if norm == "zscore":
        mean, std = statistics.fmean(values), statistics.pstdev(values)  # population σ
        return {d: (s - mean) / std if std > 0 else 0.0 for d, s in scores.items()}
    return dict(scores)


def _dbsf(scores: dict[str, float]) -> dict[str, float]:
    mean, sigma = statistics.fmean(scores.values()), statistics.pstdev(scores.values())
    if sigma == 0:
        return dict.fromkeys(scores, 0.5)
    low, high = mean - 3 * sigma, mean + 3 * sigma
    return {d: (min(max(s, low), high) - low) / (high - low) for d, s in scores.items()}


def _reference(
    runs: list[dict[str, dict[str, float]]],
    method: str,
    norm: str = "minmax",
    weights: tuple[float, ...] | None = None,
    k: int = 60,
) -> dict[str, dict[str, float]]:
    """Every method in plain loops: per query, each run's contributions summed; combmnz × runs holding d."""
    weights = weights or (1.0,) * len(runs)
    fused: dict[str, dict[str, float]] = {}
    for query_id in dict.fromkeys(q for run in runs for q in run):
        total: dict[str, float] = {}
        holders: dict[str, int] = {}
        for run, weight in zip(runs, weights):
            docs = run.get(query_id) or {}
            if not docs:
                continue
            if method == "rrf":
                part = {doc_id: 1.0 / (k + rank) for rank, doc_id in enumerate(_ranked(docs), start=1)}
            elif method == "dbsf":
                part = _dbsf(docs)
            else:
                part = _normalized(docs, norm)
                if method == "wsum":
                    part = {d: weight * s for d, s in part.items()}
            for doc_id, value in part.items():
                total[doc_id] = total.get(doc_id, 0.0) + value
                holders[doc_id] = holders.get(doc_id, 0) + 1
        if method == "combmnz":
            total = {d: s * holders[d] for d, s in total.items()}
        fused[query_id] = total
    return fused


def _tricky_runs(seed: int, n_runs: int = 3) -> list[dict[str, dict[str, float]]]:
    """Runs with many ties (small integer scores), partial overlap, lengths 1–20, other scales and signs,
    a query with all scores equal, a query only one run has and a query one run holds empty."""
    rng = random.Random(seed)
    pool = [f"d{i:02d}" for i in range(30)]
    runs = []
    for r in range(n_runs):
        scale, shift = (1.0, 0.0, 100.0)[r % 3], (0.0, -7.0, 0.5)[r % 3]
        run = {
            f"q{q}": {d: rng.randint(0, 5) * scale + shift for d in rng.sample(pool, rng.randint(1, 20))}
            for q in range(6)
        }
        run["flat"] = dict.fromkeys(rng.sample(pool, 4 + r), 3.0 + r)  # one score for all: minmax/zscore give 0
        run["single"] = {pool[r]: 2.0 + r}  # one document
        runs.append(run)
    runs[0]["only0"] = {d: float(i) for i, d in enumerate(pool[:7])}
    runs[0]["empty1"] = {"d01": 1.0, "d02": 2.0}
    runs[1]["empty1"] = {}
    return runs


def _as_runs(runs: list[dict[str, dict[str, float]]]) -> list[Run]:
    return [Run.from_scores(run, name=f"r{i}") for i, run in enumerate(runs)]


def _assert_same_ranking(got: Run, expected: dict[str, dict[str, float]], depth: int, exact: bool) -> None:
    """Same queries, same documents in the same order, same scores, after the depth cut.

    `exact`: the reference does the same float operations in the same order, so ties stay ties and the
    order must match to the document; otherwise (zscore, dbsf: other σ arithmetic) scores are compared
    to 1e-9 and the order pair by pair, a near-tie allowed either way only when the fused scores differ.
    """
    assert set(got) == set(expected)
    for query_id, scores in expected.items():
        have = [(hit.doc_id, hit.score) for hit in got[query_id]]
        want = _ranked(scores)[:depth]
        assert len(have) == len(want), query_id
        for doc_id, score in have:
            assert score == pytest.approx(scores[doc_id], abs=1e-12 if exact else 1e-9), (query_id, doc_id)
        if exact:
            assert [doc_id for doc_id, _ in have] == want, query_id
            continue
        for (a, score_a), (b, score_b) in zip(have, have[1:]):
            assert scores[a] >= scores[b] - 1e-9, (query_id, a, b)
            if abs(scores[a] - scores[b]) <= 1e-9 and score_a == score_b:
                assert a > b, (query_id, a, b)  # an exact tie: doc_id descending
        cut = min(scores[doc_id] for doc_id, _ in have)
        kept = {doc_id for doc_id, _ in have}
        assert all(s <= cut + 1e-9 for d, s in scores.items() if d not in kept), query_id


SPECS = [  # every method × every normalization it uses, default and non-default settings
    FusionSpec("rrf"),
    FusionSpec("rrf", rrf_k=0),
    FusionSpec("rrf", rrf_k=7),
    *(FusionSpec(method, norm) for method in ("combsum", "combmnz", "wsum") for norm in NORMS),
    FusionSpec("wsum", "minmax", weights=(0.2, 0.5, 0.3)),
    FusionSpec("wsum", "zscore", weights=(2.0, -1.0, 0.25)),
    FusionSpec("wsum", "none", weights=(0.01, 3.0, 1.0)),
    FusionSpec("dbsf"),
]


def _spec_id(spec: FusionSpec) -> str:
    return f"{spec.method}-{spec.norm}-k{spec.rrf_k}-w{spec.weights}"


def test_every_method_and_normalization_is_covered():
    assert {spec.method for spec in SPECS} == set(METHODS)
    assert {spec.norm for spec in SPECS if spec.method in ("combsum", "combmnz", "wsum")} == set(NORMS)


@pytest.mark.parametrize("depth", [1000, 3])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("spec", SPECS, ids=_spec_id)
def test_each_method_equals_the_brute_force_reference(spec, seed, depth):
    runs = _tricky_runs(seed)
    spec = FusionSpec(spec.method, spec.norm, spec.weights, spec.rrf_k, depth)
    expected = _reference(runs, spec.method, spec.norm, spec.weights, spec.rrf_k)
    exact = spec.norm != "zscore" and spec.method != "dbsf"
    _assert_same_ranking(fuse(_as_runs(runs), spec), expected, depth, exact)


@pytest.mark.parametrize("n_low", [10, 30])
def test_dbsf_clips_a_score_beyond_three_sigma_to_the_end_of_the_range(n_low):
    """DBSF's range is μ ± 3σ and a score outside it counts as its end: one 100.0 among n zeros lies
    √n σ above the mean (population σ), past 3σ once n ≥ 10, so it contributes exactly 1.0, never more."""
    outlier = {f"z{i:02d}": 0.0 for i in range(n_low)} | {"top": 100.0}
    flat = dict.fromkeys(outlier, 1.0)  # σ = 0: every document contributes 0.5
    fused = fuse(_as_runs([{"q": outlier}, {"q": flat}]), FusionSpec("dbsf"))
    scores = dict(fused.scores_of("q"))
    mean, sigma = 100.0 / (n_low + 1), statistics.pstdev(outlier.values())
    assert (100.0 - mean) / sigma > 3  # the premise: the outlier is beyond 3σ
    assert scores["top"] == pytest.approx(1.0 + 0.5, abs=1e-12)
    low_part = (0.0 - (mean - 3 * sigma)) / (6 * sigma)
    assert all(scores[d] == pytest.approx(low_part + 0.5, abs=1e-12) for d in outlier if d != "top")
    assert all(0.5 <= s <= 1.5 for s in scores.values())


def _distinct_runs(seed: int, n_runs: int = 3) -> list[dict[str, dict[str, float]]]:
    """For ranx: every run holds every query (ranx fuses the first run's queries), no ties inside a run
    (ranx's RRF ranks ties in its own order); still partial overlap, lengths 1–25, other scales."""
    rng = random.Random(seed)
    pool = [f"d{i:02d}" for i in range(40)]
    runs = []
    for r in range(n_runs):
        scale, shift = (0.01, 1.0, 3.0)[r % 3], (0.0, -50.0, 2.0)[r % 3]
        run = {}
        for q in range(8):
            n = rng.randint(1, 25)
            run[f"q{q}"] = {d: v * scale + shift for d, v in zip(rng.sample(pool, n), rng.sample(range(1, 10_000), n))}
        runs.append(run)
    return runs


RANX = [  # (our spec, ranx norm, ranx method, ranx params); ranx has no DBSF (the reference test covers it)
    (FusionSpec("rrf"), "min-max", "rrf", {"k": 60}),
    (FusionSpec("rrf", rrf_k=5), "min-max", "rrf", {"k": 5}),
    (FusionSpec("combsum", "minmax"), "min-max", "sum", None),
    (FusionSpec("combsum", "zscore"), "zmuv", "sum", None),
    (FusionSpec("combsum", "none"), None, "sum", None),
    (FusionSpec("combmnz", "minmax"), "min-max", "mnz", None),
    (FusionSpec("combmnz", "zscore"), "zmuv", "mnz", None),
    (FusionSpec("combmnz", "none"), None, "mnz", None),
    (FusionSpec("wsum", "minmax"), "min-max", "wsum", {"weights": [1.0, 1.0, 1.0]}),
    (FusionSpec("wsum", "minmax", weights=(0.2, 0.5, 0.3)), "min-max", "wsum", {"weights": [0.2, 0.5, 0.3]}),
    (FusionSpec("wsum", "zscore", weights=(2.0, 0.1, 1.0)), "zmuv", "wsum", {"weights": [2.0, 0.1, 1.0]}),
    (FusionSpec("wsum", "none", weights=(0.7, 0.05, 1.5)), None, "wsum", {"weights": [0.7, 0.05, 1.5]}),
]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("spec", "norm", "method", "params"), RANX, ids=[_spec_id(row[0]) for row in RANX])
def test_each_method_equals_ranx(seed, spec, norm, method, params):
    ranx = pytest.importorskip("ranx")
    runs = _distinct_runs(seed)
    theirs = ranx.fuse(
        [ranx.Run(run, name=f"r{i}") for i, run in enumerate(runs)], norm=norm, method=method, params=params
    ).to_dict()
    expected = {query_id: dict(docs) for query_id, docs in theirs.items()}
    _assert_same_ranking(fuse(_as_runs(runs), spec), expected, 1000, exact=False)


def test_rrf_ranks_ties_as_trec_eval_does():
    tied = Run.from_scores({"q": {"a": 1.0, "b": 1.0, "c": 0.5}})
    other = Run.from_scores({"q": {"c": 2.0}})
    fused = fuse([tied, other], FusionSpec("rrf", rrf_k=0))
    # trec_eval order: ties by doc_id descending, so b is rank 1 and a rank 2; c: 1/3 + 1/1.
    assert [(hit.doc_id, hit.score) for hit in fused["q"]] == [("c", 1 / 3 + 1.0), ("b", 1.0), ("a", 0.5)]


def test_combmnz_counts_the_runs_holding_a_document_even_at_score_zero():
    # minmax maps each run's lowest score to 0; the document is still held by that run (×2, not ×1).
    low = Run.from_scores({"q": {"a": 1.0, "b": 3.0}})
    high = Run.from_scores({"q": {"a": 5.0, "b": 2.0, "c": 4.0}})
    fused = fuse([low, high], FusionSpec("combmnz", "minmax"))
    # a: (0 + 1) × 2, b: (1 + 0) × 2, c: 2/3 × 1
    assert [(hit.doc_id, hit.score) for hit in fused["q"]] == [("b", 2.0), ("a", 2.0), ("c", pytest.approx(2 / 3))]


def test_depth_cuts_the_fused_run_in_trec_eval_order():
    runs = _tricky_runs(1)
    for depth in (1, 2, 5):
        expected = _reference(runs, "rrf")
        _assert_same_ranking(fuse(_as_runs(runs), FusionSpec("rrf", depth=depth)), expected, depth, exact=True)


@pytest.mark.parametrize(
    ("spec", "n", "message"),
    [
        (FusionSpec("borda"), 2, "unknown fusion method 'borda'"),
        (FusionSpec("combsum", "l2"), 2, "unknown normalization 'l2'"),
        (FusionSpec("rrf"), 1, "at least two runs"),
        (FusionSpec("wsum", weights=(1.0,)), 2, "1 weights for 2 runs"),
        (FusionSpec("rrf", weights=(1.0, 2.0)), 2, "weights apply to wsum only"),
    ],
)
def test_bad_fusion_settings_are_one_line(spec, n, message):
    with pytest.raises(HarnessError, match=message):
        spec.check(n)


# --------------------------------------------------------------------------- the fuse command


def _two_results(tiny_beir, out):

    for model in ("bm25", "hash:64"):
        result = invoke(["-q", "evaluate", str(tiny_beir), "--model", model, "--output-dir", str(out)])
        assert result.exit_code == 0, result.stderr
    return out / "tiny" / "bm25" / "test.json", out / "tiny" / "hash_64" / "test.json"


def _trec_lines(path) -> dict[str, list[tuple[str, float]]]:
    """A TREC run file read by hand, in file order: query_id → [(doc_id, score), …]."""
    ranked: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text().splitlines():
        query_id, _, doc_id, _, score, _ = line.split()
        ranked.setdefault(query_id, []).append((doc_id, float(score)))
    return ranked


def test_fuse_scores_the_fused_run_and_writes_a_result(tiny_beir, tmp_path):
    import json

    import pytrec_eval

    out = tmp_path / "results"
    bm25, dense = _two_results(tiny_beir, out)
    result = invoke(["fuse", str(bm25), str(dense), "--output-dir", str(out), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["model"] == "fusion"
    assert data["config"]["fusion"] == {"method": "rrf", "rrf_k": 60, "depth": 1000}
    written = list((out / "tiny" / "fusion").glob("test.rrf_2-runs-*.json"))
    assert len(written) == 1
    # The fused run file holds, in order, RRF of the two member run files as they were saved.
    members = [
        {q: dict(hits) for q, hits in _trec_lines(path.with_name("test.run.trec")).items()} for path in (bm25, dense)
    ]
    expected = _reference(members, "rrf")
    fused = _trec_lines(written[0].with_name(written[0].stem + ".run.trec"))
    assert set(fused) == set(expected)
    for query_id, hits in fused.items():
        assert [doc_id for doc_id, _ in hits] == _ranked(expected[query_id])
        assert [score for _, score in hits] == pytest.approx([expected[query_id][d] for d, _ in hits], abs=1e-12)
    # …and its metrics are pytrec_eval's on that file (unretrieved judged queries count 0).
    qrels: dict[str, dict[str, int]] = {}
    for line in (tiny_beir / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query_id, doc_id, grade = line.split()
        qrels.setdefault(query_id, {})[doc_id] = int(grade)
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.3", "map_cut.3", "P.1"}).evaluate(
        {q: dict(hits) for q, hits in fused.items()}
    )
    for ours, theirs in (("nDCG@3", "ndcg_cut_3"), ("MAP@3", "map_cut_3"), ("P@1", "P_1")):
        assert data["metrics"][ours] == pytest.approx(
            sum(per_query.get(q, {}).get(theirs, 0.0) for q in qrels) / len(qrels), abs=1e-6
        )
    assert any("fewer than the fusion depth 1000" in note for note in data["notes"])  # noted, not an error
    # The fused result is a result like any other: report shows it as its own column.
    report = invoke(["report", str(out), "--format", "csv"])
    assert data["label"] in report.stdout.splitlines()[0]


def test_a_fusion_stores_the_cutoffs_of_the_depth_asked_whatever_its_rankings_hold(tiny_beir, tmp_path):
    """stored_cutoffs' rule: each standard cutoff up to the fusion's depth (1000 by default), though the tiny
    rankings hold a handful of documents: @100 and @1000 are stored, as trec_eval computes them."""
    import json

    import pytrec_eval

    out = tmp_path / "results"
    bm25, dense = _two_results(tiny_beir, out)
    result = invoke(["fuse", str(bm25), str(dense), "--output-dir", str(out), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    written = next((out / "tiny" / "fusion").glob("test.rrf_2-runs-*.run.trec"))
    fused = {q: dict(hits) for q, hits in _trec_lines(written).items()}
    assert max(len(hits) for hits in fused.values()) < 20  # the premise: every ranking shorter than @20
    qrels: dict[str, dict[str, int]] = {}
    for line in (tiny_beir / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query_id, doc_id, grade = line.split()
        qrels.setdefault(query_id, {})[doc_id] = int(grade)
    measures = {f"{m}.{k}" for m in ("ndcg_cut", "recall") for k in (20, 100, 1000)}
    per_query = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(fused)
    for k in (20, 100, 1000):
        for ours, theirs in ((f"nDCG@{k}", f"ndcg_cut_{k}"), (f"Recall@{k}", f"recall_{k}")):
            assert data["metrics"][ours] == pytest.approx(
                sum(per_query.get(q, {}).get(theirs, 0.0) for q in qrels) / len(qrels), abs=1e-6
            ), ours


def test_fuse_refuses_different_datasets_altered_and_missing_runs(tiny_beir, tmp_path):
    import json
    import shutil

    out = tmp_path / "results"
    bm25, dense = _two_results(tiny_beir, out)
    other = tmp_path / "other.json"
    data = json.loads(dense.read_text())
    data["dataset"] = "scifact"
    del data["fingerprints"]["content"]  # rewritten by hand: a result of before content digests
    other.write_text(json.dumps(data))
    shutil.copy(dense.with_name("test.run.trec"), tmp_path / "other.run.trec")
    different = invoke(["fuse", str(bm25), str(other), "--output-dir", str(out)])
    assert different.exit_code == 1 and "different datasets" in different.stderr and "tiny" in different.stderr
    qrels = json.loads(dense.read_text())
    qrels["fingerprints"]["qrels"] = "0" * 64
    del qrels["fingerprints"]["content"]
    other.write_text(json.dumps(qrels))
    assert "differ in qrels" in invoke(["fuse", str(bm25), str(other)]).stderr
    run_file = dense.with_name("test.run.trec")
    run_file.write_text(run_file.read_text().replace(" 1 ", " 1 ", 1) + "q1 Q0 d5 99 -1.0 x\n")
    altered = invoke(["fuse", str(bm25), str(dense), "--output-dir", str(out)])
    assert altered.exit_code == 1 and "was altered after test.json was written" in altered.stderr
    run_file.unlink()
    missing = invoke(["fuse", str(bm25), str(dense), "--output-dir", str(out)])
    assert missing.exit_code == 1 and "is missing" in missing.stderr
    assert not (out / "tiny" / "fusion").exists()
    weights = invoke(["fuse", str(bm25), str(dense), "--method", "wsum", "--weights", "1,x"])
    assert weights.exit_code == 2 and "comma-separated numbers" in weights.output
