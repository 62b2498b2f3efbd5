"""The evaluation pipeline end to end on tiny data with a fake encoder, and on real BEIR files."""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import pytest
import pytrec_eval

from harness.errors import DatasetError, FormatError, HarnessError
from harness.io.trec import read_qrels, read_run
from harness.pipeline.demo import run_demo
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset

LOG2_3 = math.log2(3)


def _config(folder: Path, tmp_path: Path, **overrides) -> EvaluateConfig:
    values = {"dataset_path": folder, "output_dir": tmp_path / "results", "progress": False}
    values.update(overrides)
    return EvaluateConfig(**values)


def test_dense_evaluation_writes_a_complete_result(tiny_beir, tmp_path, fake_encoder):
    outcome = evaluate_dataset(_config(tiny_beir, tmp_path, k_values=(1, 3, 10)), encoder=fake_encoder)
    json_path, run_path = outcome.paths
    assert json_path == tmp_path / "results" / "tiny" / "fake-bow" / "test.json"
    assert run_path == json_path.with_name("test.run.trec")
    data = json.loads(json_path.read_text())
    assert {
        "dataset",
        "split",
        "model",
        "metrics",
        "per_query",
        "config",
        "fingerprints",
        "timings",
        "versions",
    } <= set(data)
    assert data["dataset"] == "tiny" and data["split"] == "test" and data["model"] == "fake-bow"
    assert list(data["metrics"])[:6] == ["nDCG@1", "nDCG@3", "nDCG@5", "nDCG@10", "nDCG@20", "nDCG@100"]
    assert set(data["per_query"]) == {"q1", "q2", "q3"}
    assert data["n_queries"] == 3
    assert data["config"]["ignore_identical_ids"] is False
    assert data["config"]["self_hit_policy_source"] == "default"
    assert data["config"]["top_k"] == 100 and data["config"]["index"] == "flat"
    assert data["config"]["n_docs"] == 5
    assert set(data["timings"]) == {
        "load",
        "encode_corpus",
        "encode_queries",
        "encode",
        "index",
        "search",
        "latency_probe",
        "score",
        "total",
    }
    assert {"python", "beir-harness", "torch", "faiss-cpu", "pytrec-eval-terrier"} <= set(data["versions"])
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        key = name.split(".")[0].split("/")[0]
        assert data["fingerprints"][key] == hashlib.sha256((tiny_beir / name).read_bytes()).hexdigest()
    # Only the split's judged queries were encoded (q4 is not in qrels/test.tsv).
    assert sorted(fake_encoder.query_texts) == ["banana", "cherry date", "zucchini"]
    # The title joins the text: "Fruit apple banana".
    assert "Fruit apple banana" in [t for batch in fake_encoder.doc_batches for t in batch]


def test_written_run_rescored_by_pytrec_eval_gives_the_same_numbers(tiny_beir, tmp_path, fake_encoder):
    outcome = evaluate_dataset(_config(tiny_beir, tmp_path, k_values=(1, 3, 10)), encoder=fake_encoder)
    run = read_run(outcome.paths[1]).to_dict()
    qrels = read_qrels(tiny_beir / "qrels" / "test.tsv").to_dict()
    direct = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.3"}).evaluate(run)
    for query_id, values in direct.items():
        assert outcome.result.per_query[query_id]["nDCG@10"] == pytest.approx(values["ndcg_cut_10"], abs=1e-12)
        assert outcome.result.per_query[query_id]["Recall@3"] == pytest.approx(values["recall_3"], abs=1e-12)


def test_external_run_hand_computed(tiny_beir, tmp_path):
    run_file = tmp_path / "system.trec"
    # q1: d2 (grade 1) above d1 (grade 2); q2 absent; q3: d5 third.
    run_file.write_text(
        "q1 Q0 d2 1 2.0 sys\nq1 Q0 d1 2 1.0 sys\n"
        "q3 Q0 d1 1 3 sys\nq3 Q0 d2 2 2 sys\nq3 Q0 d5 3 1 sys\nq4 Q0 d1 1 1 sys\n"
    )
    outcome = evaluate_dataset(_config(tiny_beir, tmp_path, k_values=(1, 10), run_path=run_file))
    result = outcome.result
    q1 = (1 + 2 / LOG2_3) / (2 + 1 / LOG2_3)
    q3 = 1 / 2  # one relevant doc at rank 3: 1/log2(4)
    assert result.per_query["q1"]["nDCG@10"] == pytest.approx(q1)
    assert result.per_query["q2"]["nDCG@10"] == 0.0
    assert result.metrics["nDCG@10"] == pytest.approx((q1 + q3) / 3)
    assert result.metrics["MRR@10"] == pytest.approx((1 + 0 + 1 / 3) / 3)
    assert result.metrics["Recall@1"] == pytest.approx((1 / 2) / 3)
    assert result.model == "run:system.trec"
    assert result.config["run_tag"] == "sys"
    assert result.fingerprints["run"] == hashlib.sha256(run_file.read_bytes()).hexdigest()
    assert "1 of 3 judged queries have no results" in result.notes[0]
    assert outcome.paths[0] == tmp_path / "results" / "tiny" / "run_system.trec" / "test.json"


