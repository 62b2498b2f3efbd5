"""report with several metrics: one table, checked cell by cell against pytrec_eval on the same runs (pandas builds
the expected table), the long layout pivoted back, every format parsed back, marks per metric, published rows."""

from __future__ import annotations

import io
import json
import random
import re
from pathlib import Path

import pandas as pd
import pytest
from cli_runner import invoke

import harness

pytrec_eval = pytest.importorskip("pytrec_eval")

METRICS = ["nDCG@10", "Recall@100", "MRR@10"]
DATASETS = ["nfcorpus", "scifact"]  # registry names: the published table has BM25 rows for them
SYSTEMS = ["bm25", "dense-a", "dense-b"]
N_QUERIES, N_DOCS = 25, 150


def _data(seed: int) -> tuple[dict, dict[str, dict]]:
    """Qrels (grades 0-2) and one run per system, every score distinct (no tie rule involved)."""
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(N_DOCS)]
    qrels = {f"q{q}": {d: rng.choice([0, 1, 1, 2]) for d in rng.sample(docs, 6)} for q in range(N_QUERIES)}
    runs = {}
    for s, system in enumerate(SYSTEMS):
        scores = rng.sample(range(1, 10**6), N_DOCS)
        runs[system] = {
            q: {
                d: scores[(i + s * 7 + int(q[1:])) % N_DOCS] / 1000 + (3.0 if d in judged else 0.0) * s / 2
                for i, d in enumerate(docs)
            }
            for q, judged in qrels.items()
        }
    return qrels, runs


