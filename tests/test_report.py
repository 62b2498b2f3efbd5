"""Result records, paths and the printed table."""

from __future__ import annotations

from dataclasses import replace

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


HOSTILE_NAMES = ["../../x", "{tmp}/abs/x", "a/../../b", "..", ".", "~/x", "x/../../../y", "..\\..\\x", "a/b/c", " "]


@pytest.mark.parametrize("through_link", [False, True], ids=["folder", "symlinked-folder"])
@pytest.mark.parametrize("role", ["dataset", "model", "split", "variant"])
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_result_paths_stay_inside_the_output_dir(tmp_path, name, role, through_link):
    """The files actually written land inside the output folder, as the file system resolves both (`..`,
    absolute paths, `~`, a symbolic link to the folder): compared as real paths, not as text."""
    from harness.records import Run
    from harness.reporting.report import write_result

    out = tmp_path / "a" / "b" / "out"
    out.mkdir(parents=True)
    given = out
    if through_link:
        given = tmp_path / "link"
        given.symlink_to(out, target_is_directory=True)
    hostile = name.replace("{tmp}", str(tmp_path))
    names = {"dataset": "d", "model": "m", "split": "test", "variant": ""} | {role: hostile}
    result = Result(
        dataset=names["dataset"],
        split=names["split"],
        model=names["model"],
        metrics={"nDCG@10": 0.5},
        per_query={"q": {"nDCG@10": 0.5}},
        n_queries=1,
        config={},
        fingerprints={},
        timings={},
        versions={},
        created="2026-11-30T00:00:00+00:00",
    )
    before = {p for p in tmp_path.rglob("*") if p.is_file()}
    predicted = result_paths(given, names["dataset"], names["model"], names["split"], names["variant"])
    written = write_result(
        replace(result, variant=names["variant"]) if names["variant"] else result,
        Run.from_scores({"q": {"a": 1.0}}),
        given,
    )
    inside = out.resolve()
    for path in (*predicted, *written):
        assert path.resolve().is_relative_to(inside), (name, role, path.resolve())
    new = {p.resolve() for p in tmp_path.rglob("*") if p.is_file()} - {p.resolve() for p in before}
    assert len(new) == 2 and all(p.is_relative_to(inside) for p in new), new  # the result and its run, no other
    assert {p.resolve() for p in written} == new


def test_table_lists_every_metric():
    result = Result("d", "test", "m", {"nDCG@10": 0.123456, "Recall@100": 1.0}, {}, 3, {}, {}, {}, {}, "now")
    table = format_metrics_table(result)
    assert "d [test] · m · 3 judged queries" in table
    assert "nDCG@10     0.1235" in table and "Recall@100  1.0000" in table
    assert result.to_json()["schema_version"] == 3


def test_a_result_reads_back_typed_and_equal(tmp_path):
    from harness.records import Run
    from harness.reporting.report import Result, write_result

    result = Result(
        dataset="d",
        split="test",
        model="m",
        metrics={"nDCG@10": 0.5},
        per_query={"q": {"nDCG@10": 0.5}},
        n_queries=1,
        config={"top_k": 10},
        fingerprints={"qrels": "x"},
        timings={"total": 1.0},
        versions={"beir-harness": "1"},
        created="2026-11-30T00:00:00+00:00",
        label="mine",
        config_hash="h",
    )
    path, _ = write_result(result, Run.from_scores({"q": {"a": 1.0}}), tmp_path)
    back = Result.from_json(path)
    assert back.path == path and back.label == "mine" and back.metrics == result.metrics
    assert back.fingerprints["scored_run"]  # what the writer adds: the run file's hash
    assert back == Result(**{**result.__dict__, "fingerprints": back.fingerprints})  # `path` is not compared


@pytest.mark.parametrize(
    "text, why", [("{", "invalid JSON"), ('{"dataset": "d"}', "no split, model"), ("[1, 2]", "no dataset")]
)
def test_a_file_that_is_not_a_result_says_what_it_lacks(tmp_path, text, why):
    from harness.errors import HarnessError
    from harness.reporting.report import Result, read_result

    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(HarnessError, match=why):
        Result.from_json(path)
    assert read_result(path) is None
