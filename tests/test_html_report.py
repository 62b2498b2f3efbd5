"""`report --format html`: one self-contained page, texts escaped, colours with AA contrast, bad inputs said on
the page — and, in headless Chromium (marker `browser`), sorting, the metric switcher, a drill-down, no
console error, and 20 systems × 15 datasets under 3 MB rendered in under a second."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest
from browser import CHROMIUM
from browser import launch as browser_launch
from cli_runner import invoke

from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.reporting.comparison import load_results
from harness.reporting.html import PageOptions, build_page, render_page

PLANTED = "</script><script>window.__pwned = 1</script><b>bold?</b>"


def _page_data(html: str) -> dict:
    block = re.search(r'<script type="application/json" id="page-data">(.*?)</script>', html, re.S)
    return json.loads(block.group(1))


@pytest.fixture
def results_dir(tiny_beir, tmp_path, monkeypatch):
    """bm25 and hash:64 on two copies of the tiny set (one with HTML planted in a query and a title)."""
    monkeypatch.setenv("BEIR_HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    queries = (tiny_beir / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(queries[0])
    first["text"] = PLANTED + " " + first["text"]
    (tiny_beir / "queries.jsonl").write_text("\n".join([json.dumps(first), *queries[1:]]) + "\n", encoding="utf-8")
    other = tmp_path / "tiny2"
    shutil.copytree(tiny_beir, other)
    out = tmp_path / "results"
    for folder in (tiny_beir, other):
        for model in ("bm25", "hash:64"):
            evaluate_dataset(EvaluateConfig(folder, model=model, output_dir=out, progress=False, k_values=(1, 3, 10)))
    return out


def test_the_page_is_self_contained_and_texts_cannot_escape(results_dir, tmp_path):
    result = invoke(
        ["report", str(results_dir), "--format", "html", "--out", str(tmp_path / "p.html"), "--metric", "nDCG@3"]
    )
    assert result.exit_code == 0, result.output
    html = (tmp_path / "p.html").read_text(encoding="utf-8")
    assert '<table id="leaderboard">' in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html) and "@import" not in html
    assert "url(" not in html  # no font, image or style fetched from anywhere
    assert PLANTED not in html  # the planted markup never appears raw...
    assert "\\u003c/script\\u003e\\u003cscript\\u003ewindow.__pwned" in html  # ...only escaped, inside the data
    data = _page_data(html)
    assert any(PLANTED in text for drill in data["drilldowns"].values() for text in drill["queries"].values())
    assert data["metric"] == "nDCG@3" and {"nDCG@10", "Recall@10", "Judged@10"} <= set(data["metrics"])
    assert sorted(data["datasets"]) == ["tiny", "tiny2"] and len(data["systems"]) == 2


def _relative_luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(a: str, b: str) -> float:
    high, low = sorted((_relative_luminance(a), _relative_luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_text_colours_pass_wcag_aa():
    template = (Path(__file__).resolve().parents[1] / "harness" / "data" / "report-page.html").read_text()
    colours = dict(re.findall(r"--([a-z-]+):\s*(#[0-9a-f]{6})", template.split(":root", 1)[1].split("}", 1)[0]))
    pairs = [
        ("fg", "bg"),
        ("muted", "bg"),
        ("fg", "panel"),
        ("muted", "panel"),
        ("fg", "best"),
        ("pos", "bg"),
        ("neg", "bg"),
        ("accent", "bg"),
        ("accent", "panel"),
        ("warn-fg", "warn-bg"),
        ("pos", "best"),
    ]
    for text, background in pairs:
        assert _contrast(colours[text], colours[background]) >= 4.5, (text, background)


def test_a_missing_run_file_is_said_for_that_column(results_dir):
    results = load_results([results_dir])
    victim = next(r for r in results if r.dataset == "tiny" and r.model == "bm25")
    victim.run_path.unlink()
    data = build_page(results, PageOptions(metric="nDCG@3"))
    entry = data["drilldowns"]["tiny"]["systems"][victim.label]
    assert "is missing: no retrieved documents to show" in entry["missing"] and entry["worst"]
    others = [e for label, e in data["drilldowns"]["tiny"]["systems"].items() if label != victim.label]
    assert others and all("missing" not in e for e in others)


def test_results_of_another_split_are_left_out_and_said(results_dir, tiny_beir):
    evaluate_dataset(
        EvaluateConfig(
            tiny_beir, model="bm25", split="dev", output_dir=results_dir, progress=False, k_values=(1, 3, 10)
        )
    )
    data = build_page(load_results([results_dir]), PageOptions(metric="nDCG@3"))
    assert data["notes"] == ["left out 1 result(s) of other splits: tiny [dev]"]


def test_html_to_stdout_and_a_missing_metric(results_dir):
    result = invoke(["report", str(results_dir), "--format", "html", "--metric", "nDCG@3", "--worst", "1"])
    assert result.exit_code == 0 and result.stdout.lstrip().startswith("<!doctype html>")
    drill = _page_data(result.stdout)["drilldowns"]["tiny"]["systems"]
    assert drill and all(len(entry["worst"]) == 1 for entry in drill.values())
    bad = invoke(["report", str(results_dir), "--format", "html", "--metric", "nDCG@5000"])
    assert bad.exit_code == 1 and "no result has nDCG@5000" in bad.stderr


# --------------------------------------------------------------------------- in a real browser


def _chromium():
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium (.ci/run installs Debian's chromium package)")
    sync_api = pytest.importorskip("playwright.sync_api")
    return sync_api


def _open(sync_api, path: Path):
    manager = sync_api.sync_playwright().start()
    browser = browser_launch(manager)
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type in ("error", "warning") else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on(
        "request",
        lambda request: (
            problems.append(f"request {request.url}") if not request.url.startswith(("file:", "data:")) else None
        ),
    )
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    return manager, browser, page, problems


def _column(page, index: int) -> list[str]:
    return page.eval_on_selector_all("#leaderboard tbody tr", f"rows => rows.map(r => r.children[{index}].textContent)")


@pytest.mark.browser
def test_sorting_switching_and_a_drill_down_in_chromium(results_dir, tmp_path):
    sync_api = _chromium()
    path = tmp_path / "page.html"
    path.write_text(
        render_page(build_page(load_results([results_dir]), PageOptions(metric="nDCG@3"))), encoding="utf-8"
    )
    manager, browser, page, problems = _open(sync_api, path)
    try:
        first_rows = _column(page, 0)
        page.click("#leaderboard thead th:nth-child(1) button")  # dataset: ascending
        page.click("#leaderboard thead th:nth-child(1) button")  # then descending
        assert _column(page, 0) == sorted(first_rows, reverse=True)
        page.focus("#leaderboard thead th:nth-child(2) button")
        page.keyboard.press("Enter")  # keyboard-operable sorting
        values = [float(v.rstrip("†")) for v in _column(page, 1)]
        assert values == sorted(values, reverse=True)
        assert page.get_attribute("#leaderboard thead th:nth-child(2)", "aria-sort") == "descending"
        before = _column(page, 1)
        page.select_option("#metric", "Judged@10")
        assert page.text_content("#leaderboard caption").startswith("Judged@10") and _column(page, 1) != before
        page.click("#drilldowns details[data-dataset='tiny'] > summary")
        page.click("#drilldowns details[data-dataset='tiny'] details.query > summary")
        page.wait_for_selector("#drilldowns details[data-dataset='tiny'] details.query[open] table")
        shown = page.text_content("#drilldowns details[data-dataset='tiny']")
        assert PLANTED in shown  # the planted markup is shown as text...
        assert page.evaluate("window.__pwned") is None  # ...and never ran
        assert "Judged documents" in shown and "Top " in shown and ("unjudged" in shown or "grade" in shown)
        page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
        assert problems == []
    finally:
        browser.close()
        manager.stop()


def _synthetic_results(root: Path, systems: int = 20, datasets: int = 15, queries: int = 300, docs: int = 2000):
    """`systems` × `datasets` results with run files over synthetic BEIR folders (titles of BEIR-like length).

    As with real systems, a query hard for one system is hard for the others (a per-query difficulty plus
    noise per system) and their top documents come from one pool per query, shuffled per system.
    """
    from harness.io.formats import write_qrels
    from harness.records import Run
    from harness.reporting.report import Result, write_result

    rng = random.Random(0)
    words = [f"{w}{i}" for i, w in enumerate(["protein", "cell", "study", "effect", "risk", "model"] * 40)]
    metrics = [
        f"{family}@{k}" for family in ("nDCG", "MAP", "Recall", "P", "MRR", "Success") for k in (1, 3, 5, 10, 100, 1000)
    ]
    out = root / "results"
    for d in range(datasets):
        folder = root / f"set{d:02d}"
        (folder / "qrels").mkdir(parents=True)
        with open(folder / "corpus.jsonl", "w") as handle:
            for i in range(docs):
                handle.write(
                    json.dumps(
                        {
                            "_id": f"doc{d}-{i}",
                            "title": " ".join(rng.choices(words, k=9)),
                            "text": " ".join(rng.choices(words, k=30)),
                        }
                    )
                    + "\n"
                )
        with open(folder / "queries.jsonl", "w") as handle:
            for q in range(queries):
                handle.write(json.dumps({"_id": f"q{q}", "text": " ".join(rng.choices(words, k=12))}) + "\n")
        pools = {f"q{q}": rng.sample(range(docs), 15) for q in range(queries)}
        difficulty = {query_id: rng.random() for query_id in pools}
        write_qrels(
            ((q, f"doc{d}-{doc}", rng.choice((1, 2))) for q, pool in pools.items() for doc in pool[:3]),
            folder / "qrels" / "test.tsv",
        )
        for s in range(systems):
            per_query = {q: {m: min(1.0, max(0.0, difficulty[q] + rng.gauss(0, 0.1))) for m in metrics} for q in pools}
            run = Run.from_scores(
                {
                    q: {f"doc{d}-{doc}": 10 - r * 0.1 for r, doc in enumerate(rng.sample(pool, 10))}
                    for q, pool in pools.items()
                },
                name=f"system{s}",
            )
            means = {m: sum(values[m] for values in per_query.values()) / queries for m in metrics}  # as written
            write_result(
                Result(
                    f"set{d:02d}",
                    "test",
                    f"org/system-{s:02d}",
                    means,
                    per_query,
                    queries,
                    {"dataset_path": str(folder), "top_k": 10, "index": "flat"},
                    {"corpus": "ab" * 32},
                    {},
                    {"beir-harness": "test"},
                    "2026-12-01T00:00:00+00:00",
                    label=f"org/system-{s:02d}",
                    config_hash=f"{s:016x}",
                ),
                run,
                out,
            )
    return out


@pytest.mark.browser
def test_twenty_systems_by_fifteen_datasets_stay_small_and_build_drill_downs_on_demand(tmp_path):
    sync_api = _chromium()
    results = load_results([_synthetic_results(tmp_path)])
    html = render_page(build_page(results, PageOptions(metric="nDCG@10", worst=20)))
    size = len(html.encode("utf-8"))
    assert size < 3 * 2**20, size
    path = tmp_path / "big.html"
    path.write_text(html, encoding="utf-8")
    manager, browser, page, problems = _open(sync_api, path)
    try:
        # Fast by the work done at load, not by a clock: the drill-downs' per-query rows are not built until one
        # is opened (300 queries x 15 datasets would be), and the page holds a bounded number of elements.
        assert page.query_selector_all("#drilldowns details.query") == []
        assert page.evaluate("document.getElementsByTagName('*').length") < 15_000  # 10,453 measured
        assert len(page.query_selector_all("#leaderboard tbody tr")) == 15
        assert len(page.query_selector_all("#leaderboard thead th")) == 21
        page.click("#drilldowns details[data-dataset='set03'] > summary")
        page.wait_for_selector("#drilldowns details[data-dataset='set03'] details.query")  # built on the toggle event
        assert len(page.query_selector_all("#drilldowns details[data-dataset='set03'] details.query")) == 20
        assert problems == []
    finally:
        browser.close()
        manager.stop()


def test_published_columns_and_their_delta_are_on_the_page(tiny_beir, tmp_path, monkeypatch):
    monkeypatch.setenv("BEIR_HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "results"
    evaluate_dataset(EvaluateConfig(tiny_beir, model="bm25", output_dir=out, progress=False, dataset_name="scifact"))
    data = build_page(load_results([out]), PageOptions(published=True))
    board = data["boards"]["nDCG@10"]
    kinds = [data["kinds"][data["columns"][i]] for i in board["columns"]]
    assert kinds == ["system", "published", "delta"]
    published, delta = board["values"]["scifact"][1:]
    assert published == pytest.approx(0.6789) and delta == pytest.approx(
        board["values"]["scifact"][0] - 0.6789, abs=1e-4
    )


# The reported value (0.5359 on a page that stored it as 0.53585), others near a boundary, and 0.03125, an exact
# binary tie that JavaScript's toFixed rounds up (0.0313) where Python's format rounds to even (0.0312).
ROUNDING = {"set-a": 0.535845, "set-b": 0.12345, "set-c": 0.99995, "set-d": 0.03125}


@pytest.mark.browser
def test_the_page_shows_the_labels_and_digits_of_the_tables(tmp_path):
    from harness.records import Run
    from harness.reporting.report import Result, write_result

    sync_api = _chromium()
    minilm = "sentence-transformers/all-MiniLM-L6-v2"
    out = tmp_path / "results"
    for dataset, value in ROUNDING.items():
        for model, label, score, config in (
            (minilm, minilm, 0.5, {}),
            ("x", "team/ours", 0.25, {}),  # a label with a slash of its own: shown whole
            (
                "fusion",
                f"rrf(bm25, {minilm})",
                value,
                {"inputs": [{"label": "bm25", "model": "bm25"}, {"label": minilm, "model": minilm}]},
            ),
        ):
            write_result(
                Result(
                    dataset,
                    "test",
                    model,
                    {"nDCG@10": score},
                    {"q1": {"nDCG@10": score}},
                    1,
                    config,
                    {},
                    {},
                    {"beir-harness": "test"},
                    "2026-12-01T00:00:00+00:00",
                    label=label,
                    config_hash=model[:1] * 16,
                ),
                Run.from_scores({"q1": {"d1": 1.0}}),
                out,
            )
    path = tmp_path / "page.html"
    path.write_text(render_page(build_page(load_results([out]))), encoding="utf-8")
    manager, browser, page, problems = _open(sync_api, path)
    try:
        headings = page.eval_on_selector_all("#leaderboard thead th", "cells => cells.map(c => c.textContent)")
        assert sorted(headings[1:]) == ["all-MiniLM-L6-v2", "rrf(bm25, all-MiniLM-L6-v2)", "team/ours"]
        legend = page.eval_on_selector_all("#chart-legend > span", "items => items.map(i => i.textContent)")
        assert legend == headings[1:]
        column = headings.index("rrf(bm25, all-MiniLM-L6-v2)")  # th 0 is the dataset, as td 0 of each row
        shown = dict(zip(_column(page, 0), _column(page, column)))
        assert shown == {dataset: format(value, ".4f") for dataset, value in ROUNDING.items()}  # Python's digits
        assert problems == []
    finally:
        browser.close()
        manager.stop()


# --------------------------------------------------------------------------- layout at 1,400 and 800 px (docs/reports.md)


def _two_by_three(out: Path) -> Path:
    """Two datasets × three systems, each with a published score: a leaderboard wider than the page."""
    from harness.records import Run
    from harness.reporting.report import Result, write_result

    models = [("bm25", 0.4), ("sentence-transformers/all-MiniLM-L6-v2", 0.6), ("intfloat/e5-base-v2", 0.7)]
    for d, dataset in enumerate(("scifact", "nfcorpus")):
        for m, (model, score) in enumerate(models):
            value = score - 0.1 * d
            per_query = {"q1": {"nDCG@10": value}, "q2": {"nDCG@10": value}}
            write_result(
                Result(
                    dataset,
                    "test",
                    model,
                    {"nDCG@10": value},
                    per_query,
                    2,
                    {},
                    {},
                    {},
                    {"beir-harness": "test"},
                    "2026-12-01T00:00:00+00:00",
                    label=model,
                    config_hash=f"{m:016x}",
                ),
                Run.from_scores({"q1": {"d1": 1.0}, "q2": {"d1": 1.0}}),
                out,
            )
    return out


def _layout(page) -> dict:
    return page.evaluate("""() => {
        const chart = document.getElementById("chart"), board = document.querySelector("#leaderboard").parentElement;
        const first = document.querySelector("#leaderboard tbody tr th"), last = document.querySelector(
            "#leaderboard tbody tr td:last-child");
        return {chart: chart.querySelector("svg").getBoundingClientRect().width, column: chart.clientWidth,
                first: first.getBoundingClientRect().left, last: last.getBoundingClientRect().left,
                scrollable: board.scrollWidth - board.clientWidth, background: getComputedStyle(first).backgroundColor,
                top: document.elementFromPoint(first.getBoundingClientRect().left + 5,
                                               first.getBoundingClientRect().top + 5) === first};
    }""")


@pytest.mark.browser
def test_the_chart_uses_its_width_and_the_dataset_column_stays_in_view(tmp_path):
    sync_api = _chromium()
    path = tmp_path / "page.html"
    path.write_text(
        render_page(build_page(load_results([_two_by_three(tmp_path / "results")]), PageOptions(published=True))),
        encoding="utf-8",
    )
    manager, browser, page, problems = _open(sync_api, path)
    try:
        loaded = _layout(page)  # as first drawn (1,366 px), then redrawn as the window changes
        assert 0.8 * loaded["column"] <= loaded["chart"] <= loaded["column"], loaded
        for width in (1400, 800):
            page.set_viewport_size({"width": width, "height": 900})
            page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
            before = _layout(page)
            assert before["chart"] >= 0.8 * before["column"], (width, before)  # was ~180 px of 1,192 at 1,400
            assert before["chart"] <= before["column"], (width, before)  # fits: no scrollbar for a small grid
            assert before["scrollable"] > 100, before  # the published and Δ columns need the scrollbar
            page.eval_on_selector("#leaderboard", "table => table.parentElement.scrollLeft = 400")
            after = _layout(page)
            assert after["last"] < before["last"] - 300  # the table did scroll...
            assert after["first"] == before["first"] and after["top"]  # ...and the dataset column stayed, on top
            assert after["background"] not in ("rgba(0, 0, 0, 0)", "transparent")  # covering what passes under
            page.screenshot(path=str(tmp_path / f"page-{width}.png"))
            page.eval_on_selector("#leaderboard", "table => table.parentElement.scrollLeft = 0")
        assert problems == []
    finally:
        browser.close()
        manager.stop()


@pytest.mark.browser
def test_the_cost_table_is_drawn_beside_the_quality_in_chromium(results_dir, tmp_path):
    sync_api = _chromium()
    path = tmp_path / "page.html"
    path.write_text(
        render_page(build_page(load_results([results_dir]), PageOptions(metric="nDCG@3"))), encoding="utf-8"
    )
    manager, browser, page, problems = _open(sync_api, path)
    try:
        header = page.eval_on_selector_all("#cost-table thead th", "cells => cells.map(c => c.textContent)")
        assert header[:4] == ["dataset", "system", "nDCG@3", "wall s"] and "p99 ms" in header and "peak RSS" in header
        rows = page.eval_on_selector_all("#cost-table tbody tr", "rows => rows.map(r => r.children[1].textContent)")
        assert sorted(rows) == ["bm25", "bm25", "hash:64", "hash:64"]
        # Peak RSS is this test process's own (its size depends on what ran before): a size in a binary unit.
        body = page.text_content("#cost-table tbody")
        assert re.search(r"\d+(\.\d+)? [KMG]iB", body), body
        assert problems == []
    finally:
        browser.close()
        manager.stop()
