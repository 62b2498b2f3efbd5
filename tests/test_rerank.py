"""Cross-encoder reranking with a tiny random-weight BERT built here and loaded through
sentence-transformers' CrossEncoder exactly as a real model is."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_runner import invoke

from harness.errors import HarnessError
from harness.records import Run
from harness.retrieval.rerank import Reranker, RerankSpec, ScoreCache, model_kind, rerank

WORDS = "apple banana cherry date zucchini fruit stone fig elder grape kiwi lemon query doc".split()


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory) -> Path:
    """A 2-layer BERT sequence classifier with random weights and a word-level vocabulary."""
    from tiny_models import cross_encoder

    return cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"), WORDS)


def _evaluate(folder, out, *options):
    return invoke(["-q", "evaluate", str(folder), "--output-dir", str(out), "--json", *options])


def test_model_kinds_are_read_from_the_folder(tiny_cross_encoder, tmp_path):
    from sentence_transformers import CrossEncoder

    from harness.retrieval.models import resolve_model_source

    assert model_kind(str(tiny_cross_encoder)) == "cross-encoder"  # a plain transformers classifier folder
    CrossEncoder(str(tiny_cross_encoder)).save(str(tmp_path / "saved"))
    assert model_kind(str(tmp_path / "saved")) == "cross-encoder"  # as sentence-transformers 6 saves one
    assert model_kind(resolve_model_source("all-MiniLM-L6-v2")) == "bi-encoder"
    assert model_kind("some/hub-name") == "unknown"


def test_reranked_scores_are_the_cross_encoders_and_depth_1_keeps_the_ranking(tiny_cross_encoder, tmp_path):
    from sentence_transformers import CrossEncoder

    first = Run.from_scores({"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}, "q2": {"d3": 1.0, "d1": 0.5}})
    queries = {"q1": "apple fruit", "q2": "cherry"}
    docs = {"d1": "Fruit apple banana", "d2": "banana cherry", "d3": "Stone fruit cherry date"}
    reranker = Reranker(RerankSpec(str(tiny_cross_encoder), depth=3))
    reranked, counts = rerank(first, queries, docs, reranker, ScoreCache(None, {}), progress=False)
    model = CrossEncoder(str(tiny_cross_encoder))
    for query_id, hits in first.items():
        expected = model.predict([(queries[query_id], docs[hit.doc_id]) for hit in hits])
        got = [reranked.scores[query_id][hit.doc_id] for hit in hits]
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    tokenizer = model.tokenizer  # the tokens read: each pair as the tokenizer joins it, nothing truncated here
    tokens = sum(len(tokenizer(queries[q], docs[hit.doc_id])["input_ids"]) for q, hits in first.items() for hit in hits)
    assert counts == {"pairs": 5, "cached": 0, "tokens": tokens}
    top1, _ = rerank(
        first,
        queries,
        docs,
        Reranker(RerankSpec(str(tiny_cross_encoder), depth=1)),
        ScoreCache(None, {}),
        progress=False,
    )
    assert {q: [h.doc_id for h in top1[q]] for q in top1} == {q: [first[q][0].doc_id] for q in first}


def test_a_deeper_rerun_scores_only_new_pairs_and_the_result_names_both_stages(tiny_cross_encoder, tiny_beir, tmp_path):
    cache = tmp_path / "cache"
    shallow = _evaluate(
        tiny_beir,
        tmp_path / "r",
        "--model",
        "hash:64",
        "--rerank",
        str(tiny_cross_encoder),
        "--rerank-depth",
        "2",
        "--k",
        "1,2",
        "--cache-dir",
        str(cache),
    )
    assert shallow.exit_code == 0, shallow.stderr
    deep = _evaluate(
        tiny_beir,
        tmp_path / "r",
        "--model",
        "hash:64",
        "--rerank",
        str(tiny_cross_encoder),
        "--rerank-depth",
        "4",
        "--k",
        "1,2",
        "--cache-dir",
        str(cache),
    )
    a, b = json.loads(shallow.stdout), json.loads(deep.stdout)
    assert a["config"]["rerank"]["cached_pairs"] == 0 and a["config"]["rerank"]["pairs"] == 6
    assert b["config"]["rerank"]["cached_pairs"] == 6 and b["config"]["rerank"]["pairs"] == 12
    assert a["label"] == f"hash:64 >> {tiny_cross_encoder.name}@2" and b["label"].endswith("@4")
    assert a["config"]["top_k"] == 2 and all(len(v) <= 2 for v in _run_lengths(tmp_path / "r", a))
    assert a["variant"] != b["variant"] and "rerank" in a["variant"]


def _run_lengths(out, data):
    from harness.io.trec import read_run

    path = next(out.glob(f"*/*/test.{data['variant']}.run.trec"))
    run = read_run(path)
    return [list(run[q]) for q in run]


def test_an_interrupted_rerank_keeps_the_scored_pairs(tiny_cross_encoder, tmp_path, monkeypatch):
    first = Run.from_scores({f"q{i}": {f"d{j}": float(j) for j in range(10)} for i in range(30)})
    queries = {f"q{i}": f"apple {WORDS[i % len(WORDS)]}" for i in range(30)}
    docs = {f"d{j}": " ".join(WORDS[j : j + 3]) for j in range(10)}
    reranker = Reranker(RerankSpec(str(tiny_cross_encoder), depth=10, batch_size=4))
    original, calls = reranker.score, []

    def interrupted(pairs):
        calls.append(len(pairs))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(pairs)

    monkeypatch.setattr(reranker, "score", interrupted)
    fingerprint = reranker.fingerprint()
    with pytest.raises(KeyboardInterrupt):
        rerank(
            first, queries, docs, reranker, ScoreCache(tmp_path, fingerprint), progress=False, checkpoint_seconds=3600
        )
    assert len(ScoreCache(tmp_path, fingerprint).scores) == 64  # the two batches of 32 pairs scored before


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--rerank-depth", "5"], "rerank depth 5 is below the largest cutoff 100"),
        (["--top-k", "50", "--k", "10"], "set --rerank-depth, not --top-k"),
    ],
)
def test_bad_rerank_settings_are_one_line(tiny_cross_encoder, tiny_beir, tmp_path, options, message):
    result = _evaluate(tiny_beir, tmp_path / "r", "--model", "bm25", "--rerank", str(tiny_cross_encoder), *options)
    assert result.exit_code == 1 and message in result.stderr and not (tmp_path / "r").exists()


def test_models_in_the_wrong_role_are_named(tiny_cross_encoder, tiny_beir, tmp_path):
    from harness.retrieval.models import resolve_model_source

    as_model = _evaluate(tiny_beir, tmp_path / "r", "--model", str(tiny_cross_encoder))
    assert as_model.exit_code == 1 and "is a cross-encoder (it scores query-document pairs)" in as_model.stderr
    bi = resolve_model_source("all-MiniLM-L6-v2")
    as_reranker = _evaluate(tiny_beir, tmp_path / "r", "--model", "bm25", "--rerank", bi, "--rerank-depth", "100")
    assert as_reranker.exit_code == 1 and "is a bi-encoder" in as_reranker.stderr
    assert not (tmp_path / "r").exists()
    with pytest.raises(HarnessError, match="not a cross-encoder"):
        Reranker(RerankSpec(bi))


def test_bench_takes_reranking_systems(tiny_cross_encoder, tiny_beir, tmp_path):
    import csv

    system = f"bm25 >> {tiny_cross_encoder}@3"
    result = invoke(
        [
            "-q",
            "bench",
            "--models",
            f"{system},hash:64",
            "--datasets",
            str(tiny_beir),
            "--k",
            "1,3",
            "--output-dir",
            str(tmp_path / "grid"),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
    )
    assert result.exit_code == 0, result.stderr
    labels = {row["label"] for row in csv.DictReader(open(tmp_path / "grid" / "results.csv"))}
    assert labels == {f"bm25 >> {tiny_cross_encoder.name}@3", "hash:64"}
    bad = invoke(
        [
            "-q",
            "bench",
            "--models",
            "bm25 >> x@ten",
            "--datasets",
            str(tiny_beir),
            "--output-dir",
            str(tmp_path / "grid2"),
        ],
    )
    assert bad.exit_code == 1 and "write FIRST >> CROSS_ENCODER@DEPTH" in bad.output


def test_top_k_equal_to_the_rerank_depth_is_accepted(tiny_cross_encoder, tiny_beir, tmp_path):
    options = ("--model", "bm25", "--rerank", str(tiny_cross_encoder), "--rerank-depth", "5", "--k", "5")
    agreed = _evaluate(tiny_beir, tmp_path / "r", *options, "--top-k", "5")
    assert agreed.exit_code == 0, agreed.output
    alone = _evaluate(tiny_beir, tmp_path / "r", *options)
    assert json.loads(agreed.stdout)["config"]["top_k"] == 5
    assert json.loads(agreed.stdout)["config_hash"] == json.loads(alone.stdout)["config_hash"]  # one configuration
    differing = _evaluate(tiny_beir, tmp_path / "s", *options, "--top-k", "6")
    assert differing.exit_code == 1 and "set --rerank-depth, not --top-k" in differing.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("depth", "k", "stored"),
    [
        ("20", "10", {1, 3, 5, 10, 20}),  # no @100: the rerank depth, not the default 100, bounds the cutoffs
        ("7", "2", {1, 2, 3, 5}),  # a cutoff asked for, and each standard one up to the rerank depth
        ("1000", "10", {1, 3, 5, 10, 20, 100, 1000}),  # deeper than 100: @1000 is stored
    ],
    ids=["depth-20", "depth-7", "depth-1000"],
)
def test_a_reranked_result_stores_the_cutoffs_up_to_the_rerank_depth(
    tiny_cross_encoder, tiny_beir, tmp_path, depth, k, stored
):
    # The rule (docs/conventions.md): each of 1, 3, 5, 10, 20, 100, 1000 up to the depth kept, and each cutoff asked.
    options = ("--model", "bm25", "--rerank", str(tiny_cross_encoder), "--rerank-depth", depth, "--k", k)
    result = _evaluate(tiny_beir, tmp_path / "r", *options)
    assert result.exit_code == 0, result.stderr
    metrics = json.loads(result.stdout)["metrics"]
    assert {int(name.split("@")[1]) for name in metrics if "@" in name} == stored
    assert {name for name in metrics if name.startswith("nDCG@")} == {f"nDCG@{c}" for c in stored}


def test_a_rerun_whose_pairs_are_all_cached_records_rerank_as_cached(tiny_cross_encoder, tiny_beir, tmp_path):
    args = [
        "--model",
        "hash:64",
        "--rerank",
        str(tiny_cross_encoder),
        "--rerank-depth",
        "2",
        "--k",
        "1,2",
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    first, again = (json.loads(_evaluate(tiny_beir, tmp_path / "r", *args).stdout) for _ in range(2))
    assert "rerank" not in first["cost"]["cached"] and first["timings"]["rerank"] > 0
    assert "rerank" in again["cost"]["cached"]
    shown = invoke(["report", str(tmp_path / "r"), "--cost", "--metric", "nDCG@1"])
    assert shown.exit_code == 0, shown.output
    header, _, row = shown.output.splitlines()[:3]
    assert dict(zip(header.split("|"), row.split("|")))[" rerank s "].strip() == "cached"


def _pairs(path: Path) -> list[tuple[str, str]]:
    return [tuple(line.split()[0:3:2]) for line in path.read_text().splitlines() if line.strip()]


def _texts(folder: Path) -> tuple[dict[str, str], dict[str, str]]:
    docs = {}
    for line in (folder / "corpus.jsonl").read_text().splitlines():
        record = json.loads(line)
        docs[record["_id"]] = f"{record.get('title') or ''} {record['text']}".strip()
    queries = {r["_id"]: r["text"] for r in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())}
    return queries, docs


def test_two_rerankers_on_one_candidate_set_are_reported_side_by_side_with_its_digest(
    tiny_cross_encoder, tiny_beir, tmp_path
):
    import hashlib

    from sentence_transformers import CrossEncoder
    from tiny_models import cross_encoder

    second = cross_encoder(tmp_path / "ce2", WORDS, seed=1)
    out = tmp_path / "out"
    systems = f"a=>> {tiny_cross_encoder}, b=>> {second}@3"
    bench = ["-q", "bench", "--datasets", str(tiny_beir), "--systems", systems, "--candidates", "bm25", "--depth", "3"]
    assert invoke([*bench, "--k", "1,3", "--output-dir", str(out)]).exit_code == 0
    (candidates,) = (out / "tiny" / "candidates").glob("candidates-*.trec")
    digest = hashlib.sha256(candidates.read_bytes()).hexdigest()
    assert candidates.name == f"candidates-{digest[:12]}.trec"
    bm25 = _pairs(out / "tiny" / "bm25" / "test.run.trec")  # the candidates' system, evaluated and written
    assert _pairs(candidates) == [
        p for q in dict.fromkeys(q for q, _ in bm25) for p in [x for x in bm25 if x[0] == q][:3]
    ]
    queries, docs = _texts(tiny_beir)
    pairs = _pairs(candidates)
    for label, model in (("a", tiny_cross_encoder), ("b", second)):
        (path,) = [p for p in out.rglob("test*.json") if json.loads(p.read_text())["label"] == label]
        result = json.loads(path.read_text())
        assert result["config"]["candidates"] == {"source": "bm25", "depth": 3, "sha256": digest}
        assert result["fingerprints"]["run"] == digest and result["model"] == f"run:{candidates.name}"
        cross = CrossEncoder(str(model))
        expected = cross.predict([(queries[q], docs[d]) for q, d in pairs])
        scored = {tuple(line.split()[0:3:2]): float(line.split()[4]) for line in open(path.with_suffix(".run.trec"))}
        np.testing.assert_allclose([scored[p] for p in pairs], expected, rtol=1e-5)
        tokens = sum(len(cross.tokenizer(queries[q], docs[d])["input_ids"]) for q, d in pairs)
        assert (result["config"]["rerank"]["pairs"], result["config"]["rerank"]["tokens"]) == (len(pairs), tokens)
    report = invoke(["report", str(out), "--metric", "nDCG@3"])
    assert report.exit_code == 0, report.output
    header = next(line for line in report.stdout.splitlines() if line.startswith("| dataset"))
    assert "| a |" in header and "| b |" in header
    assert f"tiny: candidate set {digest[:8]} (top 3 of bm25) reranked by a, b" in report.stdout
    assert "did not rerank the same candidates" not in report.stdout
    # a third reranker of its own first stage: the report says they reranked different candidates, and so does †
    assert _evaluate(tiny_beir, out, "--model", f"c=bm25 >> {second}@3", "--k", "1,3").exit_code == 0
    mixed = invoke(["report", str(out), "--metric", "nDCG@3", "--significance", "a"])
    assert "tiny: these rerankers did not rerank the same candidates" in mixed.stdout
    assert "† against a compares rerankers of other candidate sets for c (tiny)" in mixed.stdout


@pytest.mark.parametrize(
    ("model", "options", "message"),
    [
        (">> {ce}", [], "a rerank without a first stage reranks the candidate set"),
        ("bm25 >> {ce}", ["--candidates", "bm25"], "--candidates gives every rerank its first stage"),
        (">> {ce}@5", ["--candidates", "bm25", "--depth", "3"], "every rerank reranks the whole candidate set"),
        ("bm25", ["--candidates", "bm25"], "reranks nothing"),
        (">> {ce}", ["--candidates", "{other}"], "candidate query is not in"),
        (">> {ce}", ["--candidates", "{stranger}"], "candidate document(s) are not in"),
    ],
)
def test_bad_candidates_are_one_line_before_any_model_loads(
    tiny_cross_encoder, tiny_beir, tmp_path, model, options, message
):
    other = tmp_path / "other.trec"
    other.write_text("q1 Q0 d1 1 2.0 x\nnq7 Q0 d2 1 1.0 x\n")  # a query of another dataset
    stranger = tmp_path / "stranger.trec"
    stranger.write_text("q1 Q0 d1 1 2.0 x\nq1 Q0 zz9 2 1.0 x\n")  # a document of another corpus
    filled = [o.format(other=other, stranger=stranger) for o in options]
    cache = tmp_path / "cache"
    result = _evaluate(tiny_beir, tmp_path / "out", "--model", model.format(ce=tiny_cross_encoder), *filled,
                       "--k", "1,3", "--cache-dir", str(cache))  # fmt: skip
    assert result.exit_code != 0
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (cache / "rerank").exists() and not list((tmp_path / "out").rglob("test*.json"))


def test_the_candidate_set_holds_each_querys_top_depth_after_its_exclusions(tiny_cross_encoder, tiny_beir, tmp_path):
    """Excluded pairs inside each query's top 3: the set holds exactly 3 documents a query, none excluded, those of a
    brute force (the pairs removed, then the top 3 by float32 score, ties the greater doc_id first)."""
    docs = [f"d{i}" for i in range(1, 6)]
    queries = ["q1", "q2", "q3"]  # the judged queries
    scores = [3.0, 2.0, 2.0, 2.0, 1.0]  # ties at the cut
    run = {q: {d: scores[(i + j) % 5] for j, d in enumerate(docs)} for i, q in enumerate(queries)}
    source = tmp_path / "first.trec"
    source.write_text("".join(f"{q} Q0 {d} 0 {s!r} x\n" for q, hits in run.items() for d, s in hits.items()))
    excluded = {("q1", "d1"), ("q1", "d4"), ("q2", "d2"), ("q3", "d3"), ("q3", "d5")}
    (tiny_beir / "excluded").mkdir()
    body = "".join(f"{q}\t{d}\n" for q, d in sorted(excluded))
    (tiny_beir / "excluded" / "test.tsv").write_text("query-id\tcorpus-id\n" + body)
    out = tmp_path / "out"
    result = _evaluate(tiny_beir, out, "--model", f">> {tiny_cross_encoder}", "--candidates", str(source),
                       "--depth", "3", "--k", "1,3", "--keep-identical-ids")  # fmt: skip
    assert result.exit_code == 0, result.output
    (candidates,) = (out / "tiny" / "candidates").glob("candidates-*.trec")
    expected = {}
    for q, hits in run.items():
        kept = [d for d in hits if (q, d) not in excluded]
        expected[q] = sorted(sorted(kept, key=lambda d: (np.float32(hits[d]), d), reverse=True)[:3])
    got: dict[str, list[str]] = {}
    for q, d in _pairs(candidates):
        got.setdefault(q, []).append(d)
    assert {q: sorted(ds) for q, ds in got.items()} == expected
    assert all(len(ds) == 3 for ds in got.values()) and not set(_pairs(candidates)) & excluded


def test_a_candidate_set_naming_an_unjudged_query_reranks_the_judged_ones(tiny_cross_encoder, tiny_beir, tmp_path):
    """A candidate run may hold a query of queries.jsonl that the split does not judge (tiny's q4): it is left out of
    the rerank, and the judged queries are scored as a candidate set without it scores them."""
    docs = [f"d{i}" for i in range(1, 6)]
    run = {q: {d: float((i * 7 + j * 3) % 5) for j, d in enumerate(docs)} for i, q in enumerate(["q1", "q2", "q3"])}
    judged = "".join(f"{q} Q0 {d} 0 {s!r} x\n" for q, hits in run.items() for d, s in hits.items())
    (tmp_path / "judged.trec").write_text(judged)
    (tmp_path / "all.trec").write_text(judged + "".join(f"q4 Q0 {d} 0 1.0 x\n" for d in docs))
    metrics = []
    for name in ("judged", "all"):
        done = _evaluate(tiny_beir, tmp_path / name, "--model", f">> {tiny_cross_encoder}",
                         "--candidates", str(tmp_path / f"{name}.trec"), "--depth", "5", "--k", "1,3")  # fmt: skip
        assert done.exit_code == 0, done.output
        metrics.append(json.loads(done.stdout)["metrics"])
    assert metrics[0] == metrics[1]


def test_rerankers_each_on_its_own_first_stage_are_reported_as_reranking_different_candidates(
    tiny_cross_encoder, tiny_beir, tmp_path
):
    from tiny_models import cross_encoder

    second = cross_encoder(tmp_path / "ce2", WORDS, seed=1)
    out = tmp_path / "out"
    for system in (f"a=bm25 >> {tiny_cross_encoder}@5", f"b=hash:64 >> {second}@5"):
        done = _evaluate(tiny_beir, out, "--model", system, "--k", "1,3")
        assert done.exit_code == 0, done.output
    report = invoke(["report", str(out), "--metric", "nDCG@3"])
    assert report.exit_code == 0, report.output
    assert "tiny: these rerankers did not rerank the same candidates (a, b on their own first stages)" in report.stdout
