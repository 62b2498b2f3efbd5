"""One tie order at every cut: a ranking cut at K is the first K of the deeper ranking, ties at the cut included.

The rule (docs/conventions.md, "Ties"): score descending as pytrec_eval compares scores (float32: 1.0 and
1.00000001 tie), then doc_id descending in byte order. Every system that runs offline is searched at every depth
K of a small corpus built so that ties straddle every cut (duplicated texts, repeated terms, vectors of -1/0/1,
scores drawn from a few values, some equal only in float32), with doc_ids whose byte order is not their insertion
order; its ranking at K must be the first K of its deepest ranking, and the deepest ranking must be a brute-force
sort, written here, of the scores it holds (or that this file computes). The command line is checked the same way
(`retrieve --top-k K` against `--top-k 100`, `fuse --depth K` against `--depth 100`), a pool at depth d against
each pooled system's evaluated top d, and a cutoff deeper than a ranking against pytrec_eval.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval
import scipy.sparse
from cli_runner import invoke
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.records import Doc, Query, Run
from harness.retrieval.bm25 import BM25Retriever
from harness.retrieval.fusion import METHODS, FusionSpec, fuse
from harness.retrieval.index import VectorIndex

SETTINGS = settings(
    derandomize=True, deadline=None, max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
WORDS = ("apple", "banana", "cherry", "date")
# Scores that tie as pytrec_eval compares them (float32) but not as float64 does, and some that do not tie.
TIE_VALUES = (0.0, 1e-50, 0.5, 1.0, 1.00000001, 1.0000001, 2.0, 3.0)


def brute_force(scores: dict[str, float]) -> list[tuple[str, float]]:
    """Every document by (float32 score, doc_id bytes), both descending: trec_eval's order, by a plain sort."""
    return sorted(scores.items(), key=lambda item: (np.float32(item[1]), item[0].encode("utf-8")), reverse=True)


def ranked(run: Run, query_id: str) -> list[tuple[str, float]]:
    return [(hit.doc_id, hit.score) for hit in run.get(query_id, ())]


def assert_every_cut_is_the_prefix(search, query_ids, n: int, reference=None) -> None:
    """`search(K)` for K in 1..n is the first K of `search(n)`, which is the brute-force order of its scores
    (or of `reference`: query_id → every document's score)."""
    deep = search(n)
    for query_id in query_ids:
        scores = reference[query_id] if reference is not None else dict(deep.scores_of(query_id))
        assert ranked(deep, query_id) == brute_force(scores), query_id
    for k in range(1, n + 1):
        cut = search(k)
        for query_id in query_ids:
            assert ranked(cut, query_id) == ranked(deep, query_id)[:k], (k, query_id)


# --- generators ------------------------------------------------------------------------------------------------


@st.composite
def doc_ids(draw, n: int) -> list[str]:
    """n distinct ids, drawn in an order that is not their byte order (mixed case, digits, a non-ASCII letter)."""
    return draw(st.lists(st.text(alphabet="aBz09_é", min_size=1, max_size=3), min_size=n, max_size=n, unique=True))


@st.composite
def corpora(draw, min_docs: int = 3, max_docs: int = 9):
    """Documents whose texts come from a few texts (duplicates tie exactly), words repeated."""
    n = draw(st.integers(min_docs, max_docs))
    texts = draw(st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), min_size=1, max_size=3))
    ids = draw(doc_ids(n))
    return [Doc(doc_id, "", " ".join(draw(st.sampled_from(texts)))) for doc_id in ids]


@st.composite
def tied_vectors(draw, min_docs: int = 3, max_docs: int = 12, dimension: int = 3):
    """(doc_ids, vectors, queries) of -1/0/1 entries: a handful of distinct scores, ties at every cut."""
    n = draw(st.integers(min_docs, max_docs))
    entry = st.integers(-1, 1)
    docs = draw(st.lists(st.lists(entry, min_size=dimension, max_size=dimension), min_size=n, max_size=n))
    queries = draw(st.lists(st.lists(entry, min_size=dimension, max_size=dimension), min_size=1, max_size=3))
    return draw(doc_ids(n)), np.array(docs, dtype=np.float32), np.array(queries, dtype=np.float32)


def dense_reference(ids, vectors, queries) -> dict[str, dict[str, float]]:
    """Every document's score (exact in float64 for these small integers)."""
    scores = queries.astype(np.float64) @ vectors.astype(np.float64).T
    return {f"q{i}": dict(zip(ids, row.tolist())) for i, row in enumerate(scores)}


