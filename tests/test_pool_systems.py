"""`pool --systems` written as `bench --systems` writes them: fusions (checked against ranx), labels and
weights, over run files and over systems retrieved now; every system checked before any retrieval (a bad
one: one line naming it, exit 2, nothing retrieved, nothing written)."""

from __future__ import annotations

import csv
import json
import struct
from pathlib import Path

import pytest
from cli_runner import invoke
from test_pool import SYSTEMS, _write_folder, _write_runs


def _pool(args: list) -> object:
    return invoke(["pool", *map(str, args)])


def _pairs_by_query(out: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    with open(out / "pool.csv", encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            found.setdefault(row["query_id"], set()).add(row["doc_id"])
    return found


def _ranx_runs(paths: list[Path]) -> list[dict[str, dict[str, float]]]:
    runs = []
    for path in paths:
        run: dict[str, dict[str, float]] = {}
        for line in path.read_text().splitlines():
            query_id, _, doc_id, _, score, _ = line.split()
            run.setdefault(query_id, {})[doc_id] = float(score)
        runs.append(run)
    return runs


def _f32(score: float) -> float:
    """A score as pytrec_eval compares it (float32)."""
    return struct.unpack("f", struct.pack("f", score))[0]


def _top(scores: dict[str, float], depth: int) -> tuple[set[str], set[str]]:
    """The documents surely in the top `depth` (above the boundary score) and those that may be (at or above)."""
    ranked = sorted(scores.values(), reverse=True)
    boundary = ranked[min(depth, len(ranked)) - 1]
    return {d for d, s in scores.items() if s > boundary}, {d for d, s in scores.items() if s >= boundary}


@pytest.mark.parametrize(
    ("systems", "method", "norm", "params"),
    [
        ("rrf(alpha, beta)", "rrf", "min-max", {"k": 60}),
        ("hybrid=wsum(alpha, beta, weights=0.3:0.7)", "wsum", "min-max", {"weights": [0.3, 0.7]}),
        ("mnz=combmnz(alpha, beta, norm=zscore)", "mnz", "zmuv", None),
    ],
    ids=["rrf", "labelled-wsum-weights", "combmnz-zscore"],
)
def test_a_fused_system_pools_the_top_of_the_fusion_ranx_makes(tmp_path, systems, method, norm, params):
    ranx = pytest.importorskip("ranx")
    folder = _write_folder(tmp_path / "set", None)
    paths = _write_runs(tmp_path)
    out = tmp_path / "pool"
    result = _pool(
        [folder, *[a for p in paths for a in ("--runs", p)], "--systems", systems, "--depth", 4, "--out", out]
    )
    assert result.exit_code == 0, result.output
    fused = ranx.fuse(
        [ranx.Run(run, name=f"r{i}") for i, run in enumerate(_ranx_runs(paths[:2]))],
        norm=norm,
        method=method,
        params=params,
    ).to_dict()
    pooled = _pairs_by_query(out)
    for query_id, scores in fused.items():
        sure, may = _top(dict(scores), 4)
        assert sure <= pooled[query_id] <= may and len(pooled[query_id]) == 4, query_id
    manifest = json.loads((out / "manifest.json").read_text())
    label = systems.split("=", 1)[0] if "=" in systems.split("(")[0] else systems
    assert [s["name"] for s in manifest["systems"]] == [label]


def test_listed_systems_and_their_fusion_are_pooled_together(tmp_path):
    folder = _write_folder(tmp_path / "set", None)
    paths = _write_runs(tmp_path)
    out = tmp_path / "pool"
    systems = "alpha, beta, gamma, all=rrf(alpha, beta, gamma)"
    result = _pool(
        [folder, *[a for p in paths for a in ("--runs", p)], "--systems", systems, "--depth", 2, "--out", out]
    )
    assert result.exit_code == 0, result.output
    assert [s["name"] for s in json.loads((out / "manifest.json").read_text())["systems"]] == [
        "alpha",
        "beta",
        "gamma",
        "all",
    ]
    assert "(4 systems, depth 2;" in result.output


def test_bench_syntax_with_retrieval_pools_bm25_a_dense_model_and_their_fusion(tmp_path):
    folder = _write_folder(tmp_path / "set", None)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{d}", "text": f"word{d % 5} common {d}"}) + "\n" for d in range(20))
    )
    (folder / "queries.jsonl").write_text('{"_id": "q0", "text": "word1"}\n{"_id": "q1", "text": "word2 common"}\n')
    out = tmp_path / "pool"
    result = _pool([folder, "--systems", "bm25, h=hash:32, rrf(bm25, h)", "--depth", 3, "--out", out])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["name"] for s in manifest["systems"]] == ["bm25", "h", "rrf(bm25, h)"]
    ranx = pytest.importorskip("ranx")
    # RRF reads ranks only: ranx is given each member's ranks in the tie rule's order, written here (float32 score,
    # then doc_id, descending; ranx would rank ties its own way), as scores that cannot tie.
    runs = [
        {
            q: {d: -float(rank) for rank, d in enumerate(sorted(docs, key=lambda d: (_f32(docs[d]), d), reverse=True))}
            for q, docs in _ranx_runs([out / s["run"]])[0].items()
        }
        for s in manifest["systems"][:2]
    ]
    fused = ranx.fuse(
        [ranx.Run(run, name=f"r{i}") for i, run in enumerate(runs)], method="rrf", params={"k": 60}
    ).to_dict()
    saved = _ranx_runs([out / manifest["systems"][2]["run"]])[0]  # the fused run, as the pool fused it
    assert {q: set(docs) for q, docs in saved.items()} == {q: set(docs) for q, docs in fused.items()}
    for query_id, scores in fused.items():
        assert all(saved[query_id][d] == pytest.approx(score) for d, score in scores.items())
        assert _top(dict(scores), 3)[0] <= _pairs_by_query(out)[query_id]


