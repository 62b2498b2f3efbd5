"""crosscheck: BEIR's own pipeline beside ours on tiny data with the real default model."""

from __future__ import annotations

from cli_runner import invoke

import harness.pipeline.evaluate
import harness.retrieval.encode


def test_crosscheck_agrees_with_beir(tiny_beir, tmp_path, monkeypatch, default_encoder):
    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: default_encoder)
    result = invoke(["crosscheck", str(tiny_beir), "--k", "1,3", "--no-cache"])
    assert result.exit_code == 0, result.output
    assert "AGREE: largest |difference|" in result.stdout
    assert "Batches" not in result.stderr  # BEIR's own bars only with -vv
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith(("nDCG@", "MRR@", "P@"))]
    assert len(rows) == 6 and all(abs(float(row[3])) <= 5e-6 for row in rows)  # BEIR rounds to 5 decimals


def test_crosscheck_refuses_bm25(tiny_beir):
    result = invoke(["crosscheck", str(tiny_beir), "--model", "bm25"])
    assert result.exit_code == 1 and "Elasticsearch" in result.stderr
    assert "Example:" in invoke(["crosscheck", "--help"]).stdout
