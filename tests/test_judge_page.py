"""The judging page in headless Chromium (marker `browser`): grading with keys, autosave across a reload, an
export equal to what was typed, a blind order that does not follow rank, and planted markup that stays inert."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from browser import CHROMIUM
from browser import launch as browser_launch
from cli_runner import invoke

PLANTED = '</script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b>bold?</b>'


def _pool(tmp_path: Path, docs: int = 12, queries: int = 2, planted: bool = False) -> Path:
    """A folder and one run ranking d00, d01, ... in that order for every query, pooled at full depth."""
    folder = tmp_path / "set"
    folder.mkdir()
    lines = [
        json.dumps(
            {
                "_id": f"d{d:02d}",
                "title": f"Title {d}" if not (planted and d == 0) else PLANTED,
                "text": (PLANTED if planted and d == 0 else f"text {d} " + "long line\n" * 200),
            }
        )
        for d in range(docs)
    ]
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{q}", "text": f"query {q}"}) + "\n" for q in range(queries))
    )
    run = tmp_path / "ranked.trec"
    run.write_text("".join(f"q{q} Q0 d{d:02d} {d + 1} {100 - d} ranked\n" for q in range(queries) for d in range(docs)))
    result = invoke(["pool", str(folder), "--runs", str(run), "--depth", str(docs), "--out", str(tmp_path / "pool")])
    assert result.exit_code == 0, result.output
    return tmp_path / "pool" / "judge.html"


def _items(path: Path) -> list[list[str]]:
    block = re.search(r'<script type="application/json" id="pool-data">(.*?)</script>', path.read_text(), re.S)
    return json.loads(block.group(1))["items"]


def _chromium():
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium (.ci/run installs Debian's chromium package)")
    return pytest.importorskip("playwright.sync_api")


class Browser:
    """One headless Chromium with a page on `path`; every console error and non-file request is collected."""

    def __init__(self, path: Path, downloads: Path):
        self.manager = _chromium().sync_playwright().start()
        self.browser = browser_launch(self.manager)
        self.context = self.browser.new_context(accept_downloads=True)
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.page.on("console", lambda m: self.problems.append(m.text) if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda error: self.problems.append(str(error)))
        self.page.on(
            "request",
            lambda r: (
                self.problems.append(f"request {r.url}") if not r.url.startswith(("file:", "data:", "blob:")) else None
            ),
        )
        self.downloads = downloads
        self.open(path)

    def open(self, path: Path) -> None:
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("body[data-ready='1']")

    def judge_as(self, name: str) -> None:
        """Type `name` in the annotator field and press Enter: that annotator's session starts (or resumes)."""
        self.page.fill("#annotator", name)
        self.page.press("#annotator", "Enter")
        self.page.wait_for_function("n => document.body.dataset.annotator === n", arg=name)

    def keys(self, *keys: str) -> None:
        self.page.locator("#title").click()  # focus outside the name field
        for key in keys:
            self.page.keyboard.press(key)

    def export(self, button: str) -> str:
        with self.page.expect_download() as info:
            self.page.click(button)
        target = self.downloads / info.value.suggested_filename
        info.value.save_as(target)
        return target.read_text(encoding="utf-8")

    def close(self) -> None:
        self.browser.close()
        self.manager.stop()


