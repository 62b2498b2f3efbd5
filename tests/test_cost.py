"""Every result records what it cost (`Result.cost`, `Result.timings`), and `report --cost` shows it beside the
quality: phases within the wall time, cached phases said, latency percentiles as numpy computes them, a peak
RSS the process itself confirms, index and cache bytes, old results without a cost record."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_runner import invoke

from harness.metering import peak_rss, percentile, search_latencies
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.reporting.report import Result

PHASES = ("load", "encode_corpus", "encode_queries", "index", "search", "score")


def _evaluate(folder: Path, tmp_path: Path, model: str = "hash:64", **changes) -> Result:
    return evaluate_dataset(
        EvaluateConfig(
            folder,
            model=model,
            output_dir=tmp_path / "results",
            progress=False,
            cache_dir=tmp_path / "cache",
            k_values=(1, 3, 10),
            **changes,
        )
    ).result


@pytest.mark.parametrize("model, extra", [("hash:64", {}), ("bm25", {}), ("hash:64", {"index": "hnsw"})])
def test_every_phase_is_timed_and_the_phases_fit_in_the_wall_time(tiny_beir, tmp_path, model, extra):
    from harness.retrieval.index import IndexSpec

    changes = {"index": IndexSpec(kind="hnsw")} if extra else {}
    result = _evaluate(tiny_beir, tmp_path, model, **changes)
    timings = result.timings
    assert set(PHASES) <= set(timings) and "latency_probe" in timings
    phases = {name: seconds for name, seconds in timings.items() if name not in ("encode", "total")}
    assert all(seconds >= 0 for seconds in phases.values())
    assert sum(phases.values()) <= timings["total"] + 1e-3  # each rounded to 0.1 ms
    assert timings["encode"] == pytest.approx(timings["encode_corpus"] + timings["encode_queries"], abs=2e-4)
    assert result.cost["cached"] == [] and result.cost["docs"] == 5
    assert result.cost["peak_rss_bytes"] > 0


def test_a_warm_run_says_which_phases_came_from_the_cache_and_keeps_its_hash(tiny_beir, tmp_path):
    from harness.retrieval.index import IndexSpec

    cold = _evaluate(tiny_beir, tmp_path, index=IndexSpec(kind="hnsw"))
    warm = _evaluate(tiny_beir, tmp_path, index=IndexSpec(kind="hnsw"))
    assert cold.cost["docs_per_s"] > 0 and cold.timings["encode_corpus"] > 0
    assert set(warm.cost["cached"]) == {"encode_corpus", "encode_queries", "index"}
    assert warm.timings["encode_corpus"] == 0 and warm.cost["docs_per_s"] is None
    # Index and cache bytes: the cached index file is on disk; the cache holds the corpus and query vectors.
    index_files = list((tmp_path / "cache").rglob("*.faiss"))
    assert len(index_files) == 1 and warm.cost["index_bytes"] > 5 * 64 * 4  # five 64-d float32 vectors, a graph
    on_disk = sum(
        p.stat().st_size
        for p in (tmp_path / "cache").rglob("*")
        if p.is_file() and "models" not in p.relative_to(tmp_path / "cache").parts
    )
    assert warm.cost["cache_bytes"] == on_disk
    assert cold.config_hash == warm.config_hash and cold.cost != warm.cost  # the cost is not the identity


@pytest.mark.parametrize("n", [1, 2, 5, 7, 100, 101])
def test_percentile_is_numpys_linear_interpolation(n):
    values = list(np.random.default_rng(n).exponential(1.0, n))
    for q in (0, 50, 95, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)


def test_the_recorded_percentiles_are_those_of_the_recorded_latencies(tiny_beir, tmp_path):
    result = _evaluate(tiny_beir, tmp_path, "bm25")
    latency = result.cost["search_latency"]
    per_query = latency["per_query_ms"]
    assert latency["queries"] == len(per_query) == 3 == latency["of"]  # every judged query (fewer than 100)
    for q in (50, 95, 99):
        assert latency[f"p{q}_ms"] == pytest.approx(float(np.percentile(per_query, q)), abs=1e-4)
    assert 0 < latency["p50_ms"] <= latency["p95_ms"] <= latency["p99_ms"]


def test_the_latency_probe_stops_at_its_budget(monkeypatch):
    import time

    import harness.metering as metering

    monkeypatch.setattr(metering, "LATENCY_FLOOR_SECONDS", 0.05)
    searched = []
    seconds = search_latencies(lambda i: (searched.append(i), time.sleep(0.02)), 1000, batch_seconds=0.0)
    assert 2 <= len(seconds) <= 4 and searched == [i * 10 for i in range(len(searched))]  # 100 of 1000, spaced


def test_the_latency_probe_spends_a_tenth_of_the_batch_search(monkeypatch):
    """A long batch search (an exact search over millions of vectors, where one query alone reads them all) gets
    a probe of a tenth of its time, not as long again: 2 s of batch search, queries of ≥ 20 ms, stop past 0.2 s."""
    import time

    import harness.metering as metering

    monkeypatch.setattr(metering, "LATENCY_FLOOR_SECONDS", 0.05)
    seconds = search_latencies(lambda i: time.sleep(0.02), 1000, batch_seconds=2.0)
    assert sum(seconds) > 0.2 and sum(seconds[:-1]) <= 0.2  # stopped by the first query past the budget
    assert len(seconds) <= 11  # 0.2 s of 20 ms queries (with the whole batch time as budget: 100)


def test_peak_rss_is_what_the_process_itself_reports(tiny_beir, tmp_path):
    script = f"""
