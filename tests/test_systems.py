"""Systems: one record per kind and one parser (`harness.pipeline.systems`), identities that stay what they were, no
system text tested anywhere else, and one system string is one ranking and one number in every command (evaluate,
bench, retrieve + score, pool + judgments reusability), checked against pytrec_eval."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import pytrec_eval
from cli_runner import invoke

import harness
from harness.errors import HarnessError
from harness.pipeline.systems import BY_NAME, KINDS, parse_system, parse_systems
from harness.pipeline.systems.registry import DENSE

PACKAGE = Path(harness.__file__).parent


# --- the records --------------------------------------------------------------------------------------------------


def test_every_kind_has_a_valid_record():
    assert set(BY_NAME) == {"dense", "bm25", "hash", "endpoint", "sparse", "multi-vector", "run", "fusion", "rerank"}
    assert KINDS[-1] is DENSE  # the kind of any text no other kind takes
    for kind in KINDS:
        assert kind.what and kind.device in ("none", "cpu", "any"), kind.name
        # a first stage records a model and has an identity of its own; a fusion or a rerank has its members'
        assert (kind.model_name is None) == (kind.identity is None) == kind.composite, kind.name
        assert not kind.probed or (kind.weights and kind.vectors), kind.name  # auto probes weights that make vectors
        assert not kind.vectors or kind.encodes, kind.name
        assert not kind.weights or kind.encodes, kind.name
        assert not kind.service or (kind.vectors and not kind.weights), kind.name
        assert not kind.ray or kind.vectors, kind.name  # only vectors fan out
        assert kind.needs_device == (kind.device == "any"), kind.name
    assert [kind.name for kind in KINDS if kind.probed] == ["dense"]
    assert [kind.name for kind in KINDS if not kind.retrieves] == ["run"]


def _sparse_folder(root: Path) -> Path:
    folder = root / "sparse_m"
    folder.mkdir(parents=True)
    (folder / "config_sentence_transformers.json").write_text('{"model_type": "SparseEncoder"}')
    return folder


KIND_OF = {
    "bm25": "bm25",
    "BM25": "bm25",
    "hash:64": "hash",
    "openai:text-embedding-3-small": "endpoint",
    "run:out/x.trec": "run",
    "sentence-transformers/all-MiniLM-L6-v2": "dense",
    "./models/e5": "dense",
    "sparse_m": "sparse",
    "rrf(bm25, hash:64)": "fusion",
    "wsum(bm25, e5, weights=0.3:0.7, norm=zscore)": "fusion",
    "rrf(bm25 >> ce@10, e5)": "fusion",
    "bm25 >> ce@10": "rerank",
    "hash:64>>org/ce": "rerank",
}


@pytest.mark.parametrize("text", list(KIND_OF))
def test_each_kind_is_recognised_from_its_text(tmp_path, monkeypatch, text):
    _sparse_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert parse_system(text).kind.name == KIND_OF[text]
    assert parse_system(f"  lab = {text} ").label == "lab"


def test_a_system_is_parsed_into_its_parts():
    fused = parse_system("hybrid=wsum(bm25, e5 >> org/ce@7, weights=0.3:0.7, k=5, depth=50)")
    assert (fused.label, fused.spec, fused.kind.name) == (
        "hybrid",
        "wsum(bm25, e5 >> org/ce@7, weights=0.3:0.7, k=5, depth=50)",
        "fusion",
    )
    assert [member.spec for member in fused.members] == ["bm25", "e5 >> org/ce@7"]
    assert (fused.fusion.method, fused.fusion.weights, fused.fusion.rrf_k, fused.fusion.depth) == (
        "wsum",
        (0.3, 0.7),
        5,
        50,
    )
    reranked = fused.members[1]
    assert (reranked.kind.name, reranked.first.model, reranked.reranker, reranked.rerank_depth) == (
        "rerank",
        "e5",
        "org/ce",
        7,
    )
    assert parse_system("bm25 >> org/ce").rerank_depth == 100
    assert parse_system("run:out/x.trec").model == "out/x.trec"
    assert parse_system("run:out/x.trec").model_name == "run:x.trec"
    assert parse_system("BM25").model_name == "bm25"
    assert parse_system("all-MiniLM-L6-v2").model_name == "sentence-transformers/all-MiniLM-L6-v2"
    assert parse_system("bm25 >> org/ce@7").model_name == "bm25"
    # the depth each keeps: a rerank's, a fusion's, else top_k, else max(100, the largest cutoff)
    assert fused.depth(None, (10,)) == 50 and reranked.depth(None, (10,)) == 7
    assert parse_system("bm25").depth(None, (10, 1000)) == 1000 and parse_system("bm25").depth(30, (10,)) == 30
    assert parse_system("bm25").depth(None, (10,)) == 100


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rrf(bm25)", "system 'rrf(bm25)': fusion needs at least two runs"),
        ("foo(bm25, e5)", "unknown fusion method 'foo'"),
        ("rrf(bm25, e5, weights=0.3:0.7)", "system 'rrf(bm25, e5, weights=0.3:0.7)': weights apply to wsum only"),
        ("wsum(bm25, e5, weights=0.3, 0.7)", "separate weights with ':'"),
        ("rrf(bm25, rrf(a, b))", "a fusion of a fusion"),
        ("rrf(bm25, e5, x=1)", "unknown fusion setting 'x'"),
        ("rrf(bm25, e5) >> ce@10", "reranking a fusion is not supported"),
        ("bm25 >> ce@ten", "write FIRST >> CROSS_ENCODER@DEPTH"),
        (" >> @10", "write FIRST >> CROSS_ENCODER@DEPTH"),
        ("bm25 >> a@1 >> b@1", "one reranker per system"),
        ("rrf(bm25", "a '(' is never closed"),
        ("a=b=bm25", "more than one '='"),
        ("=bm25", "no label before the '='"),
    ],
)
def test_a_malformed_system_is_one_line_naming_it(text, message):
    with pytest.raises(HarnessError, match=re.escape(message)):
        parse_system(text)


def test_a_grid_lists_each_system_once_under_unique_labels():
    systems = parse_systems("a=bm25, hash:64, rrf(bm25, hash:64, k=5), hash:64")
    assert [(system.label, system.spec) for system in systems] == [
        ("a", "bm25"),
        (None, "hash:64"),
        (None, "rrf(bm25, hash:64, k=5)"),
    ]
    with pytest.raises(HarnessError, match="listed twice"):
        parse_systems("a=bm25, b=bm25")
    with pytest.raises(HarnessError, match="both labelled 'a'"):
        parse_systems("a=bm25, a=hash:64")


# --- identities: computed by the code before the registry (the same configs, the same hashes) ---------------------

CONFIG_HASHES = {
    "bm25": ({"model": "bm25"}, "4cd30586c5c425e8", ""),
    "BM25": ({"model": "BM25"}, "4cd30586c5c425e8", ""),
    "bm25-top50": ({"model": "bm25", "top_k": 50}, "298e325fd55fe789", "top50-298e325f"),
    "hash": ({"model": "hash:64"}, "e5a81e2cf2d4ce0a", ""),
    "hash-hnsw": ({"model": "hash:64", "index": "hnsw"}, "ec324177cda80dd1", "hnsw-ec324177"),
    "endpoint": ({"model": "openai:text-embedding-3-small"}, "c49370c7be5b3f9c", "api.openai.com-c49370c7"),
    "sparse": ({"model": "sparse_m"}, "a16ee11bc5d608ac", ""),
    "sparse-onnx": ({"model": "sparse_m", "sparse_backend": "onnx"}, "39bb103eace8f244", "sparse_backend-39bb103e"),
    "dense-alias": ({"model": "all-MiniLM-L6-v2"}, "0f723d59bb0393d3", ""),
    "run": ({"run_path": "/x/runs/my.trec"}, "be87337f9c40836f", ""),
    "rerank": ({"model": "bm25", "rerank": 50}, "261e1f6949bb1d14", "top50_rerank-261e1f69"),
    "rerank-text": (
        {"model": "bm25 >> cross-encoder/ms-marco-MiniLM-L-6-v2@50"},
        "261e1f6949bb1d14",
        "top50_rerank-261e1f69",
    ),
}


@pytest.mark.parametrize("case", list(CONFIG_HASHES))
def test_each_kinds_configuration_hash_stays_what_it_was(tmp_path, monkeypatch, case):
    from harness.pipeline.evaluate import EvaluateConfig, configuration
    from harness.pipeline.systems import settle
    from harness.retrieval.endpoint import EndpointSpec
    from harness.retrieval.index import IndexSpec
    from harness.retrieval.rerank import RerankSpec

    _sparse_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    fields, config_hash, variant = CONFIG_HASHES[case]
    fields = dict(fields)
    if "index" in fields:
        fields["index"] = IndexSpec(kind=fields["index"])
    if "rerank" in fields:
        fields["rerank"] = RerankSpec("cross-encoder/ms-marco-MiniLM-L-6-v2", depth=fields["rerank"])
    if "run_path" in fields:
        fields["run_path"] = Path(fields["run_path"])
    config = EvaluateConfig(
        dataset_path=Path("/nonexistent"), endpoint=EndpointSpec(url="https://api.openai.com/v1"), **fields
    )
    identity = configuration(settle(config), "scifact")
    assert (identity.config_hash, identity.variant) == (config_hash, variant)


# --- nothing outside the registry tests a system's text -------------------------------------------------------------

OLD_TESTS = {
    r"startswith\(\(?\s*(HASH_PREFIX|ENDPOINT_PREFIX|RUN_PREFIX|\"hash:\"|\"openai:\"|\"run:\")": "a prefix tested",
    r"[=!]=\s*(BM25_MODEL|BM25_NAME|\"bm25\")|(BM25_MODEL|BM25_NAME|\"bm25\")\s*[=!]=": "bm25 compared",
    r"\bBM25_MODEL\b": "the old bm25 constant",
    r"[\"']run:": "a run's name written by hand",
    r"\bparse_fusion\b": "the old fusion parser",
    r"[\"']>>[\"']": "a rerank's arrow",
    r"\bis_sparse_model\b": "the old sparse test",
    r"[=!]=\s*\"sparse-encoder\"": "a sparse encoder recognised",
}
# Below the registry's layer (it cannot be imported there): where a kind's own encoder is built from the name the
# record passes it, and a published row's system is matched (a recorded model name, not a system's text).
BELOW = {
    "retrieval/stand_ins.py": "defines hash:N and parses its dimension",
    "retrieval/encode.py": "load_encoder builds hash:N's encoder from the model name it is given",
    "retrieval/endpoint.py": "defines openai: and strips it for the service",
    "io/cache/records.py": "a hash:N source has no files to key its fingerprint by",
    "datasets/published.py": "matches a result's recorded model name with the published rows",
}


def _old_tests(text: str) -> list[tuple[int, str]]:
    return [
        (number, why)
        for number, line in enumerate(text.splitlines(), start=1)
        for pattern, why in OLD_TESTS.items()
        if re.search(pattern, line.split("#")[0])
    ]


def test_no_system_text_is_tested_outside_the_registry():
    """A system's kind is read from its record (`harness.pipeline.systems.registry`), never from its text."""
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith("pipeline/systems/") or where in BELOW:
            continue
        violations += [f"{where}:{line}: {why}" for line, why in _old_tests(path.read_text(encoding="utf-8"))]
    assert not violations, "\n".join(violations)
    for where in BELOW:
        assert (PACKAGE / where).is_file(), where  # an exemption for a module that is gone goes too


