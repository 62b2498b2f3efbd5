"""Two ids that are the same text in different Unicode normalisation ('café' as one code point, NFC, or as 'e'
and a combining accent, NFD) are still different ids: nothing is normalised silently, but wherever such an id is
not found, the refusal says why and how to fix it."""

from __future__ import annotations

import json
import shutil
import unicodedata

import pytest
from cli_runner import invoke

from harness.datasets.validate import validate_folder
from harness.errors import DatasetError
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset

NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")
FIX = "only by Unicode normalisation: normalise the ids (e.g. unicodedata.normalize('NFC', id))"


def _hint(asked: str, found: str, where: str) -> str:
    forms = {NFC: "NFC", NFD: "NFD"}
    return f"{asked!r} ({forms[asked]}) differs from {found!r} ({forms[found]}) in {where} {FIX}"


def test_the_two_forms_differ_as_python_sees_them():
    assert NFC != NFD and len(NFC) == 4 and len(NFD) == 5  # the premise: not one id


@pytest.mark.parametrize("kind", ["document", "query"])
@pytest.mark.parametrize(("corpus_form", "qrels_form"), [(NFC, NFD), (NFD, NFC)], ids=["nfc-corpus", "nfd-corpus"])
def test_convert_names_the_normalisation(tmp_path, monkeypatch, kind, corpus_form, qrels_form):
    monkeypatch.chdir(tmp_path)
    doc, query = (corpus_form, "q1") if kind == "document" else ("d1", corpus_form)
    judged_doc, judged_query = (qrels_form, "q1") if kind == "document" else ("d1", qrels_form)
    (tmp_path / "docs.csv").write_text(f"id,text\n{doc},alpha\n", encoding="utf-8")
    (tmp_path / "queries.csv").write_text(f"id,text\n{query},alpha?\n", encoding="utf-8")
    (tmp_path / "qrels.csv").write_text(f"query-id,corpus-id,score\n{judged_query},{judged_doc},1\n", encoding="utf-8")
    args = ["--corpus", "docs.csv", "--queries", "queries.csv", "--qrels", "qrels.csv", "--out", "out"]
    result = invoke(["convert", *args])
    assert result.exit_code == 1 and not (tmp_path / "out").exists()  # refused, not normalised
    where = "docs.csv" if kind == "document" else "queries.csv"
    assert _hint(qrels_form, corpus_form, where) in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1


def _folder(tmp_path, doc_id: str, judged: str):
    root = tmp_path / "set"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        json.dumps({"_id": doc_id, "text": "alpha"}) + "\n" + json.dumps({"_id": "d2", "text": "beta"}) + "\n"
    )
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "alpha"}) + "\n")
    (root / "qrels" / "test.tsv").write_text(f"query-id\tcorpus-id\tscore\nq1\t{judged}\t1\n", encoding="utf-8")
    return root


def test_validate_names_the_normalisation(tmp_path):
    report = validate_folder(_folder(tmp_path, NFC, NFD))
    assert not report.ok
    assert [p.message for p in report.problems] == [
        f"document {NFD!r} is not in corpus.jsonl ({_hint(NFD, NFC, 'corpus.jsonl')})"
    ]


@pytest.mark.parametrize(("stored", "judged"), [(NFC, NFD), (NFD, NFC)], ids=["nfc-queries", "nfd-queries"])
def test_validate_names_the_normalisation_of_a_query(tmp_path, stored, judged):
    root = _folder(tmp_path, "d1", "d1")
    (root / "queries.jsonl").write_text(json.dumps({"_id": stored, "text": "alpha"}) + "\n")
    (root / "qrels" / "test.tsv").write_text(f"query-id\tcorpus-id\tscore\n{judged}\td1\t1\n", encoding="utf-8")
    report = validate_folder(root)
    assert not report.ok
    assert [p.message for p in report.problems if p.severity == "error"] == [
        f"query {judged!r} is not in queries.jsonl ({_hint(judged, stored, 'queries.jsonl')})"
    ]


def test_evaluate_names_the_normalisation_of_a_document_and_a_query(tmp_path, fake_encoder):
    root = _folder(tmp_path, NFD, NFC)
    config = EvaluateConfig(dataset_path=root, output_dir=None, progress=False, k_values=(1,))
    with pytest.raises(DatasetError) as raised:
        evaluate_dataset(config, encoder=fake_encoder)
    assert str(raised.value).endswith(f"(e.g. {NFC!r}); {_hint(NFC, NFD, 'corpus.jsonl')}")
    shutil.rmtree(root)
    root = _folder(tmp_path, "d1", "d1")
    (root / "queries.jsonl").write_text(json.dumps({"_id": NFC, "text": "alpha"}) + "\n")
    (root / "qrels" / "test.tsv").write_text(f"query-id\tcorpus-id\tscore\n{NFD}\td1\t1\n", encoding="utf-8")
    with pytest.raises(DatasetError) as raised:
        evaluate_dataset(config, encoder=fake_encoder)
    assert str(raised.value).endswith(f"(e.g. {NFD!r}); {_hint(NFD, NFC, 'queries.jsonl')}")


def test_merge_names_the_normalisation(tmp_path):
    root = _folder(tmp_path, NFC, NFC)
    votes = tmp_path / "votes.csv"
    votes.write_text(f"query_id,doc_id,grade,annotator\nq1,{NFD},1,ann\n", encoding="utf-8")
    result = invoke(["judgments", "merge", str(root), str(votes)])
    assert result.exit_code == 1
    assert f"unknown document {NFD!r} ({_hint(NFD, NFC, 'the corpus')})" in result.stderr, result.stderr


def test_an_ascii_id_that_is_missing_gets_no_unicode_hint(tmp_path):
    report = validate_folder(_folder(tmp_path, "d1", "d9"))
    assert [p.message for p in report.problems] == ["document 'd9' is not in corpus.jsonl"]
