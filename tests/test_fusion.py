"""Fusion: every method against ranx (and DBSF, which ranx lacks, against a reference written here)."""

from __future__ import annotations

import math
import random

import pytest

from harness.errors import HarnessError
from harness.retrieval.fusion import FusionSpec, fuse
from harness.records import Run


def _runs(seed: int, n_runs: int = 3) -> list[Run]:
    """Random runs without score ties (ranx and trec_eval break ties differently)."""
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(40)]
    runs = []
    for r in range(n_runs):
        scores = {}
        for q in range(8):
            picked = rng.sample(docs, rng.randint(3, 25))
            values = rng.sample(range(1, 10_000), len(picked))
            scores[f"q{q}"] = {d: v / 100 - (50 if r == 1 else 0) for d, v in zip(picked, values)}
        runs.append(Run.from_scores(scores, name=f"r{r}"))
    return runs


RANX = [  # (our spec, ranx norm, ranx method, ranx params)
    (FusionSpec("rrf"), "min-max", "rrf", {"k": 60}),
    (FusionSpec("rrf", rrf_k=10), "min-max", "rrf", {"k": 10}),
    (FusionSpec("combsum", "minmax"), "min-max", "sum", None),
    (FusionSpec("combsum", "zscore"), "zmuv", "sum", None),
    (FusionSpec("combsum", "none"), None, "sum", None),
    (FusionSpec("combmnz", "minmax"), "min-max", "mnz", None),
    (FusionSpec("wsum", "minmax", weights=(0.2, 0.5, 0.3)), "min-max", "wsum", {"weights": [0.2, 0.5, 0.3]}),
]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("spec", "norm", "method", "params"), RANX, ids=lambda v: str(v) if isinstance(v, str) else None)
def test_each_method_equals_ranx(seed, spec, norm, method, params):
    ranx = pytest.importorskip("ranx")
    runs = _runs(seed)
    ours = fuse(runs, spec)
    theirs = ranx.fuse([ranx.Run(run.to_dict(), name=run.name) for run in runs], norm=norm or "min-max",
                       method=method, params=params) if norm else _ranx_unnormalized(ranx, runs, method)
    expected = {q: dict(docs) for q, docs in theirs.to_dict().items()}
    got = ours.to_dict()
    assert set(got) == set(expected)
    for query_id, docs in expected.items():
        assert set(got[query_id]) == set(docs)
        for doc_id, score in docs.items():
            assert got[query_id][doc_id] == pytest.approx(score, abs=1e-9)


def _ranx_unnormalized(ranx, runs, method):
    from ranx.fusion import comb_sum

    return comb_sum([ranx.Run(run.to_dict(), name=run.name) for run in runs])


def _reference_dbsf(runs: list[Run]) -> dict[str, dict[str, float]]:
    """DBSF written out independently: μ ± 3σ per run and query, clipped, scaled to [0, 1], summed."""
    out: dict[str, dict[str, float]] = {}
    for run in runs:
        for query_id, docs in run.to_dict().items():
            values = list(docs.values())
            mean = sum(values) / len(values)
            sigma = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
            for doc_id, value in docs.items():
                scaled = 0.5 if sigma == 0 else (min(max(value, mean - 3 * sigma), mean + 3 * sigma)
                                                 - (mean - 3 * sigma)) / (6 * sigma)
                out.setdefault(query_id, {})[doc_id] = out.get(query_id, {}).get(doc_id, 0.0) + scaled
    return out


@pytest.mark.parametrize("seed", range(3))
def test_dbsf_equals_the_reference(seed):
    runs = _runs(seed)
    expected = _reference_dbsf(runs)
    got = fuse(runs, FusionSpec("dbsf")).to_dict()
    for query_id, docs in expected.items():
        for doc_id, score in docs.items():
            assert math.isclose(got[query_id][doc_id], score, abs_tol=1e-12)


def test_rrf_ranks_ties_as_trec_eval_does():
    tied = Run.from_scores({"q": {"a": 1.0, "b": 1.0, "c": 0.5}})
    other = Run.from_scores({"q": {"c": 2.0}})
    fused = fuse([tied, other], FusionSpec("rrf", rrf_k=0)).to_dict()["q"]
    # trec_eval order: ties by doc_id descending, so b is rank 1 and a rank 2.
    assert fused == {"b": 1.0, "a": 0.5, "c": 1 / 3 + 1.0}


def test_depth_cuts_the_fused_run():
    runs = _runs(0)
    fused = fuse(runs, FusionSpec("rrf", depth=5))
    assert all(len(fused[q]) <= 5 for q in fused)