@st.composite
def tied_runs(draw, n_runs: int = 2, max_docs: int = 9):
    """Runs of one query over shared doc_ids, scores drawn from `TIE_VALUES`."""
    ids = draw(doc_ids(draw(st.integers(2, max_docs))))
    runs = []
    for _ in range(n_runs):
        held = draw(st.lists(st.sampled_from(ids), min_size=1, unique=True))
        runs.append({"q": {doc_id: draw(st.sampled_from(TIE_VALUES)) for doc_id in held}})
    return ids, runs


# --- Run.truncated and the order every metric reads -------------------------------------------------------------


@SETTINGS
@given(
    scores=st.dictionaries(
        st.text(alphabet="aBz09_é", min_size=1, max_size=3), st.sampled_from(TIE_VALUES), min_size=1, max_size=10
    )
)
def test_run_truncated_cuts_as_pytrec_eval_ranks(scores):
    run = Run({"q": scores})
    assert ranked(run, "q") == brute_force(scores)
    for k in range(1, len(scores) + 1):
        assert ranked(run.truncated(k), "q") == brute_force(scores)[:k]
    # pytrec_eval's own ranking: a document is in its top k exactly when it is in the cut's (P@k × k = 1).
    qrels = {f"q{i}": {doc_id: 1} for i, doc_id in enumerate(scores)}
    measures = {"P." + ",".join(str(k) for k in range(1, len(scores) + 1))}
    values = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate({q: dict(scores) for q in qrels})
    for i, doc_id in enumerate(scores):
        for k in range(1, len(scores) + 1):
            inside = doc_id in {d for d, _ in ranked(run.truncated(k), "q")}
            assert round(values[f"q{i}"][f"P_{k}"] * k) == int(inside), (doc_id, k)


# --- BM25 -------------------------------------------------------------------------------------------------------


@SETTINGS
@given(
    docs=corpora(),
    query_words=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3), min_size=1, max_size=3),
)
def test_bm25_every_cut_is_the_prefix_of_the_deeper_ranking(docs, query_words):
    retriever = BM25Retriever()
    retriever.index(iter(docs), progress=False)
    queries = [Query(f"q{i}", " ".join(words)) for i, words in enumerate(query_words)]
    assert_every_cut_is_the_prefix(lambda k: retriever.search(queries, k), [q.query_id for q in queries], len(docs))


# --- dense: flat, streamed and sharded exact search, compressed without rescoring ---------------------------------


def _flat(ids, vectors):
    index = VectorIndex(vectors.shape[1])
    half = len(ids) // 2  # two chunks: the order of the vectors is not the order of the doc_ids
    index.add(ids[:half], vectors[:half])
    index.add(ids[half:], vectors[half:])
    return index


@SETTINGS
@given(data=tied_vectors())
def test_flat_search_every_cut_is_the_prefix(data):
    ids, vectors, queries = data
    index = _flat(ids, vectors)
    query_ids = [f"q{i}" for i in range(len(queries))]
    reference = dense_reference(ids, vectors, queries)
    assert_every_cut_is_the_prefix(lambda k: index.search(query_ids, queries, k), query_ids, len(ids), reference)


@SETTINGS
@given(data=tied_vectors(), chunk=st.integers(1, 5))
def test_streamed_search_every_cut_is_the_prefix(data, chunk):
    from harness.retrieval.streamed import StreamedIndex

    ids, vectors, queries = data
    chunks = [vectors[start : start + chunk] for start in range(0, len(vectors), chunk)]
    index = StreamedIndex(lambda: iter(chunks), vectors.__getitem__, ids, vectors.shape[1], None, chunk, 2, 1)
    query_ids = [f"q{i}" for i in range(len(queries))]
    reference = dense_reference(ids, vectors, queries)
    assert_every_cut_is_the_prefix(lambda k: index.search(query_ids, queries, k), query_ids, len(ids), reference)


