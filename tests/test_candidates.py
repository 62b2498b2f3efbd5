"""One candidate set for every reranker across a bench grid and in every report: each dataset's set checked before the
first cell, a set that fails when made failing only the cells that rerank it, the several-metric table naming each
set by its digest in every format, and the pairs and tokens each rerank scored in the cost table.

The rerankers are tiny random-weight BERT cross-encoders (tests/tiny_models.py) loaded by sentence-transformers'
CrossEncoder exactly as a real one is; the datasets are copies of tests/data/tiny."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest
from cli_runner import invoke

DATA = Path(__file__).parent / "data" / "tiny"
WORDS = "apple banana cherry date zucchini fruit stone fig elder grape kiwi lemon query doc eggplant".split()


def _copy(root: Path, name: str) -> Path:
    target = root / name
    shutil.copytree(DATA, target)
    return target


def _run_file(path: Path, pairs: list[tuple[str, str]]) -> Path:
    path.write_text("".join(f"{q} Q0 {d} {i + 1} {10.0 - i} x\n" for i, (q, d) in enumerate(pairs)))
    return path


def _first_line(path: Path, column: int, ids: set[str]) -> int:
    """The number of the run file's first line naming one of `ids` in `column`: a loop over its lines."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.split()[column] in ids:
            return number
    raise AssertionError(f"no line of {path} names {ids}")


def _bench(datasets: list[Path], systems: str, out: Path, *options: str):
    named = ",".join(str(d) for d in datasets)
    return invoke(["-q", "bench", "--datasets", named, "--systems", systems, "--k", "1,3", "--output-dir", str(out),
                   *options])  # fmt: skip


@pytest.fixture(scope="module")
def rerankers(tmp_path_factory) -> tuple[Path, Path]:
    from tiny_models import cross_encoder

    root = tmp_path_factory.mktemp("cross-encoders")
    return cross_encoder(root / "a", WORDS, seed=0), cross_encoder(root / "b", WORDS, seed=1)


# --------------------------------------------------------------------------- bench: checked before the first cell


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("document of another corpus", "candidate document(s) are not in"),
        ("query of another dataset", "candidate query is not in"),
        ("missing model", "no-such-model"),
        ("malformed system", "rrf(bm25)"),
        ("rerank of the set", "cannot be a rerank of itself"),
    ],
)
def test_bench_refuses_bad_candidates_in_one_line_before_any_cell(rerankers, tmp_path, case, message):
    """The first dataset's candidates are fine; the fault is the second's (or the source's): nothing is evaluated,
    no candidate set is written, and a run file's fault names its first offending line and the fix."""
    first = _copy(tmp_path, "first")
    second = _copy(tmp_path, "second")
    if case == "document of another corpus":
        corpus = second / "corpus.jsonl"
        corpus.write_text(corpus.read_text().replace('"d5"', '"e5"'))
        (second / "qrels" / "test.tsv").write_text((second / "qrels" / "test.tsv").read_text().replace("d5", "e5"))
    if case == "query of another dataset":
        queries = second / "queries.jsonl"
        queries.write_text(queries.read_text().replace('"q3"', '"r3"'))
        (second / "qrels" / "test.tsv").write_text((second / "qrels" / "test.tsv").read_text().replace("q3", "r3"))
    run = _run_file(tmp_path / "run.trec", [(q, d) for q in ("q1", "q2", "q3") for d in ("d1", "d3", "d5")])
    source = {
        "missing model": str(tmp_path / "no-such-model"),
        "malformed system": "rrf(bm25)",
        "rerank of the set": f">> {rerankers[0]}",
    }.get(case, str(run))
    out = tmp_path / "out"
    done = _bench([first, second], f"bm25, >> {rerankers[0]}", out, "--candidates", source, "--depth", "3")
    assert done.exit_code == 1, done.output
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr, done.stderr
    if case in ("document of another corpus", "query of another dataset"):
        column, bad = (2, {"d5"}) if case == "document of another corpus" else (0, {"q3"})
        assert f"{run}:{_first_line(run, column, bad)}: 1 " in done.stderr
        assert str(second) in done.stderr and "give --candidates a system (e.g. bm25)" in done.stderr
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()]


