"""convert, meeting tables where people keep them: .xlsx workbooks (a sheet per table, formulas as their
saved values), decimal commas, a grade scale, column names in any case, and every row problem in one run.

Expected folders come from a brute-force reading of the workbook in the test (openpyxl's cells one by
one, cross-checked with pandas.read_excel), never from the converter."""

from __future__ import annotations

import gzip
import itertools
import json
import re
import zipfile
from pathlib import Path

import pytest
from cli_runner import invoke

from harness.datasets.convert import ConvertOptions, convert_tables, parse_grade, parse_grade_scale
from harness.errors import HarnessError, MissingDependencyError
from harness.io.trec import read_qrels
from harness.judging.merge import parse_scale

openpyxl = pytest.importorskip("openpyxl")

SHEETS = {
    "Documents": [
        ["ArticleNo", "Title", "Text", "Year"],
        ["007", "Intro", "hello world", 2024],
        [12, None, "twelve", None],
        ["d3", "Third", '=CONCAT("th","ird")', 2023],
    ],
    "Questions": [["qid", "question"], ["q1", "hello?"], ["q2", "twelve?"], ["q3", "unjudged"]],
    "Judgments": [
        ["query_id", "doc_id", "grade"],
        ["q1", "007", 2.0],
        ["q1", 12, "0"],
        ["q2", 12, "=1+2"],
        ["q2", "d3", 1],
    ],
}
# The values Excel would have saved with the formulas above (openpyxl writes formulas without them).
CACHED = {("Documents", "C4"): "third", ("Judgments", "C4"): 3}


def _book(path: Path, sheets: dict[str, list[list]], merge: dict[str, str] | None = None) -> Path:
    """A workbook with one sheet per entry (rows as given; None an empty cell), merging the given ranges."""
    book = openpyxl.Workbook()
    book.remove(book.active)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(row)
        if merge and name in merge:
            sheet.merge_cells(merge[name])
    book.save(path)
    return path


