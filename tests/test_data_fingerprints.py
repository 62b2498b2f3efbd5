"""Numbers that know their data: bench, evaluate, report, compare, fuse and the registry check what a result
was computed on (docs/reports.md, docs/bench.md)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytrec_eval
from cli_runner import invoke

import harness.retrieval.encode
from harness.io.formats import locate_beir_folder
from harness.pipeline.bench import _changed_data
from harness.pipeline.config import EvaluateConfig
from harness.reporting.report import folder_fingerprints
from harness.retrieval.encode import HashingEncoder


def _invoke(*args):
    return invoke([str(a) for a in args])


def _bench(dataset, out, *extra):
    return _invoke("-q", "bench", "--models", "bm25", "--datasets", dataset, "--output-dir", out, "--k", "10", *extra)


def _set_grade(folder, query_id, doc_id, grade):
    path = folder / "qrels" / "test.tsv"
    lines = path.read_text().splitlines()
    changed = [
        f"{query_id}\t{doc_id}\t{grade}" if line.split("\t")[:2] == [query_id, doc_id] else line for line in lines
    ]
    assert changed != lines, "the judgment to change is not in the file"
    path.write_text("\n".join(changed) + "\n")


def _trec_ndcg10(folder, run_path) -> float:
    """nDCG@10 by pytrec_eval (the reference) of a run file against the folder's test qrels, over every judged
    query (a query without results scores 0, as trec_eval -c does)."""
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query_id, doc_id, grade = line.split("\t")
        qrels.setdefault(query_id, {})[doc_id] = int(grade)
    run: dict[str, dict[str, float]] = {}
    for line in run_path.read_text().splitlines():
        query_id, _, doc_id, _, score, _ = line.split()
        run.setdefault(query_id, {})[doc_id] = float(score)
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut"}).evaluate(run)
    return sum(scores.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / len(qrels)


def test_bench_redoes_a_cell_whose_judgments_changed_and_says_why(tiny_beir, tmp_path):
    out = tmp_path / "results"
    assert _bench(tiny_beir, out).exit_code == 0
    assert "0 done, 1 skipped" in _bench(tiny_beir, out).stdout
    _set_grade(tiny_beir, "q1", "d1", 0)
    result = _bench(tiny_beir, out)
    assert result.exit_code == 0, result.stderr
    assert "1 done, 0 skipped" in result.stdout
    assert "redone: tiny × bm25: qrels changed since the stored result" in result.stdout
    stored = json.loads((out / "tiny" / "bm25" / "test.json").read_text())
    expected = _trec_ndcg10(tiny_beir, out / "tiny" / "bm25" / "test.run.trec")
    assert stored["metrics"]["nDCG@10"] == pytest.approx(expected, abs=1e-12)
    assert f"{expected:.4f}" in result.stdout.splitlines()[1]
    assert "0 done, 1 skipped" in _bench(tiny_beir, out).stdout  # and now it is current again


def test_bench_redoes_a_cell_whose_corpus_changed(tiny_beir, tmp_path):
    out = tmp_path / "results"
    assert _bench(tiny_beir, out).exit_code == 0
    corpus = tiny_beir / "corpus.jsonl"
    corpus.write_text(corpus.read_text().replace('"apple banana"', '"apple banana kiwi"'))
    result = _bench(tiny_beir, out)
    assert "1 done, 0 skipped" in result.stdout
    assert "redone: tiny × bm25: corpus changed since the stored result" in result.stdout


def test_changed_judgments_reuse_the_cached_embeddings(tiny_beir, tmp_path, monkeypatch):
    calls: list[int] = []

    class Counting(HashingEncoder):
        def encode_docs(self, texts):
            calls.append(len(texts))
            return super().encode_docs(texts)

    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: Counting(dimension=32))
    out, cache = tmp_path / "results", tmp_path / "cache"
    args = (
        "-q",
        "bench",
        "--models",
        "hash:32",
        "--datasets",
        tiny_beir,
        "--output-dir",
        out,
        "--k",
        "10",
        "--cache-dir",
        cache,
    )
    assert _invoke(*args).exit_code == 0
    assert sum(calls) == 5  # the five documents, once
    _set_grade(tiny_beir, "q1", "d1", 0)
    result = _invoke(*args)
    assert "1 done, 0 skipped" in result.stdout and "qrels changed" in result.stdout
    assert sum(calls) == 5  # no document encoded again: the vectors are keyed by the corpus, which did not change


def test_evaluate_says_when_it_replaces_a_result_computed_on_other_data(tiny_beir, tmp_path):
    out = tmp_path / "results"
    assert _invoke("evaluate", tiny_beir, "--model", "bm25", "--output-dir", out).exit_code == 0
    _set_grade(tiny_beir, "q2", "d3", 0)
    result = _invoke("evaluate", tiny_beir, "--model", "bm25", "--output-dir", out)
    assert result.exit_code == 0
    assert "replacing the result of the same settings computed on other data (qrels changed" in result.stderr
    again = _invoke("evaluate", tiny_beir, "--model", "bm25", "--output-dir", out)
    assert "other data" not in again.stderr  # same data: replaced silently, as before


@pytest.fixture
def mixed(tiny_beir, tmp_path):
    """Two results of dataset 'tiny': bm25 on the judgments as they were, bm25 at --top-k 50 after one changed."""
    out = tmp_path / "results"
    assert _invoke("evaluate", tiny_beir, "--model", "bm25", "--output-dir", out).exit_code == 0
    _set_grade(tiny_beir, "q1", "d1", 0)
    assert (
        _invoke("evaluate", tiny_beir, "--model", "bm25", "--output-dir", out, "--top-k", "50", "--k", "10").exit_code
        == 0
    )
    old, new = out / "tiny" / "bm25" / "test.json", next((out / "tiny" / "bm25").glob("test.top50-*.json"))
    return out, old, new


def test_report_refuses_results_of_one_dataset_on_different_data(mixed, tmp_path):
    out, old, new = mixed
    for fmt in ("markdown", "html"):
        target = tmp_path / f"table.{fmt}"
        result = _invoke("report", out, "--format", fmt, "--out", target)
        assert result.exit_code == 1
        message = result.stderr.strip()
        assert message.count("\n") == 0
        assert f"results of tiny were computed on different data: {old} and {new} differ in qrels" in message
        assert f"the folder as it is now matches {new}" in message
        assert "--allow-mixed-data" in message
        assert not target.exists()


def test_report_with_allow_mixed_data_shows_each_version_as_its_own_row(mixed):
    out, old, new = mixed
    result = _invoke("report", out, "--allow-mixed-data")
    assert result.exit_code == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| tiny")]
    assert len(rows) == 2 and all("[data " in row for row in rows)
    tags = {row.split("[data ")[1][:8] for row in rows}
    assert len(tags) == 2


def test_compare_inspect_and_fuse_refuse_results_on_different_data(mixed, tmp_path):
    out, old, new = mixed
    for args in (
        ("compare", old, new),
        ("inspect", old, new),
        ("fuse", old, new, "--method", "rrf", "--output-dir", tmp_path / "fused"),
    ):
        result = _invoke(*args)
        assert result.exit_code == 1, args
        assert "were computed on different data" in result.stderr and "differ in qrels" in result.stderr
    assert not (tmp_path / "fused").exists()


def test_import_under_a_registry_name_checks_the_registry_counts(tiny_beir, tmp_path):
    folder = tmp_path / "scifact"
    shutil.copytree(tiny_beir, folder)
    data = tmp_path / "data"
    result = _invoke("datasets", "import", folder, "--data-dir", data)
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error: scifact: the folder has 5 documents and 3 judged test queries, the registry expects 5,183 and 300; "
        "not scifact: import it under another name (--name scifact-custom), which makes it a custom dataset"
    )
    assert not data.exists()  # not even an empty data folder is left behind
    again = _invoke("datasets", "import", folder, "--data-dir", data, "--name", "scifact-custom")
    assert again.exit_code == 0, again.stderr
    listed = {row["name"]: row for row in json.loads(_invoke("datasets", "list", "--data-dir", data, "--json").stdout)}
    assert listed["scifact-custom"]["family"] == "custom" and listed["scifact"]["installed"] is False


def test_evaluating_a_folder_under_a_registry_name_with_other_counts_warns_and_says_so(tiny_beir, tmp_path):
    folder = tmp_path / "nfcorpus"
    shutil.copytree(tiny_beir, folder)
    out = tmp_path / "results"
    result = _invoke("evaluate", folder, "--model", "bm25", "--output-dir", out)
    assert result.exit_code == 0
    why = (
        "this folder has 5 documents and 3 judged test queries, the registry's nfcorpus has 3,633 and 323: its "
        "numbers are not comparable with published nfcorpus scores"
    )
    assert why in result.stderr
    stored = json.loads((out / "nfcorpus" / "bm25" / "test.json").read_text())
    assert any(why in note for note in stored["notes"]) and why in stored["config"]["registry_mismatch"]
    check = _invoke("report", out, "--check-published")
    assert f"nfcorpus: {why}" in check.stdout


def test_a_custom_dataset_is_listed_and_usable_by_name(tiny_beir, tmp_path, monkeypatch):
    data, out = tmp_path / "data", tmp_path / "results"
    monkeypatch.chdir(tmp_path)  # so that "shop" can only be the installed dataset, never a folder here
    assert _invoke("datasets", "import", tiny_beir, "--name", "shop", "--data-dir", data).exit_code == 0
    listing = _invoke("datasets", "list", "--data-dir", data)
    line = next(line for line in listing.stdout.splitlines() if line.startswith("shop "))
    assert line.split()[:5] == ["shop", "custom", "test", "5", "3"] and "yes" in line
    evaluated = _invoke("evaluate", "shop", "--model", "bm25", "--data-dir", data, "--output-dir", out, "--json")
    assert evaluated.exit_code == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["dataset"] == "shop"
    benched = _invoke("-q", "bench", "--models", "bm25", "--datasets", "shop", "--data-dir", data, "--output-dir", out)
    assert benched.exit_code == 0 and "0 done, 1 skipped" in benched.stdout
    retrieved = _invoke("retrieve", "shop", "--model", "bm25", "--data-dir", data, "--out", tmp_path / "run.trec")
    assert retrieved.exit_code == 0, retrieved.stderr
    assert (tmp_path / "run.trec").read_text().split()[0] in {"q1", "q2", "q3", "q4"}


def test_bench_redoes_a_cell_whose_label_changed(tiny_beir, tmp_path):
    out = tmp_path / "results"
    assert _bench(tiny_beir, out).exit_code == 0
    relabelled = _invoke(
        "-q", "bench", "--models", "lexical=bm25", "--datasets", tiny_beir, "--output-dir", out, "--k", "10"
    )
    assert relabelled.exit_code == 0, relabelled.stderr
    assert "redone: tiny × lexical: the label (was 'bm25') changed since the stored result" in relabelled.stdout
    assert json.loads((out / "tiny" / "bm25" / "test.json").read_text())["label"] == "lexical"


# Data fingerprints and bench's staleness rule, on changes that keep the file's size.
#
# A change that also changes a file's size lets a memo keyed by size alone, or a staleness check that skips one
# file, pass. Here each fingerprinted file (corpus, queries, qrels, an external run) is changed in turn to
# content of the same length; the reference is hashlib's sha256 of the bytes written here.
# The tests below use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


TINY = Path(__file__).parent / "data" / "tiny"
FILES = {"corpus": "corpus.jsonl", "queries": "queries.jsonl", "qrels": "qrels/test.tsv"}
WORDS = {"the corpus": "corpus", "the queries": "queries", "the judgments": "qrels"}


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def same_size_change(path: Path, keep_mtime: bool = False) -> None:
    """Rewrite `path` in place with one byte changed (a digit or letter swapped), the size unchanged."""
    data = bytearray(path.read_bytes())
    before = path.stat()
    for i in range(len(data) - 1, -1, -1):
        if chr(data[i]).isalnum():
            data[i] = ord("1") if data[i] != ord("1") else ord("2")
            break
    path.write_bytes(bytes(data))
    after = path.stat()
    assert after.st_size == before.st_size
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    else:  # a later mtime, whatever the file system's clock granularity
        os.utime(path, ns=(after.st_atime_ns, before.st_mtime_ns + 1_000_000_000))


def replace_keeping_size_and_mtime(path: Path) -> None:
    """Write new content of the same size to a sibling and rename it over `path`, the old mtime restored."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[-2] = ord("7") if data[-2] != ord("7") else ord("8")
    sibling = path.with_name(path.name + ".new")
    sibling.write_bytes(bytes(data))
    os.utime(sibling, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(sibling, path)
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns


@pytest.fixture
def folder(tmp_path):
    target = tmp_path / "tiny"
    shutil.copytree(TINY, target)
    return target


def fingerprints_by_hand(root: Path) -> dict[str, str]:
    return {name: sha256_of(root / file) for name, file in FILES.items()}


@pytest.mark.parametrize("name", FILES)
def test_a_same_size_change_gives_a_new_fingerprint(folder, name):
    assert folder_fingerprints(locate_beir_folder(folder, "test")) == fingerprints_by_hand(folder)
    same_size_change(folder / FILES[name])
    assert folder_fingerprints(locate_beir_folder(folder, "test")) == fingerprints_by_hand(folder)


@pytest.mark.parametrize("name", FILES)
def test_a_file_replaced_by_one_of_the_same_size_and_mtime_gives_a_new_fingerprint(folder, name):
    assert folder_fingerprints(locate_beir_folder(folder, "test")) == fingerprints_by_hand(folder)
    replace_keeping_size_and_mtime(folder / FILES[name])
    assert folder_fingerprints(locate_beir_folder(folder, "test")) == fingerprints_by_hand(folder)


def test_two_folders_of_same_sized_files_are_told_apart(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    shutil.copytree(TINY, first)
    shutil.copytree(TINY, second)
    for file in FILES.values():
        same_size_change(second / file)
        stat = (first / file).stat()
        os.utime(second / file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert folder_fingerprints(locate_beir_folder(first, "test")) == fingerprints_by_hand(first)
    assert folder_fingerprints(locate_beir_folder(second, "test")) == fingerprints_by_hand(second)
    assert fingerprints_by_hand(first) != fingerprints_by_hand(second)


def _run_file(tmp_path: Path) -> Path:
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.5 tag\nq1 Q0 d2 2 1.5 tag\n")
    return run


def _stored(folder: Path, run: Path | None):
    fingerprints = fingerprints_by_hand(folder)
    if run is not None:
        fingerprints["run"] = sha256_of(run)
    return SimpleNamespace(fingerprints=fingerprints)


@pytest.mark.parametrize("with_run", [False, True])
def test_bench_sees_nothing_changed_on_the_same_data(folder, tmp_path, with_run):
    run = _run_file(tmp_path) if with_run else None
    config = EvaluateConfig(dataset_path=folder, run_path=run)
    assert _changed_data(config, _stored(folder, run)) == []


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("keep_mtime", [False, True])
def test_bench_names_each_data_file_changed_alone_at_the_same_size(folder, tmp_path, name, keep_mtime):
    run = _run_file(tmp_path)
    stored = _stored(folder, run)
    if keep_mtime:
        replace_keeping_size_and_mtime(folder / FILES[name])
    else:
        same_size_change(folder / FILES[name])
    changed = _changed_data(EvaluateConfig(dataset_path=folder, run_path=run), stored)
    assert [WORDS.get(c, c) for c in changed] == [name]


@pytest.mark.parametrize("keep_mtime", [False, True])
def test_bench_names_a_run_file_changed_at_the_same_size(folder, tmp_path, keep_mtime):
    run = _run_file(tmp_path)
    stored = _stored(folder, run)
    (replace_keeping_size_and_mtime if keep_mtime else same_size_change)(run)
    assert _changed_data(EvaluateConfig(dataset_path=folder, run_path=run), stored) == ["the run file"]


def test_a_result_without_a_run_fingerprint_is_not_stale_for_its_run(folder, tmp_path):
    run = _run_file(tmp_path)
    stored = _stored(folder, None)  # written before runs were fingerprinted
    assert _changed_data(EvaluateConfig(dataset_path=folder, run_path=run), stored) == []


def test_a_folder_that_cannot_be_read_counts_as_changed(folder, tmp_path):
    stored = _stored(folder, None)
    shutil.rmtree(folder)
    assert _changed_data(EvaluateConfig(dataset_path=folder), stored) == ["the dataset folder"]


def test_every_file_changed_is_named(folder, tmp_path):
    run = _run_file(tmp_path)
    stored = _stored(folder, run)
    for file in [*FILES.values()]:
        same_size_change(folder / file)
    same_size_change(run)
    changed = _changed_data(EvaluateConfig(dataset_path=folder, run_path=run), stored)
    assert sorted(WORDS.get(c, c) for c in changed) == sorted([*FILES, "the run file"])


def test_the_data_tag_changes_with_each_fingerprint_and_nothing_else():
    import re

    from harness.reporting.report import data_tag

    base = {"corpus": "a" * 64, "queries": "b" * 64, "qrels": "c" * 64}
    tag = data_tag(SimpleNamespace(fingerprints=base))
    assert re.fullmatch(r"[0-9a-f]{8}", tag)
    assert data_tag(SimpleNamespace(fingerprints={**base, "run": "d" * 64})) == tag  # the run is not the data
    seen = {tag}
    for name in base:
        other = data_tag(SimpleNamespace(fingerprints={**base, name: "e" * 64}))
        assert other not in seen
        seen.add(other)
    # the files stay apart: the same three values in another order are other data
    assert data_tag(SimpleNamespace(fingerprints={"corpus": "b" * 64, "queries": "a" * 64, "qrels": "c" * 64})) != tag


def test_a_file_one_side_does_not_record_is_not_compared():
    from harness.reporting.report import data_changes

    recorded = {"corpus": "a", "queries": "b", "qrels": "c"}
    assert data_changes(recorded, {"corpus": "a", "queries": "b", "qrels": "c"}) == []
    assert data_changes(recorded, {"corpus": "x", "queries": "y", "qrels": "z"}) == ["corpus", "queries", "qrels"]
    assert data_changes({"corpus": "a"}, {"corpus": "a", "queries": "y"}) == []
    assert data_changes({"corpus": "", "queries": "b"}, {"corpus": "x", "queries": "y"}) == ["queries"]
    assert data_changes({"corpus": "a", "qrels": "c"}, {"corpus": "x", "qrels": ""}) == ["corpus"]


def test_the_staleness_check_never_downloads(folder, monkeypatch):
    import harness.pipeline.bench as bench

    calls = []
    real = bench.resolve_dataset

    def spy(*args, **kwargs):
        calls.append(kwargs.get("download"))
        return real(*args, **kwargs)

    monkeypatch.setattr(bench, "resolve_dataset", spy)
    assert _changed_data(EvaluateConfig(dataset_path=folder), _stored(folder, None)) == []
    assert calls == [False]


def test_the_data_tag_is_stable_across_versions():
    # a report names mixed data "scifact [data 1a2b3c4d]": the tag of given fingerprints must never change
    from harness.reporting.report import data_tag

    prints = {"corpus": "a" * 64, "queries": "b" * 64, "qrels": "c" * 64}
    by_hand = hashlib.sha256(("a" * 64 + "\n" + "b" * 64 + "\n" + "c" * 64).encode()).hexdigest()[:8]
    assert data_tag(SimpleNamespace(fingerprints=prints)) == by_hand
    older = {"corpus": "a" * 64, "queries": "b" * 64}  # a result written before qrels were fingerprinted
    assert (
        data_tag(SimpleNamespace(fingerprints=older))
        == hashlib.sha256(("a" * 64 + "\n" + "b" * 64 + "\n").encode()).hexdigest()[:8]
    )
