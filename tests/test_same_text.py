"""Documents whose title and text are identical are judged once per query — on the judging page (headless
Chromium) and by the LLM judge — and the grade goes to each id, recorded as such; the expected groups are
computed here by a loop over the corpus file."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from cli_runner import invoke
from test_judge_page import Browser, _items
from test_llm_judge import MODEL, _judge, rule, service  # noqa: F401 - service is the fake LLM fixture

TWINS = {"d01": "d00", "d04": "d00", "d05": "d03"}  # document → the one whose title and text it repeats


def _corpus(folder: Path) -> None:
    folder.mkdir()
    lines = []
    for d in range(8):
        source = int(TWINS.get(f"d{d:02d}", f"d{d:02d}")[1:])
        lines.append(json.dumps({"_id": f"d{d:02d}", "title": f"title {source}", "text": f"text {{of}} {source}"}))
    lines.append(json.dumps({"_id": "d08", "title": "title 9", "text": "text {of} 0"}))  # same text, other title
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "queries.jsonl").write_text('{"_id": "q0", "text": "query 0"}\n{"_id": "q1", "text": "query 1"}\n')


def _groups(folder: Path, pooled: set[tuple[str, str]]) -> dict[tuple[str, str], set[str]]:
    """(query, title + text) → the pooled ids with that title and text, by a loop over corpus.jsonl."""
    texts = {r["_id"]: (r["title"], r["text"]) for r in map(json.loads, (folder / "corpus.jsonl").open())}
    groups: dict[tuple[str, str], set[str]] = {}
    for query_id, doc_id in pooled:
        groups.setdefault((query_id, "\n".join(texts[doc_id])), set()).add(doc_id)
    return groups


def _pool(tmp_path: Path, query_docs: dict[str, list[int]]) -> Path:
    folder = tmp_path / "set"
    _corpus(folder)
    run = tmp_path / "run.trec"
    run.write_text(
        "".join(f"{q} Q0 d{d:02d} 0 {50 - r} sys\n" for q, docs in query_docs.items() for r, d in enumerate(docs))
    )
    result = invoke(["pool", str(folder), "--runs", str(run), "--depth", "9", "--out", str(tmp_path / "pool")])
    assert result.exit_code == 0, result.output
    pooled = {(q, f"d{d:02d}") for q, docs in query_docs.items() for d in docs}
    n_copies = sum(len(ids) - 1 for ids in _groups(folder, pooled).values())
    assert f"{n_copies} pooled documents have the text of another of their query" in result.output
    return tmp_path / "pool"


@pytest.mark.browser
def test_the_page_shows_each_text_once_per_query_and_the_export_grades_every_id(tmp_path):
    pool = _pool(tmp_path, {"q0": [0, 1, 2, 3, 4, 5, 8], "q1": [1, 2, 6]})
    pooled = {(q, f"d{d:02d}") for q, docs in {"q0": [0, 1, 2, 3, 4, 5, 8], "q1": [1, 2, 6]}.items() for d in docs}
    groups = _groups(tmp_path / "set", pooled)
    items = [tuple(item) for item in _items(pool / "judge.html")]
    assert len(items) == len(groups)  # one shown per query and text
    assert all(len({item for item in items if item[0] == q and item[1] in ids}) == 1 for (q, _), ids in groups.items())
    manifest = json.loads((pool / "manifest.json").read_text())
    shown = set(items)
    copies = {(q, d): rep for q, docs in manifest["same_text"].items() for d, rep in docs.items()}
    assert set(copies) == pooled - shown and all((q, rep) in shown for (q, _), rep in copies.items())
    browser = Browser(pool / "judge.html", tmp_path)
    try:
        browser.judge_as("ada")
        n_q0 = sum(q == items[0][0] for q, _ in items)
        assert browser.page.inner_text("#in-query") == f"(document 1 of {n_q0} for this query)"
        grades = {item: n % 4 for n, item in enumerate(items)}
        browser.keys(*[str(grades[item]) for item in items])
        rows = list(csv.DictReader(io.StringIO(browser.export("#export-csv"))))
    finally:
        browser.close()
    expected = {**grades, **{pair: grades[pair[0], rep] for pair, rep in copies.items()}}
    assert {(r["query_id"], r["doc_id"]): int(r["grade"]) for r in rows} == expected
    assert {(r["query_id"], r["doc_id"]): r["same_text_as"] for r in rows if r["same_text_as"]} == copies
    (export,) = tmp_path.glob("judgments-*-ada.csv")  # the page's download, saved
    merged = invoke(["judgments", "merge", str(tmp_path / "set"), str(export)])
    assert merged.exit_code == 0, merged.output
    records = [json.loads(line) for line in (tmp_path / "set" / "qrels" / "test.annotations.jsonl").open()]
    assert {(r["query_id"], r["doc_id"]): r.get("same_text_as") for r in records if r.get("same_text_as")} == copies
    assert {(r["query_id"], r["doc_id"]): r["grade"] for r in records} == expected


def test_the_llm_asks_each_text_once_per_query_and_grades_every_id(service, tmp_path):  # noqa: F811
    query_docs = {"q0": [0, 1, 2, 3, 4, 5, 8], "q1": [1, 2, 6]}
    pool = _pool(tmp_path, query_docs)
    result = _judge(service, pool, tmp_path)
    assert result.exit_code == 0, result.output
    pooled = {(q, f"d{d:02d}") for q, docs in query_docs.items() for d in docs}
    assert len(service.requests) == len(_groups(tmp_path / "set", pooled))  # one question per query and text
    with open(pool / f"judgments-llm_{MODEL}.csv", encoding="utf-8", newline="") as handle:
        written = {(r["query_id"], r["doc_id"]): int(r["grade"]) for r in csv.DictReader(handle)}
    titles = {r["_id"]: int(r["title"].split()[1]) for r in map(json.loads, (tmp_path / "set" / "corpus.jsonl").open())}
    assert written == {(q, d): rule(int(q[1:]), titles[d]) for q, d in pooled}