def _save_cached_values(path: Path, values: dict[tuple[str, str], object]) -> None:
    """Write into the file the value a spreadsheet program saves with each formula (openpyxl computes none):
    ``<c r="C4"><f>1+2</f><v>3</v></c>``, and ``t="str"`` for a text result, as Excel does."""
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    workbook = members["xl/workbook.xml"].decode()
    names = re.findall(r'<sheet [^>]*name="([^"]+)"', workbook)
    for (sheet, cell), value in values.items():
        member = f"xl/worksheets/sheet{names.index(sheet) + 1}.xml"
        xml = members[member].decode()
        kind = ' t="str"' if isinstance(value, str) else ""
        xml, count = re.subn(
            rf'<c r="{cell}"([^>]*)><f>(.*?)</f><v\s*/?>(?:</v>)?',
            lambda m: f'<c r="{cell}"{m.group(1)}{kind}><f>{m.group(2)}</f><v>{value}</v>',
            xml,
        )
        assert count == 1, (cell, xml)
        members[member] = xml.encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def _with_shared_strings(path: Path) -> None:
    """Store the text cells as Excel does, in one shared-strings table (``<c t="s"><v>3</v></c>``), where
    openpyxl writes each string inline."""
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    strings: list[str] = []

    def shared(match: re.Match) -> str:
        strings.append(match.group(3))
        return f'<c r="{match.group(1)}"{match.group(2)} t="s"><v>{len(strings) - 1}</v></c>'

    for name in [n for n in members if n.startswith("xl/worksheets/sheet")]:
        xml, count = re.subn(
            r'<c r="([A-Z]+\d+)"([^>]*?) t="inlineStr"><is><t(?: [^>]*)?>(.*?)</t></is></c>',
            shared,
            members[name].decode(),
        )
        members[name] = xml.encode()
    assert "inlineStr" not in b"".join(members.values()).decode(errors="replace")
    main = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    members["xl/sharedStrings.xml"] = (
        f'<sst xmlns="{main}" count="{len(strings)}" uniqueCount="{len(strings)}">'
        + "".join(f"<si><t>{text}</t></si>" for text in strings)
        + "</sst>"
    ).encode()
    members["[Content_Types].xml"] = members["[Content_Types].xml"].replace(
        b"</Types>",
        (
            b'<Override PartName="/xl/sharedStrings.xml" ContentType="application/vnd.openxmlformats-officedocument.'
            b'spreadsheetml.sharedStrings+xml"/></Types>'
        ),
    )
    members["xl/_rels/workbook.xml.rels"] = members["xl/_rels/workbook.xml.rels"].replace(
        b"</Relationships>",
        (
            b'<Relationship Id="rIdShared" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
            b'sharedStrings" Target="sharedStrings.xml"/></Relationships>'
        ),
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def _brute_force(path: Path) -> dict[str, list[list]]:
    """Each sheet's non-empty rows as Excel shows them, read cell by cell, the header dropped."""
    book = openpyxl.load_workbook(path, data_only=True)
    tables = {}
    for sheet in book.worksheets:
        rows = [[cell.value for cell in row] for row in sheet.iter_rows()]
        rows = [row for row in rows if any(v is not None for v in row)]
        tables[sheet.title] = rows[1:]
    return tables


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def workbook(tmp_path: Path) -> Path:
    path = _book(tmp_path / "eval.xlsx", SHEETS)
    _save_cached_values(path, CACHED)
    _with_shared_strings(path)
    return path


def _convert(workbook: Path, *extra: str, out: str = "out"):
    return invoke(
        [
            "convert",
            "--corpus",
            str(workbook),
            "--queries",
            str(workbook),
            "--qrels",
            str(workbook),
            "--out",
            str(workbook.parent / out),
            *extra,
        ],
    )


def test_a_workbook_with_a_sheet_per_table_converts_as_excel_shows_it(workbook):
    import pandas as pd

    result = _convert(workbook, "--corpus-id-column", "articleno")  # the header says ArticleNo
    assert result.exit_code == 0, result.output
    tables = _brute_force(workbook)
    # pandas reads the same cells (the cached formula values included)
    frames = pd.read_excel(workbook, sheet_name=None, dtype=object)
    assert [list(row) for row in frames["Judgments"].itertuples(index=False)] == tables["Judgments"]
    out = workbook.parent / "out"
    expected_docs = [
        {"_id": str(doc_id), "title": title or "", "text": text, "metadata": {"Year": year}}
        for doc_id, title, text, year in tables["Documents"]
    ]
    assert _jsonl(out / "corpus.jsonl") == expected_docs
    assert expected_docs[2]["text"] == "third"  # a formula, as the value saved with it
    assert _jsonl(out / "queries.jsonl") == [{"_id": q, "text": t, "metadata": {}} for q, t in tables["Questions"]]
    expected_qrels: dict[str, dict[str, int]] = {}
    for query_id, doc_id, grade in tables["Judgments"]:
        expected_qrels.setdefault(query_id, {})[str(doc_id)] = int(float(grade))
    assert (
        read_qrels(out / "qrels" / "test.tsv").to_dict()
        == expected_qrels
        == {"q1": {"007": 2, "12": 0}, "q2": {"12": 3, "d3": 1}}
    )
    for sheet in ("Documents", "Questions", "Judgments"):
        assert f"read {workbook}, sheet '{sheet}' as an Excel sheet (found by its name)" in result.stdout
    assert "grade scale 0-3 (the grades found, not checked: pass --grade-scale 0-3" in result.stdout


def test_sheets_are_found_by_their_header_or_chosen(tmp_path):
    path = _book(
        tmp_path / "book.xlsx",
        {
            "Sheet1": [["id", "title", "text"], ["d1", "A", "alpha"]],
            "Sheet2": [["qid", "question"], ["q1", "alpha?"]],
            "Sheet3": [["query_id", "doc_id", "score"], ["q1", "d1", 1]],
        },
    )
    # Sheet1 (id, text) has the columns of a queries table too: which one is meant is asked, not guessed.
    refused = _convert(path)
    assert refused.exit_code == 1
    assert (
        "book.xlsx: sheets 'Sheet1' and 'Sheet2' all have the columns of the queries (choose one with --sheet "
        "queries=NAME; sheets: 'Sheet1', 'Sheet2', 'Sheet3')"
    ) in " ".join(refused.stderr.split())
    assert not (tmp_path / "out").exists()
    result = _convert(path, "--sheet", "queries=sheet2")  # sheet names match whatever their case
    assert result.exit_code == 0, result.output
    assert "sheet 'Sheet1' as an Excel sheet (found by its header)" in result.stdout
    assert "sheet 'Sheet2' as an Excel sheet (chosen with --sheet)" in result.stdout
    assert read_qrels(tmp_path / "out" / "qrels" / "test.tsv").to_dict() == {"q1": {"d1": 1}}


def test_one_workbook_per_table_reads_its_only_sheet(tmp_path):
    docs = _book(tmp_path / "docs.xlsx", {"Blatt1": [["id", "text"], ["d1", "alpha"]]})
    queries = _book(tmp_path / "queries.xlsx", {"Blatt1": [["id", "text"], ["q1", "alpha?"]]})
    qrels = _book(tmp_path / "qrels.xlsx", {"Blatt1": [["qid", "docid", "relevance"], ["q1", "d1", 2], ["q1", 12, 1]]})
    _book(docs, {"Blatt1": [["id", "text"], ["d1", "alpha"], [12, "twelve"]]})
    with zipfile.ZipFile(docs) as archive:  # a writer that stores the number 12 as 12.0 (Excel shows 12)
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    assert members["xl/worksheets/sheet1.xml"].count(b"<v>12</v>") == 1
    members["xl/worksheets/sheet1.xml"] = members["xl/worksheets/sheet1.xml"].replace(b"<v>12</v>", b"<v>12.0</v>")
    with zipfile.ZipFile(docs, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    summary = convert_tables(docs, queries, qrels, tmp_path / "out")
    assert summary.formats[f"{qrels}, sheet 'Blatt1'"] == "an Excel sheet (its only sheet)"
    assert read_qrels(tmp_path / "out" / "qrels" / "test.tsv").to_dict() == {"q1": {"d1": 2, "12": 1}}


@pytest.mark.parametrize(
    "value, decimal_comma, grade", [("3,0", True, 3), ("0,0", True, 0), ("2", True, 2), ("3.0", False, 3)]
)
def test_parse_grade_with_a_decimal_comma(value, decimal_comma, grade):
    assert parse_grade(value, False, decimal_comma) == grade


def test_a_semicolon_csv_writes_grades_with_a_decimal_comma(tmp_path):
    (tmp_path / "docs.csv").write_text("id;text\nd1;one, two\nd2;three\n")
    (tmp_path / "q.csv").write_text("id;text\nq1;first\n")
    (tmp_path / "j.csv").write_text("query_id;doc_id;score\nq1;d1;3,0\nq1;d2;0,0\n")
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
            "--grade-scale",
            "0-3",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "CSV, semicolon-separated (detected); grades with a decimal comma (3,0 is 3)" in result.stdout
    assert "grade scale 0-3 (given; every grade within it)" in result.stdout
    assert read_qrels(tmp_path / "out" / "qrels" / "test.tsv").to_dict() == {"q1": {"d1": 3, "d2": 0}}


def test_decimal_comma_on_request_in_a_comma_csv(tmp_path):
    (tmp_path / "docs.csv").write_text("id,text\nd1,one\n")
    (tmp_path / "q.csv").write_text("id,text\nq1,first\n")
    (tmp_path / "j.csv").write_text('query_id,doc_id,score\nq1,d1,"2,0"\n')
    summary = convert_tables(
        tmp_path / "docs.csv",
        tmp_path / "q.csv",
        tmp_path / "j.csv",
        tmp_path / "out",
        ConvertOptions(decimal_comma=True),
    )
    assert summary.grades == {2: 1}


def test_every_row_problem_of_every_kind_in_one_run(tmp_path, monkeypatch):
    (tmp_path / "docs.csv").write_text("id,text\nd1,alpha\nd 2,beta\nd1,again\nd4,\nd5,x,extra\nd6,fine\n")
    (tmp_path / "queries.csv").write_text("id,text\nq1,first\nq2,second\nq1,dup\n")
    (tmp_path / "qrels.csv").write_text("qid,docid,score\nq1,d1,1\nq1,d6,1.5\nq9,d1,1\nq2,d8,1\nq2,d6,7\n")
    monkeypatch.chdir(tmp_path)
    result = invoke(
        [
            "convert",
            "--corpus",
            "docs.csv",
            "--queries",
            "queries.csv",
            "--qrels",
            "qrels.csv",
            "--out",
            "out",
            "--grade-scale",
            "0-3",
        ],
    )
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    expected = [
        "Error: 9 problems in the input rows (nothing written):",
        "qrels.csv:3: grade '1.5' is not an integer in column 'score'",
        "qrels.csv:6: grade 7 is outside the scale 0-3 in column 'score' (correct it, or widen --grade-scale)",
        "queries.csv:4: duplicate query id 'q1' (first at line 2) (query ids must be unique)",
        "docs.csv:3: document id 'd 2' contains whitespace",
        "docs.csv:4: duplicate document id 'd1' (first at line 2)",
        "docs.csv:5: document 'd4' has empty text",
        "docs.csv:6: row has 3 fields, the header has 2",
        "qrels.csv: 1 judgment(s) name unknown queries: line 4 'q9' (every id must be in queries.csv)",
        "qrels.csv: 1 judgment(s) name unknown documents: line 5 'd8' (every id must be in docs.csv)",
    ]
    assert len(lines) == len(expected), result.stderr
    for line, start in zip(lines, expected):
        assert line.strip().startswith(start), (line, start)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.csv", "qrels.csv", "queries.csv"]


def test_more_problems_than_the_limit_are_counted(tmp_path, monkeypatch):
    (tmp_path / "docs.csv").write_text("id,text\nd1,alpha\n")
    (tmp_path / "queries.csv").write_text("id,text\nq1,first\n")
    (tmp_path / "qrels.csv").write_text("qid,docid,score\n" + "".join(f"q1,d1,{g}.5\n" for g in range(25)))
    monkeypatch.chdir(tmp_path)
    result = invoke(
        ["convert", "--corpus", "docs.csv", "--queries", "queries.csv", "--qrels", "qrels.csv", "--out", "out"]
    )
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "Error: 25 problems in the input rows (nothing written):"
    assert [int(re.match(r"\s*qrels.csv:(\d+):", line).group(1)) for line in lines[1:21]] == list(range(2, 22))
    assert lines[21].strip() == "and 5 more" and len(lines) == 22
    assert not (tmp_path / "out").exists()


def test_openpyxl_missing_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    import sys

    path = _book(tmp_path / "docs.xlsx", {"Docs": [["id", "text"], ["d1", "x"]]})
    monkeypatch.setitem(sys.modules, "openpyxl", None)
    with pytest.raises(
        MissingDependencyError, match=r"reading \.xlsx needs openpyxl: pip install 'beir-harness\[excel\]'"
    ):
        convert_tables(path, path, path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# Bad inputs: (case id, a function writing the files into the folder, CLI args, expected message).
# Every case is a row of RELIABILITY.md; each exits non-zero and leaves the folder as it was.

GOOD = {
    "Documents": [["id", "title", "text"], ["d1", "T", "alpha"], ["d2", None, "beta"]],
    "Queries": [["id", "text"], ["q1", "alpha?"]],
    "Judgments": [["query-id", "corpus-id", "score"], ["q1", "d1", 1]],
}
BOOK = ["--corpus", "eval.xlsx", "--queries", "eval.xlsx", "--qrels", "eval.xlsx"]


def _good(**sheets):
    return lambda folder: _book(folder / "eval.xlsx", {**GOOD, **sheets})


def _merged(folder):
    _book(
        folder / "eval.xlsx",
        {**GOOD, "Judgments": [["query-id", None, "score"], ["q1", "d1", 1]]},
        merge={"Judgments": "A1:B1"},
    )


def _formula_without_value(folder):
    _book(folder / "eval.xlsx", {**GOOD, "Judgments": [["query-id", "corpus-id", "score"], ["q1", "d1", "=1+1"]]})


def _csv(qrels: str):
    def write(folder):
        (folder / "docs.csv").write_text("id,text\nd1,alpha\nd2,beta\n")
        (folder / "queries.csv").write_text("id,text\nq1,first\n")
        (folder / "qrels.csv").write_text(qrels)

    return write


def _raw(name: str, content: bytes):
    def write(folder):
        _csv("qid,docid,score\nq1,d1,1\n")(folder)
        (folder / name).write_bytes(content)

    return write


CSV = ["--corpus", "docs.csv", "--queries", "queries.csv", "--qrels", "qrels.csv"]

BAD_EXCEL_INPUTS = [
    (
        "xlsx-merged-header-cells",
        _merged,
        BOOK,
        "eval.xlsx, sheet 'Judgments' (row 1): merged header cells A1:B1 (unmerge them and give each column its own "
        "name in its own cell)",
    ),
    (
        "xlsx-formula-without-saved-value",
        _formula_without_value,
        BOOK,
        "eval.xlsx, sheet 'Judgments' (row 2): formula without a saved value in cell C2 (=1+1) (openpyxl reads the "
        "values Excel saves with its formulas and computes none",
    ),
    (
        "xlsx-empty-sheet",
        _good(Judgments=[]),
        BOOK,
        "eval.xlsx, sheet 'Judgments': empty sheet: no header row (put the column names in its first row",
    ),
    (
        "xlsx-unknown-sheet",
        _good(),
        BOOK + ["--sheet", "qrels=judgement"],
        "eval.xlsx: no sheet 'judgement' (from --sheet) (did you mean 'Judgments'? sheets: 'Documents', 'Queries', "
        "'Judgments')",
    ),
    (
        "xlsx-no-sheet-fits",
        lambda folder: _book(
            folder / "eval.xlsx", {"Documents": GOOD["Documents"], "Queries": GOOD["Queries"], "Notes": [["a"]]}
        ),
        BOOK,
        "eval.xlsx: no sheet is named qrels or judgments or judgements or has the columns of the judgments (choose one "
        "with --sheet qrels=NAME",
    ),
    (
        "xlsx-non-integer-grade",
        _good(Judgments=[["qid", "docid", "grade"], ["q1", "d1", 3.5]]),
        BOOK,
        "eval.xlsx, sheet 'Judgments' (row 2): grade '3.5' is not an integer in column 'grade'",
    ),
    (
        "xlsx-value-under-no-column",
        _good(Queries=[["id", "text"], ["q1", "alpha?", "stray"]]),
        BOOK,
        "eval.xlsx, sheet 'Queries' (row 2): cell C2 holds a value under no column name",
    ),
    (
        "xlsx-not-a-workbook",
        _raw("eval.xlsx", b"id,text\nd1,x\n"),
        ["--corpus", "eval.xlsx", "--queries", "queries.csv", "--qrels", "qrels.csv"],
        "eval.xlsx: not a readable .xlsx workbook",
    ),
    (
        "xlsx-compressed",
        _raw("eval.xlsx.gz", gzip.compress(b"x")),
        ["--corpus", "eval.xlsx.gz", "--queries", "queries.csv", "--qrels", "qrels.csv"],
        "eval.xlsx.gz: a compressed workbook (an .xlsx file is compressed already; unpack it)",
    ),
    (
        "xls-old-format",
        _raw("eval.xls", b"\xd0\xcf\x11\xe0"),
        ["--corpus", "eval.xls", "--queries", "queries.csv", "--qrels", "qrels.csv"],
        "eval.xls: the old Excel format (.xls) is not read (open it in Excel or LibreOffice and save it as .xlsx",
    ),
    (
        "decimal-comma-half-grade",
        _csv("qid;docid;score\nq1;d1;3,5\n"),
        CSV,
        "qrels.csv:2: grade '3,5' is not an integer in column 'score'",
    ),
    (
        "decimal-comma-without-the-option",
        _csv('qid,docid,score\nq1,d1,"3,0"\n'),
        CSV,
        "qrels.csv:2: grade '3,0' is not an integer (a decimal comma? pass --decimal-comma) in column 'score'",
    ),
    (
        "grade-outside-the-scale",
        _csv("qid,docid,score\nq1,d1,1\nq1,d2,7\n"),
        CSV + ["--grade-scale", "0-3"],
        "qrels.csv:3: grade 7 is outside the scale 0-3 in column 'score' (correct it, or widen --grade-scale)",
    ),
    (
        "grade-scale-upside-down",
        _csv("qid,docid,score\nq1,d1,1\n"),
        CSV + ["--grade-scale", "3-0"],
        "--grade-scale '3-0': the lowest grade is above the highest",
    ),
    (
        "grade-scale-of-one-grade",
        _csv("qid,docid,score\nq1,d1,1\n"),
        CSV + ["--grade-scale", "1-1"],
        "--grade-scale '1-1': the lowest grade is the highest: a scale has two grades or more, e.g. 0-1",
    ),
    (
        "grade-scale-not-a-range",
        _csv("qid,docid,score\nq1,d1,1\n"),
        CSV + ["--grade-scale", "high"],
        "--grade-scale 'high': expected LOWEST-HIGHEST, e.g. 0-3",
    ),
    (
        "column-override-with-suggestion",
        _good(Documents=[["ArticleNo", "Body"], ["d1", "alpha"]]),
        BOOK + ["--corpus-id-column", "article", "--corpus-text-column", "body"],
        "eval.xlsx, sheet 'Documents': no column 'article' (from --corpus-id-column); did you mean 'ArticleNo'? "
        "columns found: ArticleNo, Body",
    ),
    (
        "column-override-matching-two-cases",
        _csv("QID,qid,docid,score\nq1,q1,d1,1\n"),
        CSV + ["--qrels-query-column", "Qid"],
        "qrels.csv: 'QID' and 'qid' all match 'Qid' (from --qrels-query-column) but for case (give the exact name",
    ),
    (
        "sheet-for-a-csv-input",
        _good(),
        ["--corpus", "eval.xlsx", "--queries", "eval.xlsx", "--qrels", "q.csv", "--sheet", "qrels=Judgments"],
        "--sheet qrels=Judgments: the qrels input is not an .xlsx workbook",
    ),
    (
        "eval-set-grade-outside-the-scale",
        lambda folder: (folder / "eval.json").write_text(
            '{"documents": ["a"], "queries": [{"text": "q", "relevant": {"0": 4}}]}'
        ),
        ["--eval-set", "eval.json", "--grade-scale", "0-3"],
        "eval.json: query 1: relevant '0': grade 4 is outside the scale 0-3 (correct it, or widen --grade-scale)",
    ),
    (
        "unknown-query-and-unknown-document",
        _csv("qid,docid,score\nq7,d1,1\nq1,d9,1\n"),
        CSV,
        "2 problems in the input rows (nothing written): qrels.csv: 1 judgment(s) name unknown queries: line 2 'q7' "
        "(every id must be in queries.csv) qrels.csv: 1 judgment(s) name unknown documents: line 3 'd9'",
    ),
]


@pytest.mark.parametrize(("case", "setup", "args", "message"), BAD_EXCEL_INPUTS, ids=[c[0] for c in BAD_EXCEL_INPUTS])
def test_bad_excel_and_locale_input_writes_nothing(tmp_path, monkeypatch, case, setup, args, message):
    setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = invoke(["convert", *args, "--out", "out"])
    assert result.exit_code != 0
    assert message in " ".join(result.stderr.split()), result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no folder, no temporary leftovers


def test_a_workbook_with_any_part_cut_short_is_a_one_line_error(workbook, tmp_path):
    from harness.errors import HarnessError

    with zipfile.ZipFile(workbook) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    for name in sorted(members):
        for cut in (members[name][: len(members[name]) // 2], members[name].replace(b'r="', b'r="Z', 1)):
            damaged = tmp_path / "damaged.xlsx"
            with zipfile.ZipFile(damaged, "w") as archive:
                for other, data in members.items():
                    archive.writestr(other, cut if other == name else data)
            try:
                convert_tables(damaged, damaged, damaged, tmp_path / "damaged-out", ConvertOptions(force=True))
            except HarnessError as exc:
                assert "\n" not in str(exc) or str(exc).startswith(tuple("0123456789")), (name, str(exc))
            assert not [p for p in tmp_path.iterdir() if p.name.startswith(".damaged-out")], name


# The one reader of a ``LOW-HIGH`` grade scale (`harness.datasets.convert.grades.scale_bounds`), through both
# of its callers: convert's ``grade_scale`` and the merge's ``scale``.
#
# The expectations are built here by brute force: every text written from two grades on -3..5, each separator and
# spacing, is a scale exactly when the first grade is below the second (one rule for both callers: a one-grade
# scale is refused), and texts that are not two integers joined by a separator are refused by both.
# The tests below use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


SEPARATORS = ("-", "–", "..", ":", " to ")
GRADES = range(-3, 6)
CASES = [
    (f"{pad}{low}{pad}{separator}{pad}{high}{pad}", low, high)
    for low, high in itertools.product(GRADES, GRADES)
    for separator in SEPARATORS
    for pad in ("", " ")
]
NOT_SCALES = ["", " ", "0", "3", "-3", "a-b", "0-", "-0-", "..3", "0..", "0-3-4", "1.5-3", "0 3", "0—3", "0_3", "0,3"]


def _merge_refusal(text: str) -> str:
    with pytest.raises(ValueError) as caught:
        parse_scale(text)
    return str(caught.value)


def _convert_refusal(text: str) -> str:
    with pytest.raises(HarnessError) as caught:
        parse_grade_scale(text)
    return str(caught.value)


def test_every_two_grades_make_a_scale_exactly_when_the_first_is_below_the_second():
    assert len(CASES) == len(GRADES) ** 2 * len(SEPARATORS) * 2
    for text, low, high in CASES:
        if low < high:
            assert parse_scale(text) == (low, high), text
            assert parse_grade_scale(text) == (low, high), text
            continue
        assert _merge_refusal(text) == f"grade scale {text!r} is not LOW-HIGH with LOW < HIGH (e.g. 0-3)"
        reason = (
            "the lowest grade is above the highest"
            if low > high
            else "the lowest grade is the highest: a scale has two grades or more, e.g. 0-1"
        )
        assert _convert_refusal(text) == f"`grade_scale` {text!r}: {reason}", text


@pytest.mark.parametrize("text", NOT_SCALES)
def test_a_text_that_is_not_two_grades_is_refused_by_both_callers(text):
    assert _merge_refusal(text) == f"grade scale {text!r} is not LOW-HIGH with LOW < HIGH (e.g. 0-3)"
    assert _convert_refusal(text) == f"`grade_scale` {text!r}: expected LOWEST-HIGHEST, e.g. 0-3"
