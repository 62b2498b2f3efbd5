"""Commands on data: convert tables into a BEIR folder, validate a folder, and the datasets of the data dir."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from harness.api.choices import delimiters
from harness.cli.group import as_flags
from harness.cli.options import BASE_URL, DATA_DIR, FORCE, JSON, K_VALUES, NAME, OUT, QUERIES, RUN, SPLIT

_COLUMN_OPTIONS = (
    ("--corpus-id-column", "corpus_id", "document id"),
    ("--corpus-title-column", "corpus_title", "document title"),
    ("--corpus-text-column", "corpus_text", "document text"),
    ("--query-id-column", "query_id", "query id"),
    ("--query-text-column", "query_text", "query text"),
    ("--qrels-query-column", "qrels_query", "judgment's query id"),
    ("--qrels-doc-column", "qrels_doc", "judgment's document id"),
    ("--qrels-score-column", "qrels_score", "judgment's grade"),
)


def _column_options(command):
    for option, name, role in reversed(_COLUMN_OPTIONS):
        command = click.option(
            option, name, default=None, metavar="NAME", help=f"Column holding the {role} [default: detected]."
        )(command)
    return command


@click.command()
@click.option(
    "--corpus",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Documents: .csv/.tsv/.jsonl/.json/.parquet, optionally .gz, or an .xlsx sheet.",
)
@QUERIES
@click.option(
    "--qrels",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Judgments (query id, document id, grade), same formats, or a TREC qrels file (.qrels/.txt); "
    "omit it for a folder not judged yet (qrels/SPLIT.tsv a header only: pool it).",
)
@click.option(
    "--excluded",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Excluded pairs (query id, document id), same formats: written as excluded/SPLIT.tsv, removed from every "
    "ranking of the split before any cut and metric.",
)
@click.option(
    "--eval-set",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Instead of the three tables: one .json/.yaml file with documents and queries.",
)
@OUT.but(type=click.Path(path_type=Path, file_okay=False), required=True, help="The BEIR folder to create.")
@SPLIT.but(help="Name of the qrels split written.")
@FORCE.but(help="Replace an existing output folder.")
@click.option("--drop-empty", is_flag=True, help="Skip documents/queries with empty text instead of failing.")
@click.option(
    "--delimiter",
    type=click.Choice(delimiters()),
    default=None,
    help="Field separator of the .csv tables [default: detected from each header row].",
)
@click.option("--allow-negative", is_flag=True, help="Accept negative grades (TREC-COVID-style -1).")
@click.option(
    "--default-grade",
    type=int,
    default=None,
    metavar="N",
    help="Judgments without a grade column (query id, document id pairs): every pair has grade N.",
)
@click.option(
    "--sheet",
    "sheets",
    multiple=True,
    metavar="[TABLE=]NAME",
    help="The sheet of an .xlsx input to read: NAME for every workbook, or corpus=NAME, queries=NAME, "
    "qrels=NAME (repeatable) [default: the only sheet, or the one named or headed like the table].",
)
@click.option("--decimal-comma", is_flag=True, help="Grades are written 3,0 (always so in a ;-separated CSV).")
@click.option(
    "--grade-scale",
    default=None,
    metavar="LOW-HIGH",
    help="The grades allowed, e.g. 0-3: a grade outside is refused [default: any; the summary states the range found].",
)
@JSON.but(help="Print the summary as JSON.")
@_column_options
def convert(
    corpus: Path | None,
    queries: Path | None,
    qrels: Path | None,
    excluded: Path | None,
    eval_set: Path | None,
    out: Path,
    split: str,
    force: bool,
    drop_empty: bool,
    delimiter: str | None,
    allow_negative: bool,
    default_grade: int | None,
    sheets: tuple[str, ...],
    decimal_comma: bool,
    grade_scale: str | None,
    as_json: bool,
    **columns: str | None,
) -> None:
    """Convert your own eval set into a BEIR folder, checking it first.

    Columns are detected from common names: document id from
    _id|id|doc_id|docid|corpus_id|corpus-id, title from title, text from
    text|body|content|contents|passage|document; query id from _id|id|query_id|qid|query-id,
    text from text|query|question; judgments from query-id|query_id|qid,
    corpus-id|corpus_id|doc_id|docid and score|relevance|grade|label|rel. Name a column
    explicitly with the --*-column options. Other document columns go into BEIR's metadata.
    Every column problem of the three tables is reported in one run. Judgments may also be
    TREC qrels (.qrels/.txt: query_id 0 doc_id grade, or query_id doc_id [grade]); a list of
    relevant pairs without grades needs --default-grade 1.

    An .xlsx workbook holds one table per sheet: each table's sheet is the one given with --sheet, the
    only sheet, the sheet named like the table (Corpus/Documents, Queries, Judgments/Qrels) or the
    one whose header has the table's columns. Formulas count as the values Excel saved with them;
    merged header cells are refused. Column names match whatever their case. Every row problem is
    reported in one run (the first 20, then a count).

    Ids are kept as text ("007" stays "007"); grades must be integers (0 is kept). Nothing is
    written unless every check passes; an existing folder is refused without --force, except
    that a new --split can be added to it when its ids resolve against its corpus and queries.

    Example:

    \b
        beir-harness convert --corpus docs.csv --queries queries.csv --qrels judgments.csv --out datasets/helpdesk
        beir-harness convert --qrels dev.csv --out datasets/helpdesk --split dev
        beir-harness convert --corpus items.parquet --corpus-id-column sku --corpus-text-column description ...
        beir-harness convert --eval-set eval.json --out datasets/products
        beir-harness convert --corpus docs.csv --queries q.csv --qrels j.csv --out datasets/x --delimiter semicolon
        beir-harness convert --corpus docs.csv --queries q.csv --qrels pairs.csv --out datasets/x --default-grade 1
        beir-harness convert --corpus eval.xlsx --queries eval.xlsx --qrels eval.xlsx --out datasets/x --grade-scale 0-3
    """
    from harness.api import convert as run_convert

    if eval_set is not None and (corpus or queries or qrels or excluded):
        raise click.UsageError("give either --eval-set or --corpus/--queries/--qrels, not both")
    if eval_set is None and qrels is None and (corpus is None or queries is None):
        raise click.UsageError("give --corpus and --queries (and --qrels, unless nothing is judged yet), or --eval-set")
    summary = run_convert(
        out,
        corpus,
        queries,
        qrels,
        eval_set=eval_set,
        excluded=excluded,
        columns=columns,
        split=split,
        force=force,
        drop_empty=drop_empty,
        allow_negative=allow_negative,
        default_grade=default_grade,
        delimiter=delimiter,
        decimal_comma=decimal_comma,
        sheets=_sheet_choices(sheets),
        grade_scale=grade_scale,
    )
    if as_json:
        click.echo(json.dumps(summary.to_json(), indent=2))
    else:
        _print_summary(summary)


def _print_summary(summary) -> None:
    """What `convert` wrote, in words: counts, grades, how each source was read, the grade scale."""
    grades = ", ".join(f"{g}: {n}" for g, n in sorted(summary.grades.items()))
    verb = {"new": "wrote", "replace": "replaced", "add-split": "added split to"}[summary.mode]
    judged = (
        f"with {summary.n_judgments} judgments for {summary.n_judged_queries} queries (grades {{{grades}}})"
        if summary.n_judgments
        else "with no judgments yet"
    )
    click.echo(
        f"{verb} {summary.out}: {summary.n_docs} documents, {summary.n_queries} queries, "
        f"qrels/{summary.split}.tsv {judged}"
    )
    if summary.n_excluded:
        click.echo(f"excluded/{summary.split}.tsv with {summary.n_excluded} excluded pairs")
    for source, how in summary.formats.items():
        click.echo(as_flags(f"read {source} as {how}"))
    if summary.grade_scale:
        click.echo(as_flags(f"grade scale {summary.grade_scale}"))
    if not summary.n_judgments:
        click.echo(f"no judgments yet: pool it (beir-harness pool {summary.out} --systems ... --out POOL)")


def _sheet_choices(values: tuple[str, ...]) -> dict[str, str]:
    """--sheet NAME (any table) and --sheet TABLE=NAME as {table or '*': sheet name}."""
    choices: dict[str, str] = {}
    for value in values:
        table, equals, name = value.partition("=")
        if equals and table.strip().lower() in ("corpus", "queries", "qrels", "excluded"):
            choices[table.strip().lower()] = name.strip()
        else:
            choices["*"] = value.strip()
    return choices


@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
@JSON.but(help="Print the report as JSON.")
@RUN.but(
    "runs",
    multiple=True,
    metavar="FILE",
    help="A run (TREC or JSON) whose coverage to show: Judged@k and unjudged top-k documents (repeatable).",
)
@SPLIT.but(help="The split --run is measured on.")
@K_VALUES.but("k", type=click.IntRange(min=1), default=10, callback=None, help="The depth --run is measured at.")
def validate(folder: Path, as_json: bool, runs: tuple[Path, ...], split: str, k: int) -> None:
    """Check a BEIR folder and summarise it; exit 1 if it has errors.

    Checks every line of corpus.jsonl, queries.jsonl and qrels/*.tsv (plain or .gz): JSON
    records with _id and text, unique ids, BEIR's qrels header, three columns, integer grades,
    no conflicting duplicates, and judgments that name existing queries and documents. Empty
    texts are warnings and CRLF line endings a note. Prints counts per split, the grade
    histogram, judged documents per query and mean document length. With --run, each run's Judged@k on
    --split and the number of unjudged documents in its top k (what is left to judge).

    Example:

    \b
        beir-harness validate datasets/helpdesk
        beir-harness validate ./my-eval-set --json
        beir-harness validate ./my-eval-set --run bm25.trec --run dense.trec --k 10
    """
    from harness.api import coverage as run_coverage
    from harness.api import validate as validate_folder

    report = validate_folder(folder)
    coverage = [run_coverage(folder, run, split, k) for run in runs] if runs and report.ok else []
    if as_json:
        click.echo(
            json.dumps(
                {**report.to_json(), **({"coverage": [c.to_json() for c in coverage]} if runs else {})}, indent=2
            )
        )
    else:
        click.echo("\n".join([report.format_text(), *(c.format_text() for c in coverage)]))
    if not report.ok:
        sys.exit(1)


@click.group()
def datasets() -> None:
    """List, download, import and remove BEIR datasets.

    Datasets live in the data dir: --data-dir, else $BEIR_HARNESS_DATA_DIR, else ./datasets.
    Downloads are verified (md5 from the registry), resumable, and installed atomically.

    Example:

    \b
        beir-harness datasets list
        beir-harness datasets download scifact nfcorpus
    """


@datasets.command("list")
@DATA_DIR
@JSON.but(help="Print the rows as JSON.")
def datasets_list(data_dir: Path | None, as_json: bool) -> None:
    """List every BEIR dataset: split, size, counts, installed?, published scores known? Then the custom
    datasets installed with `datasets import` (family "custom"), which evaluate, bench and retrieve take by name.

    Example:

    \b
        beir-harness datasets list
        beir-harness datasets list --data-dir /data/beir --json
    """
    from harness.api import list_datasets

    rows = list_datasets(data_dir)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from harness.presentation import align

    table = [["name", "family", "split", "docs", "queries", "zip MB", "installed", "published", "note"]]
    for row in rows:
        note = "not distributed" if not row["public"] else ("self-hits dropped" if row["ignore_identical_ids"] else "")
        note = "your own eval set" if row["family"] == "custom" else note
        table.append(
            [
                row["name"],
                row["family"],
                row["split"],
                _count(row["docs"]),
                _count(row["queries"]),
                f"{row['zip_mb']:.1f}" if row["zip_mb"] else "-",
                "yes" if row["installed"] else "no",
                str(row["published_scores"]),
                note,
            ]
        )
    click.echo("\n".join(align(table, right=[False, False, False, True, True, True, False, True, False])))


def _count(value: int | None) -> str:
    return f"{value:,}" if value is not None else "-"


@datasets.command("download")
@click.argument("names", nargs=-1, required=True)
@DATA_DIR
@BASE_URL.but(help="Mirror to download <URL>/<name>.zip from [default: $BEIR_HARNESS_MIRROR or BEIR's server].")
@FORCE.but(help="Download and install again even when installed.")
@click.pass_context
def datasets_download(
    ctx: click.Context, names: tuple[str, ...], data_dir: Path | None, base_url: str | None, force: bool
) -> None:
    """Download, verify (md5, counts) and install BEIR datasets.

    An interrupted download resumes where it stopped on the next run.

    Example:

    \b
        beir-harness datasets download scifact nfcorpus
        beir-harness datasets download fiqa --base-url https://mirror.example.org/beir/
    """
    from harness.api import download_dataset

    for name in names:
        installed = download_dataset(name, data_dir, base_url=base_url, progress=ctx.obj["progress"], force=force)
        click.echo(f"{name}: {installed.path}")


@datasets.command("import")
@click.argument("source", type=click.Path(path_type=Path))
@DATA_DIR
@NAME.but(metavar=None, callback=None, help="Dataset name [default: the file or folder name].")
@FORCE.but(help="Replace an installed dataset of that name.")
def datasets_import(source: Path, data_dir: Path | None, name: str | None, force: bool) -> None:
    """Install a local BEIR zip or folder (offline), verified.

    A zip named like a BEIR dataset must have the registry's md5 and counts, and a folder imported
    under a BEIR name the registry's counts (else give it another --name). Any other zip or folder must
    pass `validate` and becomes a custom dataset: listed by `datasets list`, usable by its name in
    evaluate, bench and retrieve.

    Example:

    \b
        beir-harness datasets import ~/Downloads/nfcorpus.zip
        beir-harness datasets import datasets-in-progress/helpdesk --name helpdesk
    """
    from harness.api import import_dataset

    installed = import_dataset(source, data_dir, name=name, force=force)
    click.echo(f"{installed.name}: {installed.path}")


@datasets.command("remove")
@click.argument("name")
@DATA_DIR
def datasets_remove(name: str, data_dir: Path | None) -> None:
    """Delete an installed dataset and any download leftovers.

    Example:

    \b
        beir-harness datasets remove nfcorpus
    """
    from harness.api import remove_dataset

    for path in remove_dataset(name, data_dir):
        click.echo(f"removed {path}")