@pytest.mark.parametrize("depth", [100, 101, 130], ids=["at-100", "just-deeper", "deeper"])
def test_a_pool_deeper_than_100_holds_each_retrieved_systems_top_depth(tmp_path, depth):
    # One query word, once in every document, the documents padded to different lengths: BM25 scores a shorter
    # document higher (same tf, same idf), so the top `depth` is d000 .. d{depth - 1}, whatever the implementation.
    folder = _write_folder(tmp_path / "set", None)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{d:03d}", "text": "apple" + " pad" * d}) + "\n" for d in range(140))
    )
    (folder / "queries.jsonl").write_text('{"_id": "q0", "text": "apple"}\n')
    out = tmp_path / "pool"
    result = _pool([folder, "--systems", "bm25", "--depth", depth, "--out", out])
    assert result.exit_code == 0, result.output
    assert _pairs_by_query(out) == {"q0": {f"d{d:03d}" for d in range(depth)}}
    manifest = json.loads((out / "manifest.json").read_text())
    saved = _ranx_runs([out / manifest["systems"][0]["run"]])[0]
    assert len(saved["q0"]) == max(100, depth)  # retrieved as `retrieve` does: 100, or the pool's depth if deeper


@pytest.mark.parametrize(("depth", "retrieved"), [(10, 100), (100, 100), (150, 150), (1000, 1000)])
def test_each_system_of_a_pool_retrieves_100_or_the_pools_depth_when_deeper(tmp_path, depth, retrieved):
    from harness.judging.pool_systems import check_retrievable, parse_pool_systems
    from harness.pipeline.config import retrieval_depth

    folder = _write_folder(tmp_path / "set", None)
    configs = check_retrievable(folder, parse_pool_systems(["bm25, h=hash:32, rrf(bm25, h)"]), depth)
    assert [retrieval_depth(config) for config in configs] == [retrieved, retrieved]


# --- bad input: checked before any retrieval ---------------------------------------------------------------------


@pytest.fixture
def no_retrieval(monkeypatch):
    """Any retrieval fails the test: a refusal must come before it."""
    import harness.pipeline.retrieve as retrieve

    calls = []
    monkeypatch.setattr(retrieve, "retrieve", lambda *a, **k: calls.append(a) or pytest.fail("retrieved"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return calls


@pytest.mark.parametrize(
    ("systems", "message"),
    [
        (
            "bm25, rrf(bm25, no-such-org/no-such-model)",
            "--systems 'no-such-org/no-such-model': cannot load model 'no-such-org/no-such-model': not a local folder",
        ),
        ("bm25, no-such-org/no-such-model", "--systems 'no-such-org/no-such-model': cannot load model"),
        ("bm25, rrf(bm25, x, weights=0.5)", "system 'rrf(bm25, x, weights=0.5)': weights"),
        ("bm25, foo(bm25, e5)", "system 'foo(bm25, e5)': unknown fusion method 'foo'"),
        ("bm25, rrf(bm25", "a '(' is never closed"),
    ],
    ids=["fusion-member-model-not-installed", "model-not-installed", "bad-weights", "unknown-method", "unclosed"],
)
def test_a_bad_system_is_one_line_exit_2_before_any_retrieval(tmp_path, no_retrieval, systems, message):
    folder = _write_folder(tmp_path / "set", None)
    out = tmp_path / "pool"
    result = _pool([folder, "--systems", systems, "--out", out])
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not no_retrieval and not out.exists() and not list(tmp_path.glob(".pool*"))


def test_a_fusion_member_with_no_run_is_refused_before_pooling(tmp_path):
    folder = _write_folder(tmp_path / "set", None)
    paths = _write_runs(tmp_path)
    out = tmp_path / "pool"
    result = _pool(
        [folder, *[a for p in paths for a in ("--runs", p)], "--systems", "alpha, rrf(alpha, delta)", "--out", out]
    )
    assert result.exit_code == 2, result.output
    assert result.output.startswith(
        "Error: --systems 'rrf(alpha, delta)': fusion member 'delta' is none of the runs "
        f"({', '.join(f'{s} ({s}.trec)' for s in SYSTEMS)})"
    )
    assert not out.exists()