def _reference(qrels: dict, run: dict) -> dict[str, dict[str, float]]:
    """Per query, from pytrec_eval directly: nDCG@10, Recall@100, and MRR@10 as recip_rank of the run cut at 10."""
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(run)
    top10 = {q: dict(sorted(docs.items(), key=lambda item: -item[1])[:10]) for q, docs in run.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    return {
        q: {"nDCG@10": v["ndcg_cut_10"], "Recall@100": v["recall_100"], "MRR@10": rr[q]["recip_rank"]}
        for q, v in per_query.items()
    }


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    """Result files scored by the harness, and the expected per-query values from pytrec_eval as a frame."""
    from harness.reporting.report import model_slug

    root = tmp_path_factory.mktemp("results")
    rows = []
    for i, dataset in enumerate(DATASETS):
        qrels, runs = _data(i)
        for system, run in runs.items():
            scored = harness.score(qrels, run, METRICS)
            path = root / dataset / model_slug(system) / "test.json"
            path.parent.mkdir(parents=True)
            result = {
                "dataset": dataset,
                "split": "test",
                "model": system,
                "metrics": dict(scored.means),
                "per_query": {q: dict(v) for q, v in scored.per_query.items()},
                "n_queries": len(qrels),
                "config": {},
                "fingerprints": {"qrels": f"qrels-{dataset}"},
                "created": "2026-11-30T00:00:00+00:00",
            }
            path.write_text(json.dumps(result))
            for query, values in _reference(qrels, run).items():
                rows += [(system, dataset, metric, query, value) for metric, value in values.items()]
    return root, pd.DataFrame(rows, columns=["system", "dataset", "metric", "query", "value"])


def _expected_wide(per_query: pd.DataFrame) -> pd.DataFrame:
    """systems × (dataset, metric): the mean over queries of pytrec_eval's values, in the table's column order."""
    means = per_query.groupby(["system", "dataset", "metric"])["value"].mean()
    wide = means.unstack(["dataset", "metric"])
    return wide[pd.MultiIndex.from_product([DATASETS, METRICS], names=["dataset", "metric"])].loc[SYSTEMS]


def _report(root: Path, *options: str) -> str:
    args = ["report", str(root), *(a for m in METRICS for a in ("--metric", m)), *options]
    result = invoke(args)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_the_wide_csv_is_pytrec_evals_means_cell_by_cell(study):
    root, per_query = study
    table = pd.read_csv(io.StringIO(_report(root, "--format", "csv")), header=[0, 1], index_col=0)
    expected = _expected_wide(per_query)
    assert list(table.index) == SYSTEMS and list(table.columns) == list(expected.columns)
    for system in SYSTEMS:
        for column in expected.columns:
            assert table.loc[system, column] == pytest.approx(expected.loc[system, column], abs=1e-12), (system, column)


def test_the_long_layout_pivots_into_the_wide_table(study):
    root, per_query = study
    long = pd.read_csv(io.StringIO(_report(root, "--format", "csv", "--layout", "long")))
    assert list(long.columns) == ["system", "kind", "dataset", "metric", "value", "significant"]
    assert len(long) == len(SYSTEMS) * len(DATASETS) * len(METRICS)
    pivot = long.pivot_table(index="system", columns=["dataset", "metric"], values="value")
    wide = pd.read_csv(io.StringIO(_report(root, "--format", "csv")), header=[0, 1], index_col=0)
    pd.testing.assert_frame_equal(pivot.reindex_like(wide), wide, check_names=False, rtol=0, atol=1e-15)
    expected = _expected_wide(per_query)
    pd.testing.assert_frame_equal(pivot.reindex_like(expected), expected, check_names=False, atol=1e-12)


def test_markdown_and_latex_carry_every_metric_column(study):
    root, per_query = study
    expected = _expected_wide(per_query)
    markdown = _report(root, "--format", "markdown")
    header = [c.strip() for c in markdown.splitlines()[0].strip("|").split("|")]
    assert header[1:] == [f"{d} · {m}" for d in [*DATASETS, "average"] for m in METRICS]
    for line in markdown.splitlines()[2 : 2 + len(SYSTEMS)]:
        system, *cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        assert cells[: len(expected.columns)] == [f"{expected.loc[system, c]:.4f}" for c in expected.columns]
    latex = _report(root, "--format", "latex")
    assert re.findall(r"\\multicolumn\{3\}\{c\}\{([^}]*)\}", latex) == [*DATASETS, "average"]
    metric_row = next(line for line in latex.splitlines() if line.startswith("system &"))
    assert metric_row.removesuffix(r" \\").split(" & ")[1:] == [m.replace("@", "@") for m in METRICS] * 3
    for system in SYSTEMS:
        row = next(line for line in latex.splitlines() if line.startswith(f"{system} &"))
        cells = [re.sub(r"\\textbf\{(.*)\}", r"\1", c) for c in row.removesuffix(r" \\").split(" & ")[1:]]
        assert cells[:6] == [f"{expected.loc[system, c]:.4f}" for c in expected.columns]


def test_the_html_page_holds_the_table_with_every_metric(study, tmp_path):
    root, per_query = study
    pytest.importorskip("lxml")
    page = tmp_path / "page.html"
    _report(root, "--format", "html", "--out", str(page))
    tables = [t for t in pd.read_html(io.StringIO(page.read_text(encoding="utf-8"))) if t.columns.nlevels == 2]
    assert len(tables) == 1
    table = tables[0].set_index(tables[0].columns[0])
    expected = _expected_wide(per_query)
    for system in SYSTEMS:
        for column in expected.columns:
            assert table.loc[system, column] == pytest.approx(expected.loc[system, column], abs=5e-5)


def test_the_api_gives_the_same_table(study):
    root, _ = study
    table = harness.report([root], METRICS)
    assert table.render("csv") == _report(root, "--format", "csv").rstrip("\n") + "\n"
    one = harness.report([root], "nDCG@10")
    assert one.render("csv") + "\n" == _report_one(root)


def _report_one(root: Path) -> str:
    result = invoke(["report", str(root), "--metric", "nDCG@10", "--format", "csv"])
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_one_metric_gives_todays_table_byte_for_byte(study):
    root, per_query = study
    expected = per_query[per_query.metric == "nDCG@10"].groupby(["dataset", "system"])["value"].mean().unstack()
    lines = _report_one(root).splitlines()
    assert lines[0] == "dataset," + ",".join(SYSTEMS)  # datasets as rows, as before
    for line, dataset in zip(lines[1:], DATASETS):
        name, *values = line.split(",")
        assert name == dataset and [float(v) for v in values] == pytest.approx(list(expected.loc[dataset]), abs=1e-12)


def test_significance_marks_belong_to_their_metric(tmp_path):
    """B beats A on every query's nDCG@10 and ties it on every Recall@100: only the nDCG@10 cells are marked
    (scipy's exact paired t-test says p < 1e-10 for the first and nothing differs in the second)."""
    from scipy import stats

    def write(model: str, ndcg: list[float], recall: list[float]) -> None:
        path = tmp_path / "scifact" / model / "test.json"
        path.parent.mkdir(parents=True)
        per_query = {f"q{i}": {"nDCG@10": n, "Recall@100": r} for i, (n, r) in enumerate(zip(ndcg, recall))}
        metrics = {m: sum(v[m] for v in per_query.values()) / len(per_query) for m in ("nDCG@10", "Recall@100")}
        data = {"dataset": "scifact", "split": "test", "model": model, "metrics": metrics, "per_query": per_query}
        path.write_text(json.dumps({**data, "n_queries": 30, "config": {}, "fingerprints": {"qrels": "x"}}))

    ndcg_a = [0.2 + 0.01 * i for i in range(30)]
    ndcg_b = [v + 0.3 + 0.001 * (i % 5) for i, v in enumerate(ndcg_a)]
    recall = [0.5 + 0.01 * i for i in range(30)]
    write("a", ndcg_a, recall)
    write("b", ndcg_b, recall)
    assert stats.ttest_rel(ndcg_b, ndcg_a).pvalue < 1e-10
    args = ["report", str(tmp_path), "--metric", "nDCG@10", "--metric", "Recall@100", "--significance", "a"]
    long = pd.read_csv(io.StringIO(invoke([*args, "--layout", "long", "--format", "csv"]).stdout))
    marked = long[long.significant.fillna("") == "†"]
    assert list(zip(marked.system, marked.metric)) == [("b", "nDCG@10")]
    markdown = invoke([*args, "--rounds", "2000"]).stdout
    row = next(line for line in markdown.splitlines() if line.startswith("| b |"))
    assert row.count("†") == 1 and "†" in row.split("|")[2]


def test_published_rows_per_metric(study):
    """With --published, BM25's pyserini row per dataset and metric, read here from the published CSV itself."""
    root, per_query = study
    source = Path(harness.__file__).parent / "data" / "published-scores.csv"
    published = pd.read_csv(source)
    flat = published[(published.system == "bm25") & (published.variant == "pyserini 2CR bm25-flat")]
    long = pd.read_csv(io.StringIO(_report(root, "--format", "csv", "--layout", "long", "--published")))
    rows = long[long.kind == "published"]
    assert set(rows.system) == {"bm25 · pyserini flat"}
    for _, row in rows.iterrows():
        column = {"nDCG@10": "ndcg@10", "Recall@100": "recall@100"}[row.metric]  # MRR@10: pyserini gives none
        assert row.value == flat.set_index("dataset").loc[row.dataset, column]
    assert set(rows.metric) == {"nDCG@10", "Recall@100"}
    delta = long[long.kind == "delta"].set_index(["dataset", "metric"]).value
    ours = per_query[per_query.system == "bm25"].groupby(["dataset", "metric"]).value.mean()
    for (dataset, metric), value in delta.items():
        theirs = flat.set_index("dataset").loc[dataset, metric.lower()]
        assert value == pytest.approx(ours[(dataset, metric)] - theirs, abs=1e-12)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--cost"], 2, "--cost tabulates one metric, and 2 were given (nDCG@10, Recall@100); give one --metric"),
        (["--compression"], 2, "--compression tabulates one metric"),
        (["--check-published"], 2, "--check-published tabulates one metric"),
    ],
    ids=["cost", "compression", "check-published"],
)
def test_a_one_metric_mode_with_several_metrics_is_refused(tmp_path, args, code, message):
    out = tmp_path / "t.md"
    command = ["report", str(tmp_path / "nowhere"), "--metric", "nDCG@10", "--metric", "Recall@100", "--out", str(out)]
    result = invoke([*command, *args])
    assert result.exit_code == code and message in result.stderr  # said before any result is looked for
    assert not out.exists()


