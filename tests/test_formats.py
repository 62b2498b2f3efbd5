"""BEIR/TREC readers and writers: streaming, CRLF, gzip, strict errors, atomic writes."""

from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from readonly import read_only

from harness.errors import DatasetError, FormatError, HarnessError, OutputError
from harness.io.files import atomic_writer, write_json
from harness.io.formats import iter_corpus, iter_queries, locate_beir_folder
from harness.io.trec import read_qrels, read_run, write_run
from harness.records import Doc, Run


def test_iter_corpus_reads_titles_text_and_unicode(tiny_beir):
    docs = list(iter_corpus(tiny_beir / "corpus.jsonl"))
    assert docs[0] == Doc("d1", "Fruit", "apple banana")
    assert docs[3] == Doc("d4", "", "eggplant")  # missing title
    assert docs[4] == Doc("d5", "", "fig grape été")  # null title, \u escapes decoded
    assert [d.doc_id for d in docs] == ["d1", "d2", "d3", "d4", "d5"]


def test_gzip_and_plain_give_the_same_records_and_digest(tiny_beir):
    plain = tiny_beir / "corpus.jsonl"
    packed = tiny_beir / "corpus2.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = hashlib.sha256(), hashlib.sha256()
    assert list(iter_corpus(plain, a)) == list(iter_corpus(packed, b))
    assert a.hexdigest() == b.hexdigest() == hashlib.sha256(plain.read_bytes()).hexdigest()


def test_read_qrels_accepts_crlf_and_keeps_grades(tiny_beir):
    qrels = read_qrels(tiny_beir / "qrels" / "test.tsv")
    assert qrels.to_dict() == {"q1": {"d1": 2, "d2": 1}, "q2": {"d3": 1, "d4": 0}, "q3": {"d5": 1}}
    assert qrels.relevant("q2") == {"d3"}
    assert qrels.n_judgments == 5


def test_locate_beir_folder_finds_gz_and_reports_missing_parts(tiny_beir):
    (tiny_beir / "corpus.jsonl.gz").write_bytes(gzip.compress((tiny_beir / "corpus.jsonl").read_bytes()))
    (tiny_beir / "corpus.jsonl").unlink()
    folder = locate_beir_folder(tiny_beir, "test")
    assert folder.corpus.name == "corpus.jsonl.gz"
    with pytest.raises(DatasetError, match=r"missing qrels/train\.tsv \(available splits: dev, test"):
        locate_beir_folder(tiny_beir, "train")
    with pytest.raises(DatasetError, match="no such dataset folder"):
        locate_beir_folder(tiny_beir / "nope", "test")
    (tiny_beir / "queries.jsonl").unlink()
    with pytest.raises(DatasetError, match="missing queries.jsonl"):
        locate_beir_folder(tiny_beir, "test")


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        (b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": \n', 2, "invalid JSON"),
        (b'["a"]\n', 1, "expected a JSON object"),
        (b'{"text": "x"}\n', 1, 'missing or empty "_id"'),
        (b'{"_id": "", "text": "x"}\n', 1, 'missing or empty "_id"'),
        (b'{"_id": "a"}\n', 1, 'missing "text"'),
        (b'{"_id": "a", "text": 3}\n', 1, '"text" must be a string'),
        (b'{"_id": "a", "text": "x"}\n\n{"_id": "a", "text": "y"}\n', 3, "duplicate document id"),
    ],
    ids=["invalid-json", "not-an-object", "missing-id", "empty-id", "missing-text", "text-not-string", "duplicate-id"],
)
def test_corpus_errors_name_file_and_line(tmp_path, content, line, message):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(content)
    with pytest.raises(FormatError, match=message) as info:
        list(iter_corpus(path))
    assert info.value.line_no == line
    assert str(info.value).startswith(f"{path}:{line}: ")


def test_truncated_gzip_is_a_format_error(tmp_path):
    path = tmp_path / "corpus.jsonl.gz"
    lines = "".join(f'{{"_id": "{i}", "text": "x"}}\n' for i in range(5000)).encode()
    path.write_bytes(gzip.compress(lines)[:3000])
    with pytest.raises(FormatError, match="damaged or truncated"):
        list(iter_corpus(path))


def test_queries_duplicate_id(tmp_path):
    path = tmp_path / "queries.jsonl"
    path.write_text('{"_id": 1, "text": "a"}\n{"_id": "1", "text": "b"}\n')
    with pytest.raises(FormatError, match="duplicate query id '1'"):
        list(iter_queries(path))


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        ("qid\tdocid\trel\nq\td\t1\n", 1, "wrong header"),
        ("q\td\t1\n", 1, "wrong header"),
        ("query-id\tcorpus-id\tscore\nq d 1\n", 2, "expected 3 tab-separated columns, found 1"),
        ("query-id\tcorpus-id\tscore\nq\td\thigh\n", 2, "score 'high' is not an integer"),
        ("query-id\tcorpus-id\tscore\nq\td\t1\nq\td\t2\n", 3, r"judged 1 on line 2 and 2 here"),
        ("query-id\tcorpus-id\tscore\n\tq\t1\n", 2, "empty query-id"),
    ],
    ids=["wrong-header-names", "no-header", "spaces-not-tabs", "text-score", "conflicting-duplicate", "empty-query-id"],
)
def test_qrels_errors(tmp_path, content, line, message):
    path = tmp_path / "test.tsv"
    path.write_text(content)
    with pytest.raises(FormatError, match=message) as info:
        read_qrels(path)
    assert info.value.line_no == line