@pytest.mark.browser
def test_keys_grade_a_reload_keeps_the_work_and_the_export_is_what_was_typed(tmp_path):
    path = _pool(tmp_path)
    items = _items(path)
    browser = Browser(path, tmp_path)
    try:
        browser.judge_as("Ada L.")
        browser.keys("2", "0", "s", "3", "b", "1", "ArrowLeft", "ArrowLeft", "ArrowLeft", "3")
        # typed: pair 1 → 2, pair 2 → 0, pair 3 skipped, pair 4 → 3; back to pair 4 → 1;
        # back ×3 to pair 2 → 3
        expected = {tuple(items[0]): 2, tuple(items[1]): 3, tuple(items[3]): 1}
        assert browser.page.inner_text("#progress").startswith("3 of 24 judged, 1 skipped; pair 3 of 24")
        browser.open(path)  # closing and reopening the file: the page asks who is judging, and resumes Ada's work
        assert browser.page.input_value("#annotator") == ""
        browser.judge_as("Ada L.")
        assert browser.page.inner_text("#progress").startswith("3 of 24 judged, 1 skipped; pair 3 of 24")
        assert browser.page.inner_text("#query") == {"q0": "query 0", "q1": "query 1"}[items[2][0]]
        rows = list(csv.DictReader(io.StringIO(browser.export("#export-csv"))))
        assert {(r["query_id"], r["doc_id"]): int(r["grade"]) for r in rows} == expected
        assert {r["annotator"] for r in rows} == {"Ada L."}
        qrels = browser.export("#export-qrels")
        assert {(q, d): int(g) for q, zero, d, g in (line.split() for line in qrels.splitlines())} == expected
        assert browser.page.locator("#download-qrels").get_attribute("download").endswith("Ada_L..qrels")
        assert not browser.problems, browser.problems
    finally:
        browser.close()


@pytest.mark.browser
def test_the_order_does_not_follow_rank_and_long_documents_scroll(tmp_path):
    path = _pool(tmp_path, docs=12)
    items = _items(path)
    for query_id in ("q0", "q1"):
        order = [doc for q, doc in items if q == query_id]
        assert sorted(order) == [f"d{d:02d}" for d in range(12)]
        assert order not in ([f"d{d:02d}" for d in range(12)], [f"d{d:02d}" for d in reversed(range(12))])
    assert [q for q, _ in items] == sorted((q for q, _ in items), key=[q for q, _ in items].index)  # by query
    browser = Browser(path, tmp_path)
    try:
        browser.judge_as("Cy")
        shown = []
        for _ in range(4):
            shown.append(browser.page.inner_text("#doc-title"))
            browser.keys("n")
        assert shown == [f"Title {int(doc[1:])}" for _, doc in items[:4]]
        box = browser.page.eval_on_selector(
            "#doc-text", "e => [e.scrollHeight, e.clientHeight, getComputedStyle(e).overflowY]"
        )
        assert box[0] > box[1] and box[2] == "auto"
    finally:
        browser.close()


@pytest.mark.browser
def test_planted_markup_in_a_document_is_shown_as_text_and_never_runs(tmp_path):
    path = _pool(tmp_path, docs=3, queries=1, planted=True)
    items = _items(path)
    browser = Browser(path, tmp_path)
    try:
        browser.judge_as("Cy")
        browser.keys(*["n"] * [doc for _, doc in items].index("d00"))
        assert browser.page.inner_text("#doc-text") == PLANTED
        assert browser.page.inner_text("#doc-title") == PLANTED
        assert browser.page.evaluate("typeof window.__pwned") == "undefined"
        assert browser.page.locator("#doc-text img, #doc-text b, #doc-title script").count() == 0
        assert not [p for p in browser.problems if "request" in p], browser.problems
    finally:
        browser.close()


@pytest.mark.browser
def test_a_team_scale_takes_only_its_own_keys(tmp_path):
    folder, run = tmp_path / "set", tmp_path / "r.trec"
    folder.mkdir()
    docs = (json.dumps({"_id": f"d{d}", "text": f"t{d}"}) + "\n" for d in range(3))
    (folder / "corpus.jsonl").write_text("".join(docs))
    (folder / "queries.jsonl").write_text('{"_id": "q0", "text": "query"}\n')
    run.write_text("".join(f"q0 Q0 d{d} {d + 1} {9 - d} r\n" for d in range(3)))
    (tmp_path / "g.json").write_text(
        json.dumps(
            {"scale": [{"grade": 0, "label": "No"}, {"grade": 1, "label": "Yes"}], "guidelines": "Yes if it answers."}
        )
    )
    result = invoke(
        [
            "pool",
            str(folder),
            "--runs",
            str(run),
            "--guidelines",
            str(tmp_path / "g.json"),
            "--out",
            str(tmp_path / "pool"),
        ],
    )
    assert result.exit_code == 0, result.output
    path = tmp_path / "pool" / "judge.html"
    items = _items(path)
    browser = Browser(path, tmp_path)
    try:
        assert browser.page.locator("#grades button").all_inner_texts() == ["0 No", "1 Yes"]
        assert "Yes if it answers." in browser.page.inner_text("#guidelines")
        browser.judge_as("Bo")
        browser.keys("3", "2", "1", "0")  # 3 and 2 are not grades here: nothing happens
        rows = list(csv.DictReader(io.StringIO(browser.export("#export-csv"))))
        assert {(r["query_id"], r["doc_id"]): r["grade"] for r in rows} == {tuple(items[0]): "1", tuple(items[1]): "0"}
        assert not browser.problems, browser.problems
    finally:
        browser.close()


