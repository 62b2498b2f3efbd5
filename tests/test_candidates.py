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
import tempfile
from pathlib import Path

import pytest
from cli_runner import invoke
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.errors import HarnessError

DATA = Path(__file__).parent / "data" / "tiny"
WORDS = "apple banana cherry date zucchini fruit stone fig elder grape kiwi lemon query doc eggplant".split()
QUERY_IDS = ["q1", "q2", "q3", "q4"]  # tests/data/tiny's queries and documents
CORPUS_IDS = ["d1", "d2", "d3", "d4", "d5"]


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


@pytest.mark.parametrize("failing", ["first", "second"])
def test_a_candidate_set_that_fails_when_made_fails_only_the_cells_that_rerank_it(rerankers, tmp_path, failing):
    """One dataset excludes every candidate pair (excluded/test.tsv), which only making its set finds: its rerank cell
    fails with that reason; its bm25 cell and both of the other dataset's cells are done (before or after it)."""
    first = _copy(tmp_path, "first")
    second = _copy(tmp_path, "second")
    pairs = [("q1", "d4"), ("q1", "d5"), ("q2", "d5"), ("q3", "d4")]  # none judged: excluding them is allowed
    run = _run_file(tmp_path / "run.trec", pairs)
    (tmp_path / failing / "excluded").mkdir()
    excluded = "query-id\tcorpus-id\n" + "".join(f"{q}\t{d}\n" for q, d in pairs)
    (tmp_path / failing / "excluded" / "test.tsv").write_text(excluded)
    out = tmp_path / "out"
    done = _bench([first, second], f"bm25, r=>> {rerankers[0]}", out, "--candidates", str(run), "--depth", "3")
    assert done.exit_code == 1, done.output
    assert "4 cells: 3 done, 0 skipped" in done.stdout and "1 failed" in done.stdout
    (failed,) = [line for line in done.stdout.splitlines() if line.startswith("failed:")]
    assert failed.startswith(f"failed: {failing} × r: its candidate set could not be made: ")
    assert "has a candidate" in failed
    written = {
        (r["dataset"], r["label"] or r["model"]) for r in map(json.loads, map(Path.read_text, out.rglob("test*.json")))
    }
    assert written == {(d, s) for d in ("first", "second") for s in ("bm25", "r")} - {(failing, "r")}
    fine = "second" if failing == "first" else "first"
    assert list((out / fine / "candidates").glob("candidates-*.trec"))
    assert not (out / failing / "candidates").exists() or not list((out / failing / "candidates").glob("*.trec"))


@st.composite
def _foreign_runs(draw) -> list[tuple[str, str]]:
    """A candidate run's (query, document) pairs in file order: tiny's queries and documents, with one or more
    documents of another corpus placed in any query at any rank (the first query may carry none)."""
    queries = draw(st.lists(st.sampled_from(QUERY_IDS), min_size=2, max_size=4, unique=True))
    ranked = {q: draw(st.lists(st.sampled_from(CORPUS_IDS), min_size=1, max_size=4, unique=True)) for q in queries}
    foreign = st.tuples(st.sampled_from(queries), st.sampled_from(["e5", "x1"]), st.integers(0, 4))
    for query, doc, rank in draw(st.lists(foreign, min_size=1, max_size=3, unique_by=lambda t: t[:2])):
        ranked[query].insert(min(rank, len(ranked[query])), doc)
    return [(q, d) for q in queries for d in ranked[q]]


@example(pairs=[("q1", "d1"), ("q1", "d2"), ("q2", "d3"), ("q3", "x1"), ("q3", "d4")])  # only a later query's
@given(pairs=_foreign_runs())
@settings(derandomize=True, deadline=None, max_examples=25)
def test_a_document_of_another_corpus_in_any_query_of_a_candidate_run_is_refused_at_its_first_line(rerankers, pairs):
    with tempfile.TemporaryDirectory() as root:
        folder = _copy(Path(root), "tiny")
        run = _run_file(Path(root) / "run.trec", pairs)
        foreign = {d for _, d in pairs if d not in CORPUS_IDS}
        done = invoke(["-q", "evaluate", str(folder), "--model", f">> {rerankers[0]}", "--candidates", str(run),
                       "--depth", "3", "--k", "1,3", "--output-dir", f"{root}/out"])  # fmt: skip
        assert done.exit_code == 1, done.output
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        where = f"{run}:{_first_line(run, 2, foreign)}: {len(foreign)} candidate document(s) are not in"
        assert where in done.stderr and f"(e.g. {sorted(foreign)[0]!r})" in done.stderr, done.stderr
        assert not Path(root, "out").exists() or not [p for p in Path(root, "out").rglob("*") if p.is_file()]