def test_a_metric_named_twice_is_refused(study, tmp_path):
    root, _ = study
    out = tmp_path / "t.csv"
    args = ["report", str(root), "--metric", "nDCG@10", "--metric", "ndcg_cut_10", "--format", "csv", "--out", str(out)]
    result = invoke(args)
    assert result.exit_code == 1 and "metric nDCG@10 is asked for twice; name each metric once" in result.stderr
    assert not out.exists()


def test_report_cost_shows_the_runs_own_times_and_host(tmp_path):
    """The times and host a result recorded, as they were written into it here (and as `env` names the CPU)."""
    host = {"cpu": "AMD EPYC 7B13", "machine": "x86_64", "logical_cores": 16, "cores_used": 2, "gpus": ["NVIDIA H200"]}
    timings = {"load": 0.5, "encode_corpus": 12.25, "search": 0.75, "total": 14.0}
    path = tmp_path / "scifact" / "m" / "test.json"
    path.parent.mkdir(parents=True)
    data = {"dataset": "scifact", "split": "test", "model": "m", "metrics": {"nDCG@10": 0.5}, "n_queries": 1}
    data |= {"per_query": {"q": {"nDCG@10": 0.5}}, "config": {}, "timings": timings, "host": host}
    path.write_text(json.dumps(data))
    result = invoke(["report", str(tmp_path), "--cost", "--format", "csv"])
    row = pd.read_csv(io.StringIO(result.stdout)).iloc[0]
    assert row.wall_s == 14.0 and row.encode_corpus_s == 12.25 and row.search_s == 0.75
    assert row.host == "AMD EPYC 7B13 (2 of 16 cores), NVIDIA H200"
    markdown = invoke(["report", str(tmp_path), "--cost"]).stdout
    header, _, line = markdown.splitlines()[:3]
    shown = dict(zip(header.strip("|").split("|"), line.strip("|").split("|")))
    assert shown[" host "].strip() == row.host and shown[" wall s "].strip() == "14.00"
    assert "whether the machine was otherwise quiet is not recorded" in markdown