@settings(derandomize=True, deadline=None, max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=tied_vectors(), chunk=st.integers(1, 4), shards=st.integers(1, 3))
def test_sharded_search_every_cut_is_the_prefix(tmp_path_factory, data, chunk, shards):
    """What a Ray task runs on each shard (`search_shard`) and the driver's merge (`merge_top`), without Ray."""
    from harness.engines.ray_search import plan_shards, search_shard
    from harness.io.cache import embedding_entry
    from harness.retrieval.index import merge_top

    ids, vectors, queries = data
    chunks = [vectors[start : start + chunk] for start in range(0, len(vectors), chunk)]
    entry = embedding_entry(tmp_path_factory.mktemp("cache"), {"kind": "corpus", "test": "cut-prefix"})
    entry.start(chunk)
    for number, part in enumerate(chunks):
        entry.write_chunk(number, ids[number * chunk : number * chunk + len(part)], part)
    entry.finish(len(chunks), len(ids), vectors.shape[1])
    query_ids = [f"q{i}" for i in range(len(queries))]

    def search(depth: int) -> Run:
        best = None
        for shard in plan_shards([len(part) for part in chunks], shards):
            scores, rows, _ = search_shard(entry, shard, queries, depth, block=2)
            best = (scores, rows) if best is None else merge_top([best, (scores, rows)], depth, ids.__getitem__)
        return Run.from_scores(
            {
                q: {ids[r]: s for r, s in zip(rows, scores)}
                for q, scores, rows in zip(query_ids, *map(np.ndarray.tolist, best))
            }
        )

    reference = dense_reference(ids, vectors, queries)
    assert_every_cut_is_the_prefix(search, query_ids, len(ids), reference)


@SETTINGS
@given(data=tied_vectors(dimension=8), precision=st.sampled_from(["int8", "binary"]))
def test_compressed_search_without_rescoring_every_cut_is_the_prefix(data, precision):
    from harness.retrieval.compress import CompressedIndex, CompressionSpec

    ids, vectors, queries = data
    index = CompressedIndex(vectors.shape[1], CompressionSpec(embedding_precision=precision, rescore_multiplier=0))
    index.add(ids, vectors)
    query_ids = [f"q{i}" for i in range(len(queries))]
    assert_every_cut_is_the_prefix(lambda k: index.search(query_ids, queries, k), query_ids, len(ids))


# --- learned sparse -----------------------------------------------------------------------------------------------


@SETTINGS
@given(data=tied_vectors(dimension=5))
def test_learned_sparse_search_every_cut_is_the_prefix(data):
    from harness.retrieval.learned_sparse import SparseIndex

    ids, vectors, queries = data
    vectors, queries = np.abs(vectors) * 2, np.abs(queries)  # sparse weights are non-negative
    index = SparseIndex()
    half = len(ids) // 2
    index.add(ids[:half], scipy.sparse.csr_matrix(vectors[:half]))
    index.add(ids[half:], scipy.sparse.csr_matrix(vectors[half:]))
    query_ids = [f"q{i}" for i in range(len(queries))]
    rows = scipy.sparse.csr_matrix(queries)
    reference = {
        q: {d: s for d, s in scores.items() if s > 0} for q, scores in dense_reference(ids, vectors, queries).items()
    }
    assert_every_cut_is_the_prefix(lambda k: index.search(query_ids, rows, k), query_ids, len(ids), reference)


# --- fusion and reranking ---------------------------------------------------------------------------------------


def rrf_by_hand(runs: list[dict[str, dict[str, float]]], k: int = 60) -> dict[str, float]:
    """RRF of one query "q", ranks by the brute-force order of each run."""
    totals: dict[str, float] = {}
    for run in runs:
        for rank, (doc_id, _) in enumerate(brute_force(run["q"]), 1):
            totals[doc_id] = totals.get(doc_id, 0.0) + 1.0 / (k + rank)
    return totals


@SETTINGS
@given(data=tied_runs(), method=st.sampled_from(METHODS))
def test_fusion_every_cut_is_the_prefix(data, method):
    ids, members = data
    runs = [Run(member) for member in members]
    reference = {"q": rrf_by_hand(members)} if method == "rrf" else None
    n = len({d for member in members for d in member["q"]})
    assert_every_cut_is_the_prefix(lambda k: fuse(runs, FusionSpec(method=method, depth=k)), ["q"], n, reference)


class FakeReranker:
    """A cross-encoder stand-in: a pair's score is the number of query words in the document (duplicates tie)."""

    def __init__(self, depth: int):
        from harness.retrieval.rerank import RerankSpec

        self.spec = RerankSpec("fake", depth=depth)

    def score(self, pairs):
        return np.array([sum(w in document.split() for w in query.split()) for query, document in pairs], np.float32)