def _export_rows(browser: Browser) -> dict[tuple[str, str], int]:
    rows = list(csv.DictReader(io.StringIO(browser.export("#export-csv"))))
    assert len({r["annotator"] for r in rows}) <= 1, rows
    return {(r["query_id"], r["doc_id"]): int(r["grade"]) for r in rows}


@pytest.mark.browser
def test_two_judges_in_one_browser_each_get_their_own_progress_and_export(tmp_path):
    path = _pool(tmp_path, docs=4, queries=2)
    items = _items(path)
    browser = Browser(path, tmp_path)  # one browser profile for both judges, as on a shared machine
    try:
        # no grade before a name: the page asks who is judging, and a key grades nothing
        assert browser.page.is_visible("#who")
        assert browser.page.inner_text("#progress") == "no annotator yet"
        browser.keys("2")
        assert browser.page.locator("#grades button[disabled]").count() == 4
        browser.judge_as("alice")
        assert browser.page.inner_text("#progress").startswith("0 of 8 judged, 0 skipped; pair 1 of 8")
        browser.keys("3", "3", "3", "3", "3", "3", "3", "3")  # alice grades every pair 3
        assert browser.page.inner_text("#progress").startswith("8 of 8 judged")
        alice = {tuple(item): 3 for item in items}
        assert _export_rows(browser) == alice
        assert browser.page.locator("#download-csv").get_attribute("download").endswith("-alice.csv")

        browser.open(path)  # bob opens the same file in the same browser
        assert browser.page.input_value("#annotator") == ""
        assert browser.page.inner_text("#progress") == "no annotator yet"
        browser.judge_as("bob")
        assert browser.page.inner_text("#progress").startswith("0 of 8 judged, 0 skipped; pair 1 of 8")
        browser.keys("1", "0")  # bob grades two pairs
        bob = {tuple(items[0]): 1, tuple(items[1]): 0}
        assert _export_rows(browser) == bob  # only what bob typed, never alice's grades
        assert browser.page.locator("#download-csv").get_attribute("download").endswith("-bob.csv")

        browser.judge_as("alice")  # switching back resumes alice's own progress, untouched by bob
        assert browser.page.inner_text("#progress").startswith("8 of 8 judged")
        assert _export_rows(browser) == alice
        browser.judge_as("bob")
        assert browser.page.inner_text("#progress").startswith("2 of 8 judged, 0 skipped; pair 3 of 8")
        assert not browser.problems, browser.problems
    finally:
        browser.close()


@pytest.mark.browser
def test_progress_an_older_page_saved_per_pool_goes_only_to_its_own_annotator(tmp_path):
    path = _pool(tmp_path, docs=3, queries=1)
    items = _items(path)
    pool_id = json.loads((tmp_path / "pool" / "manifest.json").read_text())["pool_id"]
    browser = Browser(path, tmp_path)
    try:
        old = {"annotator": "alice", "pos": 2, "grades": {f"{q}\t{d}": 2 for q, d in items}}
        browser.page.evaluate(
            "([k, v]) => localStorage.setItem(k, v)", [f"beir-harness-judge:{pool_id}", json.dumps(old)]
        )
        browser.open(path)
        browser.judge_as("bob")
        assert browser.page.inner_text("#progress").startswith("0 of 3 judged")
        assert _export_rows(browser) == {}
        browser.judge_as("alice")
        assert browser.page.inner_text("#progress").startswith("3 of 3 judged")
        assert _export_rows(browser) == {tuple(item): 2 for item in items}
    finally:
        browser.close()