def test_self_hit_policy_option_registry_and_depth(tiny_beir, tmp_path, fake_encoder):
    # Make q1 a corpus document too, as in ArguAna.
    with open(tiny_beir / "corpus.jsonl", "a") as handle:
        handle.write('{"_id": "q1", "title": "", "text": "banana"}\n')
    kept = evaluate_dataset(_config(tiny_beir, tmp_path, top_k=3, k_values=(1, 3)), encoder=fake_encoder)
    assert kept.run["q1"][0].doc_id == "q1"
    dropped = evaluate_dataset(
        _config(tiny_beir, tmp_path, top_k=3, k_values=(1, 3), ignore_identical_ids=True), encoder=fake_encoder
    )
    assert all(hit.doc_id != "q1" for hit in dropped.run["q1"])
    assert len(dropped.run["q1"]) == 3  # one extra retrieved, so depth survives the drop
    assert dropped.result.config["ignore_identical_ids"] is True
    assert dropped.result.config["self_hit_policy_source"] == "option"
    assert dropped.result.metrics["MRR@1"] > kept.result.metrics["MRR@1"]
    registry_default = evaluate_dataset(
        _config(tiny_beir, tmp_path, dataset_name="arguana", output_dir=None), encoder=fake_encoder
    )
    assert registry_default.result.config["ignore_identical_ids"] is True
    assert registry_default.result.config["self_hit_policy_source"] == "registry"
    assert registry_default.paths is None


def test_run_is_cut_to_top_k(tiny_beir, tmp_path, fake_encoder):
    outcome = evaluate_dataset(_config(tiny_beir, tmp_path, top_k=2, k_values=(1, 2)), encoder=fake_encoder)
    assert all(len(hits) == 2 for hits in outcome.run.values())
    assert len(outcome.paths[1].read_text().splitlines()) == 6