@SETTINGS
@given(
    data=tied_runs(n_runs=1),
    texts=st.lists(st.sampled_from(["apple", "apple banana", "cherry"]), min_size=9, max_size=9),
)
def test_rerank_reranks_the_first_stage_top_depth_by_the_rule(data, texts):
    from harness.retrieval.rerank import ScoreCache, rerank

    ids, (first,) = data
    first_run = Run(first)
    documents = dict(zip(ids, texts))
    queries = {"q": "apple banana"}
    n = len(first["q"])
    for depth in range(1, n + 1):
        reranked, _ = rerank(first_run, queries, documents, FakeReranker(depth), ScoreCache(None, {}), progress=False)
        wanted = {doc_id for doc_id, _ in brute_force(first["q"])[:depth]}  # the first stage's top `depth`
        assert set(reranked.scores_of("q")) == wanted, depth
        assert ranked(reranked, "q") == brute_force(dict(reranked.scores_of("q")))
        for k in range(1, depth + 1):
            assert ranked(reranked.truncated(k), "q") == ranked(reranked, "q")[:k]


# --- the command line: retrieve, fuse, pool, and a cutoff deeper than the ranking -------------------------------

# A team's small set: KB-003 and KB-020 say the same thing (they tie for every query), as do KB-1 and KB-10;
# ids are written in an order that is not their byte order.
TEAM_DOCS = {
    "KB-020": "reset a password from the login page",
    "KB-003": "reset a password from the login page",
    "KB-7": "password rules and password length",
    "KB-10": "login with single sign on",
    "KB-1": "login with single sign on",
    "KB-2": "reset the router",
    "KB-005": "export a report as csv",
    "kb-9": "password reset email never arrives",
}
TEAM_QUERIES = {"q1": "reset password", "q2": "login", "q3": "password"}
TEAM_QRELS = {"q1": {"KB-7": 1}, "q2": {"KB-2": 1}, "q3": {"KB-005": 1}}


def team_folder(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in TEAM_DOCS.items())
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in TEAM_QUERIES.items())
    )
    lines = [f"{q}\t{d}\t{g}" for q, docs in TEAM_QRELS.items() for d, g in docs.items()]
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(lines) + "\n")
    return root


def read_lines(path: Path) -> dict[str, list[tuple[str, float]]]:
    """A TREC run as written: query → [(doc, score)] in the file's rank order."""
    found: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text().splitlines():
        query_id, _, doc_id, _, score, _ = line.split()
        found.setdefault(query_id, []).append((doc_id, float(score)))
    return found


def succeeds(*args) -> None:
    result = invoke([str(arg) for arg in args])
    assert result.exit_code == 0, result.output