@pytest.mark.parametrize("systems", ["bm25", "bm25, hash:64"])
def test_bench_refuses_a_candidate_set_no_system_reranks_in_one_line_before_any_cell(tmp_path, systems):
    import harness

    folder = _copy(tmp_path, "tiny")
    out = tmp_path / "out"
    done = _bench([folder], systems, out, "--candidates", "bm25", "--depth", "3")
    assert done.exit_code == 1, done.output
    assert done.stderr.strip().splitlines() == [
        "Error: --candidates gives reranks written '>> CROSS_ENCODER' their first stage; no system is one"
    ]
    assert "cells" not in done.stdout and not out.exists()
    with pytest.raises(HarnessError, match="^`candidates` gives reranks written"):
        harness.bench([s.strip() for s in systems.split(",")], [str(folder)], candidates="bm25", output_dir=out)
    assert not out.exists()


@pytest.mark.parametrize("given_as", ["candidates_depth", "CandidateSpec"])
def test_the_python_api_refuses_a_candidate_depth_below_1_in_one_line_before_any_cell(rerankers, tmp_path, given_as):
    """The command line's --depth takes no 0; the Python API's bench refuses it before its first cell, however given
    (the bm25 cell, which reranks nothing, is not run either)."""
    import harness
    from harness.retrieval.rerank import CandidateSpec

    folder = _copy(tmp_path, "tiny")
    out = tmp_path / "out"
    chosen = {"candidates": "bm25", "candidates_depth": 0}
    if given_as == "CandidateSpec":
        chosen = {"candidates": CandidateSpec("bm25", depth=0)}
    with pytest.raises(HarnessError) as refused:
        harness.bench(["bm25", f">> {rerankers[0]}"], [str(folder)], k_values=(1, 3), output_dir=out, **chosen)
    assert str(refused.value) == "`candidates_depth` must be at least 1, got 0"
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()]


def _candidates(out: Path) -> dict[str, list[str]]:
    """The candidate file's documents per query, in file order."""
    (path,) = out.rglob("candidates-*.trec")
    ranked: dict[str, list[str]] = {}
    for query, _, doc, *_ in map(str.split, path.read_text().splitlines()):
        ranked.setdefault(query, []).append(doc)
    return ranked


def test_candidates_for_the_dev_split_are_made_on_a_dataset_with_dev_qrels_alone(rerankers, tmp_path):
    """MS MARCO's shape: qrels/dev.tsv and no test.tsv. The set of --split dev is made on the dev split (nothing asks
    for test's qrels) and its rerank is a dev result over the dev queries."""
    folder = _copy(tmp_path, "tiny")
    (folder / "qrels" / "test.tsv").unlink()
    dev = {line.split("\t")[0] for line in (folder / "qrels" / "dev.tsv").read_text().splitlines()[1:]}
    done = invoke(["-q", "evaluate", str(folder), "--split", "dev", "--model", f">> {rerankers[0]}", "--candidates",
                   "hash:64", "--depth", "3", "--k", "1,3", "--output-dir", str(tmp_path / "out"), "--json"])  # fmt: skip
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert result["split"] == "dev" and set(result["per_query"]) == dev
    ranked = _candidates(tmp_path / "out")
    assert dev <= set(ranked) and all(len(docs) == 3 == len(set(docs)) for docs in ranked.values())


