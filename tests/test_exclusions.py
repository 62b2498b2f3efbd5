"""Excluded pairs (``excluded/<split>.tsv``): removed from every ranking before any cut and metric, for every kind
of system, in pools; read and checked like qrels; written by convert; recorded by digest."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import pytrec_eval
from cli_runner import invoke
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

WORDS = "apple banana cherry date zucchini fruit stone fig elder grape eggplant".split()
DOCS = [f"d{i}" for i in range(8)]
QUERIES = ["q0", "q1", "q2"]


def _folder(root: Path, qrels: dict, excluded: list[tuple[str, str]] | None, corpus_ids=DOCS) -> Path:
    """A BEIR folder: documents of two words each, three queries (whose ids are documents too: self-hits), qrels."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "corpus.jsonl", "w") as handle:
        for i, doc_id in enumerate([*corpus_ids, *QUERIES]):
            text = f"{WORDS[i % len(WORDS)]} {WORDS[(3 * i + 1) % len(WORDS)]}"
            handle.write(json.dumps({"_id": doc_id, "title": "", "text": text}) + "\n")
    with open(root / "queries.jsonl", "w") as handle:
        for i, query_id in enumerate(QUERIES):
            handle.write(json.dumps({"_id": query_id, "text": f"{WORDS[i]} {WORDS[i + 2]}"}) + "\n")
    (root / "qrels").mkdir(exist_ok=True)
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{g}" for q, docs in qrels.items() for d, g in docs.items()]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    if excluded is not None:
        (root / "excluded").mkdir(exist_ok=True)
        body = "".join(f"{q}\t{d}\n" for q, d in excluded)
        (root / "excluded" / "test.tsv").write_text("query-id\tcorpus-id\n" + body)
    return root


def _run_pairs(path: Path) -> set[tuple[str, str]]:
    return {tuple(line.split()[0:3:2]) for line in Path(path).read_text().splitlines() if line.strip()}


def _ok(result):
    assert result.exit_code == 0, result.output
    return result


