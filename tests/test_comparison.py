"""report, compare and inspect on fixture results: table shape, averages, golden Markdown/LaTeX,
CQADupStack averaging, published columns, reproduction checks, significance marks, the plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import invoke

from harness.datasets import published
from harness.errors import HarnessError
from harness.io.trec import read_run
from harness.reporting.comparison import build_comparison, load_results, render
from harness.reporting.reproduction import check_published

GOLDEN = Path(__file__).parent / "data" / "golden"


def write_result(
    root: Path,
    dataset: str,
    model: str,
    per_query: dict[str, float],
    split: str = "test",
    metric: str = "nDCG@10",
    extra: dict | None = None,
) -> Path:
    """A minimal result file as `evaluate` writes it."""
    from harness.reporting.report import model_slug

    path = root / model_slug(dataset) / model_slug(model) / f"{split}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    mean = sum(per_query.values()) / len(per_query)
    data = {
        "dataset": dataset,
        "split": split,
        "model": model,
        "metrics": {metric: mean},
        "per_query": {q: {metric: v} for q, v in per_query.items()},
        "n_queries": len(per_query),
        "config": {},
        "fingerprints": {"qrels": "same"},
        "created": "2026-11-30T00:00:00+00:00",
    }
    data.update(extra or {})
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def results(tmp_path) -> Path:
    root = tmp_path / "results"
    write_result(root, "scifact", "model-a", {"1": 0.5, "2": 0.7, "3": 0.9})
    write_result(root, "scifact", "model-b", {"1": 0.6, "2": 0.8, "3": 1.0})
    write_result(root, "nfcorpus", "model-a", {"1": 0.2, "2": 0.4})
    write_result(root, "nfcorpus", "model-b", {"1": 0.3, "2": 0.1})
    write_result(root, "my-set", "model-a", {"x": 1.0})  # only one model: not in the average
    write_result(root, "scifact", "model-a", {"1": 0.0, "2": 0.0, "3": 0.0}, split="train")  # other split
    return root


def test_table_shape_order_and_average(results):
    comparison = build_comparison(load_results([results]))
    assert comparison.datasets == ["nfcorpus", "scifact", "my-set"]  # registry order, then others
    assert comparison.models == ["model-a", "model-b"]
    assert comparison.value("scifact", "model-a") == pytest.approx(0.7)  # the test split, not train
    assert comparison.value("my-set", "model-b") is None
    average, shared = comparison.average()
    assert shared == 2
    assert average["model-a"] == pytest.approx((0.3 + 0.7) / 2)
    assert average["model-b"] == pytest.approx((0.2 + 0.8) / 2)
    assert comparison.best("nfcorpus") == {"model-a"} and comparison.best("scifact") == {"model-b"}


@pytest.mark.parametrize(
    ("fmt", "by", "golden"),
    [
        ("markdown", "dataset", "table.md"),
        ("latex", "dataset", "table.tex"),
        ("markdown", "model", "table-by-model.md"),
    ],
)
def test_golden_renderings(results, fmt, by, golden):
    text = render(build_comparison(load_results([results])), fmt, digits=3, by=by)
    assert text + "\n" == (GOLDEN / golden).read_text()


def test_csv_is_the_unrounded_pivot(results):
    text = render(build_comparison(load_results([results])), "csv")
    lines = text.splitlines()
    assert lines[0] == "dataset,model-a,model-b"
    assert lines[1].startswith("nfcorpus,0.30000000000000004,0.2") or lines[1].startswith("nfcorpus,0.3,")
    assert lines[3] == "my-set,1.0,"
    data = json.loads(render(build_comparison(load_results([results])), "json"))
    assert data["average_over"] == 2 and data["rows"][0]["dataset"] == "nfcorpus"


def test_cqadupstack_is_the_mean_of_its_forums(tmp_path):
    root = tmp_path / "r"
    forums = published.registry.get("cqadupstack").subsets if hasattr(published, "registry") else None
    from harness.datasets import registry

    forums = registry.get("cqadupstack").subsets
    for i, forum in enumerate(forums):
        write_result(root, f"cqadupstack/{forum}", "m", {"q1": i / 20, "q2": i / 20 + 0.1})
    comparison = build_comparison(load_results([root]))
    assert comparison.datasets == ["cqadupstack"]
    assert comparison.value("cqadupstack", "m") == pytest.approx(sum(i / 20 + 0.05 for i in range(12)) / 12)
    assert len(comparison.cells[("cqadupstack", "m")].per_query) == 24
    (root / "cqadupstack__tex").rename(tmp_path / "moved")
    write_result(root, "scifact", "m", {"1": 0.5})
    comparison = build_comparison(load_results([root]))
    assert comparison.value("cqadupstack", "m") is None  # the row stays, empty, with a note
    assert "11 of 12 forums (missing tex)" in comparison.notes[0]


def test_published_columns_and_deltas(tmp_path):
    root = tmp_path / "r"
    write_result(root, "scifact", "bm25", {"1": 0.6789})
    write_result(root, "scifact", "all-MiniLM-L6-v2", {"1": 0.64508})
    comparison = build_comparison(load_results([root]), with_published=True)
    assert comparison.published_columns == ["all-MiniLM-L6-v2 · MTEB", "bm25 · pyserini flat"]
    # Each Δ column says which published column it is measured against.
    assert comparison.value("scifact", "Δ bm25 vs bm25 · pyserini flat") == pytest.approx(0.0)
    assert comparison.value("scifact", "Δ all-MiniLM-L6-v2 vs all-MiniLM-L6-v2 · MTEB") == pytest.approx(0.0)
    # One note per column: its source once, and the datasets it covers.
    notes = [note for note in comparison.notes if note.startswith("bm25 · pyserini flat:")]
    assert notes == ["bm25 · pyserini flat: castorini/pyserini pyserini/2cr/beir.yaml@0a0be2960d33 (datasets: scifact)"]
    # The bold best value goes to a system the user ran, never to a published column.
    assert comparison.best("scifact") == {"bm25"}


def test_a_one_system_table_bolds_nothing(tmp_path):
    root = tmp_path / "r"
    write_result(root, "scifact", "bm25", {"1": 0.6})
    comparison = build_comparison(load_results([root]), with_published=True)
    assert comparison.best("scifact") == set()
    assert "**" not in render(comparison, "markdown")


def test_published_systems_add_columns_and_a_reranked_result_meets_bm25_ce(tmp_path):
    root = tmp_path / "r"
    write_result(
        root,
        "scifact",
        "bm25",
        {"1": 0.688},
        extra={
            "label": "bm25 >> ms-marco-MiniLM-L-6-v2@100",
            "config": {"rerank": {"model": "models/ms-marco-MiniLM-L-6-v2", "depth": 100}},
        },
    )
    comparison = build_comparison(load_results([root]), published_systems=["splade-pp-ed"])
    assert comparison.published_columns == ["bm25+ce · BEIR paper", "bm25 · pyserini flat", "splade-pp-ed · pyserini"]
    assert comparison.value("scifact", "bm25+ce · BEIR paper") == pytest.approx(0.688)
    delta = "Δ bm25 >> ms-marco-MiniLM-L-6-v2@100 vs bm25+ce · BEIR paper"
    assert comparison.value("scifact", delta) == pytest.approx(0.0)
    with pytest.raises(HarnessError, match="published system 'nope' is not in the published table"):
        build_comparison(load_results([root]), published_systems=["nope"])


def test_touche_v3_rows_never_meet_a_v2_result(tmp_path):
    root = tmp_path / "r"
    write_result(root, "webis-touche2020", "sentence-transformers/all-MiniLM-L6-v2", {"1": 0.2})
    comparison = build_comparison(load_results([root]), with_published=True)
    assert comparison.value("webis-touche2020", "all-MiniLM-L6-v2 · MTEB") == 0.16904  # Touche2020, not .v3
    assert any("Touche2020Retrieval.v3" in note for note in comparison.notes)
    assert all(row.edition != "v3" for row in published.find("webis-touche2020", "test"))


def test_a_custom_dataset_says_nothing_is_published_for_it(tmp_path):
    root = tmp_path / "r"
    write_result(root, "my-set", "bm25", {"1": 0.5})
    comparison = build_comparison(load_results([root]), with_published=True)
    assert comparison.published_columns == []
    assert any(
        note.startswith("my-set: nothing published") and "not a BEIR dataset" in note for note in comparison.notes
    )


def test_reproduced_column_and_aliases():
    assert published.reproduced("scifact", "test", "bm25").column == "bm25 · pyserini flat"
    assert published.reproduced("scifact", "test", "all-MiniLM-L6-v2").values["nDCG@10"] == 0.64508
    assert published.reproduced("scifact", "test", "/models/all-MiniLM-L6-v2").values["nDCG@10"] == 0.64508
    assert published.reproduced("scifact", "test", "my-model") is None
    assert published.reproduced("msmarco", "dev", "sentence-transformers/all-MiniLM-L6-v2") is not None
    assert published.system_of("naver/splade-cocondenser-ensembledistil") == "splade-pp-ed"
    assert (
        published.reproduced("scifact", "test", "bm25", "cross-encoder/ms-marco-MiniLM-L-12-v2").column
        == "bm25+ce · BEIR README ms-marco-MiniLM-L-12-v2"
    )


def test_check_published_works_for_every_system_in_the_table(tmp_path):
    """A result equal to its system's preferred published value is OK, for every system and dataset."""
    rows = [
        row
        for row in published.published_scores()
        if row.comparable
        and "nDCG@10" in row.values
        and "/" not in row.dataset
        and row.split == registry_split(row.dataset)
        and row.column == published.preferred_column(row.system)
    ]
    systems = {row.system for row in rows}
    assert len(systems) >= 30
    root = tmp_path / "r"
    for i, row in enumerate(rows):
        if row.system in ("bm25+ce",):
            continue  # needs a reranked result; covered above
        write_result(root / str(i), row.dataset, row.system, {"1": row.values["nDCG@10"]}, split=row.split)
    checks = check_published(load_results([root]))
    assert checks and all(check.status == "OK" for check in checks), [c for c in checks if c.status != "OK"][:3]
    assert len({check.model for check in checks}) >= 29