def test_cli_retrieve_and_fuse_at_k_are_the_prefix_of_depth_100(tmp_path):
    """`retrieve --top-k K` (bm25, the hash:16 stand-in) and `fuse --depth K` write the first K lines per query of
    the same command at 100, on a set whose rankings tie at several cuts."""
    folder = team_folder(tmp_path / "team")
    cache = ["--cache-dir", tmp_path / "cache"]
    for model in ("bm25", "hash:16"):
        succeeds(
            "retrieve", folder, "--model", model, "--top-k", 100, "--out", tmp_path / f"{model[:4]}-100.trec", *cache
        )
    deep = {model: read_lines(tmp_path / f"{model}-100.trec") for model in ("bm25", "hash")}
    tied_cuts = [k for hits in deep["bm25"].values() for k in range(1, len(hits)) if hits[k - 1][1] == hits[k][1]]
    assert len(tied_cuts) >= 3  # the set ties at several cuts (KB-020, KB-003 and kb-9 for q1)
    runs = [tmp_path / "bm25-100.trec", tmp_path / "hash-100.trec"]
    succeeds("fuse", *runs, "--depth", 100, "--out", tmp_path / "rrf-100.trec")
    deep["rrf"] = read_lines(tmp_path / "rrf-100.trec")
    for k in range(1, len(TEAM_DOCS) + 1):
        for model in ("bm25", "hash:16"):
            succeeds(
                "retrieve", folder, "--model", model, "--top-k", k, "--out", tmp_path / f"{model[:4]}-{k}.trec", *cache
            )
        succeeds("fuse", *runs, "--depth", k, "--out", tmp_path / f"rrf-{k}.trec")
        for name in ("bm25", "hash", "rrf"):
            cut = read_lines(tmp_path / f"{name}-{k}.trec")
            assert cut == {q: hits[:k] for q, hits in deep[name].items()}, (name, k)
    for name, run in deep.items():
        for query_id, hits in run.items():
            assert hits == brute_force(dict(hits)), (name, query_id)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_a_pool_holds_every_pooled_systems_evaluated_top_depth(tmp_path, depth):
    """bm25, a dense stand-in and their RRF, each evaluated as `evaluate` and `fuse` score them, against the pool
    made at `depth` from the same systems: every document of each one's evaluated top `depth` is pooled (or
    judged already), and `report --pool` finds every one of them in the pool."""
    from harness.api import evaluate, fuse, pool, pool_check

    folder = team_folder(tmp_path / "team")
    results = tmp_path / "results"
    paths = [
        evaluate(folder, model=model, output_dir=results, cache_dir=tmp_path / "cache").path
        for model in ("bm25", "hash:16")
    ]
    fused = fuse(paths, "rrf", output_dir=results)
    manifest = pool(folder, tmp_path / "pool", "bm25, h=hash:16, rrf(bm25, h)", depth=depth)
    pooled: dict[str, set[str]] = {}
    with open(tmp_path / "pool" / "pool.csv", encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            pooled.setdefault(row["query_id"], set()).add(row["doc_id"])
    for path in [*paths, fused.path]:
        for query_id, hits in read_lines(Path(path).with_name(Path(path).stem + ".run.trec")).items():
            top = {doc_id for doc_id, _ in hits[:depth]}
            assert top <= pooled.get(query_id, set()) | set(TEAM_QRELS.get(query_id, {})), (path, query_id)
    assert manifest["depth"] == depth
    checks = pool_check([*paths, fused.path], tmp_path / "pool")
    assert [check.in_pool for check in checks] == [True, True, True], [check.format_text() for check in checks]


def test_a_cutoff_deeper_than_the_ranking_is_computed_for_every_system_as_pytrec_eval_does(tmp_path):
    """BM25 returns a few documents, its RRF with a dense stand-in the whole corpus: both store Recall@100,
    P@100 and nDCG@100 (trec_eval computes them on any ranking, however short), equal to pytrec_eval's."""
    from harness.api import evaluate, fuse
    from harness.io.formats import read_run

    folder = team_folder(tmp_path / "team")
    results = tmp_path / "results"
    members = [
        evaluate(folder, model=model, output_dir=results, cache_dir=tmp_path / "cache") for model in ("bm25", "hash:16")
    ]
    for result in [*members, fuse([member.path for member in members], "rrf", output_dir=results)]:
        run = read_run(result.run_path)
        assert max(run.depth(q) for q in run) < 100
        measured = pytrec_eval.RelevanceEvaluator(TEAM_QRELS, {"recall.100", "P.100", "ndcg_cut.100"}).evaluate(
            {q: dict(run.scores_of(q)) for q in run}
        )
        for name, key in (("Recall@100", "recall_100"), ("P@100", "P_100"), ("nDCG@100", "ndcg_cut_100")):
            want = sum(measured.get(q, {}).get(key, 0.0) for q in TEAM_QRELS) / len(TEAM_QRELS)
            assert result.metrics[name] == pytest.approx(want, abs=1e-12), (result.label, name)


def test_a_tiny_random_weight_model_retrieves_the_prefix_at_every_depth(tmp_path, tiny_bert):
    """A real sentence-transformers model (random weights, offline): KB-020 and KB-003 (one text) get one vector,
    so they tie at every cut that separates them, and flat search keeps the order of `--top-k 100` at each K."""
    from harness.api import retrieve

    words = sorted({word for text in [*TEAM_DOCS.values(), *TEAM_QUERIES.values()] for word in text.split()})
    model = str(tiny_bert(words))
    folder = team_folder(tmp_path / "team")
    cache = tmp_path / "cache"
    deep = retrieve(folder, tmp_path / "deep.trec", model, top_k=100, cache_dir=cache)
    for query_id in deep:
        assert ranked(deep, query_id) == brute_force(dict(deep.scores_of(query_id)))
    assert any(
        hits[k - 1].score == hits[k].score for hits in deep.values() for k in range(1, len(hits))
    )  # ties at a cut
    for k in range(1, len(TEAM_DOCS) + 1):
        cut = retrieve(folder, tmp_path / f"{k}.trec", model, top_k=k, cache_dir=cache)
        assert {q: ranked(cut, q) for q in cut} == {q: ranked(deep, q)[:k] for q in deep}, k