@st.composite
def _cases(draw):
    """A run with tied scores, qrels, and exclusions drawn mostly from each query's judged-relevant top documents
    (what an exclusion must remove to matter), with or without the self-hit policy."""
    candidates = [*DOCS, *QUERIES]
    run, qrels, excluded = {}, {}, []
    for query_id in QUERIES:
        docs = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=8, unique=True))
        run[query_id] = {d: draw(st.sampled_from([0.5, 1.0, 1.0, 2.0, 3.0])) for d in docs}
        judged = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=4, unique=True))
        qrels[query_id] = {d: draw(st.integers(0, 2)) for d in judged}
        top = sorted(run[query_id], key=lambda d: (-run[query_id][d], d))[:3]
        relevant_top = [d for d in top if qrels[query_id].get(d, 0) >= 1]
        pool = relevant_top + top + judged + [query_id]
        excluded += [(query_id, d) for d in draw(st.lists(st.sampled_from(pool), max_size=3, unique=True))]
    return run, qrels, sorted(set(excluded)), draw(st.booleans())


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_cases())
def test_metrics_equal_pytrec_eval_on_the_run_with_the_excluded_pairs_removed(tmp_path, case):
    run, qrels, excluded, self_hits = case
    work = tmp_path / hashlib.sha256(repr(case).encode()).hexdigest()[:12]
    folder = _folder(work / "data", qrels, excluded)
    run_file = work / "run.trec"
    run_file.write_text("".join(f"{q} Q0 {d} 0 {s!r} x\n" for q, docs in run.items() for d, s in docs.items()))
    policy = "--ignore-identical-ids" if self_hits else "--keep-identical-ids"
    out = work / "out"
    _ok(invoke(["-q", "evaluate", str(folder), "--run", str(run_file), "--k", "1,3", "--top-k", "3", policy,
                "--output-dir", str(out)]))  # fmt: skip
    result = json.loads(next(out.rglob("test*.json")).read_text())
    # the brute-force reference: every excluded pair (and, by the policy, each self-hit) filtered out by hand
    gone = set(excluded) | ({(q, q) for q in QUERIES} if self_hits else set())
    filtered = {q: {d: s for d, s in docs.items() if (q, d) not in gone} for q, docs in run.items()}
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.1,3", "recall.3", "P.3"}).evaluate(filtered)
    for query_id in qrels:
        got = result["per_query"][query_id]
        want = reference.get(query_id, {})
        assert got["nDCG@3"] == pytest.approx(want.get("ndcg_cut_3", 0.0), abs=1e-12)
        assert got["nDCG@1"] == pytest.approx(want.get("ndcg_cut_1", 0.0), abs=1e-12)
        assert got["Recall@3"] == pytest.approx(want.get("recall_3", 0.0), abs=1e-12)
        assert got["P@3"] == pytest.approx(want.get("P_3", 0.0), abs=1e-12)
    written = _run_pairs(next(out.rglob("test*.run.trec")))
    assert not written & gone
    assert (
        result["fingerprints"]["excluded"]
        == hashlib.sha256((folder / "excluded" / "test.tsv").read_bytes()).hexdigest()
    )


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny bi-encoder, sparse encoder and two cross-encoders with random weights (no download)."""
    from tiny_models import bi_encoder, cross_encoder, sparse_encoder

    root = tmp_path_factory.mktemp("exclusion-models")
    vocabulary = [*WORDS, "query", "doc"]
    return {
        "dense": bi_encoder(root / "bi", vocabulary, normalize=True),
        "sparse": sparse_encoder(root / "sparse", vocabulary),
        "ce": cross_encoder(root / "ce", vocabulary),
    }


def _every_query_loses_its_top_documents(tmp_path) -> tuple[Path, set[tuple[str, str]]]:
    """A folder whose exclusions hold each query's two best BM25 documents and a relevant one: pairs every system
    would rank high."""
    qrels = {q: {DOCS[i]: 1, DOCS[i + 3]: 2} for i, q in enumerate(QUERIES)}
    folder = _folder(tmp_path / "data", qrels, None)
    probe = tmp_path / "probe.trec"
    _ok(invoke(["-q", "retrieve", str(folder), "--model", "bm25", "--out", str(probe), "--keep-identical-ids"]))
    excluded = set()
    for query_id in QUERIES:
        ranked = [d for q, d in _ordered(probe) if q == query_id]
        excluded |= {(query_id, d) for d in ranked[:2]} | {(query_id, next(iter(qrels[query_id])))}
    (folder / "excluded").mkdir()
    body = "".join(f"{q}\t{d}\n" for q, d in sorted(excluded))
    (folder / "excluded" / "test.tsv").write_text("query-id\tcorpus-id\n" + body)
    return folder, excluded


def _ordered(path: Path) -> list[tuple[str, str]]:
    return [tuple(line.split()[0:3:2]) for line in path.read_text().splitlines() if line.strip()]


def test_no_excluded_pair_is_in_any_written_run_of_any_kind_of_system(tmp_path, models):
    folder, excluded = _every_query_loses_its_top_documents(tmp_path)
    gone = excluded | {(q, q) for q in QUERIES}  # and the self-hits, which the option drops
    external = tmp_path / "external.trec"  # a run holding every pair, excluded ones on top
    external.write_text("".join(f"{q} Q0 {d} 0 {10.0 if (q, d) in excluded else 1.0} x\n" for q in QUERIES
                                for d in [*DOCS, *QUERIES]))  # fmt: skip
    out = tmp_path / "out"
    systems = [
        "bm25",
        "hash:32",
        str(models["dense"]),
        str(models["sparse"]),
        f"run:{external}",
        "rrf(bm25, hash:32)",
        f"bm25 >> {models['ce']}@5",
    ]
    common = ["--k", "1,3", "--ignore-identical-ids", "--output-dir", str(out), "--cache-dir", str(tmp_path / "c")]
    for system in systems:
        _ok(invoke(["-q", "evaluate", str(folder), "--model", system, "--top-k", "5", *common]
                   if ">>" not in system else ["-q", "evaluate", str(folder), "--model", system, *common]))  # fmt: skip
    _ok(invoke(["-q", "bench", "--datasets", str(folder), "--systems", f">> {models['ce']}", "--candidates",
                "rrf(bm25, hash:32)", "--depth", "4", *common]))  # fmt: skip
    runs = sorted(path for path in out.rglob("*.trec") if path.is_file())
    assert len(runs) >= 10  # each system's, the fusion's members', the candidate set's and its rerank's
    for path in runs:
        assert not _run_pairs(path) & gone, path
        assert _run_pairs(path), path
    retrieved = tmp_path / "retrieved.trec"
    _ok(invoke(["-q", "retrieve", str(folder), "--model", "rrf(bm25, hash:32)", "--out", str(retrieved),
                "--ignore-identical-ids", "--cache-dir", str(tmp_path / "c")]))  # fmt: skip
    assert not _run_pairs(retrieved) & gone
    pool = tmp_path / "pool"
    _ok(invoke(["-q", "pool", str(folder), "--runs", str(external), "--depth", "20", "--out", str(pool)]))
    pooled = {
        (row["query_id"], row["doc_id"]) for row in map(json.loads, (pool / "pool.jsonl").read_text().splitlines())
    }
    assert pooled and not pooled & excluded


def test_a_result_without_exclusions_keeps_its_identity_and_one_with_them_records_their_digest(tmp_path):
    qrels = {q: {DOCS[i]: 1} for i, q in enumerate(QUERIES)}
    plain = _folder(tmp_path / "plain", qrels, None)
    excluded = _folder(tmp_path / "excluded", qrels, [("q0", "d0")])
    results = {}
    for name, folder in (("plain", plain), ("excluded", excluded)):
        _ok(invoke(["-q", "evaluate", str(folder), "--model", "bm25", "--output-dir", str(tmp_path / name)]))
        results[name] = json.loads(next((tmp_path / name).rglob("test*.json")).read_text())
    assert "excluded" not in results["plain"]["fingerprints"] and "excluded_pairs" not in results["plain"]["config"]
    assert results["plain"]["config_hash"] == results["excluded"]["config_hash"]
    digest = hashlib.sha256((excluded / "excluded" / "test.tsv").read_bytes()).hexdigest()
    assert results["excluded"]["fingerprints"]["excluded"] == digest
    assert results["excluded"]["config"]["excluded_pairs"] == 1


def test_bench_reruns_a_cell_whose_exclusions_changed(tmp_path):
    qrels = {q: {DOCS[i]: 1} for i, q in enumerate(QUERIES)}
    folder = _folder(tmp_path / "data", qrels, None)
    args = ["-q", "bench", "--datasets", str(folder), "--systems", "bm25", "--output-dir", str(tmp_path / "out")]
    _ok(invoke(args))
    assert "1 skipped" in _ok(invoke(args)).output
    (folder / "excluded").mkdir()
    (folder / "excluded" / "test.tsv").write_text("query-id\tcorpus-id\nq0\td0\n")
    rerun = _ok(invoke(args)).output
    assert "0 skipped" in rerun and "excluded changed" in rerun


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("query-id\tcorpus-id\nq0\td0\nq9\td1\n", "excluded/test.tsv:3: query 'q9' is not in queries.jsonl"),
        ("query-id\tcorpus-id\nq0\td99\n", "excluded/test.tsv:2: document 'd99' is not in corpus.jsonl"),
        ("query-id\tcorpus-id\tscore\nq0\td0\t1\n", "excluded/test.tsv:1: wrong header"),
        ("query-id\tcorpus-id\nq0\td0\t1\n", "excluded/test.tsv:2: expected 2 tab-separated ids"),
    ],
)
def test_bad_exclusions_are_one_line_before_anything_is_encoded(tmp_path, body, message):
    folder = _folder(tmp_path / "data", {"q0": {"d1": 1}}, None)
    (folder / "excluded").mkdir()
    (folder / "excluded" / "test.tsv").write_text(body)
    cache = tmp_path / "cache"
    result = invoke(["-q", "evaluate", str(folder), "--model", "hash:32", "--output-dir", str(tmp_path / "out"),
                     "--cache-dir", str(cache)])  # fmt: skip
    assert result.exit_code == 1
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))  # nothing encoded, nothing cached
    assert not (tmp_path / "out").exists()
    report = invoke(["validate", str(folder)])
    assert report.exit_code == 1 and message.split(": ", 1)[1].split(" (")[0] in report.output


def test_convert_writes_the_excluded_pairs_and_refuses_unknown_ids(tmp_path):
    (tmp_path / "docs.csv").write_text("id,text\nd1,apple\nd2,banana\nd3,cherry\n")
    (tmp_path / "queries.csv").write_text("id,text\nq1,apple\nq2,banana\n")
    (tmp_path / "qrels.csv").write_text("query_id,doc_id,score\nq1,d1,1\nq2,d2,1\n")
    (tmp_path / "excluded.csv").write_text("query_id,doc_id\nq1,d2\nq2,d3\nq1,d2\n")
    base = ["convert", "--corpus", str(tmp_path / "docs.csv"), "--queries", str(tmp_path / "queries.csv"), "--qrels",
            str(tmp_path / "qrels.csv")]  # fmt: skip
    _ok(invoke([*base, "--excluded", str(tmp_path / "excluded.csv"), "--out", str(tmp_path / "out")]))
    written = (tmp_path / "out" / "excluded" / "test.tsv").read_text().splitlines()
    assert written == ["query-id\tcorpus-id", "q1\td2", "q2\td3"]
    assert _ok(invoke(["validate", str(tmp_path / "out")])).exit_code == 0
    (tmp_path / "bad.csv").write_text("query_id,doc_id\nq1,d9\n")
    bad = invoke([*base, "--excluded", str(tmp_path / "bad.csv"), "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 1 and "pair(s) name unknown documents" in bad.stderr and "'d9'" in bad.stderr
    assert not (tmp_path / "bad").exists()
    from harness.api import convert

    summary = convert(tmp_path / "api", tmp_path / "docs.csv", tmp_path / "queries.csv", tmp_path / "qrels.csv",
                      excluded=tmp_path / "excluded.csv")  # fmt: skip
    assert summary.n_excluded == 2


def test_read_exclusions_against_a_brute_force_reader(tmp_path):
    from harness.io.exclusions import read_exclusions

    path = tmp_path / "x.tsv.gz"
    import gzip

    lines = ["query-id\tcorpus-id", "a\tb", "a\tc", "b\ta", "a\tb", ""]
    with gzip.open(path, "wt") as handle:
        handle.write("\r\n".join(lines))
    expected: dict[str, set[str]] = {}
    for line in lines[1:]:
        if line:
            q, d = line.split("\t")
            expected.setdefault(q, set()).add(d)
    got = read_exclusions(path, self_hits=True)
    assert {q: set(docs) for q, docs in got.pairs.items()} == expected
    assert got.of("a") == {"a", "b", "c"} and got.most == 3 and got.n_pairs == 3
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_first_stage_keeps_its_depth_after_its_exclusions(tmp_path):
    """BM25 asked for 3 documents a query keeps 3 once its excluded pairs are gone: the top 3 of its deeper ranking
    (made on the folder without exclusions) with the pairs filtered out by hand."""
    qrels = {q: {DOCS[i]: 1} for i, q in enumerate(QUERIES)}
    plain = _folder(tmp_path / "plain", qrels, None)
    probe = tmp_path / "probe.trec"
    _ok(invoke(["-q", "retrieve", str(plain), "--model", "bm25", "--top-k", "20", "--out", str(probe),
                "--keep-identical-ids"]))  # fmt: skip
    ranked = _ordered(probe)
    excluded = [pair for query_id in QUERIES for pair in [p for p in ranked if p[0] == query_id][:2]]
    folder = _folder(tmp_path / "excluded", qrels, excluded)
    out = tmp_path / "out"
    _ok(invoke(["-q", "evaluate", str(folder), "--model", "bm25", "--top-k", "3", "--k", "1,3", "--keep-identical-ids",
                "--output-dir", str(out)]))  # fmt: skip
    written = _ordered(next(out.rglob("test*.run.trec")))
    expected = [
        pair for query_id in QUERIES for pair in [p for p in ranked if p[0] == query_id and p not in excluded][:3]
    ]
    assert written == expected


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(QUERIES), st.sampled_from(DOCS[:3])), min_size=1, max_size=12))
def test_write_exclusions_writes_a_repeated_pair_once_and_counts_the_distinct_pairs(tmp_path, pairs):
    from harness.io.exclusions import write_exclusions

    path = tmp_path / hashlib.sha256(repr(pairs).encode()).hexdigest()[:12] / "test.tsv"
    path.parent.mkdir()
    distinct = []  # the brute-force reference: each pair at its first occurrence
    for pair in pairs:
        if pair not in distinct:
            distinct.append(pair)
    assert write_exclusions(iter(pairs), path) == len(distinct)
    assert path.read_text().splitlines() == ["query-id\tcorpus-id", *(f"{q}\t{d}" for q, d in distinct)]


def test_a_gzipped_exclusions_file_is_used_by_evaluate_and_its_ids_checked_by_validate(tmp_path):
    import gzip

    qrels = {q: {DOCS[i]: 1} for i, q in enumerate(QUERIES)}
    folder = _folder(tmp_path / "data", qrels, None)
    (folder / "excluded").mkdir()
    with gzip.open(folder / "excluded" / "test.tsv.gz", "wt") as handle:
        handle.write("query-id\tcorpus-id\nq0\td0\nq1\td5\n")
    run_file = tmp_path / "run.trec"
    run_file.write_text("".join(f"{q} Q0 {d} 0 {9.0 - i} x\n" for q in QUERIES for i, d in enumerate(DOCS)))
    out = tmp_path / "out"
    _ok(invoke(["-q", "evaluate", str(folder), "--run", str(run_file), "--k", "1,3", "--top-k", "5",
                "--keep-identical-ids", "--output-dir", str(out)]))  # fmt: skip
    written = _ordered(next(out.rglob("test*.run.trec")))
    expected = [(q, d) for q in QUERIES for d in DOCS if (q, d) not in {("q0", "d0"), ("q1", "d5")}]
    assert written == [p for q in QUERIES for p in [x for x in expected if x[0] == q][:5]]
    result = json.loads(next(out.rglob("test*.json")).read_text())
    assert result["config"]["excluded_pairs"] == 2
    with gzip.open(folder / "excluded" / "test.tsv.gz", "wt") as handle:
        handle.write("query-id\tcorpus-id\nq0\td0\nq1\td99\n")
    report = invoke(["validate", str(folder)])
    assert report.exit_code == 1 and "document 'd99' is not in corpus.jsonl" in report.output, report.output


def test_an_exclusions_file_whose_header_starts_with_a_byte_order_mark_is_read(tmp_path):
    from harness.io.exclusions import read_exclusions

    path = tmp_path / "test.tsv"
    path.write_bytes("\ufeffquery-id\tcorpus-id\r\nq0\td1\r\nq0\td2\r\nq1\td1\r\n".encode())
    assert {q: set(docs) for q, docs in read_exclusions(path).pairs.items()} == {"q0": {"d1", "d2"}, "q1": {"d1"}}


def test_validate_warns_for_the_exclusions_of_a_split_without_qrels_and_not_of_one_with_them(tmp_path):
    folder = _folder(tmp_path / "data", {q: {DOCS[i]: 1} for i, q in enumerate(QUERIES)}, [("q0", "d1")])
    (folder / "excluded" / "dev.tsv").write_text("query-id\tcorpus-id\nq1\td2\nq2\td3\n")
    report = invoke(["validate", str(folder)])
    assert "no qrels/dev.tsv: these 2 pairs apply to no split" in report.output, report.output
    assert "no qrels/test.tsv" not in report.output
