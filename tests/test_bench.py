"""bench: the grid, skipping done cells, --force, a failing cell, results.csv, the summary table."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
from cli_runner import invoke

import harness.pipeline.bench
import harness.pipeline.evaluate
import harness.retrieval.encode


@pytest.fixture
def grid(tiny_beir, tmp_path, monkeypatch, fake_encoder):
    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: fake_encoder)
    # fake-bow is no model on disk or the hub: the grid's up-front model check lets it through to the fake loader.
    real_check = harness.pipeline.bench.check_model_available
    monkeypatch.setattr(
        harness.pipeline.bench,
        "check_model_available",
        lambda name, known=(): None if name == "fake-bow" else real_check(name, known),
    )
    second = tmp_path / "tiny2"
    shutil.copytree(tiny_beir, second)
    return [str(tiny_beir), str(second)], tmp_path / "results"


def _bench(datasets, out, *extra):
    return invoke(
        [
            "-q",
            "bench",
            "--models",
            "fake-bow,bm25",
            "--datasets",
            ",".join(datasets),
            "--output-dir",
            str(out),
            "--k",
            "1,10",
            "--no-cache",
            *extra,
        ],
    )


def test_grid_writes_every_cell_and_the_long_csv(grid):
    datasets, out = grid
    result = _bench(datasets, out)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["nDCG@10", "fake-bow", "bm25"]
    assert lines[1].startswith("tiny ") and lines[2].startswith("tiny2 ")
    assert "4 cells: 4 done, 0 skipped" in result.stdout
    for dataset in ("tiny", "tiny2"):
        for model in ("fake-bow", "bm25"):
            assert (out / dataset / model / "test.json").is_file()
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert len(rows) == 4 * 43  # 4 cells × (7 metric families × 6 cutoffs (the standard set up to depth 100) + R-Prec)
    assert {row["model"] for row in rows} == {"fake-bow", "bm25"}
    assert all(len(row["config_hash"]) == 16 for row in rows)


def test_rerun_skips_done_cells_and_force_redoes_them(grid):
    datasets, out = grid
    _bench(datasets, out)
    result = _bench(datasets, out)
    assert "4 cells: 0 done, 4 skipped" in result.stdout
    assert result.stdout.splitlines()[1].split()[1] != "-"  # skipped cells still show their numbers
    assert "4 cells: 4 done" in _bench(datasets, out, "--force").stdout
    # Different settings are a different config: the cell runs again.
    assert "4 cells: 4 done" in _bench(datasets, out, "--top-k", "50").stdout


def test_a_cell_done_by_another_release_runs_again(grid):
    from harness import __version__
    from harness.records import CONTENT_DIGEST, result_digest

    datasets, out = grid
    _bench(datasets, out)
    path = out / "tiny" / "bm25" / "test.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["versions"]["beir-harness"] = "0.0.1"  # an intact result of an older release: digest recomputed
    data["fingerprints"][CONTENT_DIGEST] = result_digest(data)
    path.write_text(json.dumps(data), encoding="utf-8")
    result = _bench(datasets, out)
    assert result.exit_code == 0, result.stderr
    assert "4 cells: 1 done, 3 skipped" in result.stdout
    assert json.loads(path.read_text(encoding="utf-8"))["versions"]["beir-harness"] == __version__


def test_a_failing_cell_does_not_stop_the_grid(grid, tmp_path):
    datasets, out = grid
    broken = tmp_path / "broken"  # a folder that is there, whose fault shows only when its cell reads it
    shutil.copytree(datasets[0], broken)
    (broken / "corpus.jsonl").write_text('{"_id": "d1", "text": "one"}\nnot json\n')
    result = _bench([datasets[0], str(broken)], out)
    assert result.exit_code == 1
    assert "4 cells: 2 done, 0 skipped" in result.stdout and "settings), 2 failed" in result.stdout
    assert result.stdout.splitlines()[2].split() == ["broken", "failed", "failed"]
    assert "failed: broken × bm25: " in result.stdout and "corpus.jsonl:2" in result.stdout
    assert (out / "tiny" / "bm25" / "test.json").is_file()


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("dataset", "no such dataset folder"),
        ("registry", "not a BEIR dataset name"),
        ("model", "cannot load model"),
        ("reranker", "cannot load model"),
    ],
    ids=["dataset-folder", "dataset-name", "model", "reranker"],
)
def test_a_typo_in_the_last_name_fails_before_any_cell_runs(grid, tmp_path, monkeypatch, where, message):
    """Every dataset and model of the grid is checked first (as `pool` checks its systems): a typo in the last one
    is one line and exit 1 with no cell run, nothing encoded and nothing written."""
    datasets, out = grid
    encoded = []
    monkeypatch.setattr(harness.pipeline.bench, "evaluate_dataset", lambda *a, **k: encoded.append(a) or 1 / 0)
    names = {"dataset": [datasets[0], datasets[1] + "-typo"], "registry": [datasets[0], "scifactt"]}.get(
        where, datasets
    )
    models = {"model": "fake-bow,bm25,all-MiniLM-L6-v3", "reranker": "fake-bow,bm25 >> " + str(tmp_path / "no-ce")}
    result = invoke(
        ["-q", "bench", "--models", models.get(where, "fake-bow,bm25"), "--datasets", ",".join(names)]
        + ["--output-dir", str(out), "--k", "1,10", "--no-cache", "--data-dir", str(tmp_path / "data")],
    )
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], result.stderr
    assert encoded == [] and not out.exists() and not (tmp_path / "data").exists()


def test_bench_help_and_bad_metric(grid):
    datasets, out = grid
    assert "Example:" in invoke(["bench", "--help"]).stdout
    result = _bench(datasets, out, "--metric", "BLEU@4")
    assert result.exit_code == 2 and "unknown metric 'BLEU@4'" in result.stderr


def _trec_run(path) -> dict[str, dict[str, float]]:
    """A TREC run file read by hand: query_id → {doc_id: score}."""
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        query_id, _, doc_id, _, score, _ = line.split()
        run.setdefault(query_id, {})[doc_id] = float(score)
    return run


def _ndcg10(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> float:
    """pytrec_eval's nDCG@10 averaged over every judged query (one the run lacks scores 0)."""
    import pytrec_eval

    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    return sum(per_query.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / len(qrels)


def _forum_qrels(seed: int) -> dict[str, dict[str, int]]:
    """Different judgments per forum: 1–4 judged queries (so a mean weighted by queries differs from the
    plain mean), each with at least one relevant document, grades 1–2."""
    import random

    rng = random.Random(seed)
    queries = rng.sample(["q1", "q2", "q3", "q4"], rng.randint(1, 4))
    return {
        q: {d: rng.randint(1, 2) for d in rng.sample(["d1", "d2", "d3", "d4", "d5"], rng.randint(1, 3))}
        for q in queries
    }


def test_cqadupstack_expands_to_its_forums_and_reports_their_mean(tmp_path, monkeypatch, fake_encoder, tiny_beir):
    import statistics

    from harness.datasets import registry

    data = tmp_path / "data"
    forums = registry.get("cqadupstack").subsets
    judgments = {}
    for i, forum in enumerate(forums):
        shutil.copytree(tiny_beir, data / "cqadupstack" / forum)
        judgments[forum] = _forum_qrels(i)
        lines = ["query-id\tcorpus-id\tscore"] + [
            f"{q}\t{d}\t{g}" for q, docs in judgments[forum].items() for d, g in docs.items()
        ]
        (data / "cqadupstack" / forum / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    (data / "cqadupstack" / ".beir-harness.json").write_text('{"name": "cqadupstack"}')
    out = tmp_path / "out"
    result = invoke(
        [
            "-q",
            "bench",
            "--models",
            "bm25",
            "--datasets",
            "cqadupstack",
            "--data-dir",
            str(data),
            "--output-dir",
            str(out),
            "--k",
            "10",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert "12 cells: 12 done" in result.stdout
    lines = result.stdout.splitlines()
    # Each forum's score is pytrec_eval's on that forum's own run and judgments…
    per_forum = {}
    for forum in forums:
        (run_file,) = (out / f"cqadupstack__{forum}").glob("*/test.run.trec")
        per_forum[forum] = _ndcg10(_trec_run(run_file), judgments[forum])
        row = next(line for line in lines if line.startswith(f"cqadupstack/{forum} "))
        assert row.split()[-1] == f"{per_forum[forum]:.4f}"
    # …and CQADupStack's is their plain mean (BEIR's and MTEB's rule), not pooled over queries.
    mean = statistics.fmean(per_forum.values())
    pooled = sum(per_forum[f] * len(judgments[f]) for f in forums) / sum(len(judgments[f]) for f in forums)
    assert len({f"{v:.4f}" for v in (mean, pooled, per_forum[forums[0]], statistics.median(per_forum.values()))}) == 4
    assert (
        next(line for line in lines if line.startswith("cqadupstack (mean of 12 forums)")).split()[-1] == f"{mean:.4f}"
    )
    report = json.loads(invoke(["report", str(out), "--format", "json"]).stdout)
    (row,) = [row for row in report["rows"] if row["dataset"] == "cqadupstack"]
    assert [value for key, value in row.items() if key != "dataset"] == [pytest.approx(mean, abs=1e-12)]


def test_the_nanobeir_row_is_the_plain_mean_of_its_datasets_and_absent_when_one_lacks_a_value():
    import statistics

    from harness.datasets import registry
    from harness.pipeline.bench import BenchReport, Cell

    parts = registry.get(registry.NANOBEIR).subsets
    values = {part: round(0.05 + 0.9 * ((i * 7) % 13) / 13 + 0.001 * i * i, 6) for i, part in enumerate(parts)}
    cells = [Cell(f"{registry.NANOBEIR}/{part}", "m", "done", {"nDCG@10": value}) for part, value in values.items()]
    cells += [Cell(f"{registry.NANOBEIR}/{part}", "other", "done", {"nDCG@10": 0.5}) for part in parts[1:]]
    lines = BenchReport(cells, None).format_table().splitlines()
    (row,) = [line for line in lines if line.startswith(f"NanoBEIR (mean of {len(parts)})")]
    expected = statistics.fmean(values.values())
    assert f"{expected:.4f}" not in {f"{values[parts[0]]:.4f}", f"{statistics.median(values.values()):.4f}"}
    assert row.split()[-2:] == [f"{expected:.4f}", "-"]  # "other" lacks one dataset: no mean


# --------------------------------------------------------------------------- fusions as systems


def _rrf(runs: list[dict[str, dict[str, float]]], k: int = 60) -> dict[str, dict[str, float]]:
    """RRF written out: ranks in trec_eval's order (score, then doc_id, descending), Σ 1 / (k + rank)."""
    fused: dict[str, dict[str, float]] = {}
    for run in runs:
        for query_id, docs in run.items():
            ranked = sorted(docs, key=lambda d: (docs[d], d), reverse=True)
            for rank, doc_id in enumerate(ranked, start=1):
                fused.setdefault(query_id, {})[doc_id] = fused.get(query_id, {}).get(doc_id, 0.0) + 1 / (k + rank)
    return fused


def _wsum_zscore(runs: list[dict[str, dict[str, float]]], weights: list[float]) -> dict[str, dict[str, float]]:
    """Weighted sum of per-query z-scores (population σ; σ = 0 gives 0), written out."""
    import statistics

    fused: dict[str, dict[str, float]] = {}
    for run, weight in zip(runs, weights):
        for query_id, docs in run.items():
            mean, std = statistics.fmean(docs.values()), statistics.pstdev(docs.values())
            for doc_id, score in docs.items():
                z = (score - mean) / std if std > 0 else 0.0
                fused.setdefault(query_id, {})[doc_id] = fused.get(query_id, {}).get(doc_id, 0.0) + weight * z
    return fused


def _assert_run_file_is(path, expected: dict[str, dict[str, float]]) -> None:
    """The file lists each query's documents in trec_eval's order of the expected scores, with those scores."""
    saved = {}
    for line in path.read_text().splitlines():
        query_id, _, doc_id, _, score, _ = line.split()
        saved.setdefault(query_id, []).append((doc_id, float(score)))
    assert set(saved) == set(expected)
    for query_id, hits in saved.items():
        scores = expected[query_id]
        assert len(hits) == len(scores)
        for (a, score_a), (b, _) in zip(hits, hits[1:]):
            assert scores[a] > scores[b] - 1e-9 and (abs(scores[a] - scores[b]) > 1e-9 or a > b), (query_id, a, b)
        assert [score for _, score in hits] == pytest.approx([scores[d] for d, _ in hits], abs=1e-9)


def test_a_fusion_is_a_system_whose_members_join_the_grid(grid):
    datasets, out = grid
    result = invoke(
        [
            "-q",
            "bench",
            "--systems",
            "rrf(fake-bow, bm25), wsum(bm25, fake-bow, weights=0.3:0.7, norm=zscore)",
            "--datasets",
            datasets[0],
            "--output-dir",
            str(out),
            "--k",
            "1,10",
            "--no-cache",
        ],
    )
    assert result.exit_code == 0, result.stderr
    header = [h.strip() for h in result.stdout.splitlines()[0].split("  ") if h.strip()]
    assert header[1:3] == ["fake-bow", "bm25"] and len(set(header[1:])) == 4  # members first, then each fusion
    assert "4 cells: 4 done" in result.stdout
    fused = sorted((out / "tiny" / "fusion").glob("test.*.json"))
    assert len(fused) == 2
    # Each fused file holds what fusing the two saved member runs by hand gives, scores and order.
    members = {model: _trec_run(out / "tiny" / model / "test.run.trec") for model in ("fake-bow", "bm25")}
    by_method = {json.loads(path.read_text())["config"]["fusion"]["method"]: path for path in fused}
    assert set(by_method) == {"rrf", "wsum"}
    _assert_run_file_is(by_method["rrf"].with_suffix(".run.trec"), _rrf([members["fake-bow"], members["bm25"]]))
    _assert_run_file_is(
        by_method["wsum"].with_suffix(".run.trec"), _wsum_zscore([members["bm25"], members["fake-bow"]], [0.3, 0.7])
    )
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert len({row["label"] for row in rows}) == 4  # one label per system, fusions included
    # A rerun skips the evaluated systems and fuses again (milliseconds).
    again = invoke(
        [
            "-q",
            "bench",
            "--systems",
            "rrf(fake-bow, bm25)",
            "--datasets",
            datasets[0],
            "--output-dir",
            str(out),
            "--k",
            "1,10",
            "--no-cache",
        ],
    )
    assert "3 cells: 1 done, 2 skipped" in again.stdout


@pytest.mark.parametrize(
    "systems, message",
    [
        ("rrf(bm25)", "at least two runs"),
        ("borda(bm25, x)", "unknown fusion method 'borda'"),
        ("rrf(bm25, x, alpha=2)", "unknown fusion setting 'alpha'"),
        ("wsum(bm25, x, weights=1:2:3)", "3 weights for 2 runs"),
        ("rrf(bm25, x, k=sixty)", "k='sixty' is not a valid value"),
        ("rrf(bm25, rrf(a, b))", "a fusion of a fusion"),
        ("rrf(bm25, x", "is never closed"),
    ],
)
def test_a_malformed_fusion_is_one_line_naming_it(grid, systems, message):
    datasets, out = grid
    result = invoke(
        ["-q", "bench", "--systems", systems, "--datasets", datasets[0], "--output-dir", str(out), "--no-cache"]
    )
    assert result.exit_code != 0 and message in result.output, result.output
    assert not (out / "tiny").exists()


def test_a_fusion_of_a_failed_system_fails_alone(grid, tmp_path, monkeypatch):
    from harness.errors import ModelLoadError

    def no_model(name, *args, **kwargs):
        raise ModelLoadError(f"cannot load model {name!r}")

    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", no_model)
    (tmp_path / "nomodel").mkdir()  # there (so the grid's check passes it), and failing only when it loads
    datasets, out = grid
    result = invoke(
        [
            "-q",
            "bench",
            "--systems",
            "bm25, rrf(bm25, " + str(tmp_path / "nomodel") + ")",
            "--datasets",
            datasets[0],
            "--output-dir",
            str(out),
            "--no-cache",
        ],
    )
    assert result.exit_code == 1
    assert "failed, so it cannot be fused" in result.stdout and (out / "tiny" / "bm25" / "test.json").is_file()


def test_split_systems_keeps_commas_inside_parentheses():
    from harness.pipeline.systems import split_systems

    assert split_systems("bm25, rrf(bm25, e5, k=10) ,bm25 >> ce@50,bm25") == [
        "bm25",
        "rrf(bm25, e5, k=10)",
        "bm25 >> ce@50",
    ]


def test_warnings_name_their_cell(grid):
    datasets, out = grid
    result = invoke(
        [
            "-q",
            "bench",
            "--models",
            "bm25",
            "--datasets",
            ",".join(datasets),
            "--output-dir",
            str(out),
            "--k",
            "1,10",
            "--no-cache",
        ],
    )
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "judged queries have no results" in line]
    # One per cell, each saying which: the same warning without its cell would not tell the two apart.
    assert [line.split(": ", 1)[0] for line in warnings] == ["WARNING tiny × bm25", "WARNING tiny2 × bm25"], warnings
    assert all(line.count("×") == 1 for line in warnings)