def registry_split(dataset: str) -> str:
    from harness.datasets import registry

    return registry.get(dataset).eval_split


@pytest.mark.parametrize(("value", "code", "status"), [(0.6789, 0, "OK"), (0.6760, 0, "OK"), (0.60, 1, "OFF")])
def test_check_published_exit_codes(tmp_path, value, code, status):
    root = tmp_path / "r"
    write_result(root, "scifact", "bm25", {"1": value})
    write_result(root, "my-set", "bm25", {"1": 0.3})  # nothing published: listed, never a failure
    result = invoke(["report", str(root), "--check-published"])
    assert result.exit_code == code, result.output
    assert f" {status} " in result.stdout and "nothing published for this system on this dataset" in result.stdout


def test_check_published_with_nothing_to_compare_exits_2(results):
    result = invoke(["report", str(results), "--check-published"])
    assert result.exit_code == 2 and "nothing to compare" in result.stdout
    assert {check.status for check in check_published(load_results([results]))} == {"none"}


def test_check_tolerance_is_per_metric(tmp_path):
    root = tmp_path / "r"
    write_result(root, "scifact", "bm25", {"1": 0.9253 - 0.004}, metric="Recall@100")
    (check,) = check_published(load_results([root]), metric="Recall@100")
    assert check.tolerance == 0.005 and check.status == "OK"
    (strict,) = check_published(load_results([root]), metric="Recall@100", tolerance=0.001)
    assert strict.status == "OFF"


