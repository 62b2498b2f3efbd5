"""`fuse RUN RUN ... --out FUSED`: run files fused without qrels, checked against ranx, and the refusals."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from cli_runner import invoke

from harness.io.formats import read_run


def _runs(tmp_path: Path) -> list[Path]:
    """Three runs with distinct scores (no ties inside a run), partial overlap, every query in each."""
    rng = random.Random(3)
    paths = []
    for name in ("bm25", "e5", "splade"):
        lines = []
        for q in range(5):
            docs = rng.sample(range(40), 12)
            scores = rng.sample(range(10_000), 12)
            lines += [f"q{q} Q0 d{d} 0 {s / 100} {name}" for d, s in zip(docs, scores)]
        paths.append(tmp_path / f"{name}.trec")
        paths[-1].write_text("\n".join(lines) + "\n")
    return paths


def _as_dict(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        query_id, _, doc_id, _, score, _ = line.split()
        run.setdefault(query_id, {})[doc_id] = float(score)
    return run


@pytest.mark.parametrize(
    ("options", "method", "norm", "params", "label"),
    [
        ([], "rrf", "min-max", {"k": 60}, "rrf(bm25, e5, splade)"),
        (
            ["--method", "wsum", "--weights", "0.2:0.5:0.3"],
            "wsum",
            "min-max",
            {"weights": [0.2, 0.5, 0.3]},
            "wsum(bm25, e5, splade; 0.2:0.5:0.3)",
        ),
        (["--method", "combsum", "--norm", "zscore"], "sum", "zmuv", None, "combsum(bm25, e5, splade; zscore)"),
    ],
    ids=["rrf", "wsum-weights", "combsum-zscore"],
)
def test_run_files_fuse_without_qrels_as_ranx_does(tmp_path, options, method, norm, params, label):
    ranx = pytest.importorskip("ranx")
    paths = _runs(tmp_path)
    out = tmp_path / "fused.trec"
    result = invoke(["fuse", *map(str, paths), *options, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        f"fused 3 runs (bm25, e5, splade) into {out}: {label}, 5 queries (nothing scored: no qrels needed)"
    )
    theirs = ranx.fuse(
        [ranx.Run(_as_dict(p), name=p.stem) for p in paths], norm=norm, method=method, params=params
    ).to_dict()
    ours = _as_dict(out)
    assert set(ours) == set(theirs)
    for query_id, scores in theirs.items():
        assert ours[query_id] == pytest.approx(dict(scores))
        shown = [scores[hit.doc_id] for hit in read_run(out)[query_id]]
        assert shown == sorted(shown, reverse=True)  # in ranx's score order (ties in either order)
    assert {line.split()[5] for line in out.read_text().splitlines()} == {"_".join(label.split())}


def test_a_json_run_and_a_name(tmp_path):
    paths = _runs(tmp_path)
    as_json = tmp_path / "e5.json"
    as_json.write_text(json.dumps(_as_dict(paths[1])))
    out = tmp_path / "hybrid.trec"
    result = invoke(["fuse", str(paths[0]), str(as_json), "--name", "hybrid", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert read_run(out).name == "hybrid"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("one-run", "fusion needs at least two runs, got 1"),
        ("weights-not-wsum", "weights apply to wsum only, not rrf"),
        ("out-is-an-input", "the fused run would overwrite one of the runs fused"),
    ],
    ids=["one-run", "weights-not-wsum", "out-is-an-input"],
)
def test_bad_input_writes_no_fused_run(tmp_path, case, message):
    paths = _runs(tmp_path)
    out = tmp_path / "fused.trec"
    args = {
        "one-run": [paths[0], "--out", out],
        "weights-not-wsum": [*paths, "--weights", "1:1:1", "--out", out],
        "out-is-an-input": [*paths, "--out", paths[0]],
    }[case]
    before = paths[0].read_bytes()
    result = invoke(["fuse", *map(str, args)])
    assert result.exit_code == 1 and message in result.output, result.output
    assert not out.exists() and paths[0].read_bytes() == before