import json, resource
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
r = evaluate_dataset(EvaluateConfig({str(tiny_beir)!r}, model="bm25", output_dir=None, progress=False)).result
print(json.dumps({{"recorded": r.cost["peak_rss_bytes"],
                   "own": int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024}}))
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "BEIR_HARNESS_CACHE_DIR": str(tmp_path / "cache")},
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert 30 * 2**20 < seen["recorded"] <= seen["own"]  # python, numpy and the BM25 library are in memory
    assert seen["recorded"] >= 0.9 * seen["own"]  # nothing big happened after the result was made


def test_each_evaluation_in_one_process_records_its_own_peak(tiny_beir, tmp_path):
    """A process that held 400 MB before (a bench cell with a large model, a notebook) does not pass that peak to
    the next evaluation's cost record: the high-water mark restarts as each evaluation starts."""
    script = f"""
import json
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
config = EvaluateConfig({str(tiny_beir)!r}, model="bm25", output_dir=None, progress=False)
first = evaluate_dataset(config).result
big = bytearray(400 * 2**20); big[::4096] = b"x" * len(big[::4096]); del big
own = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
second = evaluate_dataset(config).result
print(json.dumps({{"first": first.cost["peak_rss_bytes"], "second": second.cost["peak_rss_bytes"], "own": own,
                   "scope": second.cost["peak_rss_scope"]}}))
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "BEIR_HARNESS_CACHE_DIR": str(tmp_path / "cache")},
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["own"] >= seen["first"] + 390 * 2**20  # the process's own mark saw the 400 MB
    assert seen["scope"] == "evaluation"
    assert seen["second"] < seen["first"] + 100 * 2**20  # the second evaluation's peak is its own


def test_a_peak_that_counts_from_the_process_start_is_marked_at_least(tiny_beir, tmp_path, monkeypatch):
    """Where the peak cannot be restarted, the record says so and the cost table shows it as a lower bound."""
    import harness.pipeline.stages as stages

    monkeypatch.setattr(stages, "reset_high_water", lambda: False)
    result = _evaluate(tiny_beir, tmp_path, "bm25")
    assert result.cost["peak_rss_scope"] == "process"
    markdown = _cost_report(tmp_path / "results", "markdown")
    assert "| ≥ " in markdown


@pytest.mark.parametrize(
    "count, shown",
    [
        (512, "512 B"),
        (1536, "1.5 KiB"),
        (1000 * 2**20, "1000 MiB"),
        (1023 * 2**20 + 2**19, "1024 MiB"),
        (99.96 * 2**20, "100 MiB"),
        (12.345 * 2**30, "12.3 GiB"),
    ],
)
def test_sizes_read_as_numbers_at_every_magnitude(count, shown):
    """Three significant digits, a whole number from 100 up: never ``1e+03 MiB`` (a peak of 1000–1023 MiB)."""
    from harness.reporting.cost import CostRow, cost_table

    header, body = cost_table([CostRow("d", "s", 0.5, 1.0, {}, peak_rss_bytes=int(count))], "nDCG@10")
    assert body[0][header.index("peak RSS")] == shown


def test_children_peak_rss_counts_a_child_process():
    subprocess.run([sys.executable, "-c", "b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096])"], check=True)
    assert peak_rss()["children"] >= 200 * 2**20


MIB = 2**20
HOLD = """
import resource, sys, time
held = bytearray(int(sys.argv[1]) * 2**20); held[::4096] = b"x" * len(held[::4096])
time.sleep(1.0)  # long enough for the parent's 20 ms sampler to see it
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)  # what a child measuring itself that way reports
sys.exit(int(sys.argv[2]))
"""


@pytest.mark.parametrize("form", ["code", "script"])
def test_run_measured_reports_the_childs_own_peak_not_its_parents(tmp_path, form):
    """A child holding 100 MiB, started by a parent holding 300 MiB: `run_measured` reports the child's 100 MiB
    (and its interpreter), not the parent's 300, which the child's own ``ru_maxrss`` does carry over."""
    from harness.metering import run_measured

    parent = bytearray(300 * MIB)
    parent[::4096] = b"x" * len(parent[::4096])
    script = tmp_path / "hold.py"
    script.write_text(HOLD, encoding="utf-8")
    args = ["-c", HOLD, "100", "3"] if form == "code" else [str(script), "100", "3"]
    child = run_measured(args)
    assert child.returncode == 3, child.stderr  # its exit status and output come back as they were
    assert 100 * MIB <= child.peak_bytes < 250 * MIB
    assert 100 * MIB <= child.peak_anon_bytes <= child.peak_bytes
    assert int(child.stdout.split()[-1]) >= 300 * MIB  # ru_maxrss inherited the parent's size: why VmHWM
    del parent


def test_run_measured_falls_back_to_its_samples_when_the_child_skips_its_exit_hooks():
    from harness.metering import run_measured

    code = HOLD.replace("sys.exit(int(sys.argv[2]))", "import os; os._exit(0)")
    child = run_measured(["-c", code, "100", "0"])
    assert child.returncode == 0 and 100 * MIB <= child.peak_bytes < 250 * MIB


def _cost_report(root: Path, fmt: str, *extra: str) -> str:
    result = invoke(["report", str(root), "--cost", "--format", fmt, "--metric", "nDCG@3", *extra])
    assert result.exit_code == 0, result.output
    return result.output


def test_report_cost_shows_quality_beside_cost_in_every_format(tiny_beir, tmp_path):
    cold = _evaluate(tiny_beir, tmp_path, "bm25")
    warm = [_evaluate(tiny_beir, tmp_path) for _ in range(2)][-1]
    root = tmp_path / "results"
    rows = list(csv.DictReader(io.StringIO(_cost_report(root, "csv"))))
    by_system = {row["system"]: row for row in rows}
    assert set(by_system) == {"bm25", "hash:64"}
    assert float(by_system["bm25"]["nDCG@3"]) == cold.metrics["nDCG@3"]
    assert float(by_system["bm25"]["wall_s"]) == cold.timings["total"]
    assert float(by_system["bm25"]["p99_ms"]) == cold.cost["search_latency"]["p99_ms"]
    assert int(by_system["hash:64"]["peak_rss_bytes"]) == warm.cost["peak_rss_bytes"]
    assert by_system["hash:64"]["cached"] == "encode_corpus encode_queries"
    markdown = _cost_report(root, "markdown")
    header = markdown.splitlines()[0]
    for column in (
        "nDCG@3",
        "wall s",
        "encode corpus s",
        "search s",
        "docs/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "peak RSS",
        "index",
        "cache",
    ):
        assert f"| {column} |" in header
    assert "| hash:64 |" in markdown and "cached" in markdown.split("| hash:64 |")[1].splitlines()[0]
    assert "tokens" not in header and "rerank" not in header  # no row has them
    assert "\\begin{tabular}" in _cost_report(root, "latex")
    data = json.loads(_cost_report(root, "json"))
    assert {row["system"] for row in data["rows"]} == {"bm25", "hash:64"} and data["notes"]
    import harness

    api_rows = harness.cost(root, "nDCG@3")  # the Python API gives the rows the CLI renders
    assert [row.to_json() for row in api_rows] == data["rows"]


def test_results_without_a_cost_record_show_a_dash_and_do_not_break(tiny_beir, tmp_path):
    _evaluate(tiny_beir, tmp_path, "bm25")
    new = _evaluate(tiny_beir, tmp_path)
    old_path = tmp_path / "results" / "tiny" / "hash_64" / "test.json"
    old = json.loads(old_path.read_text())
    old.pop("cost")
    old["schema_version"] = 2
    del old["fingerprints"]["content"]  # written before content digests too
    old["timings"] = {"load": 0.5, "encode": 2.0, "index": 0.25, "search": 0.125, "score": 0.0625, "total": 3.0}
    old_path.write_text(json.dumps(old))
    assert Result.from_json(old_path).cost == {}
    markdown = _cost_report(tmp_path / "results", "markdown")
    row = next(line for line in markdown.splitlines() if line.startswith("| tiny | hash:64 |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    header = [cell.strip() for cell in markdown.splitlines()[0].strip("|").split("|")]
    shown = dict(zip(header, cells))
    assert shown["wall s"] == "3.00" and shown["load s"] == "0.500" and shown["search s"] == "0.125"
    assert shown["encode corpus s"] == shown["docs/s"] == shown["p50 ms"] == shown["peak RSS"] == "–"
    assert shown["nDCG@3"] == f"{new.metrics['nDCG@3']:.4f}"
    rows = list(csv.DictReader(io.StringIO(_cost_report(tmp_path / "results", "csv"))))
    assert next(r for r in rows if r["system"] == "hash:64")["p50_ms"] == ""


def test_the_html_page_carries_the_cost_table(tiny_beir, tmp_path):
    from harness.reporting.comparison import load_results
    from harness.reporting.html import PageOptions, build_page

    _evaluate(tiny_beir, tmp_path, "bm25")
    page = build_page(load_results([tmp_path / "results"]), PageOptions(metric="nDCG@3"))
    cost = page["cost"]
    assert cost["header"][:4] == ["dataset", "system", "nDCG@3", "wall s"] and len(cost["rows"]) == 1
    assert cost["rows"][0][:2] == ["tiny", "bm25"] and cost["notes"]


def test_evaluate_logs_one_cost_line(tiny_beir, tmp_path):
    args = [
        "-v",
        "evaluate",
        str(tiny_beir),
        "--model",
        "hash:64",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--output-dir",
        str(tmp_path / "results"),
    ]
    invoke(args)
    result = invoke(args)
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.stderr.splitlines() if "cost: " in line]
    assert " s wall · load " in line and "encode corpus cached · encode queries cached" in line
    # The peak RSS is this test process's (its size depends on what ran before it): any binary unit.
    assert "search latency p50/p95/p99 " in line and re.search(r"peak RSS \d+(\.\d+)? [KMG]iB", line), line