def test_significance_marks(tmp_path):
    root = tmp_path / "r"
    base = {str(i): 0.3 + (i % 7) / 20 for i in range(60)}
    write_result(root, "scifact", "base", base)
    write_result(root, "scifact", "better", {q: v + 0.2 for q, v in base.items()})
    write_result(root, "scifact", "same", dict(base))
    write_result(root, "nfcorpus", "base", base)
    write_result(root, "nfcorpus", "better", {q: v + (0.01 if int(q) % 2 else -0.01) for q, v in base.items()})
    comparison = build_comparison(load_results([root]), significance="base", rounds=2000)
    assert comparison.marks == {("scifact", "better"): "†"}
    assert any("holm correction" in note for note in comparison.notes)
    with pytest.raises(HarnessError, match="baseline 'nope' is not among the models"):
        build_comparison(load_results([root]), significance="nope")


def test_report_cli_formats_out_and_plot(results, tmp_path):
    out = tmp_path / "table.tex"
    result = invoke(["report", str(results), "--format", "latex", "--out", str(out)])
    assert result.exit_code == 0 and out.read_text().startswith("\\begin{tabular}")
    plot = tmp_path / "plot.png"
    result = invoke(["report", str(results), "--plot", str(plot)])
    assert result.exit_code == 0, result.stderr
    data = plot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < len(data) < 2_000_000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert 600 <= width <= 3000 and 400 <= height <= 2000
    result = invoke(["report", str(results), "--metric", "Recall@100"])
    assert result.exit_code == 1 and "no result has Recall@100" in result.stderr
    result = invoke(["report", str(tmp_path / "missing")])
    assert result.exit_code == 1 and "no such file or folder" in result.stderr
    for command in (["report"], ["compare"], ["inspect"]):
        assert "Example:" in invoke([*command, "--help"]).stdout