def test_a_candidate_set_that_fails_when_made_fails_only_the_cells_that_rerank_it(rerankers, tmp_path):
    """The second dataset excludes every candidate pair (excluded/test.tsv), which only making its set finds: its
    rerank cell fails with that reason; its bm25 cell and both of the first dataset's cells are done."""
    first = _copy(tmp_path, "first")
    second = _copy(tmp_path, "second")
    pairs = [("q1", "d4"), ("q1", "d5"), ("q2", "d5"), ("q3", "d4")]  # none judged: excluding them is allowed
    run = _run_file(tmp_path / "run.trec", pairs)
    (second / "excluded").mkdir()
    (second / "excluded" / "test.tsv").write_text("query-id\tcorpus-id\n" + "".join(f"{q}\t{d}\n" for q, d in pairs))
    out = tmp_path / "out"
    done = _bench([first, second], f"bm25, r=>> {rerankers[0]}", out, "--candidates", str(run), "--depth", "3")
    assert done.exit_code == 1, done.output
    assert "4 cells: 3 done, 0 skipped" in done.stdout and "1 failed" in done.stdout
    (failed,) = [line for line in done.stdout.splitlines() if line.startswith("failed:")]
    assert failed.startswith("failed: second × r: its candidate set could not be made: ")
    assert "has a candidate" in failed
    written = {
        (r["dataset"], r["label"] or r["model"]) for r in map(json.loads, map(Path.read_text, out.rglob("test*.json")))
    }
    assert written == {("first", "bm25"), ("first", "r"), ("second", "bm25")}
    assert list((out / "first" / "candidates").glob("candidates-*.trec"))
    assert not (out / "second" / "candidates").exists() or not list((out / "second" / "candidates").glob("*.trec"))


# --------------------------------------------------------------------------- the several-metric table


@pytest.fixture(scope="module")
def compared(rerankers, tmp_path_factory) -> tuple[Path, str]:
    """a and b rerank one candidate set (bm25's top 3); c reranks its own first stage (hash:64's top 3)."""
    root = tmp_path_factory.mktemp("compared")
    folder = _copy(root, "tiny")
    out = root / "out"
    systems = f"a=>> {rerankers[0]}, b=>> {rerankers[1]}"
    assert _bench([folder], systems, out, "--candidates", "bm25", "--depth", "3").exit_code == 0
    own = invoke(["-q", "evaluate", str(folder), "--output-dir", str(out), "--model", f"c=hash:64 >> {rerankers[1]}@3",
                  "--k", "1,3"])  # fmt: skip
    assert own.exit_code == 0, own.output
    (candidates,) = (out / "tiny" / "candidates").glob("candidates-*.trec")
    return out, hashlib.sha256(candidates.read_bytes()).hexdigest()


def _table(out: Path, fmt: str, *options: str):
    shown = invoke(["report", str(out), "--metric", "nDCG@3", "--metric", "nDCG@1", "--format", fmt, *options])
    assert shown.exit_code == 0, shown.output
    return shown


SAME = "tiny: candidate set {digest} (top 3 of bm25) reranked by a, b"
MIXED = "tiny: these rerankers did not rerank the same candidates (c on their own first stages; a, b on {digest})"
ACROSS = "† against a compares rerankers of other candidate sets for c (tiny)"


@pytest.mark.parametrize("fmt", ["markdown", "json", "html", "latex"])
def test_the_several_metric_table_names_each_candidate_set_and_where_rerankers_differ(compared, fmt):
    out, digest = compared
    shown = _table(out, fmt, "--significance", "a")
    text = shown.stdout
    if fmt == "latex":  # the notes below the table, LaTeX-escaped
        text = text.replace(r"$^\dagger$", "†")
        assert text.count(r"\par\smallskip\footnotesize") == 4
    if fmt == "json":
        text = "\n".join(json.loads(shown.stdout)["notes"])
    for line in (SAME, MIXED, ACROSS):
        assert line.format(digest=digest[:8]) in text, text


def test_the_several_metric_csv_says_on_stderr_that_rerankers_reranked_different_candidates(compared):
    shown = _table(compared[0], "csv")
    assert "tiny: rerankers of different candidate sets in one table" in shown.stderr
    rows = list(csv.reader(io.StringIO(shown.stdout)))
    assert [row[0] for row in rows[3:] if row] == ["a", "b", "bm25", "c"]  # bm25: the candidates' own result


