"""export: MTEB's results layout (read back by MTEB's own loader), per-query CSV, TREC runs; and
report --published-from, which reads an MTEB results folder."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from cli_runner import invoke

from harness.io.trec import read_run


@pytest.fixture
def results(tiny_beir, tmp_path) -> Path:
    """Real results of two systems on a folder named like an MTEB task's dataset, and one on a custom set."""
    scifact = tmp_path / "scifact"
    shutil.copytree(tiny_beir, scifact)
    out = tmp_path / "results"
    for model in ("bm25", "hash:64"):
        result = invoke(["-q", "evaluate", str(scifact), "--model", model, "--output-dir", str(out), "--no-cache"])
        assert result.exit_code == 0, result.output
    assert invoke(["-q", "evaluate", str(tiny_beir), "--model", "bm25", "--output-dir", str(out)]).exit_code == 0
    return out


def _export(results: Path, fmt: str, out: Path | None, *extra: str):
    return invoke(["export", str(results), "--format", fmt, *(["--out", str(out)] if out else []), *extra])


def test_the_mteb_layout_has_mtebs_keys_for_every_stored_cutoff(results, tmp_path):
    out = tmp_path / "mteb" / "results"
    result = _export(results, "mteb", out)
    assert result.exit_code == 0, result.output
    assert "not exported (MTEB has no task for them): tiny" in result.stderr
    task = json.loads((out / "bm25" / "no_revision_available" / "SciFact.json").read_text())
    ours = json.loads((results / "scifact" / "bm25" / "test.json").read_text())
    (scores,) = task["scores"]["test"]
    for k in (1, 3, 5, 10, 100):
        for family, key in (("nDCG", "ndcg"), ("MAP", "map"), ("Recall", "recall"), ("P", "precision"), ("MRR", "mrr")):
            assert scores[f"{key}_at_{k}"] == ours["metrics"][f"{family}@{k}"]
    assert scores["main_score"] == scores["ndcg_at_10"] and scores["hf_subset"] == "default"
    assert scores["languages"] == ["eng-Latn"] and task["task_name"] == "SciFact"
    assert task["evaluation_time"] == ours["timings"]["total"]
    assert task["beir_harness"]["fingerprints"] == ours["fingerprints"]
    assert task["beir_harness"]["config_hash"] == ours["config_hash"]
    meta = json.loads((out / "hash_64" / "no_revision_available" / "model_meta.json").read_text())
    assert meta["name"] == "hash:64" and meta["revision"] == "no_revision_available"


def test_mtebs_own_loader_reads_the_export_back(results, tmp_path):
    pytest.importorskip("mteb")
    from mteb.cache import ResultCache

    cache = tmp_path / "mteb-cache"
    assert _export(results, "mteb", cache / "results").exit_code == 0
    loaded = ResultCache(cache_path=cache).load_results(include_remote=False, validate_and_filter=True)
    scores = {(m.model_name, t.task_name): t.get_score() for m in loaded.model_results for t in m.task_results}
    for model, folder in (("bm25", "bm25"), ("hash:64", "hash_64")):
        ours = json.loads((results / "scifact" / folder / "test.json").read_text())["metrics"]["nDCG@10"]
        assert scores[(model, "SciFact")] == pytest.approx(ours, abs=1e-6)


def test_two_configurations_of_one_model_on_one_task_are_refused(results, tmp_path):
    scifact = tmp_path / "scifact"
    assert (
        invoke(
            [
                "-q",
                "evaluate",
                str(scifact),
                "--model",
                "bm25",
                "--top-k",
                "200",
                "--output-dir",
                str(results),
                "--no-cache",
            ],
        ).exit_code
        == 0
    )
    result = _export(results, "mteb", tmp_path / "out")
    assert result.exit_code == 1 and "MTEB keeps one result per model and task" in result.stderr
    assert not (tmp_path / "out").exists()


def test_nothing_exportable_and_a_folder_format_without_out(results, tmp_path):
    result = _export(results / "tiny", "mteb", tmp_path / "out")
    assert result.exit_code == 1 and "MTEB has no task for any of these datasets" in result.stderr
    assert _export(results, "trec", None).exit_code == 2


def test_per_query_csv_is_one_row_per_query_and_metric(results, tmp_path):
    result = _export(results, "csv", None, "--metric", "ndcg@10")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert list(rows[0]) == ["dataset", "system", "split", "query_id", "metric", "value"]
    ours = json.loads((results / "scifact" / "bm25" / "test.json").read_text())
    mine = {
        row["query_id"]: float(row["value"]) for row in rows if row["dataset"] == "scifact" and row["system"] == "bm25"
    }
    assert mine == {q: values["nDCG@10"] for q, values in ours["per_query"].items()}
    assert {row["metric"] for row in rows} == {"nDCG@10"}
    assert _export(results, "csv", tmp_path / "all.csv").exit_code == 0
    assert len(list(csv.DictReader(open(tmp_path / "all.csv")))) > len(rows)


def test_trec_export_tags_each_run_with_its_label(results, tmp_path):
    result = _export(results, "trec", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    exported = read_run(tmp_path / "runs" / "scifact" / "hash_64.test.trec")
    original = read_run(results / "scifact" / "hash_64" / "test.run.trec")
    assert exported.name == "hash_64" and exported.to_dict() == original.to_dict()
    (results / "scifact" / "bm25" / "test.run.trec").unlink()
    missing = _export(results, "trec", tmp_path / "runs2")
    assert missing.exit_code == 1 and "the run file beside" in missing.stderr


def test_report_published_from_an_mteb_folder(results, tmp_path):
    folder = tmp_path / "team" / "results"
    revision = folder / "acme__retriever" / "abc123"
    revision.mkdir(parents=True)
    (revision / "model_meta.json").write_text(json.dumps({"name": "acme/retriever", "revision": "abc123"}))
    (revision / "SciFact.json").write_text(
        json.dumps(
            {
                "task_name": "SciFact",
                "mteb_version": "1.12.0",
                "scores": {
                    "test": [{"hf_subset": "default", "ndcg_at_10": 0.5, "recall_at_100": 0.9, "main_score": 0.5}]
                },
            }
        )
    )
    legacy = folder / "old__model" / "no_revision_available"  # MTEB before 1.11: one dict per split
    legacy.mkdir(parents=True)
    (legacy / "SciFact.json").write_text(json.dumps({"scores": {"test": {"ndcg_at_10": 0.25}}}))
    (legacy / "Banking77Classification.json").write_text("{}")  # not a BEIR task: ignored
    report = invoke(["report", str(results / "scifact"), "--published-from", str(folder), "--format", "json"])
    assert report.exit_code == 0, report.output
    data = json.loads(report.stdout)
    row = next(r for r in data["rows"] if r["dataset"] == "scifact")
    assert row["retriever · team"] == 0.5 and row["model · team"] == 0.25
    assert any(str(folder) in note for note in data["notes"])
    (tmp_path / "empty").mkdir()
    empty = invoke(["report", str(results), "--published-from", str(tmp_path / "empty")])
    assert empty.exit_code == 1 and "no MTEB task file of a BEIR dataset" in empty.stderr


def test_an_export_is_read_back_as_published_columns(results, tmp_path):
    assert _export(results, "mteb", tmp_path / "exported").exit_code == 0
    report = invoke(
        ["report", str(results / "scifact"), "--published-from", str(tmp_path / "exported"), "--format", "json"]
    )
    row = json.loads(report.stdout)["rows"][0]
    assert row["bm25 · exported"] == row["bm25"] and row["hash:64 · exported"] == row["hash:64"]