def test_compare_cli(tmp_path):
    root = tmp_path / "r"
    a = write_result(root, "scifact", "a", {str(i): 0.5 for i in range(30)})
    b = write_result(root, "scifact", "b", {str(i): 0.5 + (0.1 if i % 3 else 0.0) for i in range(30)})
    result = invoke(["compare", str(a), str(b), "--rounds", "2000"])
    assert result.exit_code == 0, result.stderr
    line = next(row for row in result.stdout.splitlines() if row.startswith("nDCG@10"))
    assert "+0.0667" in line and line.endswith("20 / 10 / 0") and "*" in line
    assert "B wins / ties / A wins" in result.stdout
    assert "< 1e-4" in line and "0.0000" not in line  # the t-test p is tiny: never printed as zero
    data = json.loads(invoke(["compare", str(a), str(a), "--json"]).stdout)
    assert data[0]["p_t_test"] == 1.0 and data[0]["p_randomization"] == 1.0
    other = write_result(root, "nfcorpus", "b", {"1": 0.1})
    result = invoke(["compare", str(a), str(other)])
    assert result.exit_code == 1 and "different datasets" in result.stderr


def test_inspect_cli_on_a_real_evaluation(tiny_beir, tmp_path, monkeypatch, fake_encoder):
    import harness.retrieval.encode

    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: fake_encoder)
    out = tmp_path / "res"
    assert invoke(["evaluate", str(tiny_beir), "--output-dir", str(out), "--no-cache"]).exit_code == 0
    assert invoke(["evaluate", str(tiny_beir), "--model", "bm25", "--output-dir", str(out)]).exit_code == 0
    dense, sparse = out / "tiny" / "fake-bow" / "test.json", out / "tiny" / "bm25" / "test.json"
    result = invoke(["inspect", str(sparse), "--worst", "1", "--depth", "2"])
    assert result.exit_code == 0, result.stderr
    assert "q3: zucchini" in result.stdout and "d5             grade 1; bm25 not retrieved" in result.stdout
    assert "1 of 3 queries score 0.0000, the worst value" in result.stdout
    data = json.loads(invoke(["inspect", str(sparse), str(dense), "--worst", "3", "--json"]).stdout)
    assert data["systems"] == ["bm25", "fake-bow"] and len(data["queries"]) == 3
    run = read_run(out / "tiny" / "fake-bow" / "test.run.trec")
    for query in data["queries"]:  # every judged document's rank is its place in the run, or None
        ranks = {hit.doc_id: rank for rank, hit in enumerate(run.get(query["query_id"], ()), start=1)}
        for judged in query["judged"]:
            assert judged["ranks"]["fake-bow"] == ranks.get(judged["doc_id"])
    result = invoke(["inspect", str(sparse), str(dense), "--worst", "2"])
    assert result.exit_code == 0 and "differ most" in result.stdout and "top 5 of fake-bow:" in result.stdout
    (out / "tiny" / "bm25" / "test.run.trec").unlink()
    result = invoke(["inspect", str(sparse)])
    assert result.exit_code == 1 and "run file beside the result is missing" in result.stderr


def test_golden_published_report(tmp_path):
    """The published report's shape: own columns, the baseline, Δ against named columns, notes, the average."""
    root = tmp_path / "r"
    write_result(root, "scifact", "bm25", {"1": 0.6769})
    write_result(root, "scifact", "sentence-transformers/all-MiniLM-L6-v2", {"1": 0.6451})
    write_result(root, "nfcorpus", "bm25", {"1": 0.3199})
    text = render(
        build_comparison(load_results([root]), with_published=True, published_systems=["bm25+ce"]), "markdown", digits=4
    )
    assert text + "\n" == (GOLDEN / "published.md").read_text()
