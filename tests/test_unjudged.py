"""One path from corpus + queries to qrels: `convert` without judgments makes a valid folder not judged yet;
`validate` says so (exit 0); `pool` and `judgments merge` take it, and the header-only and no-qrels forms
alike. Each file is read back by hand here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_runner import invoke


def _invoke(*args):
    return invoke([str(a) for a in args])


def _tables(tmp_path: Path) -> tuple[Path, Path]:
    docs, queries = tmp_path / "docs.csv", tmp_path / "queries.csv"
    docs.write_text("id,title,text\n" + "".join(f"d{i},Title {i},text {i} word{i % 3}\n" for i in range(8)))
    queries.write_text("id,text\nq1,word1\nq2,word2 text\n")
    return docs, queries


def _unjudged(tmp_path: Path, form: str) -> Path:
    docs, queries = _tables(tmp_path)
    out = tmp_path / "set"
    result = _invoke("convert", "--corpus", docs, "--queries", queries, "--out", out)
    assert result.exit_code == 0, result.output
    if form == "no-qrels":
        shutil.rmtree(out / "qrels")
    return out


def test_convert_without_judgments_writes_a_folder_not_judged_yet(tmp_path):
    docs, queries = _tables(tmp_path)
    out = tmp_path / "set"
    result = _invoke("convert", "--corpus", docs, "--queries", queries, "--out", out)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"wrote {out}: 8 documents, 2 queries, qrels/test.tsv with no judgments yet"
    assert lines[-1] == f"no judgments yet: pool it (beir-harness pool {out} --systems ... --out POOL)"
    assert not [line for line in lines if "WARNING" in line or "grade scale" in line], lines
    assert (out / "qrels" / "test.tsv").read_text() == "query-id\tcorpus-id\tscore\n"
    assert [json.loads(line)["_id"] for line in (out / "corpus.jsonl").read_text().splitlines()] == [
        f"d{i}" for i in range(8)
    ]


@pytest.mark.parametrize("form", ["header-only", "no-qrels"])
def test_validate_reports_a_folder_not_judged_yet_as_valid(tmp_path, form):
    out = _unjudged(tmp_path, form)
    result = _invoke("validate", out)
    assert result.exit_code == 0, result.output
    assert (
        result.output.splitlines()[0]
        == f"{out}: OK; no judgments yet: pool it (beir-harness pool {out} --systems ... --out POOL)"
    )
    as_json = json.loads(_invoke("validate", out, "--json").output)
    assert as_json["ok"] is True and as_json["judged"] is False


@pytest.mark.parametrize("form", ["header-only", "no-qrels"])
def test_pool_then_merge_take_a_folder_not_judged_yet(tmp_path, form):
    out = _unjudged(tmp_path, form)
    pool = tmp_path / "pool"
    result = _invoke("pool", out, "--systems", "bm25", "--depth", 2, "--out", pool)
    assert result.exit_code == 0, result.output
    pairs = [json.loads(line) for line in (pool / "pool.jsonl").read_text().splitlines()]
    assert pairs and all(p["query_id"] in ("q1", "q2") for p in pairs)
    grades = tmp_path / "alice.csv"
    grades.write_text(
        "query_id,doc_id,grade,annotator\n" + "".join(f"{p['query_id']},{p['doc_id']},1,alice\n" for p in pairs)
    )
    merged = _invoke("judgments", "merge", out, grades)
    assert merged.exit_code == 0, merged.output
    lines = (out / "qrels" / "test.tsv").read_text().splitlines()
    assert lines[0] == "query-id\tcorpus-id\tscore"
    assert sorted(lines[1:]) == sorted(f"{p['query_id']}\t{p['doc_id']}\t1" for p in pairs)
    assert _invoke("validate", out).output.splitlines()[0] == f"{out}: OK"
