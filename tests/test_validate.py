"""validate: clean folders pass with a summary; every kind of problem is listed with file and line."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
from cli_runner import invoke

from harness.datasets.validate import MAX_LISTED, validate_folder
from harness.errors import DatasetError


def test_tiny_folder_summary(tiny_beir):
    report = validate_folder(tiny_beir)
    assert report.ok and report.problems == []
    assert (report.n_docs, report.n_queries) == (5, 4)
    test = next(s for s in report.splits if s.split == "test")
    assert (test.judgments, test.judged_queries, test.grades) == (5, 3, {2: 1, 1: 3, 0: 1})
    assert test.mean_judged_per_query == pytest.approx(5 / 3)
    assert report.files["qrels/test.tsv"]["crlf"] and not report.files["qrels/dev.tsv"]["crlf"]
    assert report.mean_doc_words == pytest.approx((3 + 2 + 4 + 1 + 3) / 5)


def test_real_beir_folders_are_clean(shared_beir):
    for name, docs, queries in (("scifact", 5183, 1109), ("nfcorpus", 3633, 3237)):
        report = validate_folder(shared_beir / name)
        assert report.ok, report.format_text()
        assert (report.n_docs, report.n_queries) == (docs, queries)
    nfcorpus = validate_folder(shared_beir / "nfcorpus")
    assert {s.split: s.judgments for s in nfcorpus.splits} == {"dev": 11385, "test": 12334, "train": 110575}
    assert report.files["corpus.jsonl.gz"]["gzip"]


def test_every_problem_is_listed_with_file_and_line(tiny_beir):
    with open(tiny_beir / "corpus.jsonl", "a") as handle:
        handle.write('{"_id": "d1", "text": "again"}\n{"_id": "d9", "title": "", "text": ""}\nnot json\n')
    with open(tiny_beir / "queries.jsonl", "a") as handle:
        handle.write('{"_id": "q5", "text": " "}\n')
    (tiny_beir / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t2\nqX\td1\t1\nq2\tdX\t1\nq3\td2\tbad\nq3\td3\n"
    )
    (tiny_beir / "qrels" / "dev.tsv").write_text("qid\tdocid\tscore\nq4\td1\t1\n")
    report = validate_folder(tiny_beir)
    text = report.format_text()
    assert not report.ok
    corpus, qrels = tiny_beir / "corpus.jsonl", tiny_beir / "qrels" / "train.tsv"
    for expected in (
        f"error   {corpus}:6: duplicate document id 'd1'",
        f"warning {corpus}: document 'd9' has empty title and text",
        f"error   {corpus}:8: invalid JSON",
        f"warning {tiny_beir / 'queries.jsonl'}: query 'q5' has empty text",
        f"error   {qrels}:3: (q1, d1) judged 1 on line 2 and 2 here",
        f"error   {qrels}:4: query 'qX' is not in queries.jsonl",
        f"error   {qrels}:5: document 'dX' is not in corpus.jsonl",
        f"error   {qrels}:6: score 'bad' is not an integer",
        f"error   {qrels}:7: expected 3 tab-separated columns, found 2",
        f"error   {tiny_beir / 'qrels' / 'dev.tsv'}:1: wrong header",
    ):
        assert expected in text, (expected, text)
    assert report.count("error") == 8 and report.count("warning") == 2


def test_missing_files_and_gz(tiny_beir):
    (tiny_beir / "corpus.jsonl.gz").write_bytes(gzip.compress((tiny_beir / "corpus.jsonl").read_bytes()))
    (tiny_beir / "corpus.jsonl").unlink()
    assert validate_folder(tiny_beir).ok
    (tiny_beir / "queries.jsonl").unlink()
    shutil.rmtree(tiny_beir / "qrels")
    report = validate_folder(tiny_beir)
    assert [p.message for p in report.problems] == ["missing queries.jsonl"]  # no qrels: not judged yet, valid
    with pytest.raises(DatasetError, match="no such folder"):
        validate_folder(tiny_beir / "nope")


def test_problem_list_is_capped(tiny_beir):
    with open(tiny_beir / "corpus.jsonl", "a") as handle:
        handle.writelines("oops\n" for _ in range(MAX_LISTED + 7))
    report = validate_folder(tiny_beir)
    assert len(report.problems) == MAX_LISTED and report.count("error") == MAX_LISTED + 7
    assert "... and 7 more" in report.format_text()


def test_cli_validate(tiny_beir):
    result = invoke(["validate", str(tiny_beir)])
    assert result.exit_code == 0 and result.stdout.startswith(f"{tiny_beir}: OK")
    data = json.loads(invoke(["validate", str(tiny_beir), "--json"]).stdout)
    assert data["ok"] and data["n_docs"] == 5 and data["splits"][1]["grades"] == {"0": 1, "1": 3, "2": 1}
    (tiny_beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tnope\t1\n")
    result = invoke(["validate", str(tiny_beir)])
    assert result.exit_code == 1
    assert "INVALID: 1 error(s)" in result.stdout and "document 'nope' is not in corpus.jsonl" in result.stdout
    result = invoke(["validate", str(tiny_beir / "missing")])
    assert result.exit_code == 1 and "no such folder" in result.stderr


def test_a_corpus_with_id_instead_of__id_gets_one_hint(tiny_beir):
    rows = [json.loads(line) for line in (tiny_beir / "corpus.jsonl").read_text().splitlines() if line.strip()]
    (tiny_beir / "corpus.jsonl").write_text("".join(json.dumps({"id": row.pop("_id"), **row}) + "\n" for row in rows))
    report = validate_folder(tiny_beir)
    assert [p.message for p in report.problems] == [
        'the first record has no "_id" (the records name their id \'id\': rename the field to "_id", or build '
        "the folder with `beir-harness convert`, which reads 'id'); the checks that need its ids were skipped"
    ]
    result = invoke(["evaluate", str(tiny_beir), "--model", "hash:8", "--output-dir", str(tiny_beir / "r")])
    assert result.exit_code == 1
    assert "corpus.jsonl:1: missing or empty \"_id\" (the records name their id 'id': rename" in result.stderr


@pytest.mark.parametrize("qrels", ["header-only", "judged"])
def test_a_folder_without_queries_is_invalid_not_ready_to_pool(tiny_beir, qrels):
    (tiny_beir / "queries.jsonl").write_text("")
    for path in (tiny_beir / "qrels").iterdir():
        path.write_text("query-id\tcorpus-id\tscore\n" + ("q1\td1\t1\n" if qrels == "judged" else ""))
    result = invoke(["validate", str(tiny_beir)])
    assert result.exit_code == 1, result.stdout
    assert result.stdout.startswith(f"{tiny_beir}: INVALID") and "pool it" not in result.stdout
    assert f"error   {tiny_beir / 'queries.jsonl'}: no queries (add at least one)" in [
        line.strip() for line in result.stdout.splitlines()
    ]