def test_a_system_s_candidates_deeper_than_the_default_depth_hold_that_many_documents(rerankers, tmp_path):
    """150 candidates a query over 200 documents, the default first-stage depth 100 and --k 1,3: each query of the set
    holds 150 distinct documents of the corpus, and the rerank scores 150 pairs a judged query."""
    folder = tmp_path / "wide"
    (folder / "qrels").mkdir(parents=True)
    docs = [f"doc{n}" for n in range(200)]
    words = WORDS[:8]
    lines = [json.dumps({"_id": d, "text": f"{words[n % 8]} {words[n * 3 % 8]} {words[n * 5 % 7]}"}) for n, d in
             enumerate(docs)]  # fmt: skip
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    queries = {"q1": "apple banana", "q2": "cherry fig", "q3": "stone fruit"}
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tdoc1\t1\nq2\tdoc7\t1\nq3\tdoc9\t1\n")
    done = invoke(["-q", "evaluate", str(folder), "--model", f">> {rerankers[0]}", "--candidates", "hash:64",
                   "--depth", "150", "--k", "1,3", "--output-dir", str(tmp_path / "out"), "--json"])  # fmt: skip
    assert done.exit_code == 0, done.output
    ranked = _candidates(tmp_path / "out")
    assert set(ranked) == set(queries)
    for query, ranking in ranked.items():
        assert len(ranking) == len(set(ranking)) == 150 and set(ranking) <= set(docs), query
    assert json.loads(done.stdout)["config"]["rerank"]["pairs"] == 150 * len(queries)


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


@pytest.mark.parametrize(
    ("fmt", "layout"),
    [("markdown", "wide"), ("markdown", "long"), ("json", "wide"), ("html", "wide"), ("html", "long"),
     ("latex", "wide"), ("latex", "long")],
)  # fmt: skip
def test_the_several_metric_table_names_each_candidate_set_and_where_rerankers_differ(compared, fmt, layout):
    out, digest = compared
    shown = _table(out, fmt, "--significance", "a", "--layout", layout)
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


def test_rerankers_each_on_its_own_first_stage_draw_the_warning(compared, rerankers, tmp_path):
    """c and d rerank their own first stages (hash:64's and bm25's top 3): different candidates, said in the notes and
    warned of, though no candidate set is named."""
    out = tmp_path / "own"
    shutil.copytree(compared[0], out)
    for path in out.rglob("test*.json"):
        if json.loads(path.read_text())["label"] in ("a", "b"):
            path.unlink()
    d = invoke(["-q", "evaluate", str(_copy(tmp_path, "tiny")), "--output-dir", str(out), "--model",
                f"d=bm25 >> {rerankers[0]}@3", "--k", "1,3"])  # fmt: skip
    assert d.exit_code == 0, d.output
    shown = _table(out, "markdown")
    assert "tiny: rerankers of different candidate sets in one table" in shown.stderr
    assert "tiny: these rerankers did not rerank the same candidates (c, d on their own first stages)" in shown.stdout
    assert "candidate set " not in shown.stdout


def test_the_candidate_notes_and_warning_are_those_of_the_split_asked_for(compared, rerankers, tmp_path):
    """test: a, b on bm25's top 3 and c on its own (the warning); dev: a, b on hash:64's top 3 alone (no warning)."""
    out = tmp_path / "splits"
    shutil.copytree(compared[0], out)
    before = set((out / "tiny" / "candidates").glob("candidates-*.trec"))
    systems = f"a=>> {rerankers[0]}, b=>> {rerankers[1]}"
    done = _bench([_copy(tmp_path, "tiny")], systems, out, "--split", "dev", "--candidates", "hash:64", "--depth", "3")
    assert done.exit_code == 0, done.output
    (dev,) = set((out / "tiny" / "candidates").glob("candidates-*.trec")) - before
    digest = hashlib.sha256(dev.read_bytes()).hexdigest()
    shown = _table(out, "markdown", "--split", "dev")
    assert digest[:8] != compared[1][:8]
    assert f"tiny: candidate set {digest[:8]} (top 3 of hash:64) reranked by a, b" in shown.stdout, shown.stdout
    assert compared[1][:8] not in shown.stdout and "did not rerank" not in shown.stdout
    assert "different candidate sets" not in shown.stderr


