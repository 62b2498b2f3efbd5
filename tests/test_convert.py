"""convert: every input format, column detection, eval-set files, folder safety, conformance with BEIR,
and a table of bad inputs (each a row of RELIABILITY.md) each of which writes nothing and exits non-zero."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from cli_runner import invoke

from harness.datasets.convert import ColumnMap, ConvertOptions, convert_eval_set, convert_tables, parse_grade
from harness.datasets.validate import validate_folder
from harness.errors import FormatError, OutputError
from harness.io.formats import iter_corpus, iter_queries
from harness.io.trec import read_qrels

DATA = Path(__file__).parent / "data"
DEMO = Path(__file__).resolve().parents[1] / "harness" / "data" / "demo"

DOCS_CSV = 'id,title,text,category\r\nd1,Intro,"Hello, world",a\r\n007,,"multi\r\nline ünïcode",b\r\nd3,T3,third,c\r\n'
QUERIES_CSV = "\ufeffqid,question\nq1,hello?\nq2,ünïcode lines\nq3,unjudged\n"
QRELS_CSV = "query_id,doc_id,relevance\nq1,d1,2\nq1,d3,0\nq2,007,1\n"


def _write(folder: Path, files: dict[str, str | bytes]) -> None:
    """Write text (gzip-compressed for a .gz name) or raw bytes (as given)."""
    for name, content in files.items():
        path = folder / name
        if isinstance(content, str):
            content = content.encode("utf-8")
            if name.endswith(".gz"):
                content = gzip.compress(content)
        path.write_bytes(content)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def csv_inputs(tmp_path: Path) -> Path:
    _write(tmp_path, {"docs.csv": DOCS_CSV, "queries.csv": QUERIES_CSV, "qrels.csv": QRELS_CSV})
    return tmp_path


def _convert_csv(folder: Path, out: Path, **options) -> object:
    return convert_tables(
        folder / "docs.csv", folder / "queries.csv", folder / "qrels.csv", out, ConvertOptions(**options)
    )


def test_csv_conversion_keeps_ids_text_and_metadata(csv_inputs):
    out = csv_inputs / "out"
    summary = _convert_csv(csv_inputs, out)
    assert (summary.n_docs, summary.n_queries, summary.n_judgments, summary.n_judged_queries) == (3, 3, 3, 2)
    assert summary.grades == {2: 1, 0: 1, 1: 1}
    assert summary.unjudged_queries == 1 and "q3" in summary.warnings[0]
    corpus = _jsonl(out / "corpus.jsonl")
    assert corpus[0] == {"_id": "d1", "title": "Intro", "text": "Hello, world", "metadata": {"category": "a"}}
    assert corpus[1]["_id"] == "007" and corpus[1]["text"] == "multi\r\nline ünïcode"
    assert _jsonl(out / "queries.jsonl")[1] == {"_id": "q2", "text": "ünïcode lines", "metadata": {}}
    assert (out / "qrels" / "test.tsv").read_text() == "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td3\t0\nq2\t007\t1\n"
    assert validate_folder(out).ok
    assert sorted(p.name for p in csv_inputs.iterdir()) == ["docs.csv", "out", "qrels.csv", "queries.csv"]


def test_output_loads_identically_in_beir_generic_data_loader(csv_inputs):
    from beir.datasets.data_loader import GenericDataLoader

    out = csv_inputs / "out"
    _convert_csv(csv_inputs, out)
    corpus, queries, qrels = GenericDataLoader(data_folder=str(out)).load(split="test")
    assert len(corpus) == 3 and corpus["007"]["text"] == "multi\r\nline ünïcode" and corpus["d1"]["title"] == "Intro"
    assert queries == {"q1": "hello?", "q2": "ünïcode lines"}  # BEIR keeps the judged queries
    assert qrels == read_qrels(out / "qrels" / "test.tsv").to_dict() == {"q1": {"d1": 2, "d3": 0}, "q2": {"007": 1}}


@pytest.mark.parametrize("suffix", ["tsv", "jsonl", "json", "parquet", "csv.gz", "jsonl.gz", "json.gz"])
def test_every_input_format_gives_the_same_folder(csv_inputs, suffix):
    import pandas as pd

    reference = csv_inputs / "ref"
    _convert_csv(csv_inputs, reference)
    paths = {}
    for name in ("docs", "queries", "qrels"):
        frame = pd.read_csv(csv_inputs / f"{name}.csv", dtype=str, keep_default_na=False, encoding="utf-8-sig")
        base = suffix.removesuffix(".gz")
        path = csv_inputs / f"{name}-{base}.{base}"
        if base == "tsv":
            frame.to_csv(path, sep="\t", index=False)
        elif base == "jsonl":
            frame.to_json(path, orient="records", lines=True, force_ascii=False)
        elif base == "json":
            frame.to_json(path, orient="records", force_ascii=False)
        elif base == "parquet":
            frame.to_parquet(path, index=False)
        else:
            frame.to_csv(path, index=False)
        if suffix.endswith(".gz"):
            packed = path.with_name(path.name + ".gz")
            packed.write_bytes(gzip.compress(path.read_bytes()))
            path = packed
        paths[name] = path
    out = csv_inputs / "out"
    convert_tables(paths["docs"], paths["queries"], paths["qrels"], out)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


def test_explicit_columns_override_detection(tmp_path):
    _write(
        tmp_path,
        {
            "items.csv": "sku,name,description,id\nA-1,Mouse,wireless mouse,x\n",
            "q.jsonl": '{"key": "k1", "ask": "mouse"}\n',
            "l.csv": "q,d,stars\nk1,A-1,3\n",
        },
    )
    columns = ColumnMap(
        corpus_id="sku",
        corpus_title="name",
        corpus_text="description",
        query_id="key",
        query_text="ask",
        qrels_query="q",
        qrels_doc="d",
        qrels_score="stars",
    )
    out = tmp_path / "out"
    convert_tables(
        tmp_path / "items.csv", tmp_path / "q.jsonl", tmp_path / "l.csv", out, ConvertOptions(columns=columns)
    )
    assert _jsonl(out / "corpus.jsonl") == [
        {"_id": "A-1", "title": "Mouse", "text": "wireless mouse", "metadata": {"id": "x"}}
    ]
    assert read_qrels(out / "qrels" / "test.tsv").to_dict() == {"k1": {"A-1": 3}}


def test_lesson_eval_set_converts_to_exactly_the_demo_dataset(tmp_path):
    out = tmp_path / "products"
    summary = convert_eval_set(DATA / "lesson.json", out)
    assert (summary.n_docs, summary.n_queries, summary.n_judgments) == (15, 5, 8)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        assert (out / name).read_bytes() == (DEMO / name).read_bytes(), name


def test_yaml_eval_set_with_objects_and_grades(tmp_path):
    _write(
        tmp_path,
        {
            "eval.yaml": """