def test_qrels_identical_duplicate_is_kept_once_and_header_only_is_an_error(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("\ufeffquery-id\tcorpus-id\tscore\nq\td\t1\nq\td\t1\n")
    assert read_qrels(path).to_dict() == {"q": {"d": 1}}
    path.write_text("query-id\tcorpus-id\tscore\n")
    with pytest.raises(FormatError, match="no judgments"):
        read_qrels(path)


def test_read_run_orders_by_score_not_rank(tmp_path):
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 a 1 0.5 mine\nq1 Q0 b 2 0.9 mine\nq1 Q0 c 3 0.5 mine\r\nq2 Q0 a 1 -1e3 mine\n")
    run = read_run(path)
    assert run.name == "mine"
    assert [h.doc_id for h in run["q1"]] == ["b", "c", "a"]
    assert run["q2"][0].score == -1000.0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("q1 Q0 a 1 0.5\n", r"run.trec:1: the run tag \(sixth column\) is missing: found 5 columns"),
        ("q1 Q0 a 1 high tag\n", "score 'high' is not a number"),
        ("q1 Q0 a 1 nan tag\n", "not finite"),
        ("q1 Q0 a 1 1 t\nq1 Q0 a 2 0.5 t\n", "listed twice"),
        ("\n\n", "the run is empty"),
    ],
    ids=["five-columns", "text-score", "nan-score", "doc-listed-twice", "empty-run"],
)
def test_run_errors(tmp_path, content, message):
    path = tmp_path / "run.trec"
    path.write_text(content)
    with pytest.raises(FormatError, match=message):
        read_run(path)


def test_write_run_round_trips_exact_scores(tmp_path):
    run = Run.from_scores({"q1": {"a": 0.1 + 0.2, "b": 1 / 3, "c": 1 / 3}, "q2": {}}, name="my run")
    path = tmp_path / "out" / "run.trec"
    write_run(run, path)
    lines = path.read_text().splitlines()
    assert lines[0] == f"q1 Q0 c 1 {1 / 3!r} my_run"
    assert read_run(path).to_dict() == {"q1": run.to_dict()["q1"]}


def test_write_run_refuses_whitespace_ids(tmp_path):
    with pytest.raises(FormatError, match="whitespace"):
        write_run(Run.from_scores({"q 1": {"a": 1.0}}), tmp_path / "run.trec")
    assert list(tmp_path.iterdir()) == []


def test_atomic_writer_leaves_previous_file_on_failure(tmp_path):
    target = tmp_path / "result.json"
    write_json({"v": 1}, target)
    with pytest.raises(RuntimeError), atomic_writer(target) as handle:
        handle.write("partial")
        raise RuntimeError("crash mid-write")
    assert target.read_text() == '{\n  "v": 1\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder nobody can write to, root included (`tests/readonly.py`)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    with read_only(folder):
        yield folder


def test_atomic_writer_read_only_folder(read_only_folder):
    with pytest.raises(OutputError, match=r"x\.json: cannot write: (Read-only file system|Permission denied)"):
        write_json({}, read_only_folder / "x.json")
    assert list(read_only_folder.iterdir()) == []  # nothing written, no temporary file left


def test_atomic_writer_unwritable_parent(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputError, match="cannot write"):
        write_json({}, blocker / "x.json")


def test_atomic_writer_disk_full(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    write_json({"old": True}, target)

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OutputError, match="No space left"):
        write_json({"new": True}, target)
    assert "old" in target.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_parse_or_raise_a_harness_error(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("fuzz")
    for name, read in (
        ("c.jsonl", lambda p: list(iter_corpus(p))),
        ("q.jsonl", lambda p: list(iter_queries(p))),
        ("qrels.tsv", read_qrels),
        ("run.trec", read_run),
    ):
        path = Path(folder) / name
        path.write_bytes(data)
        try:
            read(path)
        except HarnessError:
            pass


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path):
    import subprocess
    import sys

    from harness.io.files import remove_stale_temporaries

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".chunk-00003.npy.{dead.pid}.abc123.tmp"
    live = tmp_path / f".chunk-00004.npy.{os.getpid()}.def456.tmp"
    other = tmp_path / ".notes.tmp"
    for path in (stale, live, other):
        path.write_bytes(b"partial")
    assert remove_stale_temporaries(tmp_path) == 1
    assert not stale.exists() and live.exists() and other.exists()
    with atomic_writer(tmp_path / "x.txt") as handle:
        handle.write("ok")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["x.txt"]


def test_stale_private_folders_of_dead_processes_are_removed(tmp_path):
    import subprocess
    import sys

    from harness.io.files import private_dir, remove_stale_temporaries

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".out.convert.{dead.pid}.x1y2"
    (stale / "qrels").mkdir(parents=True)
    mine = private_dir(tmp_path, ".out.convert")
    other = tmp_path / ".out.convert.notes"
    other.mkdir()
    assert remove_stale_temporaries(tmp_path, ".out.convert.") == 1
    assert not stale.exists() and mine.exists() and other.exists()
    assert mine.name.startswith(f".out.convert.{os.getpid()}.")