@pytest.mark.parametrize(("spec", "n", "message"), [
    (FusionSpec("borda"), 2, "unknown fusion method 'borda'"),
    (FusionSpec("combsum", "l2"), 2, "unknown normalization 'l2'"),
    (FusionSpec("rrf"), 1, "at least two runs"),
    (FusionSpec("wsum", weights=(1.0,)), 2, "1 weights for 2 runs"),
    (FusionSpec("rrf", weights=(1.0, 2.0)), 2, "weights apply to wsum only"),
])
def test_bad_fusion_settings_are_one_line(spec, n, message):
    with pytest.raises(HarnessError, match=message):
        spec.check(n)


# --------------------------------------------------------------------------- the fuse command


def _two_results(tiny_beir, out):
    from click.testing import CliRunner

    from harness.cli import cli

    for model in ("bm25", "hash:64"):
        result = CliRunner().invoke(cli, ["-q", "evaluate", str(tiny_beir), "--model", model, "--output-dir", str(out)])
        assert result.exit_code == 0, result.stderr
    return out / "tiny" / "bm25" / "test.json", out / "tiny" / "hash_64" / "test.json"


def test_fuse_scores_the_fused_run_and_writes_a_result(tiny_beir, tmp_path):
    import json

    from click.testing import CliRunner

    from harness.cli import cli
    from harness.io.formats import read_run

    out = tmp_path / "results"
    bm25, dense = _two_results(tiny_beir, out)
    result = CliRunner().invoke(cli, ["fuse", str(bm25), str(dense), "--output-dir", str(out), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["label"] == "rrf(bm25, hash:64)" and data["model"] == "fusion"
    assert data["config"]["fusion"] == {"method": "rrf", "rrf_k": 60, "depth": 1000}
    written = list((out / "tiny" / "fusion").glob("test.rrf_2-runs-*.json"))
    assert len(written) == 1
    fused = read_run(written[0].with_name(written[0].stem + ".run.trec"))
    expected = fuse([read_run(bm25.with_name("test.run.trec")), read_run(dense.with_name("test.run.trec"))],
                    FusionSpec("rrf"))
    assert fused.to_dict().keys() == expected.to_dict().keys()
    assert any("fewer than the fusion depth 1000" in note for note in data["notes"])  # noted, not an error
    # The fused result is a result like any other: report shows it as its own column.
    report = CliRunner().invoke(cli, ["report", str(out), "--format", "csv"])
    assert "rrf(bm25, hash:64)" in report.stdout.splitlines()[0]


def test_fuse_refuses_different_datasets_altered_and_missing_runs(tiny_beir, tmp_path):
    import json
    import shutil

    from click.testing import CliRunner

    from harness.cli import cli

    out = tmp_path / "results"
    bm25, dense = _two_results(tiny_beir, out)
    other = tmp_path / "other.json"
    data = json.loads(dense.read_text())
    data["dataset"] = "scifact"
    other.write_text(json.dumps(data))
    shutil.copy(dense.with_name("test.run.trec"), tmp_path / "other.run.trec")
    runner = CliRunner()
    different = runner.invoke(cli, ["fuse", str(bm25), str(other), "--output-dir", str(out)])
    assert different.exit_code == 1 and "different datasets" in different.stderr and "tiny" in different.stderr
    qrels = json.loads(dense.read_text())
    qrels["fingerprints"]["qrels"] = "0" * 64
    other.write_text(json.dumps(qrels))
    assert "differ in qrels" in runner.invoke(cli, ["fuse", str(bm25), str(other)]).stderr
    run_file = dense.with_name("test.run.trec")
    run_file.write_text(run_file.read_text().replace(" 1 ", " 1 ", 1) + "q1 Q0 d5 99 -1.0 x\n")
    altered = runner.invoke(cli, ["fuse", str(bm25), str(dense), "--output-dir", str(out)])
    assert altered.exit_code == 1 and "was altered after test.json was written" in altered.stderr
    run_file.unlink()
    missing = runner.invoke(cli, ["fuse", str(bm25), str(dense), "--output-dir", str(out)])
    assert missing.exit_code == 1 and "is missing" in missing.stderr
    assert not (out / "tiny" / "fusion").exists()
    weights = runner.invoke(cli, ["fuse", str(bm25), str(dense), "--method", "wsum", "--weights", "1,x"])
    assert weights.exit_code == 2 and "comma-separated numbers" in weights.output
