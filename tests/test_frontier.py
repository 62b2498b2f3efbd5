"""`report --frontier`: results placed by quality against a cost their records carry, the Pareto set marked (checked
against a brute-force O(n²) dominance loop over generated points: ties, duplicates, missing costs, two hosts), a
budget answered, hosts never mixed on a time axis, every format, the plot and the HTML page's section."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_runner import invoke
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import HarnessError
from harness.records import Result, model_slug, result_digest
from harness.reporting.frontier import UNRECORDED, build_frontier, pareto_flags, parse_within
from harness.reporting.frontier.plot import _steps

HOSTS = {"h1": {"cpu": "Xeon A", "cores_used": 2, "logical_cores": 2}, "h2": {"cpu": "EPYC B", "cores_used": 8}}


def _dominated(i: int, points: list[tuple[float, float]]) -> bool:
    """Brute force: another point at least as good in both and better in one (quality up, cost down)."""
    q, c = points[i]
    return any(j != i and oq >= q and oc <= c and (oq > q or oc < c) for j, (oq, oc) in enumerate(points) if j != i)


@settings(derandomize=True, deadline=None, max_examples=300)
@given(st.lists(st.tuples(st.sampled_from([0.1, 0.2, 0.3, 0.5]), st.sampled_from([1.0, 2.0, 3.0, 8.0])), max_size=14))
def test_the_pareto_set_is_the_undominated_points(points):
    # Few distinct values: ties in quality, in cost and whole duplicates are the common case, not the rare one.
    assert pareto_flags(points) == [not _dominated(i, points) for i in range(len(points))]


def _result(dataset, label, value, *, host=None, cost=None, config=None, timings=None, model="all-MiniLM-L6-v2"):
    return Result(
        dataset=dataset,
        split="test",
        model=model,
        metrics={} if value is None else {"nDCG@10": value},
        per_query={} if value is None else {"q1": {"nDCG@10": value}},
        n_queries=0 if value is None else 1,
        config=config or {},
        fingerprints={},
        timings=timings or {},
        versions={},
        created="2026-01-01T00:00:00+00:00",
        label=label,
        config_hash=f"{label:0>16}"[-16:],
        variant=label,
        host=HOSTS.get(host, {}),
        cost=cost or {},
    )


# Each axis the generator exercises: how a value is recorded, and the cost that record means (docs/outputs.md).
AXES = {
    "encode_s": (lambda v: {"cost": {"docs_per_s": v}}, lambda v: 1000 / v, True, True),
    "qps": (lambda v: {"cost": {"queries_per_s": v}}, lambda v: v, False, True),
    "bytes_per_doc": (lambda v: {"config": {"bytes_per_doc": v}}, lambda v: v, True, False),
}


@st.composite
def _sweeps(draw):
    axis = draw(st.sampled_from(sorted(AXES)))
    record, _, _, _ = AXES[axis]
    rows = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["scifact", "nfcorpus"]),
                st.sampled_from(["h1", "h2", None]),
                st.sampled_from([0.4, 0.5, 0.6, None]),  # None: the metric is not stored
                st.sampled_from([48.0, 96.0, 384.0, 1536.0, None]),  # None: the cost is not recorded
            ),
            max_size=12,
        )
    )
    results = []
    for i, (dataset, host, value, raw) in enumerate(rows):
        parts = record(raw) if raw is not None else {}
        results.append(_result(dataset, f"s{i}", value, host=host, **parts))
    return axis, rows, results


@settings(derandomize=True, deadline=None, max_examples=200)
@given(_sweeps())
def test_the_frontier_is_brute_force_dominance_per_dataset_and_host(sweep):
    axis, rows, results = sweep
    if not any(raw is not None for *_, raw in rows):
        with pytest.raises(HarnessError, match=f"no result records {axis}|no results of split test"):
            build_frontier(results, axis=axis)
        return
    _, cost_of, lower, per_host = AXES[axis]
    frontier = build_frontier(results, axis=axis)
    got = {p.system: p for p in frontier.points}
    assert len(got) == len(rows)  # every result listed, placed or not
    hosts = {d: {h for d2, h, *_ in rows if d2 == d} for d, *_ in rows}
    for i, (dataset, host, value, raw) in enumerate(rows):
        point = got[f"s{i}"]
        split = per_host and len(hosts[dataset]) > 1
        assert point.frontier == ((point.host if host else "host not recorded") if split else "")
        assert (point.host or "").startswith(HOSTS[host]["cpu"] if host else "")
        if value is None or raw is None:
            assert not point.pareto and point.missing == (UNRECORDED if value is not None else "no nDCG@10 stored")
            continue
        # The brute-force loop over the same frontier's placed results, in the oriented cost.
        sign = 1 if lower else -1
        mine = [
            (v, sign * cost_of(c))
            for d, h, v, c in rows
            if d == dataset and (h == host or not split) and v is not None and c is not None
        ]
        me = mine.index((value, sign * cost_of(raw)))
        assert point.pareto == (not _dominated(me, mine)), (point, mine)
    if any(not per_host and len(h) > 1 for h in hosts.values()):
        assert any("does not depend on the host" in note for note in frontier.notes)


@settings(derandomize=True, deadline=None, max_examples=150)
@given(_sweeps(), st.sampled_from([100.0, 384.0, 1000.0]), st.sampled_from(["<=", "<"]))
def test_the_best_within_a_budget_is_the_best_fitting_result(sweep, bound, op):
    _, rows, _ = sweep
    # Budget on bytes per document, frontier on it too: records where every result may or may not fit.
    results = [
        _result(d, f"s{i}", v, host=h, config={} if c is None else {"bytes_per_doc": c})
        for i, (d, h, v, c) in enumerate(rows)
    ]
    if not any(c is not None for *_, c in rows):
        return
    frontier = build_frontier(results, axis="bytes_per_doc", within=parse_within(f"bytes_per_doc{op}{bound:g}"))
    for dataset, group, best, line in frontier.best():
        fits = [
            (v, c)
            for d, _, v, c in rows
            if d == dataset and v is not None and c is not None and (c <= bound if op == "<=" else c < bound)
        ]
        if not fits:
            assert best is None and "none fits" in line
            continue
        top = max(v for v, _ in fits)
        assert best.value == top and best.costs["bytes_per_doc"] == min(c for v, c in fits if v == top)
        assert sum(p.budget == "best" for p in frontier.points if p.dataset == dataset) == 1


# --- the command line, on result files as evaluate writes them


def _write(root: Path, result: Result) -> Path:
    """The result file, with its content digest, as `write_result` would write it (no run file: not needed)."""
    path = root / model_slug(result.dataset) / model_slug(result.model) / f"test.{result.variant}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(json.dumps(result.to_json()))
    data["fingerprints"]["content"] = result_digest(data)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# The compression × index sweep of all-MiniLM-L6-v2 on SciFact in docs/reports.md, as its results recorded it:
# (label, nDCG@10, docs/s of the corpus encode (None: read from the cache), queries/s, bytes/doc).
SWEEP = [
    ("all-MiniLM-L6-v2", 0.6451, 3.6, 327.9, 1536.01),
    ("all-MiniLM-L6-v2 [int8 rescore2]", 0.6451, 3.1, 188.9, 384.02),
    ("all-MiniLM-L6-v2 [binary rescore2]", 0.6446, None, 104.2, 48.01),
    ("all-MiniLM-L6-v2 [binary no-rescore]", 0.5864, None, 282.8, 48.01),
    ("all-MiniLM-L6-v2 [dim128]", 0.6016, None, 475.4, 512.01),
    ("all-MiniLM-L6-v2 [dim128 int8 rescore2]", 0.6016, None, 393.4, 128.02),
    ("all-MiniLM-L6-v2 [hnsw]", 0.6451, None, 966.6, 1807.53),
    ("bm25", 0.6769, 4587.3, 4917.3, None),
]


@pytest.fixture
def sweep(tmp_path) -> Path:
    root = tmp_path / "results"
    for label, value, docs_per_s, qps, bpd in SWEEP:
        cost = {"docs_per_s": docs_per_s, "queries_per_s": qps, "peak_rss_bytes": 10**8, "peak_rss_scope": "evaluation"}
        config = {"bytes_per_doc": bpd} if bpd is not None else {}
        model = "bm25" if label == "bm25" else "all-MiniLM-L6-v2"
        _write(root, _result("scifact", label, value, host="h1", cost=cost, config=config, model=model))
    return root


def _csv(args) -> list[dict[str, str]]:
    run = invoke(["report", *args, "--frontier", "--format", "csv"])
    assert run.exit_code == 0, run.output
    return list(csv.DictReader(io.StringIO(run.stdout)))


def _brute_force_pareto(rows: list[dict[str, str]], axis: str, sign: float) -> set[str]:
    placed = [(r["system"], float(r["nDCG@10"]), sign * float(r[axis])) for r in rows if not r["missing"]]
    points = [(v, c) for _, v, c in placed]
    return {s for i, (s, _, _) in enumerate(placed) if not _dominated(i, points)}


def test_report_frontier_marks_the_pareto_set_of_a_compression_backend_sweep(sweep):
    rows = _csv([str(sweep), "--cost-axis", "bytes_per_doc"])
    by = {row["system"]: row for row in rows}
    assert by["bm25"]["missing"] == UNRECORDED and by["bm25"]["pareto"] == "False"  # BM25 has no dense index
    marked = {s for s, row in by.items() if row["pareto"] == "True"}
    assert marked == _brute_force_pareto(rows, "bytes_per_doc", 1)
    # int8 keeps float32's nDCG@10 at a quarter of the bytes; binary with rescoring is the smallest nearly as good.
    assert marked == {"all-MiniLM-L6-v2 [binary rescore2]", "all-MiniLM-L6-v2 [int8 rescore2]"}
    # Throughput: more is better; BM25 is both the fastest search and the best nDCG@10 here: alone on the frontier.
    rows = _csv([str(sweep), "--cost-axis", "qps"])
    marked = {row["system"] for row in rows if row["pareto"] == "True"}
    assert marked == _brute_force_pareto(rows, "qps", -1) == {"bm25"}


def test_a_budget_names_the_best_system_inside_it(sweep):
    run = invoke(["report", str(sweep), "--frontier", "--within", "qps>=100,bytes_per_doc<=512"])
    assert run.exit_code == 0, run.output
    assert "best within qps>=100, bytes_per_doc<=512: scifact: all-MiniLM-L6-v2 [int8 rescore2] (nDCG@10 0.6451;" in (
        run.stdout
    )
    row = next(line for line in run.stdout.splitlines() if "| all-MiniLM-L6-v2 [dim128] |" in line)
    assert "| over bytes_per_doc |" in row  # 512.01: the index's header is part of its bytes
    # encode_s: 1,000 / docs/s; only the cold encodes recorded one (the compressions read the cached vectors).
    none = invoke(["report", str(sweep), "--frontier", "--within", "encode_s<=300,bytes_per_doc<=512"])
    assert none.exit_code == 0 and "scifact: none fits (2 over the budget, 6 without the costs it names)" in none.stdout
    data = json.loads(
        invoke(["report", str(sweep), "--frontier", "--within", "encode_s<=400", "--format", "json"]).stdout
    )
    assert data["best"][0]["system"] == "bm25" and data["within"] == ["encode_s<=400"]


def test_the_default_axis_and_a_result_without_that_cost(sweep, tmp_path):
    # 3 of 8 recorded encode_s (the compressions read the cached vectors): the default is the most recorded, qps.
    run = invoke(["report", str(sweep), "--frontier"])
    assert run.exit_code == 0, run.output
    assert "| queries/s |" in run.stdout.splitlines()[0]
    run = invoke(["report", str(sweep), "--frontier", "--cost-axis", "encode_s"])
    row = next(line for line in run.stdout.splitlines() if "| all-MiniLM-L6-v2 [dim128] |" in line)
    assert f"| {UNRECORDED} |" in row and " – " in row  # listed, not placed
    # Where half the results recorded encode_s, it is the default (though every one recorded qps).
    half = tmp_path / "half"
    for label, docs_per_s in (("a", 50.0), ("b", None)):
        _write(half, _result("scifact", label, 0.5, cost={"docs_per_s": docs_per_s, "queries_per_s": 10.0}))
    assert "| encode s / 1,000 docs |" in invoke(["report", str(half), "--frontier"]).stdout.splitlines()[0]


def test_results_of_two_hosts_get_a_frontier_each_on_a_time_axis(tmp_path):
    root = tmp_path / "results"
    for label, value, docs_per_s, host in (("a", 0.6, 50.0, "h1"), ("b", 0.5, 400.0, "h2"), ("c", 0.55, 40.0, "h1")):
        _write(root, _result("scifact", label, value, host=host, cost={"docs_per_s": docs_per_s}))
    rows = _csv([str(root), "--cost-axis", "encode_s"])
    assert {(r["system"], r["frontier"], r["pareto"]) for r in rows} == {
        ("a", "Xeon A (2 of 2 cores)", "True"),
        ("c", "Xeon A (2 of 2 cores)", "False"),  # slower and worse than a, on the same host
        ("b", "EPYC B (8 of ? cores)", "True"),  # alone on its host: never set against a's time
    }
    text = invoke(["report", str(root), "--frontier", "--cost-axis", "encode_s"]).stdout
    assert "scifact: measured on 2 hosts" in text and "one frontier per host" in text


def test_every_format_and_the_plot(sweep, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "frontier.png"
    run = invoke(["report", str(sweep), "--frontier", "--format", "latex", "--plot", str(png)])
    assert run.exit_code == 0, run.output
    assert "\\begin{tabular}" in run.stdout and "Pareto" in run.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import harness

    api = harness.frontier(sweep, cost_axis="qps")
    data = json.loads(invoke(["report", str(sweep), "--frontier", "--cost-axis", "qps", "--format", "json"]).stdout)
    assert data["rows"] == [p.to_json() for p in api.points] and data["cost"] == "qps"


def test_the_html_page_has_the_frontier_section_with_its_texts_escaped(tmp_path):
    root = tmp_path / "results"
    for label, value, bpd in (("<b>x</b>", 0.6, 1536.0), ("y", 0.5, 48.0), ("z", 0.4, 384.0)):
        _write(root, _result("scifact", label, value, config={"bytes_per_doc": bpd}))
    out = tmp_path / "page.html"
    run = invoke(["report", str(root), "--format", "html", "--out", str(out), "--within", "bytes_per_doc<=512"])
    assert run.exit_code == 0, run.output
    page = out.read_text(encoding="utf-8")
    section = page.split('<section aria-labelledby="frontier-heading">')[1].split("</section>")[0]
    assert section.count("<svg") == 1 and section.count("<circle") >= 3
    assert "<b>x</b>" not in section and "&lt;b&gt;x&lt;/b&gt;" in section
    assert "best within bytes_per_doc&lt;=512: scifact: y" in section  # the budget's answer under the table


@pytest.mark.parametrize(
    "within, says",
    [
        ("encode_seconds<=60", "--within: unknown cost 'encode_seconds'; the costs are encode_s, qps, p50_ms"),
        ("encode_s=60", "--within: 'encode_s=60' has '='; put <=, <, >= or > between encode_s and a number"),
        ("encode_s<=", "--within: 'encode_s<=' needs a number after <= (encode_s<=60)"),
        ("encode_s<=sixty", "--within: 'encode_s<=sixty' needs a number after <= (encode_s<=60), not 'sixty'"),
        ("encode_s<=60,", "--within: '' is not a limit; give COST<=NUMBER items separated by commas"),
        ("", "--within is empty; give limits such as encode_s<=60,bytes_per_doc<=512"),
    ],
    ids=["unknown-cost", "bad-operator", "missing-number", "not-a-number", "empty-item", "empty"],
)
def test_a_bad_budget_is_one_line_before_any_result_is_read(tmp_path, within, says):
    out = tmp_path / "frontier.md"
    run = invoke(["report", str(tmp_path / "nothing-here"), "--frontier", "--within", within, "--out", str(out)])
    assert run.exit_code == 2 and says in run.stderr, run.output
    assert len(run.stderr.strip().splitlines()) == 1 and not out.exists()


def test_an_axis_no_result_recorded_is_one_line(sweep):
    run = invoke(["report", str(sweep), "--frontier", "--cost-axis", "index_bytes"])
    assert run.exit_code == 1
    assert (
        "no result records index_bytes; recorded: encode_s (3), qps (8), bytes_per_doc (7), peak_rss (8), prep_s (8)"
        in run.stderr
    )


def test_a_budget_or_an_axis_without_the_frontier_is_refused(tmp_path):
    out = tmp_path / "table.md"
    run = invoke(["report", str(tmp_path), "--within", "qps>=3", "--out", str(out)])
    assert run.exit_code == 2 and "--within places results on the quality-cost frontier: add --frontier" in run.stderr
    assert not out.exists()


# --- the bug drill's survivors (docs/development.md, "the quality–cost frontier"): each seen failing on its bug


def test_a_budget_on_a_host_measured_cost_splits_a_byte_axis_frontier_per_host():
    # Bytes per document do not depend on the host, but the budget's encode_s does: a frontier (and a best) per host.
    results = [
        _result("scifact", "a", 0.6, host="h1", cost={"docs_per_s": 50.0}, config={"bytes_per_doc": 48.0}),
        _result("scifact", "b", 0.5, host="h2", cost={"docs_per_s": 100.0}, config={"bytes_per_doc": 384.0}),
    ]
    frontier = build_frontier(results, axis="bytes_per_doc", within=parse_within("encode_s<=100"))
    got = {p.system: (p.frontier, p.pareto, p.budget) for p in frontier.points}
    # a (20 s / 1,000 docs) and b (10 s) each fit and are alone on their host: both Pareto, both the best there.
    assert got == {"a": ("Xeon A (2 of 2 cores)", True, "best"), "b": ("EPYC B (8 of ? cores)", True, "best")}
    assert [(d, f, p.system) for d, f, p, _ in frontier.best()] == [
        ("scifact", "EPYC B (8 of ? cores)", "b"),
        ("scifact", "Xeon A (2 of 2 cores)", "a"),
    ]


def test_a_prep_s_of_zero_is_not_counted_as_measured_for_the_default_axis(tmp_path):
    # Every result has a cost record, so each has prep_s 0 (nothing prepared); 3 of 4 recorded qps, none encode_s.
    results = [_result("scifact", f"s{i}", 0.5, cost={"queries_per_s": 10.0 * (i + 1)}) for i in range(3)]
    results.append(_result("scifact", "s3", 0.4, cost={"index_bytes": 4096}))
    recorded = {
        "qps": sum("queries_per_s" in r.cost for r in results),
        "index_bytes": sum("index_bytes" in r.cost for r in results),
        "prep_s": sum("prepare_model" in r.timings for r in results),
    }
    assert recorded == {"qps": 3, "index_bytes": 1, "prep_s": 0}
    assert build_frontier(results).axis == max(recorded, key=recorded.get) == "qps"


def test_the_quality_is_the_asked_metric_not_the_first_stored():
    base = _result("scifact", "a", 0.5, cost={"queries_per_s": 10.0})
    results = [
        replace(base, metrics={"MAP@10": 0.9, "nDCG@10": 0.5, "Recall@100": 0.99}),
        replace(
            _result("scifact", "b", 0.6, cost={"queries_per_s": 5.0}),
            metrics={"Recall@100": 0.1, "nDCG@10": 0.6},
        ),
    ]
    frontier = build_frontier(results, metric="nDCG@10", axis="qps")
    assert {p.system: p.value for p in frontier.points} == {"a": 0.5, "b": 0.6}
    assert all(p.pareto for p in frontier.points)  # a searches faster, b is better: neither dominates


def test_rows_under_a_higher_is_better_cost_are_best_first():
    qps = {"slow": 5.0, "fast": 500.0, "mid": 50.0, "fastest": 5000.0}
    results = [_result("scifact", label, 0.5, cost={"queries_per_s": q}) for label, q in qps.items()]
    results.append(_result("scifact", "unmeasured", 0.5, cost={"docs_per_s": 1.0}))
    frontier = build_frontier(results, axis="qps")
    # More queries/s is better: the fastest first, the result without a qps last.
    assert [p.system for p in frontier.points] == ["fastest", "fast", "mid", "slow", "unmeasured"]


def test_a_process_wide_peak_is_no_cost_recorded():
    results = [
        _result("scifact", "own", 0.5, cost={"peak_rss_bytes": 2e8, "peak_rss_scope": "evaluation"}),
        _result("scifact", "process", 0.6, cost={"peak_rss_bytes": 1e8, "peak_rss_scope": "process"}),
    ]
    got = {p.system: p for p in build_frontier(results, axis="peak_rss").points}
    assert got["own"].costs["peak_rss"] == 2e8 and got["own"].pareto
    assert got["process"].costs["peak_rss"] is None and got["process"].missing == UNRECORDED
    assert not got["process"].pareto


def test_a_result_without_a_cost_record_is_not_placed_on_the_preparation_axis():
    results = [
        _result("scifact", "onnx", 0.6, cost={"queries_per_s": 10.0}, timings={"prepare_model": 12.5}),
        _result("scifact", "torch", 0.5, cost={"queries_per_s": 10.0}),  # a cost record, nothing prepared: 0 s
        _result("scifact", "old", 0.7),  # written before cost records: its preparation is unknown
    ]
    got = {p.system: p for p in build_frontier(results, axis="prep_s").points}
    assert got["onnx"].costs["prep_s"] == 12.5 and got["torch"].costs["prep_s"] == 0.0
    assert got["old"].costs["prep_s"] is None and got["old"].missing == UNRECORDED
    assert got["torch"].pareto and got["onnx"].pareto and not got["old"].pareto


def test_the_html_page_with_an_axis_no_result_recorded_is_one_line(tmp_path):
    root = tmp_path / "results"
    for label, value, bpd in (("x", 0.6, 1536.0), ("y", 0.5, 48.0)):
        _write(root, _result("scifact", label, value, config={"bytes_per_doc": bpd}))
    out = tmp_path / "page.html"
    run = invoke(["report", str(root), "--format", "html", "--out", str(out), "--cost-axis", "index_bytes"])
    assert run.exit_code == 1 and "no result records index_bytes; recorded: bytes_per_doc (2)" in run.stderr, run.output
    assert len(run.stderr.strip().splitlines()) == 1 and not out.exists()


def test_the_step_line_of_a_higher_is_better_cost_is_the_staircase_by_hand():
    # (label, nDCG@10, queries/s): d is dominated by b (faster and better); c, b, a trade speed for quality.
    rows = [("a", 0.5, 100.0), ("b", 0.6, 50.0), ("c", 0.7, 10.0), ("d", 0.55, 20.0)]
    results = [_result("scifact", label, v, cost={"queries_per_s": q}) for label, v, q in rows]
    frontier = build_frontier(results, axis="qps")
    placed = [p for p in frontier.points if p.missing is None]
    assert {p.system for p in placed if p.pareto} == {"a", "b", "c"}
    # By hand, left to right: c at 10 q/s reaches 0.7; anything at more q/s reaches at most b's 0.6, so the line
    # drops at 10 to 0.6 and runs to b at 50, drops there to a's 0.5 and runs to a at 100.
    assert _steps(frontier, placed) == [(10.0, 0.7), (10.0, 0.6), (50.0, 0.6), (50.0, 0.5), (100.0, 0.5)]