# --------------------------------------------------------------------------- the pairs and tokens each rerank scored


def _scored(out: Path) -> list[tuple[str, str]]:
    """The candidate set's (query, document) pairs of the judged queries: what a rerank of it scores."""
    (candidates,) = (out / "tiny" / "candidates").glob("candidates-*.trec")
    pairs = [tuple(line.split()[0:3:2]) for line in candidates.read_text().splitlines() if line.strip()]
    judged = {line.split("\t")[0] for line in (DATA / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    return [(q, d) for q, d in pairs if q in judged]


def _cost_cells(markdown: str, system: str) -> dict[str, str]:
    header = [cell.strip() for cell in markdown.splitlines()[0].strip("|").split("|")]
    row = next(line for line in markdown.splitlines() if line.split("|")[2].strip() == system)
    return dict(zip(header, (cell.strip() for cell in row.strip("|").split("|"))))


def test_the_cost_table_shows_the_pairs_and_tokens_each_rerank_scored(compared, rerankers):
    from sentence_transformers import CrossEncoder

    out, digest = compared
    scored = _scored(out)
    docs = {}
    for record in map(json.loads, (DATA / "corpus.jsonl").read_text().splitlines()):
        docs[record["_id"]] = f"{record.get('title') or ''} {record['text']}".strip()
    queries = {r["_id"]: r["text"] for r in map(json.loads, (DATA / "queries.jsonl").read_text().splitlines())}
    shown = invoke(["report", str(out), "--cost", "--metric", "nDCG@3", "--format", "csv"])
    assert shown.exit_code == 0, shown.output
    rows = {row["system"]: row for row in csv.DictReader(io.StringIO(shown.stdout))}
    for label, model in (("a", rerankers[0]), ("b", rerankers[1])):
        tokenizer = CrossEncoder(str(model)).tokenizer
        tokens = sum(len(tokenizer(queries[q], docs[d])["input_ids"]) for q, d in scored)
        assert (rows[label]["rerank_pairs"], rows[label]["rerank_tokens"]) == (str(len(scored)), str(tokens))
    assert rows["bm25"]["rerank_pairs"] == ""  # no rerank: nothing recorded
    markdown = invoke(["report", str(out), "--cost", "--metric", "nDCG@3"]).stdout
    assert _cost_cells(markdown, "a")["reranked pairs / tokens"] == f"{len(scored)} / {rows['a']['rerank_tokens']}"


def test_the_cost_table_shows_the_pairs_a_rerank_scored_when_its_tokens_could_not_be_counted(compared, tmp_path):
    """Every rerank's tokens uncountable (recorded as null, each result's content digest made again as
    `harness.records.result_digest` documents it): the pairs column stays, the tokens are a dash."""
    out = tmp_path / "uncounted"
    shutil.copytree(compared[0], out)
    for path in out.rglob("test*.json"):
        data = json.loads(path.read_text())
        if data["config"].get("rerank"):
            data["config"]["rerank"]["tokens"] = None
            undigested = {**data, "fingerprints": {k: v for k, v in data["fingerprints"].items() if k != "content"}}
            canonical = json.dumps(undigested, sort_keys=True, separators=(",", ":"))
            data["fingerprints"]["content"] = hashlib.sha256(canonical.encode("ascii")).hexdigest()
            path.write_text(json.dumps(data))
    scored = _scored(out)
    shown = invoke(["report", str(out), "--cost", "--metric", "nDCG@3"])
    assert shown.exit_code == 0, shown.output
    for system in ("a", "b"):
        assert _cost_cells(shown.stdout, system)["reranked pairs / tokens"] == f"{len(scored)} / –"
    rows = {row["system"]: row for row in csv.DictReader(io.StringIO(invoke(["report", str(out), "--cost", "--metric",
            "nDCG@3", "--format", "csv"]).stdout))}  # fmt: skip
    assert (rows["a"]["rerank_pairs"], rows["a"]["rerank_tokens"]) == (str(len(scored)), "")


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
