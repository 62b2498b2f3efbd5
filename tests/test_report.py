"""Result records, paths and the printed table."""

from __future__ import annotations

import pytest

from harness.reporting.report import Result, format_metrics_table, model_slug, result_paths


@pytest.mark.parametrize(
    ("model", "slug"),
    [
        ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers__all-MiniLM-L6-v2"),
        ("/home/me/models/my-model/", "my-model"),
        ("./m", "m"),
        ("../../etc", "etc"),
        ("run:my run.trec", "run_my_run.trec"),
        ("..", "model"),
    ],
)
def test_model_slug(model, slug):
    assert model_slug(model) == slug


def test_result_paths_stay_inside_the_output_dir(tmp_path):
    json_path, run_path = result_paths(tmp_path, "../../x", "../../y", "../test")
    assert tmp_path in json_path.parents and tmp_path in run_path.parents


def test_table_lists_every_metric():
    result = Result("d", "test", "m", {"nDCG@10": 0.123456, "Recall@100": 1.0}, {}, 3, {}, {}, {}, {}, "now")
    table = format_metrics_table(result)
    assert "d [test] · m · 3 judged queries" in table
    assert "nDCG@10     0.1235" in table and "Recall@100  1.0000" in table
    assert result.to_json()["schema_version"] == 2
