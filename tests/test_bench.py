"""bench: the grid, skipping done cells, --force, a failing cell, results.csv, the summary table."""

from __future__ import annotations

import csv
import shutil

import pytest
from click.testing import CliRunner

import harness.retrieval.encode
import harness.pipeline.evaluate
from harness.cli import cli


@pytest.fixture
def grid(tiny_beir, tmp_path, monkeypatch, fake_encoder):
    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: fake_encoder)
    second = tmp_path / "tiny2"
    shutil.copytree(tiny_beir, second)
    return [str(tiny_beir), str(second)], tmp_path / "results"


def _bench(datasets, out, *extra):
    return CliRunner().invoke(cli, ["-q", "bench", "--models", "fake-bow,bm25", "--datasets", ",".join(datasets),
                                    "--output-dir", str(out), "--k", "1,10", "--no-cache", *extra])


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


def test_a_failing_cell_does_not_stop_the_grid(grid, tmp_path):
    datasets, out = grid
    result = _bench([datasets[0], str(tmp_path / "missing")], out)
    assert result.exit_code == 1
    assert "4 cells: 2 done, 0 skipped" in result.stdout and "settings), 2 failed" in result.stdout
    assert result.stdout.splitlines()[2].split() == ["missing", "failed", "failed"]
    assert "failed: missing × bm25: " in result.stdout and "no such dataset folder" in result.stdout
    assert (out / "tiny" / "bm25" / "test.json").is_file()


def test_bench_help_and_bad_metric(grid):
    datasets, out = grid
    assert "Example:" in CliRunner().invoke(cli, ["bench", "--help"]).stdout
    result = _bench(datasets, out, "--metric", "BLEU@4")
    assert result.exit_code == 2 and "unknown metric 'BLEU@4'" in result.stderr


def test_cqadupstack_expands_to_its_forums_and_reports_their_mean(tmp_path, monkeypatch, fake_encoder, tiny_beir):
    from harness.datasets import registry

    data = tmp_path / "data"
    forums = registry.get("cqadupstack").subsets
    for forum in forums:
        shutil.copytree(tiny_beir, data / "cqadupstack" / forum)
    (data / "cqadupstack" / ".beir-harness.json").write_text('{"name": "cqadupstack"}')
    result = CliRunner().invoke(cli, ["-q", "bench", "--models", "bm25", "--datasets", "cqadupstack", "--data-dir",
                                      str(data), "--output-dir", str(tmp_path / "out"), "--k", "10"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sum(line.startswith("cqadupstack/") for line in lines) == 12
    forum_value = next(line for line in lines if line.startswith("cqadupstack/android")).split()[-1]
    assert next(line for line in lines if line.startswith("cqadupstack (mean of 12 forums)")).split()[-1] == forum_value
    assert "12 cells: 12 done" in result.stdout
    report = CliRunner().invoke(cli, ["report", str(tmp_path / "out")])
    assert "| cqadupstack |" in report.stdout


# --------------------------------------------------------------------------- fusions as systems


def test_a_fusion_is_a_system_whose_members_join_the_grid(grid):
    from harness.retrieval.fusion import fuse
    from harness.io.formats import read_run

    datasets, out = grid
    result = CliRunner().invoke(cli, ["-q", "bench", "--systems", "rrf(fake-bow, bm25), wsum(bm25, fake-bow, "
                                      "weights=0.3:0.7, norm=zscore)", "--datasets", datasets[0], "--output-dir",
                                      str(out), "--k", "1,10", "--no-cache"])
    assert result.exit_code == 0, result.stderr
    header = result.stdout.splitlines()[0].split("  ")
    assert [h.strip() for h in header if h.strip()][1:] == [
        "fake-bow", "bm25", "rrf(fake-bow, bm25)", "wsum(bm25, fake-bow, weights=0.3:0.7, norm=zscore)"]
    assert "4 cells: 4 done" in result.stdout
    fused = sorted((out / "tiny" / "fusion").glob("test.*.json"))
    assert len(fused) == 2
    # The fused file holds exactly what fusing the two saved runs gives.
    runs = [read_run(out / "tiny" / model / "test.run.trec") for model in ("fake-bow", "bm25")]
    from harness.retrieval.fusion import FusionSpec

    expected = fuse(runs, FusionSpec("rrf"))
    rrf = next(path for path in fused if "rrf" in path.read_text())
    saved = read_run(rrf.with_name(rrf.stem + ".run.trec"))
    assert {q: [h.doc_id for h in saved[q]] for q in saved} == {q: [h.doc_id for h in expected[q]] for q in expected}
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert {row["label"] for row in rows} >= {"rrf(fake-bow, bm25)"}
    # A rerun skips the evaluated systems and fuses again (milliseconds).
    again = CliRunner().invoke(cli, ["-q", "bench", "--systems", "rrf(fake-bow, bm25)", "--datasets", datasets[0],
                                     "--output-dir", str(out), "--k", "1,10", "--no-cache"])
    assert "3 cells: 1 done, 2 skipped" in again.stdout


@pytest.mark.parametrize("systems, message", [
    ("rrf(bm25)", "at least two runs"),
    ("borda(bm25, x)", "unknown fusion method 'borda'"),
    ("rrf(bm25, x, alpha=2)", "unknown fusion setting 'alpha'"),
    ("wsum(bm25, x, weights=1:2:3)", "3 weights for 2 runs"),
    ("rrf(bm25, x, k=sixty)", "k='sixty' is not a valid value"),
    ("rrf(bm25, rrf(a, b))", "a fusion of a fusion"),
    ("rrf(bm25, x", "is never closed"),
])
def test_a_malformed_fusion_is_one_line_naming_it(grid, systems, message):
    datasets, out = grid
    result = CliRunner().invoke(cli, ["-q", "bench", "--systems", systems, "--datasets", datasets[0],
                                      "--output-dir", str(out), "--no-cache"])
    assert result.exit_code != 0 and message in result.output, result.output
    assert not (out / "tiny").exists()


def test_a_fusion_of_a_failed_system_fails_alone(grid, tmp_path, monkeypatch):
    from harness.errors import ModelLoadError

    def no_model(name, *args, **kwargs):
        raise ModelLoadError(f"cannot load model {name!r}")

    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", no_model)
    datasets, out = grid
    result = CliRunner().invoke(cli, ["-q", "bench", "--systems", "bm25, rrf(bm25, " + str(tmp_path / "nomodel") +
                                      ")", "--datasets", datasets[0], "--output-dir", str(out), "--no-cache"])
    assert result.exit_code == 1
    assert "failed, so it cannot be fused" in result.stdout and (out / "tiny" / "bm25" / "test.json").is_file()


def test_split_systems_keeps_commas_inside_parentheses():
    from harness.pipeline.systems import split_systems

    assert split_systems("bm25, rrf(bm25, e5, k=10) ,bm25 >> ce@50,bm25") == [
        "bm25", "rrf(bm25, e5, k=10)", "bm25 >> ce@50"]