def test_rerankers_of_one_candidate_set_alone_are_named_with_it_and_draw_no_warning(compared, tmp_path):
    out = tmp_path / "same"
    shutil.copytree(compared[0], out)
    for path in out.rglob("test*.json"):
        if json.loads(path.read_text())["label"] == "c":
            path.unlink()
    shown = _table(out, "latex")
    assert SAME.format(digest=compared[1][:8]) in shown.stdout and "did not rerank" not in shown.stdout
    assert "different candidate sets" not in shown.stderr


# --------------------------------------------------------------------------- the pairs and tokens each rerank scored


def test_the_cost_table_shows_the_pairs_and_tokens_each_rerank_scored(compared, rerankers):
    from sentence_transformers import CrossEncoder

    out, digest = compared
    (candidates,) = (out / "tiny" / "candidates").glob("candidates-*.trec")
    pairs = [tuple(line.split()[0:3:2]) for line in candidates.read_text().splitlines() if line.strip()]
    docs = {}
    for record in map(json.loads, (DATA / "corpus.jsonl").read_text().splitlines()):
        docs[record["_id"]] = f"{record.get('title') or ''} {record['text']}".strip()
    queries = {r["_id"]: r["text"] for r in map(json.loads, (DATA / "queries.jsonl").read_text().splitlines())}
    judged = {line.split("\t")[0] for line in (DATA / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    scored = [(q, d) for q, d in pairs if q in judged]  # a rerank scores the judged queries' candidates
    shown = invoke(["report", str(out), "--cost", "--metric", "nDCG@3", "--format", "csv"])
    assert shown.exit_code == 0, shown.output
    rows = {row["system"]: row for row in csv.DictReader(io.StringIO(shown.stdout))}
    for label, model in (("a", rerankers[0]), ("b", rerankers[1])):
        tokenizer = CrossEncoder(str(model)).tokenizer
        tokens = sum(len(tokenizer(queries[q], docs[d])["input_ids"]) for q, d in scored)
        assert (rows[label]["rerank_pairs"], rows[label]["rerank_tokens"]) == (str(len(scored)), str(tokens))
    assert rows["bm25"]["rerank_pairs"] == ""  # no rerank: nothing recorded
    markdown = invoke(["report", str(out), "--cost", "--metric", "nDCG@3"]).stdout
    header = [cell.strip() for cell in markdown.splitlines()[0].strip("|").split("|")]
    row = next(line for line in markdown.splitlines() if line.split("|")[2].strip() == "a")
    cells = dict(zip(header, (cell.strip() for cell in row.strip("|").split("|"))))
    assert cells["reranked pairs / tokens"] == f"{len(scored)} / {rows['a']['rerank_tokens']}"


# --------------------------------------------------------------------------- the Python API


def test_the_python_api_takes_a_candidate_set_as_the_command_line_does(rerankers, tmp_path):
    import harness

    folder = _copy(tmp_path, "tiny")
    run = _run_file(tmp_path / "run.trec", [(q, d) for q in ("q1", "q2", "q3") for d in ("d2", "d4", "d1", "d5")])
    result = harness.evaluate(
        folder,
        f">> {rerankers[0]}",
        candidates=str(run),
        candidates_depth=2,
        k_values=(1, 2),
        output_dir=tmp_path / "out",
    )
    (written,) = (tmp_path / "out" / "tiny" / "candidates").glob("candidates-*.trec")
    expected = {
        q: [d for q2, _, d, *_ in map(str.split, run.read_text().splitlines()) if q2 == q][:2]
        for q in "q1 q2 q3".split()
    }
    got: dict[str, list[str]] = {}
    for q, _, d, *_ in map(str.split, written.read_text().splitlines()):
        got.setdefault(q, []).append(d)
    assert got == expected  # each query's top 2 of the run (scores fall down the file)
    digest = hashlib.sha256(written.read_bytes()).hexdigest()
    assert result.config["candidates"] == {"source": str(run), "depth": 2, "sha256": digest}
    assert result.config["rerank"]["pairs"] == 6