def test_the_text_check_sees_each_way_of_testing_a_system():
    code = (
        "a.startswith(HASH_PREFIX)\nb.startswith((HASH_PREFIX, ENDPOINT_PREFIX))\nc.lower() == BM25_MODEL\n"
        'd != "bm25"\nf"run:{x}"\nfirst, arrow, second = s.partition(">>")\nparse_fusion(x)\nis_sparse_model(c)\n'
        'kind == "sparse-encoder"\nx = "bm25"  # a name, not a test\n"bm25" == y\n'
    )
    assert [line for line, _ in _old_tests(code)] == [1, 2, 3, 3, 4, 5, 6, 7, 8, 9, 11]


# --- one system string: one ranking and one number, whichever command runs it ---------------------------------------

SYSTEMS = ("bm25", "hash:64", "rrf(bm25, hash:64)")


def _scores(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        query_id, _, doc_id, _, score, _ = line.split()
        run.setdefault(query_id, {})[doc_id] = float(score)
    return run


def _same_run(got: dict[str, dict[str, float]], expected: dict[str, dict[str, float]]) -> bool:
    """The same documents in the same order for every query, each score within 1e-9."""
    return list(got) == list(expected) and all(
        list(got[q]) == list(expected[q]) and all(abs(got[q][d] - expected[q][d]) <= 1e-9 for d in expected[q])
        for q in expected
    )


def _qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in path.read_text().splitlines()[1:]:
        query_id, doc_id, grade = line.split("\t")
        qrels.setdefault(query_id, {})[doc_id] = int(grade)
    return qrels


def _ndcg10(qrels, run) -> float:
    """pytrec_eval's nDCG@10, every judged query counted (a query with no results scores 0)."""
    values = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(
        {query_id: run.get(query_id, {}) for query_id in qrels}
    )
    return sum(values[query_id]["ndcg_cut_10"] if query_id in values else 0.0 for query_id in qrels) / len(qrels)


def _ok(result):
    assert result.exit_code == 0, result.output
    return result


def test_one_system_is_one_ranking_and_one_number_in_every_command(tmp_path):
    from harness.pipeline.demo import demo_folder

    folder = Path(demo_folder())
    qrels = _qrels(folder / "qrels" / "test.tsv")
    cache = ["--cache-dir", str(tmp_path / "cache")]
    evaluated, runs = {}, {}
    for system in SYSTEMS:
        out = tmp_path / "evaluate"
        _ok(invoke(["-q", "evaluate", str(folder), "--model", system, "--output-dir", str(out), *cache]))
        result_path = sorted((out / "demo").glob("*/test*.json"), key=lambda p: p.stat().st_mtime_ns)[-1]
        result = json.loads(result_path.read_text())
        evaluated[system] = result["metrics"]["nDCG@10"]
        runs[system] = _scores(result_path.with_name(result_path.name.replace(".json", ".run.trec")))
        retrieved = tmp_path / f"retrieved-{len(runs)}.trec"
        _ok(invoke(["-q", "retrieve", str(folder), "--model", system, "--out", str(retrieved), *cache]))
        whole = _scores(retrieved)
        # the same ranking: every judged query's scores, as evaluate saved them
        assert _same_run({q: whole[q] for q in runs[system]}, runs[system]), system
        scored = json.loads(_ok(invoke(["score", str(folder / "qrels" / "test.tsv"), str(retrieved), "--json"])).stdout)
        assert scored["means"]["nDCG@10"] == pytest.approx(_ndcg10(qrels, whole), abs=1e-9, rel=0), system
        assert evaluated[system] == pytest.approx(_ndcg10(qrels, runs[system]), abs=1e-9, rel=0), system
        assert scored["means"]["nDCG@10"] == pytest.approx(evaluated[system], abs=1e-9, rel=0), system
    # the fusion written where bench wrote it before evaluate took fusions (its identity: its members')
    assert (tmp_path / "evaluate" / "demo" / "fusion" / "test.rrf_2-runs-e62263d3.json").is_file()

    bench = tmp_path / "bench"
    _ok(
        invoke(
            [
                "-q",
                "bench",
                "--systems",
                ", ".join(SYSTEMS),
                "--datasets",
                str(folder),
                "--output-dir",
                str(bench),
                *cache,
            ]
        )
    )
    for system in SYSTEMS:
        folder_name = "fusion" if system.startswith("rrf") else system.replace(":", "_")
        result_path = next((bench / "demo" / folder_name).glob("test*.json"))
        assert json.loads(result_path.read_text())["metrics"]["nDCG@10"] == pytest.approx(
            evaluated[system], abs=1e-9, rel=0
        )
        ran = _scores(result_path.with_name(result_path.name.replace(".json", ".run.trec")))
        assert _same_run(ran, runs[system]), system

    pool = tmp_path / "pool"
    _ok(invoke(["-q", "pool", str(folder), "--systems", ", ".join(SYSTEMS), "--depth", "5", "--out", str(pool)]))
    table = json.loads(
        _ok(invoke(["judgments", "reusability", str(pool), str(folder / "qrels" / "test.tsv"), "--json"])).stdout
    )
    full = {row["system"]: row["score"] for row in table["rows"]}
    assert full == pytest.approx(evaluated, abs=1e-9, rel=0)


def test_a_reranked_system_is_one_ranking_and_one_number_in_evaluate_bench_and_retrieve(tmp_path):
    from tiny_models import cross_encoder

    from harness.pipeline.demo import demo_folder

    folder = Path(demo_folder())
    qrels = _qrels(folder / "qrels" / "test.tsv")
    reranker = cross_encoder(tmp_path / "ce", "apple banana phone case charger cable laptop query doc".split())
    system = f"bm25 >> {reranker}@3"
    settings = ["--k", "1,3", "--cache-dir", str(tmp_path / "cache")]
    out, grid, retrieved = tmp_path / "evaluate", tmp_path / "bench", tmp_path / "run.trec"
    _ok(invoke(["-q", "evaluate", str(folder), "--model", system, "--output-dir", str(out), *settings]))
    _ok(invoke(["-q", "bench", "--systems", system, "--datasets", str(folder), "--output-dir", str(grid), *settings]))
    _ok(invoke(["-q", "retrieve", str(folder), "--model", system, "--out", str(retrieved), *settings[2:]]))
    (evaluated,) = (out / "demo" / "bm25").glob("test.*.json")
    (benched,) = (grid / "demo" / "bm25").glob("test.*.json")
    assert evaluated.name == benched.name  # one identity: the same result file
    run = _scores(evaluated.with_name(evaluated.name.replace(".json", ".run.trec")))
    assert _same_run(_scores(benched.with_name(benched.name.replace(".json", ".run.trec"))), run)
    whole = _scores(retrieved)
    assert _same_run({q: whole[q] for q in run}, run)
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.3"}).evaluate({q: run.get(q, {}) for q in qrels})
    ndcg3 = sum(expected[q]["ndcg_cut_3"] if q in expected else 0.0 for q in qrels) / len(qrels)
    for path in (evaluated, benched):
        assert json.loads(path.read_text())["metrics"]["nDCG@3"] == pytest.approx(ndcg3, abs=1e-9, rel=0)


@pytest.mark.parametrize("command", ["evaluate", "retrieve"])
def test_a_fusion_with_a_member_that_cannot_run_fails_before_any_member_runs(tmp_path, monkeypatch, command):
    from harness.pipeline.demo import demo_folder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "out"
    where = ["--output-dir", str(out)] if command == "evaluate" else ["--out", str(out / "run.trec")]
    result = invoke([command, str(demo_folder()), "--model", "rrf(bm25, no-such-org/no-such-model)", *where])
    assert result.exit_code == 1, result.output
    assert "cannot load model 'no-such-org/no-such-model'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()  # bm25 never ran: nothing written