documents:
  - {id: a1, title: Cats, text: "cats purr", lang: en}
  - {id: b2, text: "dogs bark"}
queries:
  - {id: x, text: "what purrs", relevant: {a1: 2, b2: 0}}
  - {text: "barking", relevant: [b2]}
"""
        },
    )
    out = tmp_path / "out"
    convert_eval_set(tmp_path / "eval.yaml", out)
    assert _jsonl(out / "corpus.jsonl")[0] == {
        "_id": "a1",
        "title": "Cats",
        "text": "cats purr",
        "metadata": {"lang": "en"},
    }
    assert [q["_id"] for q in _jsonl(out / "queries.jsonl")] == ["x", "q2"]
    assert read_qrels(out / "qrels" / "test.tsv").to_dict() == {"x": {"a1": 2, "b2": 0}, "q2": {"b2": 1}}


def test_add_a_split_to_an_existing_folder(csv_inputs):
    out = csv_inputs / "out"
    _convert_csv(csv_inputs, out)
    before = {name: (out / name).read_bytes() for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")}
    _write(csv_inputs, {"dev.csv": "qid,docid,score\nq3,d3,1\n"})
    summary = convert_tables(None, None, csv_inputs / "dev.csv", out, ConvertOptions(split="dev"))
    assert summary.mode == "add-split" and summary.n_docs == 3
    assert read_qrels(out / "qrels" / "dev.tsv").to_dict() == {"q3": {"d3": 1}}
    assert {name: (out / name).read_bytes() for name in before} == before
    # Giving the same corpus and queries again is fine.
    _write(csv_inputs, {"train.csv": "qid,docid,score\nq1,d1,1\n"})
    convert_tables(
        csv_inputs / "docs.csv",
        csv_inputs / "queries.csv",
        csv_inputs / "train.csv",
        out,
        ConvertOptions(split="train"),
    )
    assert sorted(p.name for p in (out / "qrels").iterdir()) == ["dev.tsv", "test.tsv", "train.tsv"]


def test_force_replaces_and_drop_empty_skips(csv_inputs):
    out = csv_inputs / "out"
    _convert_csv(csv_inputs, out)
    _write(csv_inputs, {"docs.csv": DOCS_CSV + "d4,,   ,d\n"})
    summary = _convert_csv(csv_inputs, out, force=True, drop_empty=True)
    assert summary.mode == "replace" and summary.dropped_docs == 1 and summary.n_docs == 3
    assert [p.name for p in csv_inputs.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(("value", "grade"), [(2, 2), ("2", 2), (" 0 ", 0), (1.0, 1), ("3.0", 3)])
def test_parse_grade(value, grade):
    assert parse_grade(value, False) == grade


def test_negative_grade_allowed_on_request(csv_inputs):
    _write(csv_inputs, {"qrels.csv": "qid,docid,score\nq1,d1,-1\nq1,d3,1\n"})
    out = csv_inputs / "out"
    _convert_csv(csv_inputs, out, allow_negative=True)
    assert read_qrels(out / "qrels" / "test.tsv").to_dict() == {"q1": {"d1": -1, "d3": 1}}


def test_library_errors_are_typed(csv_inputs):
    _write(csv_inputs, {"qrels.csv": "qid,docid,score\nq1,d9,1\n"})
    with pytest.raises(FormatError, match="unknown documents"):
        _convert_csv(csv_inputs, csv_inputs / "out")
    _convert_csv(csv_inputs, csv_inputs / "out2", allow_negative=False) if False else None
    (csv_inputs / "blocker").write_text("")
    with pytest.raises(OutputError, match="not a folder"):
        _convert_csv(csv_inputs, csv_inputs / "blocker")


# ---------------------------------------------------------------------------------------------
# Bad inputs: (case id, files to write over the good ones, extra CLI args, expected message).
# Every case is listed in RELIABILITY.md; the runner checks exit code, message, nothing written.

GOOD = {
    "docs.csv": "id,title,text\nd1,T,alpha\nd2,,beta\n",
    "queries.csv": "id,text\nq1,alpha?\n",
    "qrels.csv": "query-id,corpus-id,score\nq1,d1,1\n",
}
TABLES = ["--corpus", "docs.csv", "--queries", "queries.csv", "--qrels", "qrels.csv"]
LATIN1 = "id,text\nd1,caf\xe9\n".encode("latin-1")

BAD_INPUTS = [
    (
        "unsupported-extension",
        {"docs.ods": "x"},
        ["--corpus", "docs.ods", "--queries", "queries.csv", "--qrels", "qrels.csv"],
        "unsupported file type",
    ),
    (
        "missing-input-file",
        {},
        ["--corpus", "nope.csv", "--queries", "queries.csv", "--qrels", "qrels.csv"],
        "nope.csv: no such file",
    ),
    ("empty-file", {"docs.csv": ""}, TABLES, "docs.csv:1: empty file: no header row"),
    # found by the atheris fuzz test: the delimiter sniffer raised csv.Error on a bare carriage return
    ("bare-carriage-return-in-header", {"docs.csv": "\x0b=\r="}, TABLES, "docs.csv:1: malformed CSV"),
    ("no-id-column", {"docs.csv": "name,text\nd1,x\n"}, TABLES, "no document id column (looked for _id, id"),
    (
        "ambiguous-column",
        {"docs.csv": "id,doc_id,text\n1,2,x\n"},
        TABLES,
        "ambiguous document id column: 'id' and 'doc_id' both match (pick one with --corpus-id-column",
    ),
    ("no-text-column", {"docs.csv": "id,title\nd1,x\n"}, TABLES, "no text column (looked for text, body"),
    (
        "explicit-column-missing",
        {},
        TABLES + ["--corpus-id-column", "sku"],
        "no column 'sku' (from --corpus-id-column); columns found: id, title, text",
    ),
    ("duplicate-column-name", {"docs.csv": "id,id,text\n1,2,x\n"}, TABLES, "duplicate column name(s) 'id'"),
    (
        "duplicate-doc-id",
        {"docs.csv": "id,text\nd1,x\nd2,y\nd1,z\n"},
        TABLES,
        "docs.csv:4: duplicate document id 'd1' (first at line 2)",
    ),
    ("empty-id", {"docs.csv": "id,text\n,x\n"}, TABLES, "docs.csv:2: empty document id"),
    ("id-with-whitespace", {"docs.csv": "id,text\nd 1,x\n"}, TABLES, "document id 'd 1' contains whitespace"),
    (
        "empty-text",
        {"docs.csv": "id,title,text\nd1,T,x\nd2,, \n"},
        TABLES,
        "docs.csv:3: document 'd2' has empty text (fill it in, or pass --drop-empty",
    ),
    (
        "wrong-field-count",
        {"docs.csv": "id,text\nd1,x,extra\n"},
        TABLES,
        "docs.csv:2: row has 3 fields, the header has 2",
    ),
    ("not-utf8", {"docs.csv": LATIN1}, TABLES, "docs.csv:2: not UTF-8 (byte 0xe9 at byte 7 of the line)"),
    (
        "truncated-gzip",
        {
            "docs.csv.gz": gzip.compress(b"id,text\n" + b"".join(b"d%d,word %d\n" % (i, i * i) for i in range(9000)))[
                :2000
            ]
        },
        ["--corpus", "docs.csv.gz", "--queries", "queries.csv", "--qrels", "qrels.csv"],
        "damaged or truncated",
    ),
    (
        "invalid-jsonl",
        {"docs.jsonl": '{"id": "d1", "text": "x"}\n{"id": "d2", "text": \n'},
        ["--corpus", "docs.jsonl", "--queries", "queries.csv", "--qrels", "qrels.csv"],
        "docs.jsonl:2: invalid JSON",
    ),
    (
        "jsonl-not-object",
        {"docs.jsonl": '{"id": "d1", "text": "x"}\n[1, 2]\n'},
        ["--corpus", "docs.jsonl", "--queries", "queries.csv", "--qrels", "qrels.csv"],
        "docs.jsonl:2: expected a JSON object, got list",
    ),
    (
        "json-not-list",
        {"docs.json": '{"id": "d1"}'},
        ["--corpus", "docs.json", "--queries", "queries.csv", "--qrels", "qrels.csv"],
        "expected a list of objects",
    ),
    (
        "text-not-string",
        {"docs.json": '[{"id": "d1", "text": {"a": 1}}]'},
        ["--corpus", "docs.json", "--queries", "queries.csv", "--qrels", "qrels.csv"],
        "docs.json (item 1): column 'text' must hold text, got dict",
    ),
    (
        "duplicate-query-id",
        {"queries.csv": "id,text\nq1,a\nq1,b\n"},
        TABLES,
        "queries.csv:3: duplicate query id 'q1' (first at line 2)",
    ),
    (
        "no-query-text-column",
        {"queries.csv": "id,words\nq1,a\n"},
        TABLES,
        "no text column (looked for text, query, question)",
    ),
    (
        "no-grade-column",
        {"qrels.csv": "qid,docid\nq1,d1\n"},
        TABLES,
        "no grade column (looked for score, relevance, grade, label, rel) (name it with --qrels-score-column, or pass "
        "--default-grade 1 if every listed pair is relevant",
    ),
    (
        "column-problems-in-two-tables",
        {"docs.csv": "name,text\nd1,x\n", "qrels.csv": "qid,doc,score\nq1,d1,1\n"},
        TABLES,
        "2 problems with the input tables (nothing written): docs.csv: no document id column",
    ),
    (
        "negative-default-grade",
        {"qrels.csv": "qid,docid\nq1,d1\n"},
        TABLES + ["--default-grade", "-1"],
        "--default-grade -1 is negative (pass --allow-negative",
    ),
    (
        "whitespace-qrels-changing-width",
        {"j.qrels": "q1 0 d1 1\nq1 d1\n"},
        ["--corpus", "docs.csv", "--queries", "queries.csv", "--qrels", "j.qrels"],
        "j.qrels:2: expected 4 columns (as on the first line), found 2",
    ),
    (
        "non-integer-grade",
        {"qrels.csv": "qid,docid,score\nq1,d1,1.5\n"},
        TABLES,
        "qrels.csv:2: grade '1.5' is not an integer in column 'score'",
    ),
    ("text-grade", {"qrels.csv": "qid,docid,score\nq1,d1,high\n"}, TABLES, "grade 'high' is not an integer"),
    ("missing-grade", {"qrels.csv": "qid,docid,score\nq1,d1,\n"}, TABLES, "qrels.csv:2: missing grade"),
    (
        "negative-grade",
        {"qrels.csv": "qid,docid,score\nq1,d1,-1\n"},
        TABLES,
        "negative grade -1 (pass --allow-negative",
    ),
    (
        "conflicting-judgments",
        {"qrels.csv": "qid,docid,score\nq1,d1,1\nq1,d1,2\n"},
        TABLES,
        "qrels.csv:3: (q1, d1) judged 1 at line 2 and 2 here",
    ),
    (
        "unknown-document",
        {"qrels.csv": "qid,docid,score\nq1,d1,1\nq1,d9,1\n"},
        TABLES,
        "1 judgment(s) name unknown documents: line 3 'd9'",
    ),
    (
        "unknown-query",
        {"qrels.csv": "qid,docid,score\nq7,d1,1\n"},
        TABLES,
        "1 judgment(s) name unknown queries: line 2 'q7'",
    ),
    (
        "judged-dropped-document",
        {"docs.csv": "id,text\nd1,\nd2,x\n"},
        TABLES + ["--drop-empty"],
        "line 2 'd1' (dropped: empty text)",
    ),
    ("no-judgments", {"qrels.csv": "qid,docid,score\n"}, TABLES, "qrels.csv: no judgments"),
    (
        "no-queries",
        {"queries.csv": "id,text\n"},
        ["--corpus", "docs.csv", "--queries", "queries.csv"],
        "queries.csv: no queries: the table has a header only (add the queries)",
    ),
    (
        "no-documents",
        {"docs.csv": "id,title,text\n"},
        ["--corpus", "docs.csv", "--queries", "queries.csv"],
        "docs.csv: no documents: the table has a header only (add the documents)",
    ),
    (
        "eval-set-not-object",
        {"eval.json": "[1]"},
        ["--eval-set", "eval.json"],
        "expected an object with lists 'documents' and 'queries'",
    ),
    ("eval-set-invalid-json", {"eval.json": '{"documents": ['}, ["--eval-set", "eval.json"], "eval.json: invalid JSON"),
    (
        "eval-set-invalid-yaml",
        {"eval.yaml": "documents: [a\nqueries: ]"},
        ["--eval-set", "eval.yaml"],
        "eval.yaml: invalid YAML",
    ),
    (
        "eval-set-unsupported-extension",
        {"eval.txt": "{}"},
        ["--eval-set", "eval.txt"],
        "unsupported eval-set file type",
    ),
    (
        "eval-set-unknown-document",
        {"eval.json": '{"documents": ["a", "b"], "queries": [{"text": "q", "relevant": [7]}]}'},
        ["--eval-set", "eval.json"],
        "1 judgment(s) name unknown documents: query 1 '7'",
    ),
    (
        "eval-set-bad-relevant",
        {"eval.json": '{"documents": ["a"], "queries": [{"text": "q", "relevant": "0"}]}'},
        ["--eval-set", "eval.json"],
        "query 1: 'relevant' must be a list of ids or an object",
    ),
    (
        "eval-set-bad-grade",
        {"eval.json": '{"documents": ["a"], "queries": [{"text": "q", "relevant": {"0": "x"}}]}'},
        ["--eval-set", "eval.json"],
        "query 1: relevant '0': grade 'x' is not an integer",
    ),
    (
        "eval-set-duplicate-query",
        {
            "eval.json": '{"documents": ["a"], "queries": [{"id": "q", "text": "a", '
            '"relevant": [0]}, {"id": "q", "text": "b", "relevant": [0]}]}'
        },
        ["--eval-set", "eval.json"],
        "query 2: duplicate query id 'q'",
    ),
    (
        "eval-set-empty-query",
        {"eval.json": '{"documents": ["a"], "queries": [{"text": " ", "relevant": [0]}]}'},
        ["--eval-set", "eval.json"],
        "eval.json (query 1): query 'q1' has empty text",
    ),
    (
        "eval-set-no-judgments",
        {"eval.json": '{"documents": ["a"], "queries": [{"text": "q"}]}'},
        ["--eval-set", "eval.json"],
        "no query has relevant documents",
    ),
    (
        "eval-set-and-tables",
        {"eval.json": "{}"},
        ["--eval-set", "eval.json", "--qrels", "qrels.csv"],
        "give either --eval-set or --corpus/--queries/--qrels, not both",
    ),
]


@pytest.mark.parametrize(("case", "files", "args", "message"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_writes_nothing_and_exits_non_zero(tmp_path, monkeypatch, case, files, args, message):
    _write(tmp_path, {**GOOD, **files})
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = invoke(["convert", *args, "--out", "out"])
    assert result.exit_code != 0
    assert message in " ".join(result.stderr.split()), result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no folder, no temporary leftovers
    lines = [line.strip() for line in result.stderr.splitlines()]
    assert len(lines) == len(set(lines)), result.stderr  # every problem printed once


@pytest.mark.parametrize("case", ["duplicate-doc-id", "duplicate-query-id", "no-queries", "conflicting-judgments"])
def test_a_single_problem_is_printed_once(tmp_path, monkeypatch, case):
    _, files, args, message = next(c for c in BAD_INPUTS if c[0] == case)
    _write(tmp_path, {**GOOD, **files})
    monkeypatch.chdir(tmp_path)
    result = invoke(["convert", *args, "--out", "out"])
    assert result.exit_code == 1
    assert result.stderr.count(message) == 1 and len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.parametrize(
    ("case", "setup", "args", "message"),
    [
        ("existing-folder", "convert", TABLES, "qrels/test.tsv already exists; pass --force"),
        ("not-a-beir-folder", "junk", TABLES, "exists and is not a BEIR folder; pass --force"),
        (
            "add-split-different-corpus",
            "convert",
            ["--corpus", "docs2.csv", "--queries", "queries.csv", "--qrels", "qrels.csv", "--split", "dev"],
            "the corpus given differs from the folder's (record 2, id 'd2')",
        ),
    ],
    ids=["existing-folder", "not-a-beir-folder", "add-split-different-corpus"],
)
def test_existing_folders_are_never_half_overwritten(tmp_path, monkeypatch, case, setup, args, message):
    _write(tmp_path, {**GOOD, "docs2.csv": "id,title,text\nd1,T,alpha\nd2,,changed\n"})
    monkeypatch.chdir(tmp_path)
    if setup == "convert":
        assert invoke(["convert", *TABLES, "--out", "out"]).exit_code == 0
    else:
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "notes.txt").write_text("mine")
    snapshot = {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    result = invoke(["convert", *args, "--out", "out"])
    assert result.exit_code == 1
    assert message in " ".join(result.stderr.split()), result.stderr
    assert {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()} == snapshot
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_cli_convert_success_and_json(tmp_path, monkeypatch):
    _write(tmp_path, GOOD)
    monkeypatch.chdir(tmp_path)
    result = invoke(["convert", *TABLES, "--out", "out"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("wrote out: 2 documents, 1 queries, qrels/test.tsv with 1 judgments")
    result = invoke(["convert", "--qrels", "qrels.csv", "--out", "out", "--split", "dev", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["mode"] == "add-split"
    assert list(iter_corpus(tmp_path / "out" / "corpus.jsonl"))[0].title == "T"
    assert [q.query_id for q in iter_queries(tmp_path / "out" / "queries.jsonl")] == ["q1"]


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGINT"])
def test_killed_conversion_leaves_nothing_a_rerun_keeps(tmp_path, sig):
    import signal
    import subprocess
    import sys

    from conftest import start_paused

    rows = "".join(f'd{i},title {i},"text number {i}, with a comma"\n' for i in range(50_000))
    _write(
        tmp_path,
        {
            "docs.csv": "id,title,text\n" + rows,
            "queries.csv": "id,text\nq1,hello\n",
            "qrels.csv": "qid,docid,score\nq1,d1,1\n",
        },
    )
    args = [
        "-q",
        "convert",
        "--corpus",
        str(tmp_path / "docs.csv"),
        "--queries",
        str(tmp_path / "queries.csv"),
        "--qrels",
        str(tmp_path / "qrels.csv"),
        "--out",
        str(tmp_path / "out"),
    ]
    command = [sys.executable, "-m", "harness", *args]
    # Stopped mid-corpus (each record is one json.dumps; the 20,000th is inside the staged corpus.jsonl): the
    # signal comes at that state, whatever the machine's load, never after the conversion finished.
    proc = start_paused(tmp_path / "marker", "call", "json:dumps", 20_000, args, cwd=tmp_path)
    assert list(tmp_path.glob(".out.convert.*/corpus.jsonl"))  # staged, not finished
    proc.send_signal(getattr(signal, sig))
    _, stderr = proc.communicate(timeout=60)
    assert not (tmp_path / "out").exists()  # nothing that looks converted
    if sig == "SIGINT":
        assert proc.returncode == 130 and "Traceback" not in stderr, stderr
        assert stderr.strip().splitlines()[-1].startswith("interrupted:")
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # it cleaned up itself
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # the killed run's staging is gone
    assert sum(1 for _ in open(tmp_path / "out" / "corpus.jsonl")) == 50_000


@pytest.mark.parametrize("delimiter, name", [(";", "semicolon"), ("|", "pipe"), ("\t", "tab"), (",", "comma")])
def test_the_csv_delimiter_is_detected_and_said(tmp_path, delimiter, name):
    def table(rows):
        return "\n".join(delimiter.join(row) for row in rows) + "\n"

    text = "one, two" if delimiter != "," else "one two"  # a comma inside a field of a ;-separated file
    (tmp_path / "docs.csv").write_text(table([["id", "title", "text"], ["d1", "A", text], ["d2", "B", "three"]]))
    (tmp_path / "q.csv").write_text(table([["id", "text"], ["q1", "first query"]]))
    (tmp_path / "j.csv").write_text(table([["query_id", "doc_id", "score"], ["q1", "d2", "1"]]))
    result = invoke(
        [
            "convert",
            "--corpus",
            str(tmp_path / "docs.csv"),
            "--queries",
            str(tmp_path / "q.csv"),
            "--qrels",
            str(tmp_path / "j.csv"),
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"read {tmp_path / 'docs.csv'} as CSV, {name}-separated (detected)" in result.stdout
    docs = {doc.doc_id: doc for doc in iter_corpus(tmp_path / "out" / "corpus.jsonl")}
    assert docs["d1"].title == "A" and docs["d1"].text == text


def test_a_forced_delimiter_wins_over_detection(tmp_path):
    (tmp_path / "docs.csv").write_text("id;text\nd1;a,b,c,d\n")  # more commas than semicolons in the data
    (tmp_path / "q.csv").write_text("id;text\nq1;x\n")
    (tmp_path / "j.csv").write_text("query_id;doc_id;score\nq1;d1;1\n")
    result = invoke(
        [
            "convert",
            "--corpus",
            str(tmp_path / "docs.csv"),
            "--queries",
            str(tmp_path / "q.csv"),
            "--qrels",
            str(tmp_path / "j.csv"),
            "--out",
            str(tmp_path / "out"),
            "--delimiter",
            "semicolon",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "semicolon-separated (given)" in result.stdout
    assert next(iter_corpus(tmp_path / "out" / "corpus.jsonl")).text == "a,b,c,d"


@pytest.mark.parametrize("name, header", [("j.qrels", ""), ("j.txt", "qid iter docid rel\n"), ("j.qrels.gz", "")])
def test_trec_qrels_are_read_with_or_without_a_header(tmp_path, name, header):
    (tmp_path / "docs.csv").write_text("id,text\nd1,alpha\nd2,beta\n")
    (tmp_path / "q.csv").write_text("id,text\nq1,first\nq2,second\n")
    text = header + "q1 0 d1 1\nq1 0 d2 0\nq2 0 d2 2\n"
    if name.endswith(".gz"):
        (tmp_path / name).write_bytes(gzip.compress(text.encode()))
    else:
        (tmp_path / name).write_text(text)
    result = invoke(
        [
            "convert",
            "--corpus",
            str(tmp_path / "docs.csv"),
            "--queries",
            str(tmp_path / "q.csv"),
            "--qrels",
            str(tmp_path / name),
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"read {tmp_path / name} as TREC qrels (query_id iteration doc_id grade)" in result.stdout
    assert read_qrels(tmp_path / "out" / "qrels" / "test.tsv").to_dict() == {"q1": {"d1": 1, "d2": 0}, "q2": {"d2": 2}}
    for text, message in (
        ("q1 0 d1 1 x\n", "bad.qrels:1: expected 4 columns, found 5"),
        ("q1 0 d1 1\nq1 d2 1\n", "bad.qrels:2: expected 4 columns (as on the first line), found 3"),
    ):
        (tmp_path / "bad.qrels").write_text(text)
        bad = invoke(
            [
                "convert",
                "--corpus",
                str(tmp_path / "docs.csv"),
                "--queries",
                str(tmp_path / "q.csv"),
                "--qrels",
                str(tmp_path / "bad.qrels"),
                "--out",
                str(tmp_path / "out2"),
            ],
        )
        assert bad.exit_code == 1 and message in bad.stderr, bad.stderr
        assert not (tmp_path / "out2").exists()


@pytest.mark.parametrize(
    "name, text, how",
    [
        ("pairs.csv", "qid,docid\nq1,d1\nq2,d2\n", "CSV, comma-separated (detected); no grade column"),
        ("pairs.txt", "q1 d1\nq2 d2\n", "judgment pairs (query_id doc_id, whitespace-separated); no grade column"),
        ("pairs.txt", "query_id doc_id\nq1 d1\nq2 d2\n", "judgment pairs (query_id doc_id"),
    ],
)
def test_two_column_judgments_take_the_default_grade(tmp_path, name, text, how):
    (tmp_path / "docs.csv").write_text("id,text\nd1,alpha\nd2,beta\n")
    (tmp_path / "q.csv").write_text("id,text\nq1,first\nq2,second\n")
    (tmp_path / name).write_text(text)
    args = [
        "convert",
        "--corpus",
        str(tmp_path / "docs.csv"),
        "--queries",
        str(tmp_path / "q.csv"),
        "--qrels",
        str(tmp_path / name),
        "--out",
        str(tmp_path / "out"),
    ]
    refused = invoke(args)
    assert refused.exit_code == 1
    assert "pass --default-grade 1 if every listed pair is relevant" in refused.stderr, refused.stderr
    assert not (tmp_path / "out").exists()
    result = invoke(args + ["--default-grade", "1"])
    assert result.exit_code == 0, result.output
    assert how in result.stdout and "every pair has grade 1 (--default-grade)" in result.stdout
    assert read_qrels(tmp_path / "out" / "qrels" / "test.tsv").to_dict() == {"q1": {"d1": 1}, "q2": {"d2": 1}}


def test_three_column_whitespace_judgments(tmp_path):
    (tmp_path / "docs.csv").write_text("id,text\nd1,alpha\nd2,beta\n")
    (tmp_path / "q.csv").write_text("id,text\nq1,first\n")
    (tmp_path / "j.txt").write_text("q1 d1 2\nq1 d2 0\n")
    summary = convert_tables(tmp_path / "docs.csv", tmp_path / "q.csv", tmp_path / "j.txt", tmp_path / "out")
    assert summary.formats[str(tmp_path / "j.txt")] == "judgments (query_id doc_id grade, whitespace-separated)"
    assert read_qrels(tmp_path / "out" / "qrels" / "test.tsv").to_dict() == {"q1": {"d1": 2, "d2": 0}}


def test_every_column_problem_of_the_three_tables_in_one_run(tmp_path, monkeypatch):
    _write(
        tmp_path,
        {
            "docs.csv": "sku,title,description\nd1,T,alpha\n",
            "queries.csv": "id,question_text\nq1,alpha?\n",
            "qrels.csv": "qid,doc,relevance\nq1,d1,1\n",
        },
    )
    monkeypatch.chdir(tmp_path)
    result = invoke(["convert", *TABLES, "--out", "out"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "Error: 4 problems with the input tables (nothing written):"
    assert len(lines) == 5
    joined = "\n".join(lines)
    for expected in (
        "docs.csv: no document id column",
        "docs.csv: no text column",
        "queries.csv: no text column",
        "qrels.csv: no document id column",
        "--qrels-doc-column; columns found: qid, doc, relevance",
    ):
        assert expected in joined, joined
    assert not (tmp_path / "out").exists()
    fixed = invoke(
        [
            "convert",
            *TABLES,
            "--out",
            "out",
            "--corpus-id-column",
            "sku",
            "--corpus-text-column",
            "description",
            "--query-text-column",
            "question_text",
            "--qrels-doc-column",
            "doc",
        ],
    )
    assert fixed.exit_code == 0, fixed.stderr