@pytest.mark.parametrize(
    ("breakage", "error", "message"),
    [
        (
            lambda d: (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tnope\t1\n"),
            DatasetError,
            r"1 judged document id\(s\) are not in .*corpus.jsonl \(e.g. 'nope'\)",
        ),
        (
            lambda d: (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq77\td1\t1\n"),
            DatasetError,
            r"1 judged query is not in .*queries.jsonl \(e.g. 'q77'\)",
        ),
        (lambda d: (d / "corpus.jsonl").write_text(""), DatasetError, "the corpus is empty"),
        (lambda d: (d / "qrels" / "test.tsv").write_text("q\td\tscore\n"), FormatError, "wrong header"),
        (
            lambda d: (d / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n{oops\n'),
            FormatError,
            r"corpus.jsonl:2: invalid JSON",
        ),
    ],
    ids=[
        "judged-doc-not-in-corpus",
        "judged-query-not-in-queries",
        "empty-corpus",
        "wrong-qrels-header",
        "malformed-corpus-line",
    ],
)
def test_bad_input_leaves_previous_results_untouched(tiny_beir, tmp_path, fake_encoder, breakage, error, message):
    first = evaluate_dataset(_config(tiny_beir, tmp_path), encoder=fake_encoder)
    before = {path: path.read_bytes() for path in first.paths}
    breakage(tiny_beir)
    with pytest.raises(error, match=message):
        evaluate_dataset(_config(tiny_beir, tmp_path), encoder=fake_encoder)
    assert {path: path.read_bytes() for path in first.paths} == before
    assert sorted(p.name for p in first.paths[0].parent.iterdir()) == ["test.json", "test.run.trec"]


def test_option_errors(tiny_beir, tmp_path, fake_encoder):
    with pytest.raises(HarnessError, match="`top_k` 5 is smaller than the largest cutoff 10"):
        evaluate_dataset(_config(tiny_beir, tmp_path, top_k=5, k_values=(1, 10)), encoder=fake_encoder)
    with pytest.raises(DatasetError, match="missing qrels/train.tsv"):
        evaluate_dataset(_config(tiny_beir, tmp_path, split="train"), encoder=fake_encoder)
    assert not (tmp_path / "results").exists()


def test_dev_split_and_unicode_ids(tiny_beir, tmp_path, fake_encoder):
    outcome = evaluate_dataset(_config(tiny_beir, tmp_path, split="dev", k_values=(1,)), encoder=fake_encoder)
    assert outcome.result.n_queries == 1
    assert outcome.result.metrics["Recall@1"] == 1.0  # "apple" finds "Fruit apple banana"
    assert outcome.paths[0].name == "dev.json"


def test_lesson_demo_reproduces_the_published_output(default_encoder):
    outcome = run_demo(encoder=default_encoder)
    top3 = [[hit.doc_id for hit in outcome.run[q][:3]] for q in ("q1", "q2", "q3", "q4", "q5")]
    assert top3 == [["13", "2", "4"], ["10", "2", "4"], ["8", "14", "7"], ["4", "3", "8"], ["5", "6", "3"]]
    assert outcome.result.metrics["Recall@3"] == pytest.approx(0.80)
    assert outcome.result.metrics["MRR@10"] == pytest.approx(0.90)
    assert 0.80 < outcome.result.metrics["nDCG@10"] < 0.95
    assert outcome.paths is None


def test_real_scifact_files_with_an_external_run(shared_beir, tmp_path):
    """Genuine BEIR files (gzip corpus, CRLF qrels): fingerprints match SHA256SUMS."""
    folder = shared_beir / "scifact"
    qrels = read_qrels(folder / "qrels" / "test.tsv")
    assert (len(qrels), qrels.n_judgments) == (300, 339)
    # A perfect run for half the queries: those score 1, the rest 0.
    run_file = tmp_path / "half.trec"
    half = sorted(qrels)[:150]
    run_file.write_text("".join(f"{q} Q0 {d} 1 1.0 oracle\n" for q in half for d in qrels[q]))
    outcome = evaluate_dataset(_config(folder, tmp_path, run_path=run_file, k_values=(10,)))
    assert outcome.result.metrics["nDCG@10"] == pytest.approx(0.5)
    assert outcome.result.config["n_docs"] == 5183
    sums = dict(reversed(line.split("  ")) for line in (folder / "SHA256SUMS").read_text().splitlines())
    assert outcome.result.fingerprints["corpus"] == sums["corpus.jsonl"]
    assert outcome.result.fingerprints["queries"] == sums["queries.jsonl"]
    assert outcome.result.fingerprints["qrels"] == sums["qrels/test.tsv"]


@pytest.mark.parametrize("kind", ["hnsw", "ivf", "sq8"])
def test_approximate_index_records_its_recall_of_exact(tiny_beir, tmp_path, fake_encoder, kind):
    from harness.retrieval.index import IndexSpec

    outcome = evaluate_dataset(
        _config(tiny_beir, tmp_path, k_values=(1, 3), index=IndexSpec(kind)), encoder=fake_encoder
    )
    result = outcome.result
    assert result.config["index"] == kind
    assert set(result.index_quality) == {"recall_of_exact@5"}  # top-k 100 is cut to the 5 documents
    assert 0.0 <= result.index_quality["recall_of_exact@5"] <= 1.0
    data = json.loads(outcome.paths[0].read_text())
    assert data["index_quality"] == result.index_quality
    if kind == "ivf":
        assert result.config["nlist"] == 1
    flat = evaluate_dataset(_config(tiny_beir, tmp_path, k_values=(1, 3)), encoder=fake_encoder)
    assert flat.result.index_quality == {} and flat.result.config["index"] == "flat"


def test_prefixes_reach_the_model_and_the_result(tmp_path):
    import numpy as np

    from harness.retrieval.encode import load_encoder

    plain = load_encoder()
    prefixed = load_encoder(query_prefix="query: ", doc_prefix="passage: ")
    np.testing.assert_allclose(prefixed.encode_queries(["cats"]), plain.encode_queries(["query: cats"]), atol=1e-6)
    np.testing.assert_allclose(prefixed.encode_docs(["dogs"]), plain.encode_docs(["passage: dogs"]), atol=1e-6)
    assert prefixed.settings()["query_prefix"] == "query: " and prefixed.fingerprint() != plain.fingerprint()
    assert plain.query_prompt_name is None  # all-MiniLM-L6-v2 defines no prompts


@pytest.fixture
def small_filesystem(tmp_path):
    """A real 256 KiB tmpfs (needs root and mount rights; skipped elsewhere)."""
    import subprocess

    mount_point = tmp_path / "small-fs"
    mount_point.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _snapshot(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_full_disk_fails_clearly_and_keeps_previous_results(tiny_beir, tmp_path, fake_encoder, small_filesystem):
    out = small_filesystem / "results"
    evaluate_dataset(_config(tiny_beir, tmp_path, output_dir=out, k_values=(1,)), encoder=fake_encoder)
    before = _snapshot(out)
    filler = small_filesystem / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:  # fill the file system to the last byte
        while os.write(descriptor, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(descriptor)
    with pytest.raises(HarnessError, match="No space left on device"):
        evaluate_dataset(_config(tiny_beir, tmp_path, output_dir=out), encoder=fake_encoder)
    assert _snapshot(out) == before  # the earlier result is whole, and no temporary file is left


def test_a_read_only_output_folder_fails_clearly_and_keeps_previous_results(
    tiny_beir, tmp_path, fake_encoder, small_filesystem
):
    import subprocess

    out = small_filesystem / "results"
    evaluate_dataset(_config(tiny_beir, tmp_path, output_dir=out, k_values=(1,)), encoder=fake_encoder)
    before = _snapshot(out)
    # Read-only for root too (a permission bit is not: root ignores it).
    subprocess.run(["mount", "-o", "remount,ro", str(small_filesystem)], check=True)
    with pytest.raises(HarnessError, match="Read-only file system"):
        evaluate_dataset(_config(tiny_beir, tmp_path, output_dir=out), encoder=fake_encoder)
    assert _snapshot(out) == before
